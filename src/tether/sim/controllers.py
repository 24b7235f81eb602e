"""Model-based reaching controllers for the position-commanded arm: a scripted baseline
and an oracle.

``ReachController`` solves the target's inverse kinematics once per target (damped
least squares on ``ArmKinematics``, joint ranges respected), then commands the measured
pose moved toward that goal by at most ``APPROACH_RAD`` per joint: far from the goal the
impedance controller then pulls with a bounded error (the joints move at about half
their velocity limits and the command changes per step only as fast as the arm moves),
near it the command is the goal itself. The rule reads nothing but the observation, so a
policy can imitate it exactly. Given only the nominal model it is the *scripted* controller (what a
controller tuned on the healthy arm does); given the true dynamics (``dynamics=``) it is
the *oracle*: it commands the pose at which the impedance controller, with the true
actuator gain, payload and encoder bias beneath it, comes to rest on the IK solution:

    G·(Kp (q_cmd − b − q*) + g_nominal(q*)) = g_true(q*)
    ⇒  q_cmd = q* + b + (g_true(q*) − G·g_nominal(q*)) / (G·Kp)

Both speak the position interface exactly as a policy does (normalized actions through
``RobotSpec.action_for_position``), so they go through the same supervisor and the same
env. Friction and the action delay are not compensated (a static controller cannot);
they are what is left between the oracle and perfection.

Invariant: an action is finite and inside [-1, 1].
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from tether.sim.dynamics import ArmDynamics
from tether.sim.errors import SimConfigError
from tether.sim.kinematics import ArmKinematics
from tether.sim.spec import arm_spec
from tether.spec import RobotSpec

FloatArray = NDArray[np.float64]

_IK_ITERATIONS = 60
_IK_DAMPING = 1e-3
_IK_TOLERANCE_M = 1e-4
_JACOBIAN_STEP_RAD = 1e-6
# The most the command leads the measured pose by (rad): with the arm's impedance and
# its own damping, a joint pulled by this error settles at about half its velocity limit.
APPROACH_RAD = 0.35


class ReachController:
    """Reach each episode's target; ``dynamics`` (the truth) makes it the oracle."""

    def __init__(self, spec: RobotSpec | None = None, *, dynamics: ArmDynamics | None = None):
        self.spec = spec or arm_spec("position")
        if self.spec.command_interface != "position":
            raise SimConfigError(
                "ReachController commands joint positions; pass a position-interface spec "
                f"(arm_spec('position')), got {self.spec.command_interface!r}"
            )
        self.dynamics = dynamics
        self._kin = ArmKinematics(self.spec)
        self._loaded: dict[float, ArmKinematics] = {}
        self._low = np.array(self.spec.joint_position_low_rad)
        self._high = np.array(self.spec.joint_position_high_rad)
        self._kp = np.array(self.spec.joint_stiffness_nm_rad)
        lay = self.spec.layout.slices()
        self._q, self._target = lay["joint_position"], lay["target"]
        self._goal: FloatArray | None = None
        self._for_target: FloatArray | None = None

    def reset(self) -> None:
        """Forget the episode's goal (the next call solves the IK again)."""
        self._goal = self._for_target = None

    def act(self, observation: NDArray[np.floating]) -> NDArray[np.float32]:
        """The normalized position command for this step."""
        obs = np.asarray(observation, dtype=np.float64)
        target, q = obs[self._target], obs[self._q]
        if self._goal is None or self._for_target is None or (target != self._for_target).any():
            self._for_target = target.copy()
            self._goal = self._compensated(self.inverse_kinematics(target, q))
        command = q + np.clip(self._goal - q, -APPROACH_RAD, APPROACH_RAD)
        action: NDArray[np.float32] = np.clip(
            self.spec.action_for_position(command), -1.0, 1.0
        ).astype(np.float32)
        return action

    def inverse_kinematics(self, target: FloatArray, start: FloatArray) -> FloatArray:
        """A joint pose (rad) whose end effector is at ``target`` (m), searched from ``start``.

        Damped least squares can stall against a joint limit (a target behind the base
        reached the long way round); then it restarts facing the target, and facing away
        from it leaning back, and keeps the closest pose found.
        """
        q0 = np.clip(np.asarray(start, dtype=np.float64), self._low, self._high)
        facing = math.atan2(target[1], target[0])
        behind = facing - math.pi if facing > 0 else facing + math.pi
        best, best_error = q0, math.inf
        for yaw, lean in ((None, 1.0), (facing, 1.0), (behind, -1.0)):
            q = q0.copy()
            if yaw is not None:
                q[0] = yaw
                q[1:] = lean * np.abs(q0[1:])
            q, error = self._solve(target, np.clip(q, self._low, self._high))
            if error < best_error:
                best, best_error = q, error
            if best_error < _IK_TOLERANCE_M:
                break
        return best

    def _solve(self, target: FloatArray, q: FloatArray) -> tuple[FloatArray, float]:
        for _ in range(_IK_ITERATIONS):
            here = self._kin.end_effector(q)
            error = target - here
            if error.dot(error) < _IK_TOLERANCE_M**2:
                break
            jac = self._jacobian(q, here)
            step = jac.T @ np.linalg.solve(jac @ jac.T + _IK_DAMPING * np.eye(3), error)
            q = np.clip(q + step, self._low, self._high)
        offset = target - self._kin.end_effector(q)
        return q, math.sqrt(float(offset.dot(offset)))

    def _jacobian(self, q: FloatArray, here: FloatArray) -> FloatArray:
        cols = []
        for i in range(self.spec.n_joints):
            dq = np.zeros(self.spec.n_joints)
            dq[i] = _JACOBIAN_STEP_RAD
            cols.append((self._kin.end_effector(q + dq) - here) / _JACOBIAN_STEP_RAD)
        return np.stack(cols, axis=1)

    def _compensated(self, pose: FloatArray) -> FloatArray:
        d = self.dynamics
        if d is None:
            return pose
        loaded = self._loaded.get(d.payload_mass_kg)
        if loaded is None:
            loaded = self._loaded[d.payload_mass_kg] = ArmKinematics(
                self.spec, payload_mass_kg=d.payload_mass_kg
            )
        shortfall = loaded.gravity_torque(pose) - d.actuator_gain * self._kin.gravity_torque(pose)
        command = pose + d.obs_bias + shortfall / (d.actuator_gain * self._kp)
        return np.clip(command, self._low, self._high)
