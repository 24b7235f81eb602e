"""The task is solvable on the nominal arm, and the demo drift really makes it harder.

A plain model-based controller (damped least-squares toward the target, joint PD,
gravity compensation from ArmKinematics for the *nominal* arm) stands in for a policy
trained on nominal dynamics.
"""

from __future__ import annotations

import numpy as np

from tether.sim import ArmDynamics, ArmEnv, ArmEnvConfig, ArmKinematics, DriftSchedule, arm_spec

# The torque interface's task (the arm's second command interface).
TORQUE_TASK = ArmEnvConfig(command_interface="torque")

SPEC = arm_spec()
KIN = ArmKinematics()
TORQUE = np.array(SPEC.torque_limit_nm)
LAY = SPEC.layout.slices()
EPISODE_STEPS = ArmEnvConfig().episode_steps
# Per-joint proportional and damping weights, hand-tuned on the nominal arm.
GAINS_P = 60.0 * np.array([0.3, 1.0, 0.6, 0.2])
GAINS_D = 3.0 * np.array([0.5, 1.0, 0.6, 0.2])


def _jacobian(q: np.ndarray) -> np.ndarray:
    here = KIN.end_effector(q)
    cols = []
    for i in range(SPEC.n_joints):
        dq = np.zeros(SPEC.n_joints)
        dq[i] = 1e-6
        cols.append((KIN.end_effector(q + dq) - here) / 1e-6)
    return np.stack(cols, axis=1)


def _success_rate(dynamics: ArmDynamics, episodes: int) -> float:
    env = ArmEnv(config=TORQUE_TASK, dynamics=dynamics, seed=0)
    reached = 0
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        for _ in range(EPISODE_STEPS):
            q = obs[LAY["joint_position"]].astype(np.float64)
            qd = obs[LAY["joint_velocity"]].astype(np.float64)
            error = obs[LAY["target"]] - obs[LAY["end_effector"]]
            jac = _jacobian(q)
            step = jac.T @ np.linalg.solve(jac @ jac.T + 1e-3 * np.eye(3), error)
            torque = KIN.gravity_torque(q) + GAINS_P * step - GAINS_D * qd
            obs, _, _, _, info = env.step(np.clip(torque / TORQUE, -1, 1).astype(np.float32))
        reached += info["success"]
    return reached / episodes


def test_nominal_controller_reaches_targets_and_drift_defeats_it() -> None:
    assert _success_rate(ArmDynamics.nominal(), episodes=8) == 1.0
    worn = DriftSchedule.demo().dynamics_at(10**9, ArmDynamics.nominal())
    assert _success_rate(worn, episodes=8) <= 0.5
