"""The shipped position policy on the MuJoCo arm through the position supervisor, at every
degradation level and switching levels mid-episode: no joint-limit violation and no
obstacle contact, on the nominal and on the fully drifted arm (MuJoCo's counts).

Levels as serving applies them (``tether.serving.supervision``): the base limits at
NORMAL, the RESTRICTED tightening below it, the backup at TAKEOVER; a switch hands the
robot's state to the next level's supervisor (``take_state``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tether.assets import load_pretrained_bundle
from tether.policy import EngineConfig, PolicyEngine
from tether.safety.degradation_config import DegradationConfig
from tether.safety.for_spec import supervisor_for
from tether.sim import ArmDynamics, ArmEnv, ArmEnvConfig, DriftSchedule, arm_spec

NOMINAL = ArmDynamics.nominal()
DRIFTED = DriftSchedule.demo().dynamics_at(10**9, NOMINAL)
# Per level, a schedule of (first step, level) within each 200-step episode.
SCHEDULES = {
    "normal": ((0, "normal"),),
    "restricted": ((0, "restricted"),),
    "takeover": ((0, "takeover"),),
    "switching": (
        (0, "normal"),
        (40, "restricted"),
        (90, "takeover"),
        (120, "normal"),
        (160, "restricted"),
    ),
}


def run(
    dynamics: ArmDynamics, schedule: tuple[tuple[int, str], ...], seeds: range
) -> tuple[int, int]:
    torch.set_num_threads(1)
    engine = PolicyEngine(
        load_pretrained_bundle(command_interface="position"), EngineConfig(execution="eager")
    )
    base = supervisor_for(arm_spec("position"))
    restricted = base.with_limits(
        base.limits.tightened(DegradationConfig().restricted_tighten_factor)
    )
    env = ArmEnv(dynamics=dynamics, seed=0, config=ArmEnvConfig(command_interface="position"))
    contacts = violations = 0
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        previous: np.ndarray | None = None
        active = base
        for step in range(env.config.episode_steps):
            level = [lvl for first, lvl in schedule if step >= first][-1]
            supervisor = restricted if level == "restricted" else base
            if supervisor is not active:
                supervisor.take_state(active)
                active = supervisor
            if level == "takeover":
                action, _ = supervisor.backup_action(obs, previous)
            else:
                proposed = engine.act(obs[None, :], deterministic=True).actions[0]
                action, _ = supervisor.filter(obs, proposed, previous)
            previous = action
            obs, _, _, truncated, info = env.step(action)
            contacts += bool(info["obstacle_contact"])
            violations += bool(info["joint_limit_violation"])
            if truncated:
                break
    return contacts, violations


@pytest.mark.parametrize("level", sorted(SCHEDULES))
@pytest.mark.parametrize("arm", ["nominal", "drifted"])
def test_shipped_policy_at_every_level_never_touches_or_violates(arm: str, level: str) -> None:
    dynamics = NOMINAL if arm == "nominal" else DRIFTED
    assert run(dynamics, SCHEDULES[level], range(2)) == (0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("arm", ["nominal", "drifted"])
def test_shipped_policy_switching_levels_over_many_episodes(arm: str) -> None:
    dynamics = NOMINAL if arm == "nominal" else DRIFTED
    assert run(dynamics, SCHEDULES["switching"], range(2, 22)) == (0, 0)
