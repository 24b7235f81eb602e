"""``ArmEnv``: the built-in arm as a gymnasium env (``tether/Arm-v0``).

Each control step (``arm_spec().control_period_s``) holds one normalized command over
several physics substeps. Observation: ``[q | q̇ | end effector | target]`` (float32,
layout in ``arm_spec().layout``; q and q̇ carry the dynamics' sensor noise and bias, the
end effector and target are exact), and for the position interface
``[command | command change]``: the joint target (rad) the arm received on the last step
(before any delay: what the supervisor let through) and its change from the one before
(the command the arm starts holding at reset, with zero change). Action, by ``ArmEnvConfig.command_interface``:
normalized torques in [-1, 1] (1 is ``torque_limit_nm`` times the actuator gain), or
normalized joint-position targets in [-1, 1] (``RobotSpec.commanded_position``) that the
joint impedance controller inside the model tracks at the physics rate; it reads the
joint encoders, so their calibration bias shifts where the arm goes.

Invariant: everything ``info`` reports (obstacle contact, limit violations, success) is
read from the physics state, never from what a policy or supervisor believed, so tests
can count real violations. Episodes have a fixed length: ``terminated`` is always False.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any, NamedTuple

import gymnasium as gym
import mujoco
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from tether.sim.config import ArmEnvConfig
from tether.sim.drift import DriftSchedule
from tether.sim.dynamics import ArmDynamics, apply_dynamics
from tether.sim.errors import SimConfigError, SimError
from tether.sim.geometry import ARM
from tether.sim.kinematics import ArmKinematics
from tether.sim.mjcf import END_EFFECTOR_SITE, build_model
from tether.sim.outcome import EpisodeOutcome, OutcomeTracker
from tether.sim.randomization import DomainRandomization
from tether.sim.spec import arm_spec

FloatArray = NDArray[np.float64]
ObsArray = NDArray[np.float32]

# Plenty: about half the joint space reaches a valid target pose.
_TARGET_ATTEMPTS = 1000


class ArmState(NamedTuple):
    """The arm's true, noise-free state after the last step (copies, safe to keep)."""

    joint_position_rad: FloatArray
    joint_velocity_rad_s: FloatArray
    end_effector_m: FloatArray
    target_m: FloatArray
    executed_action: FloatArray
    """The normalized command the arm ran during the last step (after any delay)."""


class ArmEnv(gym.Env[ObsArray, ObsArray]):
    """Reach a target drawn per episode with a 4-joint arm; avoid the obstacle."""

    # gymnasium declares metadata as an instance attribute but reads it off the class.
    metadata: dict[str, Any] = {  # noqa: RUF012
        "render_modes": [],
        "render_fps": round(1 / ARM.control_period_s),
    }

    def __init__(
        self,
        *,
        dynamics: ArmDynamics | None = None,
        randomization: DomainRandomization | None = None,
        drift: DriftSchedule | None = None,
        seed: int | None = None,
        config: ArmEnvConfig | None = None,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None:
            raise SimConfigError(
                f"ArmEnv does not render; render_mode must be None, got {render_mode!r}"
            )
        self.config = config or ArmEnvConfig()
        self.robot_spec = arm_spec(self.config.command_interface)
        self._position = self.config.command_interface == "position"
        self._model = build_model(command_interface=self.config.command_interface)
        self._data = mujoco.MjData(self._model)
        self._kinematics = ArmKinematics()
        self._site = mujoco.mj_name2id(self._model, mujoco.mjtObj.mjOBJ_SITE, END_EFFECTOR_SITE)
        self._randomization = randomization
        self._drift = drift
        self._base = dynamics or ArmDynamics.nominal()
        self._episode_base = self._base
        self._dynamics = self._base
        apply_dynamics(self._model, self._base)
        self._initial_seed = seed
        self._seeded = False
        n = self.robot_spec.n_joints
        self._n = n
        self._low = np.array(self.robot_spec.joint_position_low_rad)
        self._high = np.array(self.robot_spec.joint_position_high_rad)
        self._vlim = np.array(self.robot_spec.joint_velocity_limit_rad_s)
        self._home = np.array(self.robot_spec.home_position_rad)
        self._obstacle = np.array(ARM.obstacle_center_m)
        self._ws_low = np.array(ARM.workspace_low_m)
        self._ws_high = np.array(ARM.workspace_high_m)
        self._target = np.zeros(3)
        self._pending: deque[FloatArray] = deque()
        self._executed = np.zeros(n)
        self._commanded = np.zeros(n)
        self._command_rad = np.zeros(n)
        self._command_change_rad = np.zeros(n)
        self._obs = np.zeros(self.robot_spec.obs_dim, dtype=np.float32)
        self.global_step = 0
        self.episode_step = 0
        self._outcome = OutcomeTracker(
            self.config.success_radius_m, self.config.settle_steps, self.config.settle_speed_rad_s
        )
        self.action_space = spaces.Box(-1.0, 1.0, shape=(n,), dtype=np.float32)
        self.observation_space = _observation_space(
            self._low, self._high, self._vlim, position=self._position
        )

    # -- gymnasium API -------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsArray, dict[str, Any]]:
        """Start an episode near home with a fresh target.

        ``options`` may pin ``joint_position`` (rad, ``(n,)``), ``joint_velocity``
        (rad/s, ``(n,)``) and ``target`` (m, ``(3,)``), e.g. to start a test next to the
        obstacle.
        """
        if seed is None and not self._seeded:
            seed = self._initial_seed
        self._seeded = True
        super().reset(seed=seed)
        opts = dict(options or {})
        unknown = set(opts) - {"joint_position", "joint_velocity", "target"}
        if unknown:
            raise SimConfigError(
                f"ArmEnv.reset options may be joint_position, joint_velocity and target; "
                f"got unknown {sorted(unknown)}"
            )
        rng = self.np_random
        if self._randomization is not None:
            self._episode_base = self._randomization.sample(rng)
        else:
            self._episode_base = self._base
        self._set_dynamics(self._dynamics_now())
        mujoco.mj_resetData(self._model, self._data)
        spread = self.config.initial_position_noise_rad
        q = np.clip(self._home + rng.uniform(-spread, spread, self._n), self._low, self._high)
        if "joint_position" in opts:
            q = _checked(opts, "joint_position", (self._n,))
        self._data.qpos[:] = q
        if "joint_velocity" in opts:
            self._data.qvel[:] = _checked(opts, "joint_velocity", (self._n,))
        # Drawn even when pinned, so pinning one does not shift the random stream.
        target = self._sample_target(rng)
        self._target = _checked(opts, "target", (3,)) if "target" in opts else target
        self._pending.clear()
        # A position-commanded arm starts holding where it is; a torque arm unpowered.
        self._executed = (
            np.clip(self.robot_spec.action_for_position(q), -1.0, 1.0)
            if self._position
            else np.zeros(self._n)
        )
        self._commanded = self._executed.copy()
        if self._position:
            self._command_rad = self.robot_spec.commanded_position(self._commanded)
            self._command_change_rad = np.zeros(self._n)
        self._data.ctrl[:] = self._control(self._executed)
        mujoco.mj_forward(self._model, self._data)
        self.episode_step = 0
        self._outcome.reset()
        return self._observe(), {"dynamics": self._dynamics}

    def step(self, action: ObsArray) -> tuple[ObsArray, float, bool, bool, dict[str, Any]]:
        """Run one control period with ``action`` (normalized commands, clipped to [-1, 1])."""
        command = np.asarray(action, dtype=np.float64)
        if command.shape != (self._n,) or not np.isfinite(command).all():
            raise SimError(
                f"ArmEnv.step needs a finite action of shape ({self._n},) (normalized "
                f"{self.config.command_interface} commands), "
                f"got shape {command.shape} with values {command}; filter actions through the "
                "safety supervisor before they reach the arm"
            )
        command = np.minimum(np.maximum(command, -1.0), 1.0)
        drift = self._drift
        if drift is not None and self.global_step <= drift.last_step:
            self._set_dynamics(drift.dynamics_at(self.global_step, self._episode_base))
        executed = self._delay(command)
        data, model = self._data, self._model
        data.ctrl[:] = self._control(executed)
        contact = False
        limit = False
        # Contacts and active limit constraints are read at every substep, so a brief
        # touch between two control steps still counts.
        for _ in range(ARM.substeps):
            mujoco.mj_step(model, data)
            contact = contact or data.ncon > 0
            limit = limit or data.nl > 0
        mujoco.mj_kinematics(model, data)
        q, qd = data.qpos, data.qvel
        # ndarray methods, not np.any/np.linalg.norm: this runs thousands of times a second.
        limit = limit or bool((q < self._low).any() or (q > self._high).any())
        speed = np.abs(qd)
        too_fast = bool((speed > self._vlim).any())
        ee = data.site_xpos[self._site]
        outside = bool((ee < self._ws_low).any() or (ee > self._ws_high).any())
        offset = ee - self._target
        distance = math.sqrt(float(offset.dot(offset)))
        success = distance < self.config.success_radius_m
        cfg = self.config
        if self._position:
            change = command - self._commanded
            reward = (
                -cfg.distance_weight * distance
                - cfg.command_change_weight * float(change.dot(change))
                # A smooth bonus: the return does not jump when the arm crosses the radius.
                + cfg.success_bonus * math.exp(-((distance / cfg.success_radius_m) ** 2))
                - (cfg.contact_penalty if contact else 0.0)
            )
        else:
            reward = (
                -cfg.distance_weight * distance
                - cfg.effort_weight * float(command.dot(command))
                + (cfg.success_bonus if success else 0.0)
                - (cfg.contact_penalty if contact else 0.0)
            )
        self._commanded = command
        if self._position:
            command_rad = self.robot_spec.commanded_position(command)
            self._command_change_rad = command_rad - self._command_rad
            self._command_rad = command_rad
        outcome = self._outcome
        outcome.record(distance, reward, contact, limit, too_fast, float(speed.max()))
        self.global_step += 1
        self.episode_step += 1
        # A task that is done ends the episode as a truncation: holding the target is not a
        # terminal state (a critic still bootstraps through it).
        truncated = self.episode_step >= cfg.episode_steps or (
            cfg.end_when_settled and outcome.at_rest
        )
        counts = outcome.outcome()
        info: dict[str, Any] = {
            "obstacle_contact": contact,
            "joint_limit_violation": limit,
            "velocity_limit_violation": too_fast,
            "end_effector_outside_workspace": outside,
            "success": success,
            "distance_m": distance,
            "executed_action": executed.copy(),
            "dynamics": self._dynamics,
            "settled": outcome.settled,
            "obstacle_contact_steps": counts.obstacle_contact_steps,
            "joint_limit_violation_steps": counts.joint_limit_violation_steps,
            "velocity_limit_violation_steps": counts.velocity_limit_violation_steps,
            "episode_step": self.episode_step,
        }
        if truncated:
            info["outcome"] = counts
        return self._observe(), reward, False, truncated, info

    # -- beyond gymnasium ----------------------------------------------------------------

    @property
    def dynamics(self) -> ArmDynamics:
        """The dynamics in force right now (base, randomization and drift combined)."""
        return self._dynamics

    def set_dynamics(self, dynamics: ArmDynamics) -> None:
        """Change the base dynamics now, mid-episode; drift still applies on top.

        With a randomization, the next reset draws fresh dynamics again.
        """
        self._base = dynamics
        self._episode_base = dynamics
        self._set_dynamics(self._dynamics_now())

    def set_external_torque(self, torque_nm: Any | None) -> None:
        """Apply ``torque_nm`` (N·m, ``(n,)``, finite) to the joints from outside the
        robot (a person's hand on the arm, a bump the model lacks) at every step from now
        until it is changed; None takes it away. A reset takes it away too."""
        data = self._data
        if torque_nm is None:
            data.qfrc_applied[:] = 0.0
            return
        torque = np.asarray(torque_nm, dtype=np.float64)
        if torque.shape != (self._n,) or not np.isfinite(torque).all():
            raise SimConfigError(
                f"ArmEnv.set_external_torque needs a finite torque of shape ({self._n},) "
                f"(N·m per joint) or None, got shape {torque.shape} with values {torque}"
            )
        data.qfrc_applied[:] = torque

    def episode_outcome(self) -> EpisodeOutcome:
        """The outcome of the episode so far (``info["outcome"]`` on its last step)."""
        return self._outcome.outcome()

    def true_state(self) -> ArmState:
        """The noise-free state after the last step, for tests and ground-truth logging."""
        data = self._data
        return ArmState(
            joint_position_rad=data.qpos.copy(),
            joint_velocity_rad_s=data.qvel.copy(),
            end_effector_m=data.site_xpos[self._site].copy(),
            target_m=self._target.copy(),
            executed_action=self._executed.copy(),
        )

    def true_observation(self) -> ObsArray:
        """The observation a perfect sensor would give now (no noise, no bias)."""
        state = self.true_state()
        parts = [
            state.joint_position_rad,
            state.joint_velocity_rad_s,
            state.end_effector_m,
            state.target_m,
        ]
        if self._position:
            parts += [self._command_rad, self._command_change_rad]
        return np.concatenate(parts).astype(np.float32)

    # -- internals -----------------------------------------------------------------------

    def _dynamics_now(self) -> ArmDynamics:
        if self._drift is None:
            return self._episode_base
        return self._drift.dynamics_at(self.global_step, self._episode_base)

    def _set_dynamics(self, dynamics: ArmDynamics) -> None:
        if dynamics != self._dynamics:
            apply_dynamics(self._model, dynamics, previous=self._dynamics)
            self._dynamics = dynamics

    def _control(self, executed: FloatArray) -> FloatArray:
        """What the model's actuators take: the normalized torque, or the commanded
        position in the encoders' frame (the controller sees ``q + obs_bias``, so to reach
        ``q_cmd`` on its readings it drives the true joint to ``q_cmd − obs_bias``)."""
        if not self._position:
            return executed
        return self.robot_spec.commanded_position(executed) - self._dynamics.obs_bias

    def _delay(self, command: FloatArray) -> FloatArray:
        # Commands wait in a queue; when the delay grows the motors repeat the last
        # executed command, when it shrinks the stale commands are skipped.
        self._pending.append(command)
        executed = self._executed
        while len(self._pending) > self._dynamics.action_delay_steps:
            executed = self._pending.popleft()
        self._executed = executed
        return executed

    def _observe(self) -> ObsArray:
        d, n, obs = self._dynamics, self._n, self._obs
        obs[:n] = self._data.qpos
        obs[n : 2 * n] = self._data.qvel
        if d.obs_bias:
            obs[:n] += d.obs_bias
        if d.obs_noise_std:
            obs[: 2 * n] += self.np_random.normal(0.0, d.obs_noise_std, 2 * n)
        obs[2 * n : 2 * n + 3] = self._data.site_xpos[self._site]
        obs[2 * n + 3 : 2 * n + 6] = self._target
        if self._position:
            obs[2 * n + 6 : 3 * n + 6] = self._command_rad
            obs[3 * n + 6 :] = self._command_change_rad
        return obs.copy()

    def _sample_target(self, rng: np.random.Generator) -> FloatArray:
        """A point the arm reaches in a pose that clears the obstacle, away from the obstacle."""
        cfg = self.config
        for _ in range(_TARGET_ATTEMPTS):
            q = rng.uniform(self._low, self._high)
            point = self._kinematics.end_effector(q)
            if point[2] < cfg.target_min_height_m or not self.robot_spec.workspace.contains(
                point, margin=cfg.success_radius_m
            ):
                continue
            centers, radii = self._kinematics.collision_spheres(q)
            gaps = np.linalg.norm(centers - self._obstacle, axis=1) - radii - ARM.obstacle_radius_m
            if gaps.min() > cfg.target_obstacle_clearance_m:
                return point
        raise SimError(
            f"ArmEnv found no reachable target clear of the obstacle in {_TARGET_ATTEMPTS} "
            "draws; lower target_obstacle_clearance_m or target_min_height_m"
        )


def _observation_space(
    low: FloatArray, high: FloatArray, velocity_limit: FloatArray, *, position: bool
) -> spaces.Box[np.float32]:
    """Generous finite bounds: no physical state of the arm comes near them.

    Joint readings and commands get half a turn beyond the range (soft limits, bias,
    noise, the command's overreach), speeds ten times their limit, positions the arm's
    full reach around the shoulder, a command's change the joint's whole span.
    """
    reach = sum(link.length_m for link in ARM.links[1:]) + ARM.end_effector_offset_m
    shoulder = ARM.base_height_m + ARM.links[0].length_m
    lo_xyz = [-reach, -reach, shoulder - reach]
    hi_xyz = [reach, reach, shoulder + reach]
    lows: list[NDArray[np.float64]] = [
        low - np.pi,
        -10 * velocity_limit,
        *map(np.array, (lo_xyz, lo_xyz)),
    ]
    highs: list[NDArray[np.float64]] = [
        high + np.pi,
        10 * velocity_limit,
        *map(np.array, (hi_xyz, hi_xyz)),
    ]
    if position:
        span = high - low + 2 * np.pi
        lows += [low - np.pi, -span]
        highs += [high + np.pi, span]
    return spaces.Box(
        np.concatenate(lows).astype(np.float32),
        np.concatenate(highs).astype(np.float32),
        dtype=np.float32,
    )


def _checked(options: dict[str, Any], key: str, shape: tuple[int, ...]) -> FloatArray:
    value = np.asarray(options[key], dtype=np.float64)
    if value.shape != shape or not np.all(np.isfinite(value)):
        raise SimConfigError(
            f"ArmEnv.reset option {key!r} must be finite with shape {shape}, got {value!r}"
        )
    return value
