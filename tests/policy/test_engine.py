"""PolicyEngine: correctness against the plain Actor, bounds, validation, sampling, swaps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from tether.policy import (
    EngineConfig,
    EngineConfigError,
    ObservationError,
    PolicyBundle,
    PolicyEngine,
    VersionInfo,
    WeightSwapError,
    init_bundle,
    kernel,
    state_sha256,
)
from tether.policy.selection import probe_observations
from tether.spec import RobotSpec

COMPILED = pytest.param(
    "compiled", marks=pytest.mark.skipif(not kernel.AVAILABLE, reason="no numba")
)


def _reference(bundle: PolicyBundle, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The textbook computation with the plain Actor module, in float64."""
    norm = bundle.manifest.normalizer
    x = (obs.astype(np.float64) - np.asarray(norm.mean)) / np.sqrt(
        np.asarray(norm.var) + norm.epsilon
    )
    x = np.clip(x, -norm.clip, norm.clip)
    actor = bundle.build_actor().double()
    with torch.no_grad():
        a, logp = actor.sample(torch.from_numpy(x), deterministic=True)
    low, high = np.asarray(bundle.manifest.action.low), np.asarray(bundle.manifest.action.high)
    return low + (a.numpy() + 1) * (high - low) / 2, logp.numpy()


@pytest.mark.parametrize("execution", ["eager", "jit", "numpy", COMPILED])
def test_exact_paths_match_the_actor(bundle: PolicyBundle, execution: str) -> None:
    engine = PolicyEngine(bundle, EngineConfig(execution=execution))  # type: ignore[arg-type]
    obs = probe_observations(bundle.manifest.normalizer, 50, spread=2.0)
    out = engine.act(obs, deterministic=True)
    ref_a, ref_lp = _reference(bundle, obs)
    assert out.actions.dtype == np.float32
    assert out.actions.shape == (50, 3)
    assert out.log_probs.dtype == np.float32
    assert out.log_probs.shape == (50,)
    np.testing.assert_allclose(out.actions, ref_a, atol=2e-6)
    np.testing.assert_allclose(out.log_probs, ref_lp, atol=5e-5, rtol=1e-5)
    assert out.version == bundle.version


def test_int8_path_is_close_to_eager(bundle: PolicyBundle) -> None:
    obs = probe_observations(bundle.manifest.normalizer, 64, spread=2.0)
    eager = PolicyEngine(bundle, EngineConfig(execution="eager")).act(obs, True).actions
    int8 = PolicyEngine(bundle, EngineConfig(execution="int8")).act(obs, True).actions
    diff = np.abs(int8 - eager).max()
    assert 0 < diff < 0.05  # quantized, so not exact, but close


def test_actions_scale_into_custom_bounds(tmp_path: Path, bundle: PolicyBundle) -> None:
    from tether.policy import ActionSpec, save_bundle

    m = bundle.manifest
    wide = save_bundle(
        tmp_path / "wide",
        actor_state=bundle.actor_state,
        architecture=m.architecture,
        observation=m.observation,
        action=ActionSpec(m.action.names, (-3.0, 0.0, 10.0), (1.0, 0.5, 10.5)),
        normalizer=m.normalizer,
        version_id=2,
        version_name="wide",
    )
    obs = probe_observations(
        bundle.manifest.normalizer, 200, spread=50.0
    )  # saturates tanh on many rows
    engine = PolicyEngine(wide, EngineConfig(execution="eager"))
    for det in (True, False):
        a = engine.act(obs, det).actions
        assert np.all(a >= engine.action_low)
        assert np.all(a <= engine.action_high)
    unit = PolicyEngine(bundle, EngineConfig(execution="eager")).act(obs[:5], True).actions
    scaled = engine.act(obs[:5], True).actions
    low, high = engine.action_low, engine.action_high
    np.testing.assert_allclose(scaled, low + (unit + 1) * (high - low) / 2, atol=1e-5)


def test_stochastic_sampling_is_seedable(bundle: PolicyBundle) -> None:
    obs = probe_observations(bundle.manifest.normalizer, 16, spread=2.0)
    a = PolicyEngine(bundle, EngineConfig(execution="eager", seed=11)).act(obs, False)
    b = PolicyEngine(bundle, EngineConfig(execution="eager", seed=11)).act(obs, False)
    c = PolicyEngine(bundle, EngineConfig(execution="eager", seed=12)).act(obs, False)
    det = PolicyEngine(bundle, EngineConfig(execution="eager")).act(obs, True)
    np.testing.assert_array_equal(a.actions, b.actions)
    assert not np.array_equal(a.actions, c.actions)
    assert not np.array_equal(a.actions, det.actions)
    assert np.all(np.isfinite(a.log_probs))


def test_per_row_deterministic_mask(bundle: PolicyBundle) -> None:
    obs = probe_observations(bundle.manifest.normalizer, 8, spread=2.0)
    engine = PolicyEngine(bundle, EngineConfig(execution="eager", seed=1))
    mask = np.array([True, False] * 4)
    out = engine.act(obs, mask)
    det = engine.act(obs, True)
    np.testing.assert_array_equal(out.actions[mask], det.actions[mask])
    np.testing.assert_array_equal(out.log_probs[mask], det.log_probs[mask])
    assert not np.any(np.all(out.actions[~mask] == det.actions[~mask], axis=1))


@pytest.mark.parametrize(
    ("obs", "fragment"),
    [
        (np.zeros((2, 5), np.float32), r"shape \(B, 12\)"),
        (np.zeros(12, np.float32), "obs\\[None\\]"),
        (np.zeros((0, 12), np.float32), "between 1 and"),
        (np.zeros((2, 12), np.float64), "float32"),
        (np.array([[0.0] * 11 + [np.nan]] * 2, np.float32), "rows \\[0, 1\\]"),
        ([[0.0] * 12], "numpy array"),
    ],
)
def test_bad_observations_are_refused(bundle: PolicyBundle, obs: object, fragment: str) -> None:
    engine = PolicyEngine(bundle, EngineConfig(execution="eager", max_batch_size=4))
    with pytest.raises(ObservationError, match=fragment):
        engine.act(obs, True)  # type: ignore[arg-type]


def test_too_large_batch_and_bad_mask(bundle: PolicyBundle) -> None:
    engine = PolicyEngine(bundle, EngineConfig(execution="eager", max_batch_size=4))
    with pytest.raises(ObservationError, match="between 1 and 4"):
        engine.act(probe_observations(bundle.manifest.normalizer, 5, spread=2.0), True)
    with pytest.raises(ObservationError, match="bool array of shape \\(3,\\)"):
        engine.act(
            probe_observations(bundle.manifest.normalizer, 3, spread=2.0), np.array([1, 0, 1])
        )


def test_swap_weights_takes_effect_at_next_call(
    tmp_path: Path, bundle: PolicyBundle, spec: RobotSpec
) -> None:
    other = init_bundle(tmp_path / "other", spec, hidden_sizes=(64, 64), seed=99, version_id=2)
    engine = PolicyEngine(bundle, EngineConfig(execution="jit"))
    obs = probe_observations(bundle.manifest.normalizer, 4, spread=2.0)
    before = engine.act(obs, True)
    engine.swap_weights(other.version, other.actor_state)
    after = engine.act(obs, True)
    expected = PolicyEngine(other, EngineConfig(execution="jit")).act(obs, True)
    assert before.version == bundle.version
    assert after.version == other.version
    np.testing.assert_array_equal(after.actions, expected.actions)
    assert engine.version == other.version


def test_swap_weights_validates(bundle: PolicyBundle) -> None:
    engine = PolicyEngine(bundle, EngineConfig(execution="eager"))
    state = {k: v.clone() for k, v in bundle.actor_state.items()}
    wrong_hash = VersionInfo(2, "v2", "0" * 64, parent=1)
    with pytest.raises(WeightSwapError, match="hash to"):
        engine.swap_weights(wrong_hash, state)
    state["head.mu.weight"] = torch.zeros(3, 32)
    with pytest.raises(WeightSwapError, match=r"head\.mu\.weight"):
        engine.swap_weights(VersionInfo(2, "v2", state_sha256(state)), state)
    assert engine.version == bundle.version


def test_cuda_without_gpu_is_a_config_error(bundle: PolicyBundle) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU; benchmarks/cuda_engine_check.py covers CUDA")
    with pytest.raises(EngineConfigError, match="no CUDA device"):
        PolicyEngine(bundle, EngineConfig(device="cuda"))


def test_config_refuses_nonsense() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="row_block must be between 1 and 256, got 0"):
        EngineConfig(row_block=0)
    with pytest.raises(ValidationError, match="device must be"):
        EngineConfig(device="tpu")
    with pytest.raises(ValidationError, match="extra"):
        EngineConfig(threads=2)  # type: ignore[call-arg]


def test_thread_count_is_capped_without_touching_the_caller(bundle: PolicyBundle) -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        engine = PolicyEngine(bundle, EngineConfig(execution="eager", num_threads=1))
        engine.act(probe_observations(bundle.manifest.normalizer, 2), deterministic=True)
        assert engine.threads == 1
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_numpy_blas_runs_at_the_engines_thread_count(bundle: PolicyBundle) -> None:
    """The numpy path's matmuls run on numpy's BLAS, one thread count per process; the
    engine sets it (a spinning second BLAS thread cost milliseconds per forward)."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> list[int]:
        return [int(i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]

    with threadpool_limits(limits=2, user_api="blas"):  # what a 2-core machine starts with
        assert blas_threads()
        assert all(n == 2 for n in blas_threads())
        engine = PolicyEngine(bundle, EngineConfig(execution="numpy", num_threads=1))
        assert blas_threads() == [1] * len(blas_threads())
        engine.act(probe_observations(bundle.manifest.normalizer, 2), deterministic=True)
        assert blas_threads() == [1] * len(blas_threads())


def test_auto_picks_an_exact_path_and_reports_all(bundle: PolicyBundle) -> None:
    engine = PolicyEngine(bundle, EngineConfig(auto_repeats=3))
    kinds = [m.kind for m in engine.measurements]
    assert kinds == ["eager", "jit", "numpy"] + (["compiled"] if kernel.AVAILABLE else [])
    chosen = next(m for m in engine.measurements if m.kind == engine.execution)
    assert chosen.eligible
    assert chosen.max_action_diff_from_eager <= 1e-5
    assert all(us > 0 for m in engine.measurements for _, us in m.median_latency_us)
    int8 = PolicyEngine(bundle, EngineConfig(auto_candidates=("int8",), auto_repeats=2))
    assert int8.execution == "eager"  # int8 is not exact, so auto refuses it
    assert not next(m for m in int8.measurements if m.kind == "int8").eligible


def test_stochastic_rows_match_the_actor_given_the_same_noise(bundle: PolicyBundle) -> None:
    from tether.policy.networks import gaussian_log_prob, squash_correction

    obs = probe_observations(bundle.manifest.normalizer, 40, spread=2.0)
    engine = PolicyEngine(bundle, EngineConfig(execution="eager", seed=21))
    out = engine.act(obs, False)
    noise = torch.randn((40, 3), generator=torch.Generator().manual_seed(21)).double()
    norm = bundle.manifest.normalizer
    x = (obs.astype(np.float64) - np.asarray(norm.mean)) / np.sqrt(
        np.asarray(norm.var) + norm.epsilon
    )
    actor = bundle.build_actor().double()
    with torch.no_grad():
        mu, log_std = actor(torch.from_numpy(np.clip(x, -norm.clip, norm.clip)))
        u = mu + log_std.exp() * noise
        logp = gaussian_log_prob(u, mu, log_std) - squash_correction(u)
    np.testing.assert_allclose(out.actions, torch.tanh(u).numpy(), atol=5e-6)
    np.testing.assert_allclose(out.log_probs, logp.numpy(), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("execution", ["eager", "jit"])
def test_every_forward_runs_at_the_engines_thread_count(
    bundle: PolicyBundle, execution: str
) -> None:
    """A thread the engine did not start in (a shadow or evaluation thread: torch gives a
    fresh one a thread per core) still runs the forward at the engine's count, and gets
    its own count back afterwards."""
    import threading

    engine = PolicyEngine(bundle, EngineConfig(execution=execution, num_threads=1))  # type: ignore[arg-type]
    path, version = engine._live
    seen: list[int] = []

    def counting(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(torch.get_num_threads())
        return path(x)

    engine._live = (counting, version)  # type: ignore[assignment]
    after: list[int] = []

    def caller() -> None:
        torch.set_num_threads(3)  # what a fresh thread on a 3-core machine starts with
        engine.act(probe_observations(bundle.manifest.normalizer, 4), deterministic=True)
        after.append(torch.get_num_threads())

    thread = threading.Thread(target=caller)
    thread.start()
    thread.join()
    assert engine.threads == 1
    assert seen == [1]
    assert after == [3]
