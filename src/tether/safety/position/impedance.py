"""The joint impedance law a position-commanded robot tracks its commands with.

The built-in arm is commanded in joint positions and tracks them, at the physics rate,
with PD plus gravity compensation from the *nominal* model, saturated at the motors:

    τ = Kp·(q_cmd − q) − Kd·q̇ + g_nominal(q),    |τ| ≤ torque_limit_nm,

the way a Franka in joint-impedance mode does. The supervisor models that law to know
the torque a command will demand (the TORQUE check), so it needs the same gains as the
robot; :class:`ImpedanceModel` carries them.

Default gains for the built-in arm (``ARM_IMPEDANCE``), per joint (base, shoulder, elbow,
wrist): Kp = 60, 200, 100, 25 N·m/rad, so a 0.2 rad error (0.24 on the wrist) demands
the joint's whole torque limit (12, 40, 20, 6 N·m); Kd = 3, 4, 1, 0.1 N·m·s/rad, which
with the joints' own viscous damping (``Link.damping_nm_s``: 3, 8, 3.3, 0.75) and the
arm's inertia about each joint (0.15-0.45, 0.29-0.38, 0.074, 0.011 kg·m²) makes each
joint about critically damped. Measured on the MuJoCo model at the home pose, a 0.2 rad
step on one joint at a time: 1 % overshoot, 90 % of the step within 0.19, 0.11, 0.08 and
0.06 s, under 1 % steady error (friction). ``Kd·velocity_limit`` (6, 10, 3, 0.4 N·m)
leaves most of each torque limit for the stiffness term at full speed.

Invariant: a constructed ``ImpedanceModel`` has one finite gain per joint, stiffness
> 0 and damping >= 0; anything else raises :class:`LimitsError` at construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tether.safety.errors import LimitsError
from tether.spec import RobotSpec

ARM_STIFFNESS_NM_PER_RAD = (60.0, 200.0, 100.0, 25.0)
ARM_DAMPING_NM_S_PER_RAD = (3.0, 4.0, 1.0, 0.1)

# The RobotSpec fields a position-commanded robot declares its gains in (issue 14);
# read by name so the spec can gain them without this module changing.
_SPEC_STIFFNESS = "joint_stiffness_nm_per_rad"
_SPEC_DAMPING = "joint_damping_nm_s_per_rad"


@dataclass(frozen=True)
class ImpedanceModel:
    """Per-joint PD gains of the robot's joint impedance controller.

    ``stiffness_nm_per_rad`` is Kp (N·m per rad of position error), ``damping_nm_s_per_rad``
    is Kd (N·m per rad/s of joint velocity; it damps the measured velocity, not the
    error's rate, as the controller does).
    """

    stiffness_nm_per_rad: tuple[float, ...]
    damping_nm_s_per_rad: tuple[float, ...]

    def __post_init__(self) -> None:
        kp, kd = self.stiffness_nm_per_rad, self.damping_nm_s_per_rad
        if len(kp) == 0 or len(kp) != len(kd):
            raise LimitsError(
                "ImpedanceModel needs one stiffness and one damping per joint, got "
                f"{len(kp)} stiffnesses and {len(kd)} dampings"
            )
        if not all(math.isfinite(k) and k > 0 for k in kp):
            raise LimitsError(
                f"ImpedanceModel.stiffness_nm_per_rad must be finite and > 0 on every joint, got {kp}"
            )
        if not all(math.isfinite(d) and d >= 0 for d in kd):
            raise LimitsError(
                f"ImpedanceModel.damping_nm_s_per_rad must be finite and >= 0 on every joint, got {kd}"
            )

    @property
    def n_joints(self) -> int:
        return len(self.stiffness_nm_per_rad)

    @classmethod
    def from_spec(cls, spec: RobotSpec) -> ImpedanceModel:
        """The gains ``spec`` declares; for the built-in arm's spec without declared gains,
        :data:`ARM_IMPEDANCE`."""
        kp = getattr(spec, _SPEC_STIFFNESS, None)
        kd = getattr(spec, _SPEC_DAMPING, None)
        if kp is not None and kd is not None:
            return cls(tuple(float(k) for k in kp), tuple(float(d) for d in kd))
        # Imported here: the safety layer names the built-in arm only to default its gains.
        from tether.sim import arm_spec

        # The whole spec, not its fingerprint (names and dims only): these gains were
        # chosen for the arm's torque limits and inertia.
        if spec == arm_spec():
            return ARM_IMPEDANCE
        raise LimitsError(
            f"robot {spec.name!r} declares no impedance gains ({_SPEC_STIFFNESS}, "
            f"{_SPEC_DAMPING}); pass ImpedanceModel(stiffness_nm_per_rad=..., "
            "damping_nm_s_per_rad=...) with its controller's gains"
        )


ARM_IMPEDANCE = ImpedanceModel(ARM_STIFFNESS_NM_PER_RAD, ARM_DAMPING_NM_S_PER_RAD)
"""The built-in arm's default gains (see the module docstring for how they were chosen)."""
