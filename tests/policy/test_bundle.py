"""load_bundle / save_bundle / init_bundle: round trips and every refusal."""

from __future__ import annotations

import hashlib
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save as st_save

from tether.policy import (
    BundleExists,
    BundleFormatError,
    BundleHashMismatch,
    BundleNotFound,
    BundleSizeError,
    BundleSpecError,
    BundleTensorError,
    PolicyBundle,
    TrainingMetadata,
    actor_parameter_shapes,
    critic_parameter_shapes,
    init_bundle,
    load_bundle,
    save_derived_bundle,
    state_sha256,
)
from tether.spec import RobotSpec


def _rewrite_manifest(root: Path, edit: dict[str, object]) -> None:
    """Apply dotted-path edits to manifest.json (a hand-crafted, damaged bundle)."""
    doc = json.loads((root / "manifest.json").read_text())
    for dotted, value in edit.items():
        node = doc
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    (root / "manifest.json").write_text(json.dumps(doc))


def _replace_weights(root: Path, data: bytes) -> None:
    """Put ``data`` where the weights go and make the manifest agree on hash and size."""
    (root / "weights.safetensors").write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    _rewrite_manifest(root, {"weights.sha256": sha, "weights.size_bytes": len(data)})


def test_init_bundle_round_trips(bundle: PolicyBundle, spec: RobotSpec) -> None:
    assert bundle.path is not None
    again = load_bundle(bundle.path)
    assert again.manifest == bundle.manifest
    assert again.robot_spec == spec
    assert again.manifest.robot_fingerprint == spec.fingerprint()
    assert set(again.actor_state) == set(actor_parameter_shapes(bundle.architecture))
    for k, v in bundle.actor_state.items():
        assert torch.equal(v, again.actor_state[k])
    assert bundle.version.weights_sha256 == state_sha256(bundle.actor_state)
    assert bundle.version.parent is None
    assert bundle.training is None


def test_init_is_deterministic_per_seed(tmp_path: Path, spec: RobotSpec) -> None:
    a = init_bundle(tmp_path / "a", spec, hidden_sizes=(16,), seed=5)
    b = init_bundle(tmp_path / "b", spec, hidden_sizes=(16,), seed=5)
    c = init_bundle(tmp_path / "c", spec, hidden_sizes=(16,), seed=6)
    assert a.version.weights_sha256 == b.version.weights_sha256
    assert a.version.weights_sha256 != c.version.weights_sha256


def test_normalizer_maps_declared_ranges_to_unit_scale(
    bundle: PolicyBundle, spec: RobotSpec
) -> None:
    norm = bundle.manifest.normalizer
    mean, std = np.asarray(norm.mean), np.sqrt(norm.var)
    hi = np.asarray(spec.joint_position_high_rad)
    z = (hi - mean[:3]) / std[:3]
    np.testing.assert_allclose(z, 1.0)
    np.testing.assert_allclose(std[3:6], spec.joint_velocity_limit_rad_s)


def test_training_section_round_trips(tmp_path: Path, spec: RobotSpec) -> None:
    b = init_bundle(tmp_path / "t", spec, hidden_sizes=(16, 16), with_training=True)
    assert b.training is not None
    assert set(b.training.critic) == set(critic_parameter_shapes(b.architecture))
    assert b.training.log_alpha == 0.0
    assert (tmp_path / "t" / "training.safetensors").exists()


def test_derived_bundle_records_lineage(tmp_path: Path, bundle: PolicyBundle) -> None:
    state = {k: v + 0.01 for k, v in bundle.actor_state.items()}
    child = save_derived_bundle(
        tmp_path / "child",
        bundle,
        actor_state=state,
        version_id=7,
        version_name="online-7",
        metadata=TrainingMetadata(algorithm="sac", env_steps=100, metrics=(("return", 1.5),)),
    )
    assert child.version.parent == bundle.version.id
    assert child.version.id == 7
    assert child.manifest.metadata.metrics == (("return", 1.5),)
    assert child.version.weights_sha256 == state_sha256(state)


def test_save_refuses_to_overwrite(bundle: PolicyBundle) -> None:
    assert bundle.path is not None
    with pytest.raises(BundleExists, match="overwrite=True"):
        save_derived_bundle(
            bundle.path, bundle, actor_state=bundle.actor_state, version_id=2, version_name="x"
        )


def test_save_refuses_bad_tensors(tmp_path: Path, bundle: PolicyBundle) -> None:
    bad = dict(bundle.actor_state)
    bad["head.mu.bias"] = torch.full_like(bad["head.mu.bias"], float("nan"))
    with pytest.raises(BundleTensorError, match=r"head\.mu\.bias"):
        save_derived_bundle(tmp_path / "n", bundle, actor_state=bad, version_id=2, version_name="x")
    assert not (tmp_path / "n").exists()


def test_missing_directory_and_files(tmp_path: Path, bundle: PolicyBundle) -> None:
    with pytest.raises(BundleNotFound, match="no bundle directory"):
        load_bundle(tmp_path / "nope")
    assert bundle.path is not None
    (bundle.path / "weights.safetensors").unlink()
    with pytest.raises(BundleNotFound, match=r"weights\.safetensors"):
        load_bundle(bundle.path)


def test_flipped_weight_byte_is_a_hash_mismatch(bundle: PolicyBundle) -> None:
    assert bundle.path is not None
    f = bundle.path / "weights.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 0x01
    f.write_bytes(bytes(data))
    with pytest.raises(BundleHashMismatch, match="sha256") as info:
        load_bundle(bundle.path)
    assert "weights.safetensors" in str(info.value)


@pytest.mark.parametrize(
    ("edit", "error", "fragment"),
    [
        ({"format_version": 99}, BundleFormatError, "format_version"),
        ({"format": "other"}, BundleFormatError, "format"),
        ({"normalizer.var": [0.0] + [1.0] * 11}, BundleSpecError, "normalizer.var"),
        ({"normalizer.mean": [1.0] * 5}, BundleSpecError, "normalizer.mean"),
        ({"action.low": [1.0, -1.0, -1.0]}, BundleSpecError, "low < high"),
        ({"action.names": ["a", "a", "b"]}, BundleSpecError, "unique"),
        ({"architecture.hidden_sizes": [32, 64]}, BundleTensorError, "shape"),
        ({"architecture.hidden_sizes": [64, 64, 64]}, BundleTensorError, "missing"),
        ({"architecture.hidden_sizes": [8]}, BundleSizeError, "architecture needs at most"),
        ({"architecture.hidden_sizes": [100_000, 100_000]}, BundleSizeError, "ceiling"),
        ({"architecture.activation": "gelu"}, BundleSpecError, "activation"),
        ({"robot.fingerprint": "0" * 16}, BundleSpecError, "fingerprint"),
        ({"version.id": "one"}, BundleFormatError, "version.id"),
        ({"weights.file": "../escape"}, BundleSpecError, "plain names"),
    ],
)
def test_manifest_faults_raise_specific_errors(
    bundle: PolicyBundle, edit: dict[str, object], error: type[Exception], fragment: str
) -> None:
    assert bundle.path is not None
    _rewrite_manifest(bundle.path, edit)
    with pytest.raises(error, match=fragment):
        load_bundle(bundle.path)


def test_non_finite_json_constant_is_refused(bundle: PolicyBundle) -> None:
    assert bundle.path is not None
    text = (bundle.path / "manifest.json").read_text().replace('"clip": 10.0', '"clip": NaN')
    (bundle.path / "manifest.json").write_text(text)
    with pytest.raises(BundleFormatError, match="JSON"):
        load_bundle(bundle.path)


def test_tensor_faults_with_valid_hash(bundle: PolicyBundle) -> None:
    assert bundle.path is not None
    state = {k: v.clone() for k, v in bundle.actor_state.items()}
    state["trunk.0.weight"][0, 0] = float("inf")
    _replace_weights(bundle.path, st_save(state))
    with pytest.raises(BundleTensorError, match=r"trunk\.0\.weight.*finite"):
        load_bundle(bundle.path)
    state = {k: v.half() for k, v in bundle.actor_state.items()}
    _replace_weights(bundle.path, st_save(state))
    with pytest.raises(BundleTensorError, match="float32"):
        load_bundle(bundle.path)
    state = {k: v.clone() for k, v in bundle.actor_state.items()}
    state["extra"] = torch.zeros(1)
    _replace_weights(bundle.path, st_save(state))
    with pytest.raises(BundleTensorError, match="unexpected \\['extra'\\]"):
        load_bundle(bundle.path)


def test_oversized_files_are_refused_before_reading(bundle: PolicyBundle) -> None:
    assert bundle.path is not None
    big = bundle.path / "weights.safetensors"
    with big.open("ab") as fh:
        fh.truncate(50 * 1024 * 1024)  # sparse: costs no disk, looks like a 50 MiB file
    with pytest.raises(BundleSizeError, match="refusing to read"):
        load_bundle(bundle.path)
    _rewrite_manifest(bundle.path, {"weights.size_bytes": 10**12})
    with pytest.raises(BundleSizeError, match="architecture needs at most"):
        load_bundle(bundle.path)
    manifest = bundle.path / "manifest.json"
    with manifest.open("ab") as fh:
        fh.truncate(5 * 1024 * 1024)
    with pytest.raises(BundleSizeError, match="manifest"):
        load_bundle(bundle.path)


class _Exploit:
    """Unpickling this creates ``marker``: proof that something unpickled the file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("fix_hash", [True, False])
def test_malicious_pickle_is_never_unpickled(
    tmp_path: Path, bundle: PolicyBundle, fix_hash: bool
) -> None:
    assert bundle.path is not None
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"trunk.0.weight": _Exploit(marker)}, protocol=2)
    # Show the payload is live: unpickling it *would* create the marker.
    probe = tmp_path / "probe"
    pickle.loads(pickle.dumps(_Exploit(probe)))  # our own object, created in this test
    assert probe.exists()
    if fix_hash:
        _replace_weights(bundle.path, payload)  # the attacker also rewrote the manifest
        expected: type[Exception] = BundleFormatError
    else:
        (bundle.path / "weights.safetensors").write_bytes(payload)
        expected = BundleSizeError  # recorded size no longer matches
    with pytest.raises(expected):
        load_bundle(bundle.path)
    assert not marker.exists()


def test_torch_save_zip_is_refused(tmp_path: Path, bundle: PolicyBundle) -> None:
    assert bundle.path is not None
    target = tmp_path / "w.pt"
    torch.save(dict(bundle.actor_state), target)
    _replace_weights(bundle.path, target.read_bytes())
    with pytest.raises(BundleFormatError, match="pickle"):
        load_bundle(bundle.path)
