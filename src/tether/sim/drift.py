"""Drift: dynamics that change as a run goes on, by global control step across episodes.

A :class:`DriftSchedule` is a list of :class:`DriftRamp`\\ s. Each ramp moves one knob
linearly from whatever value it has when the ramp starts to ``to_value`` when it ends
(``start_step == end_step`` is a step change) and holds it there. The demo's "real
robot" is the built-in arm under :meth:`DriftSchedule.demo`.

Invariant: ramps on the same knob never overlap, so the value at any step is
well-defined and does not depend on the order the ramps were listed in.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import itertools
import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tether.sim.dynamics import ArmDynamics
from tether.sim.errors import SimConfigError
from tether.sim.geometry import ARM

Knob = Literal[
    "actuator_gain",
    "joint_damping",
    "joint_friction",
    "payload_mass_kg",
    "obs_noise_std",
    "obs_bias",
    "action_delay_steps",
]


class DriftRamp(BaseModel):
    """One knob moving linearly to ``to_value`` between two global control steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    knob: Knob = Field(
        default="actuator_gain", description="The ArmDynamics field that drifts (name)"
    )
    start_step: int = Field(
        default=0, ge=0, description="Global control step the ramp starts at (steps)"
    )
    end_step: int = Field(
        default=0, ge=0, description="Global control step the ramp reaches to_value at (steps)"
    )
    to_value: float = Field(
        default=1.0, description="Value the knob holds after end_step (knob's unit)"
    )

    @model_validator(mode="after")
    def _ends_after_start(self) -> DriftRamp:
        if self.end_step < self.start_step:
            raise SimConfigError(
                f"DriftRamp on {self.knob}: end_step ({self.end_step}) must not be before "
                f"start_step ({self.start_step})"
            )
        return self

    def fraction(self, step: int) -> float:
        """How far along the ramp is at ``step``: 0 before it, 1 after it."""
        if step < self.start_step:
            return 0.0
        if step >= self.end_step:
            return 1.0
        return (step - self.start_step) / (self.end_step - self.start_step)


class DriftSchedule(BaseModel):
    """Ramps applied on top of an episode's base dynamics, by global control step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ramps: tuple[DriftRamp, ...] = Field(default=(), description="The ramps, any order (list)")

    @model_validator(mode="after")
    def _no_overlap(self) -> DriftSchedule:
        ordered = sorted(self.ramps, key=lambda r: (r.knob, r.start_step))
        for before, after in itertools.pairwise(ordered):
            if before.knob == after.knob and after.start_step < before.end_step:
                raise SimConfigError(
                    f"DriftSchedule has two ramps on {before.knob} that overlap "
                    f"(steps {before.start_step}-{before.end_step} and "
                    f"{after.start_step}-{after.end_step}); let one end before the next starts"
                )
        # Every ramp's end state must be valid dynamics (dynamics_at trusts that, see
        # there); constructing it anew, ArmDynamics says what is wrong if not.
        for ramp in self.ramps:
            ArmDynamics(
                **dataclasses.asdict(self.dynamics_at(ramp.end_step, ArmDynamics.nominal()))
            )
        return self

    @property
    def last_step(self) -> int:
        """The step after which nothing changes any more."""
        return max((r.end_step for r in self.ramps), default=0)

    def dynamics_at(self, step: int, base: ArmDynamics) -> ArmDynamics:
        """``base`` with every ramp applied as of global control step ``step``."""
        values: dict[str, float] = {}
        for ramp in self._by_start:
            if step < ramp.start_step:
                continue
            start = values.get(ramp.knob, getattr(base, ramp.knob))
            fraction = ramp.fraction(step)
            # Past the end, exactly to_value: start + 1 * (to - start) can round off.
            values[ramp.knob] = (
                ramp.to_value if fraction >= 1.0 else start + fraction * (ramp.to_value - start)
            )
        if "action_delay_steps" in values:
            # A delay is whole steps: it switches when the ramp is half-way.
            values["action_delay_steps"] = math.floor(values["action_delay_steps"] + 0.5)
        if not values:
            return base
        # Not dataclasses.replace: that re-validates on every control step of a ramp.
        # Every ArmDynamics constraint is an interval on one knob, the base and every
        # ramp's end are valid (checked when built), so a point between them is too.
        moved = copy.copy(base)
        moved.__dict__.update(values)
        return moved

    @functools.cached_property
    def _by_start(self) -> tuple[DriftRamp, ...]:
        # dynamics_at runs every control step while a ramp is active; sort once.
        return tuple(sorted(self.ramps, key=lambda r: r.start_step))

    @classmethod
    def demo(cls, *, start_step: int = 1000, ramp_steps: int = 3000) -> DriftSchedule:
        """The demo's "real robot": it wears out well beyond what pretraining randomized.

        From ``start_step`` the actuator gain sags from its base value to the rated minimum
        (0.6) and friction climbs to 4x nominal over ``ramp_steps``; half-way, the arm picks
        up the heaviest rated payload (0.5 kg); at the end, commands start arriving one
        control step late. ``DomainRandomization.default()`` covers gain 0.9-1.1, friction
        <= 2x nominal, payload <= 0.1 kg and no delay, so every one of these lies outside it,
        while the arm stays inside its rated envelope (the declared braking still holds).
        """
        if start_step < 0 or ramp_steps < 2:
            raise SimConfigError(
                f"DriftSchedule.demo needs start_step >= 0 and ramp_steps >= 2, "
                f"got {start_step} and {ramp_steps}"
            )
        end = start_step + ramp_steps
        half = start_step + ramp_steps // 2
        return cls(
            ramps=(
                DriftRamp(
                    knob="actuator_gain",
                    start_step=start_step,
                    end_step=end,
                    to_value=ARM.rated_min_actuator_gain,
                ),
                DriftRamp(knob="joint_friction", start_step=start_step, end_step=end, to_value=4.0),
                DriftRamp(
                    knob="payload_mass_kg",
                    start_step=half,
                    end_step=half,
                    to_value=ARM.rated_max_payload_kg,
                ),
                DriftRamp(knob="action_delay_steps", start_step=end, end_step=end, to_value=1.0),
            )
        )
