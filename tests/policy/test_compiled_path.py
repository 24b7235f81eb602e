"""The compiled path (``execution="compiled"``, :mod:`tether.policy.kernel`): each row
alone in a fixed order, so bit-identical at any batch size; close to eager; the same bits
as its own Python twin; and absent cleanly where numba is."""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
import torch

from tests.child_runs import ChildRuns
from tether.assets import load_pretrained_bundle
from tether.compiled import wide_vector_features
from tether.policy import EngineConfig, PolicyBundle, PolicyEngine, init_bundle, kernel
from tether.policy.action_frame import CommandStepFrame
from tether.policy.goal_shift import goal_shift_for, split_goal_state, with_goal_shift
from tether.policy.manifest import VersionInfo
from tether.policy.paths import CompiledPath, RowStages
from tether.policy.selection import probe_observations
from tether.policy.tensors import state_sha256
from tether.policy.transforms import ObservationNormalizer, action_arrays
from tether.sim.spec import arm_spec
from tether.spec import RobotSpec

pytestmark = pytest.mark.skipif(not kernel.AVAILABLE, reason="numba (the compiled path) is absent")

SIZES = (1, 2, 3, 7, 8, 33, 64)


@pytest.fixture(scope="module")
def arm() -> PolicyBundle:
    """The shipped position policy: 256 x 256 relu, a command-step frame."""
    return load_pretrained_bundle(command_interface="position")


@pytest.fixture(scope="module")
def shifted_engine(tmp_path_factory: pytest.TempPathFactory) -> PolicyEngine:
    """A compiled engine serving a version whose goal shift moves the goal (random weights)."""
    root = tmp_path_factory.mktemp("compiled")
    plain = init_bundle(root / "plain", arm_spec(), hidden_sizes=(40, 24), seed=2)
    shift = goal_shift_for(plain, goal="target", bound=0.05, hidden_sizes=(12, 6))
    bundle = with_goal_shift(root / "shifted", plain, shift)
    gen = torch.Generator().manual_seed(4)
    state = {
        k: (torch.randn(v.shape, generator=gen) * 0.7 if k.startswith("goal.") else v.clone())
        for k, v in bundle.actor_state.items()
    }
    engine = PolicyEngine(bundle, EngineConfig(execution="compiled"))
    engine.swap_weights(VersionInfo(2, "moved", state_sha256(state), 1), state)
    return engine


def _assert_rows_independent(engine: PolicyEngine, obs: np.ndarray) -> None:
    whole = engine.act(obs, True)
    for n in SIZES:
        parts = [engine.act(obs[i : i + n], True) for i in range(0, len(obs), n)]
        np.testing.assert_array_equal(np.concatenate([p.actions for p in parts]), whole.actions)
        np.testing.assert_array_equal(np.concatenate([p.log_probs for p in parts]), whole.log_probs)


def test_rows_are_bit_identical_at_any_batch_size(arm: PolicyBundle) -> None:
    engine = PolicyEngine(arm, EngineConfig(execution="compiled"))
    _assert_rows_independent(engine, probe_observations(arm.manifest.normalizer, 64, spread=2.0))


def test_rows_with_a_goal_shift_are_bit_identical_at_any_batch_size(
    shifted_engine: PolicyEngine,
) -> None:
    obs = probe_observations(shifted_engine.bundle.manifest.normalizer, 64, seed=3, spread=2.0)
    _assert_rows_independent(shifted_engine, obs)
    plain = PolicyEngine(shifted_engine.bundle, EngineConfig(execution="compiled"))
    assert not np.array_equal(plain.act(obs, True).actions, shifted_engine.act(obs, True).actions)


@pytest.mark.parametrize("activation", ["tanh", "elu", "silu"])
def test_transcendental_activations_are_bit_identical_at_any_batch_size(
    tmp_path: Path, spec: RobotSpec, activation: str
) -> None:
    bundle = init_bundle(tmp_path / "b", spec, hidden_sizes=(37, 19), activation=activation, seed=4)  # type: ignore[arg-type]
    engine = PolicyEngine(bundle, EngineConfig(execution="compiled"))
    _assert_rows_independent(engine, probe_observations(bundle.manifest.normalizer, 70, spread=2.0))


def test_a_deterministic_row_in_a_sampled_batch_is_its_deterministic_action(
    arm: PolicyBundle,
) -> None:
    engine = PolicyEngine(arm, EngineConfig(execution="compiled", seed=5))
    obs = probe_observations(arm.manifest.normalizer, 9, seed=2)
    mask = np.array([True, False] * 4 + [True])
    mixed = engine.act(obs, mask)
    for i in np.flatnonzero(mask):
        alone = engine.act(obs[i : i + 1], True)
        np.testing.assert_array_equal(mixed.actions[i], alone.actions[0])
        np.testing.assert_array_equal(mixed.log_probs[i], alone.log_probs[0])
    assert not np.array_equal(mixed.actions[~mask], engine.act(obs[~mask], True).actions)


@pytest.mark.parametrize("deterministic", [True, False])
def test_the_compiled_path_agrees_with_eager(arm: PolicyBundle, deterministic: bool) -> None:
    """Same seed, same noise: only the summation order and the transcendentals' last bit
    differ, so actions agree to float32 rounding."""
    obs = probe_observations(arm.manifest.normalizer, 200, seed=4)
    eager = PolicyEngine(arm, EngineConfig(execution="eager", seed=8)).act(obs, deterministic)
    compiled = PolicyEngine(arm, EngineConfig(execution="compiled", seed=8)).act(obs, deterministic)
    np.testing.assert_allclose(compiled.actions, eager.actions, atol=2e-6)
    np.testing.assert_allclose(compiled.log_probs, eager.log_probs, atol=5e-5, rtol=2e-6)
    assert compiled.version == eager.version


def test_the_compiled_frame_is_the_bundles_frame_bit_for_bit(arm: PolicyBundle) -> None:
    """The frame stage repeats CommandStepFrame.actions' float64 operations exactly."""
    frame = arm.manifest.action.frame
    assert frame is not None
    low, half, high = action_arrays(arm.manifest.action)
    norm = ObservationNormalizer(arm.manifest.normalizer)
    framed = CompiledPath(
        arm.architecture, arm.actor_state, RowStages(norm, low, half, high, frame=frame)
    )
    bare = CompiledPath(arm.architecture, arm.actor_state, RowStages(norm, low, half, high))
    obs = probe_observations(arm.manifest.normalizer, 64, seed=6, spread=2.0)
    noise = np.random.default_rng(1).standard_normal((64, arm.architecture.act_dim))
    noise = noise.astype(np.float32)
    for z in (None, noise):
        outputs, log_probs = bare.act(obs, z)
        actions, framed_log_probs = framed.act(obs, z)
        np.testing.assert_array_equal(actions, frame.actions(obs, outputs))
        np.testing.assert_array_equal(framed_log_probs, log_probs)


def test_the_double_precision_functions_are_accurate() -> None:
    xs = np.concatenate(
        [np.random.default_rng(0).standard_normal(3000) * s for s in (1e-6, 0.1, 1.0, 8.0, 40.0)]
    )
    for x in (float(v) for v in xs):
        assert kernel.exp64(x) == pytest.approx(math.exp(x), rel=1e-15)
        assert kernel.expm1_64(x) == pytest.approx(math.expm1(x), rel=1e-15)
        assert kernel.tanh64(x) == pytest.approx(math.tanh(x), rel=1e-15)
        reference = max(x, 0.0) + math.log1p(math.exp(-abs(x)))
        assert kernel.softplus64(x) == pytest.approx(reference, rel=1e-15)
    assert kernel.exp64(800.0) == math.inf
    assert kernel.exp64(-800.0) == 0.0
    assert kernel.tanh64(30.0) == 1.0
    assert kernel.tanh64(-30.0) == -1.0


_ASM = """
from tether.policy import kernel
kernel.warm()
print("compiles of _network:", len(kernel._network.signatures))
asm = kernel.act_rows.inspect_asm(kernel.act_rows.signatures[0])
print(asm)
"""


_TARGET = """
import sys
import numpy as np
from tether.assets import load_pretrained_bundle
from tether.policy import EngineConfig, PolicyEngine, kernel
from tether.policy.selection import probe_observations
bundle = load_pretrained_bundle(command_interface="position")
engine = PolicyEngine(bundle, EngineConfig(execution="compiled", seed=3))
obs = probe_observations(bundle.manifest.normalizer, 65, seed=9, spread=2.0)
out = engine.act(obs, np.arange(65) % 3 == 0)
np.savez(sys.argv[1], actions=out.actions, log_probs=out.log_probs)
print(kernel.act_rows.inspect_asm(kernel.act_rows.signatures[0]))
"""


def _host_has_avx512() -> bool:
    try:
        from llvmlite import binding
    except ImportError:  # pragma: no cover - numba's own dependency
        return False
    return bool(binding.get_host_cpu_features().get("avx512f"))


HOST_AVX512 = _host_has_avx512()
TARGETS = {  # cpu -> (features, the widest register its code may use)
    "x86-64": ("+sse2,-avx,-avx2,-avx512f,-fma", "xmm"),  # the x86_64 baseline
    "haswell": ("+avx,+avx2,+fma,-avx512f", "ymm"),  # AVX2 with FMA available
    # 512-bit vectors (tether.compiled.WIDE_VECTOR_CPUS), FMA on offer
    "skylake-avx512": (
        "+avx,+avx2,+fma,+avx512f,+avx512dq,+avx512bw,+avx512vl,-prefer-256-bit",
        "zmm",
    ),
}


class FreshCompiles(NamedTuple):
    runs: ChildRuns  # "host", and each of TARGETS' cpus this host checks
    root: Path  # where each target's child writes its rows' bits

    def npz(self, cpu: str) -> Path:
        return self.root / f"{cpu}.npz"


@pytest.fixture(scope="module")
def fresh_compiles(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FreshCompiles]:
    """Every compile from an empty numba cache this module checks, started at once (each
    spends seconds in LLVM): ``host`` for this CPU, the others named by ``TARGETS``."""
    compiles = FreshCompiles(ChildRuns(), tmp_path_factory.mktemp("fresh-compiles"))

    def start(name: str, script: str, env: dict[str, str], *args: str) -> None:
        cache = {"NUMBA_CACHE_DIR": str(compiles.root / f"cache-{name}")}
        compiles.runs.start(
            name, [sys.executable, "-c", script, *args], env={**os.environ, **env, **cache}
        )

    try:
        start("host", _ASM, {})
        if platform.machine() == "x86_64":
            for cpu, (features, _) in TARGETS.items():
                if cpu != "skylake-avx512" or HOST_AVX512:
                    env = {"NUMBA_CPU_NAME": cpu, "NUMBA_CPU_FEATURES": features}
                    start(cpu, _TARGET, env, str(compiles.npz(cpu)))
        yield compiles
    finally:
        compiles.runs.close()


def test_the_network_compiles_once_for_both_of_its_calls(fresh_compiles: FreshCompiles) -> None:
    """The main network and the goal shift's call one compiled ``_network``: a constant
    argument at either call would make numba compile it again (tether.compiled)."""
    assert "compiles of _network: 1\n" in fresh_compiles.runs.output("host")


def test_the_machine_code_has_no_fused_multiply_add(
    fresh_compiles: FreshCompiles,
) -> None:
    """A fused multiply-add rounds once where the Python twin rounds twice, and exists on
    some x86_64 CPUs only. Compiled afresh (numba shows no code loaded from its cache)."""
    asm = fresh_compiles.runs.output("host").lower()
    assert "mulps" in asm, "the layers' loop over output units is not vectorised"
    for fused in ("vfmadd", "vfmsub", "vfnmadd", "vfnmsub"):
        assert fused not in asm


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86_64 code generation targets")
@pytest.mark.parametrize(
    "cpu",
    [
        "x86-64",
        "haswell",
        pytest.param(
            "skylake-avx512",
            marks=pytest.mark.skipif(not HOST_AVX512, reason="needs an AVX-512 CPU"),
        ),
    ],
)
def test_other_x86_64_targets_compute_the_same_bits(
    fresh_compiles: FreshCompiles, cpu: str
) -> None:
    """The kernel compiled for another x86_64 CPU (other vector widths, FMA on offer)
    gives this CPU's bits for the same rows, sampled and deterministic."""
    register = TARGETS[cpu][1]
    asm = fresh_compiles.runs.output(cpu)
    assert register in asm
    if register != "zmm":
        assert "zmm" not in asm, "the target's vector width was not applied"
    bundle = load_pretrained_bundle(command_interface="position")
    engine = PolicyEngine(bundle, EngineConfig(execution="compiled", seed=3))
    obs = probe_observations(bundle.manifest.normalizer, 65, seed=9, spread=2.0)
    here = engine.act(obs, np.arange(65) % 3 == 0)
    there = np.load(fresh_compiles.npz(cpu))
    np.testing.assert_array_equal(here.actions, there["actions"])
    np.testing.assert_array_equal(here.log_probs, there["log_probs"])


_TWIN = """
import sys
import numpy as np
from tether.policy import EngineConfig, EngineConfigError, PolicyEngine, kernel, load_bundle
assert not kernel.AVAILABLE
bundle = load_bundle(sys.argv[1])
try:
    PolicyEngine(bundle, EngineConfig(execution="compiled"))
except EngineConfigError as exc:
    assert "numba" in str(exc), exc
else:
    raise SystemExit("'compiled' was built without numba")
auto = PolicyEngine(bundle, EngineConfig(auto_repeats=2))
assert "compiled" not in [m.kind for m in auto.measurements], auto.measurements
data = np.load(sys.argv[2])
packed = kernel.Packed(*(data[k] for k in ("weights", "layout", "consts", "frame")))
actions, log_probs = kernel.run(packed, data["obs"], data["noise"])
np.savez(sys.argv[3], actions=actions, log_probs=log_probs)
print(auto.execution)
"""


def test_the_python_twin_computes_the_same_bits(tmp_path: Path, spec: RobotSpec) -> None:
    """Without numba the kernel's functions run as Python over numpy float32 scalars
    (every operation rounded on its own, in source order); the compiled code must give
    the same bits: no contraction, no reassociation, no SIMD math. There the engine
    refuses 'compiled' and 'auto' leaves it out."""
    path = tmp_path / "b"
    bundle = init_bundle(path, spec, hidden_sizes=(9, 6), activation="tanh", seed=7)
    shift = goal_shift_for(bundle, goal="target", bound=0.05, hidden_sizes=(5,))
    shifted = with_goal_shift(tmp_path / "s", bundle, shift)
    gen = torch.Generator().manual_seed(1)
    state = {k: torch.randn(v.shape, generator=gen) for k, v in shifted.actor_state.items()}
    low, half, high = action_arrays(bundle.manifest.action)
    norm = ObservationNormalizer(bundle.manifest.normalizer)
    frame = CommandStepFrame(
        (0, 3), (3, 6), (0.1, -0.2, 0.0), (2.0, 1.5, 1.0), (0.4,) * 3, (0.3,) * 3
    )
    base, goal = split_goal_state(state)
    stages = RowStages(norm, low, half, high, goal_shift=(shift, goal), frame=frame)
    packed = CompiledPath(shifted.architecture.without_goal_shift(), base, stages).packed
    obs = probe_observations(bundle.manifest.normalizer, 5, seed=2, spread=3.0)
    noise = np.random.default_rng(3).standard_normal((5, spec.act_dim)).astype(np.float32)
    noise[2] = 0.0
    np.savez(tmp_path / "in.npz", obs=obs, noise=noise, **packed._asdict())
    env = {**os.environ, "TETHER_POLICY_COMPILED": "0", "PYTHONWARNINGS": "error"}
    out = subprocess.run(
        [sys.executable, "-c", _TWIN, str(path), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("eager", "jit", "numpy")
    twin = np.load(tmp_path / "out.npz")
    actions, log_probs = kernel.run(packed, obs, noise)
    np.testing.assert_array_equal(actions, twin["actions"])
    np.testing.assert_array_equal(log_probs, twin["log_probs"])
    assert np.all(np.abs(actions) <= 1.0)


def test_a_swap_serves_the_new_weights(arm: PolicyBundle) -> None:
    engine = PolicyEngine(arm, EngineConfig(execution="compiled"))
    obs = probe_observations(arm.manifest.normalizer, 4)
    before = engine.act(obs, True)
    state = {k: v * 1.01 for k, v in arm.actor_state.items()}
    engine.swap_weights(VersionInfo(7, "scaled", state_sha256(state), 1), state)
    after = engine.act(obs, True)
    assert after.version.id == 7
    # the frame scales the outputs' change down to below float32 steps; the log-prob shows it
    assert not np.array_equal(after.log_probs, before.log_probs)
    reference = PolicyEngine(arm, EngineConfig(execution="eager"))
    reference.swap_weights(VersionInfo(7, "scaled", state_sha256(state), 1), state)
    served = reference.act(obs, True)
    np.testing.assert_allclose(after.actions, served.actions, atol=2e-6)
    np.testing.assert_allclose(after.log_probs, served.log_probs, atol=5e-5, rtol=2e-6)


def test_wide_vectors_are_chosen_only_for_cores_that_run_them_at_full_speed() -> None:
    avx512 = "+sse2,+avx,+avx2,+fma,+avx512f,+avx512vl"
    assert wide_vector_features("emeraldrapids", avx512) == f"{avx512},-prefer-256-bit"
    assert wide_vector_features("icelake-server", avx512) == f"{avx512},-prefer-256-bit"
    # The first AVX-512 cores lower their clock for it; AMD's keep LLVM's choice.
    assert wide_vector_features("skylake-avx512", avx512) is None
    assert wide_vector_features("znver4", avx512) is None
    # AVX-512 switched off (a virtual machine's CPU model, NUMBA_ENABLE_AVX=0).
    assert wide_vector_features("sapphirerapids", "+sse2,+avx2,-avx512f") is None


def test_the_users_numba_target_is_left_as_given() -> None:
    """NUMBA_CPU_FEATURES (or NUMBA_CPU_NAME) set by the user wins over tether's choice."""
    code = (
        "import numba, tether.policy.kernel, tether.safety.position.kernel\n"
        "print(numba.config.CPU_FEATURES)\n"
    )
    env = {**os.environ, "NUMBA_CPU_FEATURES": "+sse2,-avx512f"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
        check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "+sse2,-avx512f"


@pytest.mark.parametrize("bound", [0.0, 0.5, 3.0, math.inf])
def test_the_compiled_bound_check_agrees_with_numpy(bound: float) -> None:
    """``kernel.all_within`` (the engine's finiteness check, the pipeline's bound check) on
    the compiled layout and on every other one: NaN and ±Inf never within a finite bound,
    NaN not within an infinite one either."""
    rng = np.random.default_rng(5)
    for trial in range(300):
        values = rng.uniform(-3.5, 3.5, (int(rng.integers(0, 9)), 5)).astype(np.float32)
        if values.size and trial % 3:
            values.flat[int(rng.integers(values.size))] = rng.choice([np.nan, np.inf, -np.inf])
        expected = bool(np.abs(values).max(initial=0.0) <= bound)
        assert kernel._all_within(values, bound) is expected  # the compiled loop itself
        assert kernel.all_within(values, bound) is expected
        assert kernel.all_within(values.T, bound) is expected  # another layout: numpy
        frozen = values.copy()
        frozen.flags.writeable = False
        assert kernel.all_within(frozen, bound) is expected
        assert kernel.all_within(values.astype(np.float64), bound) is expected
