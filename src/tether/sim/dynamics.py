"""The arm's dynamics knobs (:class:`ArmDynamics`) and how they reach the MuJoCo model.

``ArmDynamics`` is the record every layer sees (it rides in the env's ``info``);
:func:`apply_dynamics` writes its physical knobs into a model in place. Observation noise
and bias and the action delay are not physics: the env applies those itself.

Invariant: a constructed ``ArmDynamics`` is usable (finite, gain > 0, nothing negative
that cannot be); anything else raises ``SimConfigError`` at construction.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import mujoco
import numpy as np

from tether.sim.errors import SimConfigError
from tether.sim.geometry import ARM
from tether.sim.mjcf import set_payload

# Longer delays than this are not a robot any more; they are a broken link.
MAX_ACTION_DELAY_STEPS = 10


@dataclass(frozen=True)
class ArmDynamics:
    """One setting of every dynamics knob.

    actuator_gain: torque actually produced per commanded torque, on every joint (1).
    joint_damping: viscous damping on every joint, as a multiple of its nominal (× nominal).
    joint_friction: Coulomb friction loss on every joint, as a multiple of its nominal (× nominal).
    payload_mass_kg: point mass carried at the end effector (kg).
    obs_noise_std: std of Gaussian noise on joint position and velocity readings (rad, rad/s).
    obs_bias: constant offset on every joint position reading, a calibration error (rad).
    action_delay_steps: control steps between a command and its execution (steps).
    """

    actuator_gain: float = 1.0
    joint_damping: float = 1.0
    joint_friction: float = 1.0
    payload_mass_kg: float = 0.0
    obs_noise_std: float = 0.0
    obs_bias: float = 0.0
    action_delay_steps: int = 0

    def __post_init__(self) -> None:
        delay = self.action_delay_steps
        if isinstance(delay, bool) or not isinstance(delay, int | np.integer):
            raise SimConfigError(
                f"ArmDynamics.action_delay_steps must be a whole number of steps, got {delay!r}"
            )
        if not 0 <= delay <= MAX_ACTION_DELAY_STEPS:
            raise SimConfigError(
                f"ArmDynamics.action_delay_steps must be between 0 and {MAX_ACTION_DELAY_STEPS}, "
                f"got {delay}"
            )
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not math.isfinite(value):
                raise SimConfigError(f"ArmDynamics.{f.name} must be finite, got {value}")
        if self.actuator_gain <= 0:
            raise SimConfigError(
                f"ArmDynamics.actuator_gain must be > 0 (1 = nominal torque), got {self.actuator_gain}"
            )
        for name in ("joint_damping", "joint_friction", "payload_mass_kg", "obs_noise_std"):
            if getattr(self, name) < 0:
                raise SimConfigError(
                    f"ArmDynamics.{name} must be >= 0, got {getattr(self, name)}; use 0 to turn it off"
                )

    @classmethod
    def nominal(cls) -> ArmDynamics:
        """The arm as designed: every multiplier 1, no payload, clean sensors, no delay."""
        return cls()


_TORQUE_NM = np.array([link.torque_limit_nm for link in ARM.links])
_STIFFNESS_NM_RAD = np.array([link.stiffness_nm_rad for link in ARM.links])
_IMPEDANCE_DAMPING_NM_S = np.array([link.impedance_damping_nm_s_rad for link in ARM.links])
_DAMPING_NM_S = np.array([link.damping_nm_s for link in ARM.links])
_FRICTION_NM = np.array([link.friction_nm for link in ARM.links])


def apply_dynamics(
    model: mujoco.MjModel, dynamics: ArmDynamics, previous: ArmDynamics | None = None
) -> None:
    """Write the physical knobs of ``dynamics`` into ``model`` (in place).

    With ``previous`` (what the model holds now), only the knobs that differ are written:
    a drifting env changes one or two knobs per step and this runs every step.

    The actuator gain scales what the motors deliver: on a torque model the gear; on a
    position (impedance) model the whole controller output, ``G·clip(Kp (q_cmd − q) −
    Kd q̇ + g_nominal(q), ±τ_max)``, i.e. Kp, Kd and the gravity compensation times G
    and the saturation at ``G·τ_max`` (what a weakened motor at its current limit gives).
    """
    if previous is None or dynamics.actuator_gain != previous.actuator_gain:
        _apply_gain(model, dynamics.actuator_gain)
    if previous is None or dynamics.joint_damping != previous.joint_damping:
        model.dof_damping[:] = dynamics.joint_damping * _DAMPING_NM_S
    if previous is None or dynamics.joint_friction != previous.joint_friction:
        model.dof_frictionloss[:] = dynamics.joint_friction * _FRICTION_NM
    if previous is None or dynamics.payload_mass_kg != previous.payload_mass_kg:
        set_payload(model, dynamics.payload_mass_kg)


def _apply_gain(model: mujoco.MjModel, gain: float) -> None:
    if not model.jnt_actgravcomp.any():  # torque motors
        model.actuator_gear[:, 0] = gain * _TORQUE_NM
        return
    model.actuator_gainprm[:, 0] = gain * _STIFFNESS_NM_RAD
    model.actuator_biasprm[:, 1] = -gain * _STIFFNESS_NM_RAD
    model.actuator_biasprm[:, 2] = -gain * _IMPEDANCE_DAMPING_NM_S
    model.jnt_actfrcrange[:, 0] = -gain * _TORQUE_NM
    model.jnt_actfrcrange[:, 1] = gain * _TORQUE_NM
    # Every link compensates its own weight times the gain; the payload body stays at 0:
    # the controller's gravity model is the nominal arm's.
    linked = model.body_gravcomp > 0
    model.body_gravcomp[linked] = gain
