"""The joint impedance law a position-commanded robot tracks its commands with.

A position-commanded robot (``RobotSpec.command_interface == "position"``) tracks its
commands with PD plus gravity compensation from its *nominal* model, saturated at the
motors:

    τ = Kp·(q_cmd − q) − Kd·q̇ + g_nominal(q),    |τ| ≤ torque_limit_nm,

the way a Franka in joint-impedance mode does. The supervisor models that law to know
the torque a command will demand (the TORQUE check), so it needs the robot's own gains;
:meth:`ImpedanceModel.from_spec` reads them from the spec that declares them
(``joint_stiffness_nm_rad``, ``joint_damping_nm_s_rad``), the same fields the built-in
arm's simulated controller is built from, so the two can never disagree.

Invariant: a constructed ``ImpedanceModel`` has one finite gain per joint, stiffness
> 0 and damping >= 0; anything else raises :class:`LimitsError` at construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tether.safety.errors import LimitsError
from tether.spec import RobotSpec


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
        """The gains a position-commanded ``spec`` declares."""
        if spec.command_interface != "position":
            raise LimitsError(
                f"robot {spec.name!r} is commanded by {spec.command_interface}, so it declares "
                "no impedance gains; the position supervisor needs a spec with "
                "command_interface='position' (or pass ImpedanceModel(stiffness_nm_per_rad="
                "..., damping_nm_s_per_rad=...) with its controller's gains)"
            )
        return cls(
            tuple(float(k) for k in spec.joint_stiffness_nm_rad),
            tuple(float(d) for d in spec.joint_damping_nm_s_rad),
        )
