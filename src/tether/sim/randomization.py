"""Domain randomization: ranges over the dynamics knobs, sampled once per episode.

Pretraining draws from :meth:`DomainRandomization.default`; the demo's drift preset
(``DriftSchedule.demo``) lies deliberately outside these ranges, so the "real" arm is one
the shipped policy never saw.

Invariant: every range has low <= high and only values ``ArmDynamics`` accepts, so
``sample`` never fails.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tether.sim.dynamics import MAX_ACTION_DELAY_STEPS, ArmDynamics
from tether.sim.errors import SimConfigError
from tether.sim.geometry import ARM

Range = tuple[float, float]


class DomainRandomization(BaseModel):
    """Inclusive ranges each knob is drawn from, uniformly and independently."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    actuator_gain: Range = Field(default=(1.0, 1.0), description="Actuator gain range (1)")
    joint_damping: Range = Field(default=(1.0, 1.0), description="Joint damping range (× nominal)")
    joint_friction: Range = Field(
        default=(1.0, 1.0), description="Joint friction loss range (× nominal)"
    )
    payload_mass_kg: Range = Field(default=(0.0, 0.0), description="Payload mass range (kg)")
    obs_noise_std: Range = Field(
        default=(0.0, 0.0), description="Joint reading noise std range (rad, rad/s)"
    )
    obs_bias: Range = Field(
        default=(0.0, 0.0), description="Joint position reading bias range (rad)"
    )
    action_delay_steps: tuple[int, int] = Field(
        default=(0, 0), description="Action delay range, inclusive (control steps)"
    )

    @model_validator(mode="after")
    def _ranges_are_usable(self) -> DomainRandomization:
        for name in type(self).model_fields:
            low, high = getattr(self, name)
            if not low <= high:
                raise SimConfigError(
                    f"DomainRandomization.{name} needs low <= high, got ({low}, {high})"
                )
        # Both ends must be valid dynamics; ArmDynamics says what is wrong if not.
        self._at(0)
        self._at(1)
        if self.action_delay_steps[1] > MAX_ACTION_DELAY_STEPS:
            raise SimConfigError(
                f"DomainRandomization.action_delay_steps goes up to {self.action_delay_steps[1]}, "
                f"above the most ArmDynamics allows ({MAX_ACTION_DELAY_STEPS})"
            )
        return self

    @classmethod
    def default(cls) -> DomainRandomization:
        """The ranges pretraining uses: a healthy arm with modest variation, no delay."""
        return cls(
            actuator_gain=(0.9, 1.1),
            joint_damping=(0.8, 1.25),
            joint_friction=(0.5, 2.0),
            payload_mass_kg=(0.0, 0.1),
            obs_noise_std=(0.0, 0.002),
            obs_bias=(-0.005, 0.005),
            action_delay_steps=(0, 0),
        )

    @classmethod
    def rated(cls) -> DomainRandomization:
        """Every arm the built-in arm is rated to be: the pretraining ranges widened to the
        rated minimum actuator gain (0.6), up to 4x nominal friction, the rated maximum
        payload (0.5 kg) and one control step of delay, the envelope the demo drift ends
        at. The gate's simulation stage judges no harm over it (``SimulationStageConfig``):
        the real robot is one of these arms, and which one the simulator cannot know."""
        base = cls.default()
        return base.model_copy(
            update={
                "actuator_gain": (ARM.rated_min_actuator_gain, base.actuator_gain[1]),
                "joint_friction": (base.joint_friction[0], 4.0),
                "payload_mass_kg": (0.0, ARM.rated_max_payload_kg),
                "action_delay_steps": (0, 1),
            }
        )

    def contains(self, dynamics: ArmDynamics) -> bool:
        """Whether every knob of ``dynamics`` lies inside its range."""
        return all(
            low <= getattr(dynamics, name) <= high
            for name, (low, high) in ((n, getattr(self, n)) for n in type(self).model_fields)
        )

    def sample(self, rng: np.random.Generator) -> ArmDynamics:
        """One draw of every knob (uniform, independent)."""
        low, high = self.action_delay_steps
        return ArmDynamics(
            actuator_gain=float(rng.uniform(*self.actuator_gain)),
            joint_damping=float(rng.uniform(*self.joint_damping)),
            joint_friction=float(rng.uniform(*self.joint_friction)),
            payload_mass_kg=float(rng.uniform(*self.payload_mass_kg)),
            obs_noise_std=float(rng.uniform(*self.obs_noise_std)),
            obs_bias=float(rng.uniform(*self.obs_bias)),
            action_delay_steps=int(rng.integers(low, high + 1)),
        )

    def _at(self, end: int) -> ArmDynamics:
        return ArmDynamics(**{name: getattr(self, name)[end] for name in type(self).model_fields})
