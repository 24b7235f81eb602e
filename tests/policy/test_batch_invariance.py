"""A row's action never depends on which batch it arrived in, bit for bit, on every path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from tether.policy import (
    BlasPinState,
    EngineConfig,
    PolicyBundle,
    PolicyEngine,
    blas_pin,
    init_bundle,
    kernel,
)
from tether.policy.selection import probe_observations
from tether.spec import RobotSpec

COMPILED = pytest.param(
    "compiled", marks=pytest.mark.skipif(not kernel.AVAILABLE, reason="no numba")
)
PATHS = ["eager", "jit", "int8", "numpy", COMPILED]


@pytest.mark.parametrize("execution", PATHS)
def test_batch_1_and_batch_64_are_bitwise_identical(bundle: PolicyBundle, execution: str) -> None:
    engine = PolicyEngine(bundle, EngineConfig(execution=execution))  # type: ignore[arg-type]
    obs = probe_observations(bundle.manifest.normalizer, 64, spread=2.0)
    full = engine.act(obs, True)
    singles = [engine.act(obs[i : i + 1], True) for i in range(64)]
    np.testing.assert_array_equal(full.actions, np.concatenate([s.actions for s in singles]))
    np.testing.assert_array_equal(full.log_probs, np.concatenate([s.log_probs for s in singles]))


@pytest.mark.parametrize("execution", PATHS)
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_row_in_any_batch_matches_its_single_row_result(
    bundle: PolicyBundle, execution: str, data: st.DataObject
) -> None:
    engine = _engines(bundle, execution)
    pool = probe_observations(bundle.manifest.normalizer, 300, seed=1, spread=2.0)
    size = data.draw(st.integers(1, 300), label="batch size")
    rows = data.draw(st.lists(st.integers(0, 299), min_size=size, max_size=size), label="rows")
    batch = engine.act(pool[rows], True).actions
    row = data.draw(st.integers(0, size - 1), label="checked row")
    alone = engine.act(pool[rows[row] : rows[row] + 1], True).actions
    np.testing.assert_array_equal(batch[row], alone[0])


_CACHE: dict[tuple[str, str], PolicyEngine] = {}


def _engines(bundle: PolicyBundle, execution: str) -> PolicyEngine:
    key = (bundle.version.weights_sha256, execution)
    if key not in _CACHE:
        _CACHE[key] = PolicyEngine(bundle, EngineConfig(execution=execution))  # type: ignore[arg-type]
    return _CACHE[key]


def test_without_fixed_row_blocks_batches_would_differ(bundle: PolicyBundle) -> None:
    """The guard is needed: the plain Actor (one GEMM of B rows) is not batch-invariant here."""
    obs = probe_observations(bundle.manifest.normalizer, 64, spread=2.0)
    norm = bundle.manifest.normalizer
    x = torch.from_numpy(
        ((obs - np.asarray(norm.mean)) / np.sqrt(np.asarray(norm.var) + norm.epsilon)).astype(
            np.float32
        )
    )
    actor = bundle.build_actor()
    with torch.inference_mode():
        full, _ = actor.sample(x, deterministic=True)
        single = torch.cat([actor.sample(x[i : i + 1], deterministic=True)[0] for i in range(64)])
    if torch.equal(full, single):
        pytest.skip("this BLAS happens to give batch-invariant GEMMs; nothing to demonstrate")
    assert not torch.equal(full, single)


@pytest.mark.parametrize("activation", ["tanh", "elu", "silu"])
@pytest.mark.parametrize("execution", PATHS)
def test_transcendental_activations_stay_batch_invariant(
    tmp_path_factory: pytest.TempPathFactory, spec: RobotSpec, activation: str, execution: str
) -> None:
    path = tmp_path_factory.mktemp(activation) / "b"
    bundle = init_bundle(path, spec, hidden_sizes=(37, 19), activation=activation, seed=4)  # type: ignore[arg-type]
    engine = PolicyEngine(bundle, EngineConfig(execution=execution))  # type: ignore[arg-type]
    obs = probe_observations(bundle.manifest.normalizer, 70, spread=2.0)
    full = engine.act(obs, True)
    for i in (0, 13, 69):
        alone = engine.act(obs[i : i + 1], True)
        np.testing.assert_array_equal(full.actions[i], alone.actions[0])
        np.testing.assert_array_equal(full.log_probs[i], alone.log_probs[0])


def test_two_threads_stay_batch_invariant(bundle: PolicyBundle) -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        engine = PolicyEngine(
            bundle, EngineConfig(execution="eager", num_threads=2, max_batch_size=4096)
        )
        obs = probe_observations(bundle.manifest.normalizer, 4096, spread=2.0)
        full = engine.act(obs, True)
        for i in (0, 2047, 4095):
            np.testing.assert_array_equal(
                full.actions[i], engine.act(obs[i : i + 1], True).actions[0]
            )
            np.testing.assert_array_equal(
                full.log_probs[i], engine.act(obs[i : i + 1], True).log_probs[0]
            )
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("scripted", [False, True])
def test_per_block_gemm_used_on_cuda_matches_batched_blocks(
    bundle: PolicyBundle, scripted: bool
) -> None:
    """The CUDA forward (one GEMM per block) computes what the CPU one does, run here on CPU."""
    from tether.policy.paths import BlockActor, _jit_module

    def block(per_block: bool) -> torch.nn.Module:
        m = BlockActor(
            bundle.architecture,
            bundle.actor_state,
            row_block=8,
            device=torch.device("cpu"),
            per_block_gemm=per_block,
            num_threads=1,
        ).eval()
        return _jit_module(m) if scripted else m

    x = torch.from_numpy(np.random.default_rng(2).standard_normal((64, 12)).astype(np.float32))
    with torch.inference_mode():
        mu_loop, ls_loop = block(True)(x)
        mu_bmm, ls_bmm = block(False)(x)
        mu_one, _ = block(True)(x[:8])
    np.testing.assert_allclose(mu_loop.numpy(), mu_bmm.numpy(), atol=1e-6)
    np.testing.assert_allclose(ls_loop.numpy(), ls_bmm.numpy(), atol=1e-6)
    assert torch.equal(mu_one, mu_loop[:8])


def test_blas_numerics_are_pinned_in_this_process() -> None:
    pin = blas_pin()
    assert pin.batch_invariant, pin.detail
    if torch.backends.mkl.is_available():
        assert pin.state is BlasPinState.PINNED


_TOO_LATE = """
import torch
torch.randn(8, 8) @ torch.randn(8, 8)  # MKL runs before tether is imported
from tether.policy import BlasPinState, EngineConfig, EngineConfigError, PolicyEngine, blas_pin
from tether.policy import init_bundle
import sys, tempfile, pathlib
sys.path.insert(0, {tests!r})
from conftest import make_spec
assert blas_pin().state is BlasPinState.TOO_LATE, blas_pin()
bundle = init_bundle(pathlib.Path(tempfile.mkdtemp()) / "b", make_spec(), hidden_sizes=(8,), seed=0)
for execution in ("eager", "jit"):
    try:
        PolicyEngine(bundle, EngineConfig(execution=execution))
    except EngineConfigError as exc:
        assert "bit-identical" in str(exc) and "numpy" in str(exc), exc
    else:
        raise SystemExit(f"{{execution}} was built without the pinned numerics")
PolicyEngine(bundle, EngineConfig(execution="numpy"))
print("refused")
"""


@pytest.mark.skipif(not torch.backends.mkl.is_available(), reason="no MKL: nothing to pin")
def test_an_engine_refuses_torch_paths_when_mkl_ran_before_tether_could_pin_it() -> None:
    """Without the pin this CPU's MKL gives 1-ulp row differences between batch sizes; an
    engine built after MKL already ran would silently lose the guarantee, so it refuses."""
    code = _TOO_LATE.format(tests=str(Path(__file__).parent))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "refused" in out.stdout
