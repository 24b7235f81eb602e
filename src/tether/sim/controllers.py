"""Model-based reaching controllers for the position-commanded arm: a scripted baseline
and an oracle.

``ReachController`` solves the target's inverse kinematics once per target (damped
least squares on ``ArmKinematics``, inside the joint ranges less the supervisor's
margin), aims at the measured pose moved toward that goal by at most ``APPROACH_RAD``
per joint (near the goal, the goal itself), and moves its command toward that aim
within the supervisor's rate limits with a margin: per step by at most
``VELOCITY_FRACTION`` of velocity limit × period, that step changing by at most
``ACCELERATION_FRACTION`` of acceleration limit × period², and slowing in time to stop
on the aim. It steps from the command the observation reports (the arm's last one), so
a supervisor that sees the same command passes every step unchanged, and the rule reads
nothing but the observation, so a policy can imitate it exactly. Given only the nominal model it is the *scripted* controller (what a
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
from tether.spec import RobotSpec, Sphere

FloatArray = NDArray[np.float64]

_IK_ITERATIONS = 60
_IK_DAMPING = 1e-3
_IK_TOLERANCE_M = 1e-4
_JACOBIAN_STEP_RAD = 1e-6
# The most the aim leads the measured pose by (rad): it bounds the impedance torque the
# command demands while the arm catches up.
APPROACH_RAD = 0.35
# The command's rates as fractions of the supervisor's caps: the margin a clone's small
# error (and its sampling) has before the supervisor corrects it.
VELOCITY_FRACTION = 0.5
ACCELERATION_FRACTION = 0.7
# The goal stays this far inside each joint's range: the supervisor's range check keeps
# commands 0.1 rad inside it.
RANGE_INSET_RAD = 0.12
# A straight joint-space line to the goal that brings a collision sphere closer than this
# to the obstacle goes by a way point instead (the supervisor's margin is 0.06 m).
OBSTACLE_CLEARANCE_M = 0.08
_SEGMENT_FRACTIONS = np.linspace(0.0, 1.0, 9)


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
        self._low = np.array(self.spec.joint_position_low_rad) + RANGE_INSET_RAD
        self._high = np.array(self.spec.joint_position_high_rad) - RANGE_INSET_RAD
        self._kp = np.array(self.spec.joint_stiffness_nm_rad)
        self._home = np.array(self.spec.home_position_rad)
        self._obstacles = [
            (np.array(ob.center), ob.radius) for ob in self.spec.obstacles if isinstance(ob, Sphere)
        ]
        lay = self.spec.layout.slices()
        if "command" not in lay or "command_change" not in lay:
            raise SimConfigError(
                "ReachController steps from the command the observation reports; the spec's "
                "layout has no 'command' and 'command_change' slices (use arm_spec('position'))"
            )
        self._q, self._target = lay["joint_position"], lay["target"]
        self._command, self._change = lay["command"], lay["command_change"]
        dt = self.spec.control_period_s
        self._max_step = VELOCITY_FRACTION * np.array(self.spec.joint_velocity_limit_rad_s) * dt
        self._max_step_change = (
            ACCELERATION_FRACTION * np.array(self.spec.joint_acceleration_limit_rad_s2) * dt * dt
        )
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
        ahead = self._way_point(q, self._goal) - q
        farthest = float(np.abs(ahead).max())
        aim = q + ahead * min(1.0, APPROACH_RAD / farthest) if farthest > 0 else q
        previous, previous_step = obs[self._command], obs[self._change]
        left = aim - previous
        # All joints on one straight line in joint space, arriving together: each joint's
        # rates are the slowest joint's, scaled by how far it has to go (a joint that
        # raced ahead would swing the arm through poses the straight line avoids).
        distance = np.maximum(np.abs(left), 1e-9)
        pace = distance * (self._max_step / distance).min()
        brake = distance * (self._max_step_change / distance).min()
        # The fastest step from which the command can still stop on the aim, braking at
        # the allowed change per step: sqrt(2·a·d) in steps.
        speed = np.minimum(pace, np.sqrt(2.0 * brake * distance))
        wanted = np.sign(left) * np.minimum(speed, np.abs(left))
        step = np.clip(
            wanted, previous_step - self._max_step_change, previous_step + self._max_step_change
        )
        command = previous + np.clip(step, -self._max_step, self._max_step)
        action: NDArray[np.float32] = np.clip(
            self.spec.action_for_position(command), -1.0, 1.0
        ).astype(np.float32)
        return action

    def _way_point(self, q: FloatArray, goal: FloatArray) -> FloatArray:
        """The goal, or, when the straight line to it passes the obstacle too closely, the
        first way point from which both legs are clear: one joint group first (yaw, or
        the pitches), or through the home pitches."""
        if self._clear(q, goal):
            return goal
        home = self._home
        for via in (
            np.concatenate([goal[:1], q[1:]]),
            np.concatenate([q[:1], goal[1:]]),
            np.concatenate([goal[:1], home[1:]]),
            np.concatenate([q[:1], home[1:]]),
            np.concatenate([goal[:2], home[2:]]),
        ):
            if self._clear(q, via) and self._clear(via, goal):
                return via
        return goal

    def _clear(self, start: FloatArray, end: FloatArray) -> bool:
        """Whether the collision spheres keep ``OBSTACLE_CLEARANCE_M`` from each obstacle
        along the joint-space segment ``start`` → ``end`` (less where an end itself is
        closer: a goal near the obstacle is approached, not refused)."""
        gaps = [self._gap(start + f * (end - start)) for f in _SEGMENT_FRACTIONS]
        needed = min(OBSTACLE_CLEARANCE_M, gaps[0] - 0.005, gaps[-1] - 0.005)
        return min(gaps) >= needed

    def _gap(self, q: FloatArray) -> float:
        centers, radii = self._kin.collision_spheres(q)
        gap = math.inf
        for center, radius in self._obstacles:
            d = np.sqrt(((centers - center) ** 2).sum(axis=1)) - radii - radius
            gap = min(gap, float(d.min()))
        return gap

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
