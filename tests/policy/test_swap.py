"""Weight swaps under load: every batch is computed by exactly the version it names."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import torch
from hypothesis import given, settings, strategies as st

from tether.policy import EngineConfig, PolicyBundle, PolicyEngine, init_bundle
from tether.policy.uniform import apply_uniform, apply_uniform_np
from tether.spec import RobotSpec


def test_concurrent_swaps_never_mix_versions(
    tmp_path: Path, bundle: PolicyBundle, spec: RobotSpec
) -> None:
    other = init_bundle(tmp_path / "v2", spec, hidden_sizes=(64, 64), seed=8, version_id=2)
    obs = np.random.default_rng(0).standard_normal((32, spec.obs_dim)).astype(np.float32)
    expected = {
        b.version.id: PolicyEngine(b, EngineConfig(execution="eager")).act(obs, True).actions
        for b in (bundle, other)
    }
    engine = PolicyEngine(bundle, EngineConfig(execution="eager"))
    stop = threading.Event()
    seen: list[tuple[int, bool]] = []

    def serve() -> None:
        while not stop.is_set():
            out = engine.act(obs, True)
            seen.append((out.version.id, np.array_equal(out.actions, expected[out.version.id])))

    server = threading.Thread(target=serve)
    server.start()
    try:
        for i in range(40):
            b = other if i % 2 == 0 else bundle
            engine.swap_weights(b.version, b.actor_state)
    finally:
        stop.set()
        server.join(timeout=30)
    assert not server.is_alive()
    assert seen, "the serving thread never completed a batch"
    assert all(ok for _, ok in seen), "a batch was computed with weights other than its version's"
    assert {v for v, _ in seen} <= {1, 2}


def test_swapped_state_is_copied(bundle: PolicyBundle) -> None:
    """Mutating the caller's tensors after a swap must not change what is served."""
    engine = PolicyEngine(bundle, EngineConfig(execution="numpy"))
    state = {k: v.clone() for k, v in bundle.actor_state.items()}
    obs = np.zeros((1, engine.obs_dim), np.float32)
    engine.swap_weights(bundle.version, state)
    before = engine.act(obs, True).actions
    for v in state.values():
        v.add_(1.0)
    np.testing.assert_array_equal(engine.act(obs, True).actions, before)


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(1, 700),
    i=st.data(),
    fn=st.sampled_from(["tanh", "exp", "softplus"]),
)
def test_uniform_math_is_position_independent(n: int, i: st.DataObject, fn: str) -> None:
    f = {"tanh": torch.tanh, "exp": torch.exp, "softplus": torch.nn.functional.softplus}[fn]
    x = torch.from_numpy(np.random.default_rng(n).standard_normal(n).astype(np.float32))
    k = i.draw(st.integers(0, n - 1))
    assert torch.equal(apply_uniform(f, x, 64)[k], apply_uniform(f, x[k : k + 1], 64)[0])
    if fn in ("tanh", "exp"):
        g = np.tanh if fn == "tanh" else np.exp
        xn = x.numpy()
        assert apply_uniform_np(g, xn)[k] == apply_uniform_np(g, xn[k : k + 1])[0]
