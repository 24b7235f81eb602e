"""A goal shift in the bundle format and the engine: round trip, zero acts as before on
every path, the engine's shift is the network's, bit-identical at any batch, bounded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tether.policy import PolicyEngine, init_bundle, kernel, load_bundle
from tether.policy.config import EngineConfig
from tether.policy.errors import BundleFormatError, BundleSpecError
from tether.policy.goal_shift import goal_shift_for, with_goal_shift
from tether.policy.manifest import MANIFEST_FILE, VersionInfo
from tether.policy.networks import Actor
from tether.policy.tensors import state_sha256
from tether.policy.transforms import ObservationNormalizer
from tether.sim import ArmEnv, ArmEnvConfig
from tether.sim.spec import arm_spec

COMPILED = pytest.param(
    "compiled", marks=pytest.mark.skipif(not kernel.AVAILABLE, reason="no numba")
)

SPEC = arm_spec("position")
BOUND = 0.1


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("goal") / "plain"
    init_bundle(path, SPEC, hidden_sizes=(32, 32), seed=5)
    return path


@pytest.fixture(scope="module")
def shifted(plain: Path) -> Path:
    bundle = load_bundle(plain)
    shift = goal_shift_for(bundle, goal="target", bound=BOUND, hidden_sizes=(16, 16))
    with_goal_shift(plain.parent / "shifted", bundle, shift)
    return plain.parent / "shifted"


def _observations(n: int) -> np.ndarray:
    env = ArmEnv(config=ArmEnvConfig(command_interface="position"), seed=0)
    rows = []
    obs, _ = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(n):
        rows.append(obs)
        obs, *_ = env.step(rng.uniform(-1, 1, SPEC.act_dim).astype(np.float32))
    return np.stack(rows).astype(np.float32)


def _random_shift(bundle_path: Path, scale: float) -> dict[str, torch.Tensor]:
    bundle = load_bundle(bundle_path)
    gen = torch.Generator().manual_seed(9)
    state = {k: v.clone() for k, v in bundle.actor_state.items()}
    for k in state:
        if k.startswith("goal."):
            state[k] = torch.randn(state[k].shape, generator=gen) * scale
    return state


def test_the_goal_shift_round_trips_and_a_plain_bundle_keeps_its_document(
    plain: Path, shifted: Path
) -> None:
    doc = json.loads((shifted / MANIFEST_FILE).read_text())
    assert set(doc["architecture"]["goal_shift"]) == {"goal", "hidden_sizes", "bound", "scale"}
    assert "goal_shift" not in json.loads((plain / MANIFEST_FILE).read_text())["architecture"]
    again = load_bundle(shifted)
    assert again.architecture.goal_shift == load_bundle(shifted).architecture.goal_shift
    shift = again.architecture.goal_shift
    assert shift is not None
    assert shift.goal == (11, 14)
    assert shift.bound == (BOUND,) * 3
    assert again.version.id == load_bundle(plain).version.id


def test_a_damaged_goal_shift_field_is_refused_by_name(shifted: Path, tmp_path: Path) -> None:
    for damage, error in (
        ({"extra": 1}, BundleFormatError),
        ({"bound": [0.1, 0.1]}, BundleSpecError),
        ({"goal": [11, 40]}, BundleSpecError),
    ):
        target = tmp_path / f"d{len(list(tmp_path.iterdir()))}"
        target.mkdir()
        for f in shifted.iterdir():
            (target / f.name).write_bytes(f.read_bytes())
        doc = json.loads((target / MANIFEST_FILE).read_text())
        doc["architecture"]["goal_shift"].update(damage)
        (target / MANIFEST_FILE).write_text(json.dumps(doc))
        with pytest.raises(error, match="goal"):
            load_bundle(target)


@pytest.mark.parametrize("kind", ["numpy", "eager", "jit", "int8", COMPILED])
def test_a_zero_shift_serves_exactly_the_plain_actions(
    plain: Path, shifted: Path, kind: str
) -> None:
    obs = _observations(24)
    cfg = EngineConfig(execution=kind)  # type: ignore[arg-type]
    a = PolicyEngine(load_bundle(plain), cfg).act(obs, deterministic=True).actions
    b = PolicyEngine(load_bundle(shifted), cfg).act(obs, deterministic=True).actions
    assert np.array_equal(a, b)


@pytest.mark.parametrize("kind", ["numpy", "eager", COMPILED])
def test_the_engine_serves_the_networks_shift_bit_identically_at_any_batch(
    shifted: Path, kind: str
) -> None:
    bundle = load_bundle(shifted)
    state = _random_shift(shifted, 0.5)
    engine = PolicyEngine(bundle, EngineConfig(execution=kind))  # type: ignore[arg-type]
    engine.swap_weights(VersionInfo(2, "moved", state_sha256(state), 1), state)
    obs = _observations(19)
    whole = engine.act(obs, deterministic=True).actions
    for n in (1, 3, 8, 11):
        parts = [engine.act(obs[i : i + n], deterministic=True).actions for i in range(0, 19, n)]
        assert np.array_equal(np.concatenate(parts), whole), n
    # the same numbers as the torch actor the learner trains (to float rounding)
    actor = Actor(bundle.architecture)
    actor.load_state_dict(state)
    x = torch.from_numpy(ObservationNormalizer(bundle.manifest.normalizer)(obs))
    with torch.no_grad():
        u = torch.tanh(actor(x)[0]).numpy()
    frame = bundle.manifest.action.frame
    want = u if frame is None else frame.actions(obs, u)
    np.testing.assert_allclose(whole, want, atol=2e-5)
    plain = PolicyEngine(bundle, EngineConfig(execution=kind)).act(obs, deterministic=True)  # type: ignore[arg-type]
    assert not np.array_equal(plain.actions, whole)  # the shift did move something


def test_no_weights_move_the_goal_further_than_the_bound(shifted: Path) -> None:
    bundle = load_bundle(shifted)
    actor = Actor(bundle.architecture)
    actor.load_state_dict(_random_shift(shifted, 50.0))  # saturating weights
    x = torch.from_numpy(ObservationNormalizer(bundle.manifest.normalizer)(_observations(64)))
    assert actor.goal is not None
    with torch.no_grad():
        reach = actor.goal.reach(x).abs()
    assert float(reach.max()) <= BOUND * (1 + 1e-6)
    assert float(reach.max()) > 0.9 * BOUND  # saturated: the bound is what holds it
