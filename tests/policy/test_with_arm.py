"""A bundle initialized for the built-in arm drives the simulated arm: the contract end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tether.policy import EngineConfig, PolicyEngine, init_bundle, load_bundle
from tether.safety.for_spec import supervisor_for
from tether.sim import ArmEnv, arm_spec


def test_init_bundle_for_the_arm_drives_the_simulator(tmp_path: Path) -> None:
    spec = arm_spec()
    bundle = init_bundle(tmp_path / "arm", spec, hidden_sizes=(32, 32), seed=1)
    assert load_bundle(tmp_path / "arm").robot_spec == spec
    engine = PolicyEngine(bundle, EngineConfig(execution="eager", seed=1))
    env = ArmEnv(seed=0)
    # Through the arm's supervisor, as served: a position command then changes by at
    # most velocity limit × period per step, the scale the normalizer gives that change.
    supervisor = supervisor_for(spec)
    previous = None
    obs, _ = env.reset(seed=0)
    norm = bundle.manifest.normalizer
    z_max = 0.0
    for _ in range(40):
        out = engine.act(obs[None, :], False)
        action = out.actions[0]
        assert out.version == bundle.version
        assert np.all(np.isfinite(action))
        assert np.all(np.abs(action) <= 1.0)
        z = (obs - np.asarray(norm.mean)) / np.sqrt(np.asarray(norm.var))
        z_max = max(z_max, float(np.max(np.abs(z))))
        executed, _ = supervisor.filter(obs, action, previous)
        previous = executed
        obs, _, terminated, truncated, _ = env.step(executed)
        if terminated or truncated:
            obs, _ = env.reset()
            previous = None
    # the spec-derived statistics put the arm's real observations at order one, far from clip
    assert z_max < norm.clip
