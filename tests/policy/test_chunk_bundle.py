"""Named inputs and an action horizon: the manifest, the bundle, the engine, the frame."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from tether.assets import __file__ as assets_init
from tether.policy.action_frame import CommandStepFrame
from tether.policy.bundle import PolicyBundle, load_bundle
from tether.policy.config import EngineConfig
from tether.policy.engine import PolicyEngine
from tether.policy.errors import (
    BundleFormatError,
    BundleSpecError,
    EngineConfigError,
    ObservationError,
)
from tether.policy.initialize import init_bundle
from tether.policy.manifest import DEFAULT_INPUT, InputSpec, manifest_from_json
from tether.spec import RobotSpec

IMAGE = (12, 10, 3)
H = 3
SHIPPED = Path(assets_init).parent / "pretrained-position" / "arm"


@pytest.fixture
def chunk_bundle(tmp_path: Path, spec: RobotSpec) -> PolicyBundle:
    return init_bundle(
        tmp_path / "chunk",
        spec,
        hidden_sizes=(32,),
        seed=2,
        images=[("wrist", IMAGE)],
        horizon=H,
        conv_channels=(4, 8),
        state_input="state",
    )


def inputs(spec: RobotSpec, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "state": rng.uniform(-0.5, 0.5, (n, spec.obs_dim)).astype(np.float32),
        "wrist": rng.integers(0, 256, (n, *IMAGE), dtype=np.uint8),
    }


def test_the_shipped_bundle_loads_unchanged() -> None:
    text = (SHIPPED / "manifest.json").read_text()
    bundle = load_bundle(SHIPPED)
    assert bundle.manifest.to_json() == text  # same document, so the same hashes
    assert bundle.manifest.inputs == ()
    assert bundle.manifest.input_specs == (
        InputSpec(DEFAULT_INPUT, "float32", (bundle.architecture.obs_dim,)),
    )
    assert bundle.horizon == 1
    assert "inputs" not in json.loads(text)
    assert "horizon" not in json.loads(text)["architecture"]


def test_a_vector_bundle_document_and_weights_do_not_change(
    tmp_path: Path, spec: RobotSpec
) -> None:
    a = init_bundle(tmp_path / "a", spec, hidden_sizes=(16,), seed=1)
    doc = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert "inputs" not in doc
    assert set(doc["architecture"]) == {"kind", "obs_dim", "act_dim", "hidden_sizes", "activation"}
    data = (tmp_path / "a" / "weights.safetensors").read_bytes()
    assert hashlib.sha256(data).hexdigest() == a.version.weights_sha256


def test_a_chunk_bundle_round_trips(chunk_bundle: PolicyBundle, spec: RobotSpec) -> None:
    m = chunk_bundle.manifest
    assert m.horizon == H
    assert [t.name for t in m.input_specs] == ["state", "wrist"]
    assert m.architecture.kind == "cnn_chunk_gaussian"
    assert manifest_from_json(m.to_json()) == m
    again = load_bundle(chunk_bundle.path)  # type: ignore[arg-type]
    assert again.manifest == m
    with pytest.raises(BundleSpecError, match="no MLP actor"):
        chunk_bundle.build_actor()


def _edited(bundle: PolicyBundle, edit: object) -> str:
    doc = json.loads(bundle.manifest.to_json())
    edit(doc)  # type: ignore[operator]
    return json.dumps(doc)


@pytest.mark.parametrize(
    ("edit", "error", "words"),
    [
        (lambda d: d["inputs"][0].update(shape=[3]), BundleSpecError, "must be the state vector"),
        (lambda d: d["inputs"][1].update(dtype="float32"), BundleSpecError, "uint8 image"),
        (lambda d: d["inputs"][1].update(shape=[12, 10, 1]), BundleSpecError, "channels [1]"),
        (lambda d: d["inputs"][1].update(name="state"), BundleSpecError, "unique names"),
        (lambda d: d["inputs"][1].update(layout="hwc"), BundleFormatError, "inputs[1].layout"),
        (lambda d: d.pop("inputs"), BundleSpecError, "declares no image inputs"),
        (lambda d: d["architecture"].update(horizon=0), BundleSpecError, "horizon must be"),
        (lambda d: d["architecture"].update(kind="mlp_gaussian"), BundleFormatError, "no horizon"),
    ],
)
def test_inconsistent_chunk_manifests_are_refused_by_field(
    chunk_bundle: PolicyBundle, edit: object, error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words.replace("[", r"\[").replace("]", r"\]")):
        manifest_from_json(_edited(chunk_bundle, edit))


def test_chunks_are_bit_identical_whatever_the_batch(
    chunk_bundle: PolicyBundle, spec: RobotSpec
) -> None:
    engine = PolicyEngine(chunk_bundle, EngineConfig(execution="auto"))
    assert engine.execution == "eager"
    assert engine.horizon == H
    batch = inputs(spec, 11, seed=4)
    out = engine.act(batch, True)
    assert out.actions.shape == (11, H, spec.act_dim)
    assert out.log_probs.shape == (11,)
    assert np.all(np.abs(out.actions) <= 1.0)
    for i in (0, 5, 10):
        one = engine.act({k: v[i : i + 1] for k, v in batch.items()}, True)
        np.testing.assert_array_equal(one.actions[0], out.actions[i])
        np.testing.assert_array_equal(one.log_probs[0], out.log_probs[i])
    # The image matters: the same state with another image gives another chunk.
    other = dict(batch, wrist=255 - batch["wrist"])
    assert not np.array_equal(engine.act(other, True).actions, out.actions)


def test_named_inputs_are_checked_by_name_dtype_and_shape(
    chunk_bundle: PolicyBundle, spec: RobotSpec
) -> None:
    engine = PolicyEngine(chunk_bundle)
    good = inputs(spec, 2, seed=1)
    cases = [
        (good["state"], "takes named inputs"),
        ({"state": good["state"]}, "missing ['wrist']"),
        ({**good, "depth": good["state"]}, "unexpected ['depth']"),
        ({**good, "wrist": good["wrist"].astype(np.float32)}, "must be uint8"),
        ({**good, "wrist": good["wrist"][:1]}, "must have shape (2, 12, 10, 3)"),
        ({**good, "state": np.full_like(good["state"], np.nan)}, "finite"),
    ]
    for value, words in cases:
        with pytest.raises(ObservationError) as info:
            engine.act(value, True)  # type: ignore[arg-type]
        assert words in str(info.value), (words, str(info.value))
    with pytest.raises(EngineConfigError, match="'eager'"):
        PolicyEngine(chunk_bundle, EngineConfig(execution="int8"))


def test_a_chunk_steps_from_the_previous_step_of_the_chunk_in_the_frame() -> None:
    frame = CommandStepFrame(
        command=(0, 2),
        command_change=(2, 4),
        center_rad=(0.0, 0.0),
        half_range_rad=(1.0, 1.0),
        acceleration_step_rad=(0.01, 0.01),
        velocity_step_rad=(0.05, 0.05),
    )
    obs = np.array([[0.2, -0.1, 0.0, 0.0]], np.float32)
    outputs = np.ones((1, 6, 2), np.float32)  # always accelerate
    chunk = frame.chunk_actions(obs, outputs)
    # Step 0 is what the single-step frame gives ...
    np.testing.assert_allclose(chunk[:, 0], frame.actions(obs, outputs[:, 0]), atol=1e-7)
    # ... and every later step accelerates from the one before, up to the velocity step.
    commands = np.concatenate([obs[:, None, :2], chunk], axis=1)[0].astype(np.float64)
    changes = np.diff(commands, axis=0)
    np.testing.assert_allclose(changes[:5, 0], [0.01, 0.02, 0.03, 0.04, 0.05], atol=1e-6)
    assert np.all(np.abs(changes) <= 0.05 + 1e-6)
    # Composed from the observation instead, every step would repeat step 0's change.
    assert not np.allclose(changes[1:], changes[0])
