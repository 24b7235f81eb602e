"""Policy bundles on disk: ``save_bundle`` writes one, ``load_bundle`` verifies and reads it.

A bundle is a directory: ``manifest.json`` (see :mod:`tether.policy.manifest`),
``weights.safetensors`` (the actor) and, optionally, ``training.safetensors`` (twin
critics, their targets and the entropy coefficient) that serving ignores and a learner
uses to fine-tune from trained critics.

Invariant: a :class:`PolicyBundle` returned by :func:`load_bundle` has passed every
check: format version, file sizes bounded by the architecture (checked before reading),
sha256 of every weights file, tensor names, shapes, dtype and finiteness, normalizer and
action bounds. Bundles are written to a temporary sibling directory and renamed into
place, so a reader never sees half a bundle.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

from tether.policy.errors import (
    BundleExists,
    BundleFormatError,
    BundleHashMismatch,
    BundleNotFound,
    BundleSizeError,
    BundleSpecError,
)
from tether.policy.manifest import (
    MANIFEST_FILE,
    TRAINING_FILE,
    WEIGHTS_FILE,
    ActionSpec,
    BundleManifest,
    FileDigest,
    InputSpec,
    Normalizer,
    ObservationSpec,
    TrainingMetadata,
    VersionInfo,
    manifest_from_json,
)
from tether.policy.networks import (
    Actor,
    ActorArchitecture,
    ChunkActor,
    actor_parameter_shapes,
    critic_parameter_shapes,
)
from tether.policy.tensors import (
    StateDict,
    check_state,
    expected_file_bytes,
    parse_state,
    serialize_state,
)
from tether.spec import RobotSpec

MAX_MANIFEST_BYTES = 1 << 20  # names and a robot spec fit in a few kB; 1 MiB is absurd already
# A robot policy served at control rates is kilobytes to megabytes; a manifest claiming an
# architecture beyond this is refused rather than trusted with a multi-GB read.
MAX_WEIGHTS_BYTES = 1 << 30

_CRITIC = "critic."
_TARGET = "critic_target."
_LOG_ALPHA = "log_alpha"


@dataclass(frozen=True)
class TrainingState:
    """What a learner needs to resume from trained critics; serving never reads it."""

    critic: StateDict
    critic_target: StateDict
    log_alpha: float

    def to_tensors(self) -> dict[str, torch.Tensor]:
        out = {_CRITIC + k: v for k, v in self.critic.items()}
        out.update({_TARGET + k: v for k, v in self.critic_target.items()})
        out[_LOG_ALPHA] = torch.tensor([self.log_alpha], dtype=torch.float32)
        return out


def training_tensor_shapes(arch: ActorArchitecture) -> dict[str, tuple[int, ...]]:
    """Names and shapes of ``training.safetensors`` for ``arch``."""
    critic = critic_parameter_shapes(arch)
    shapes = {_CRITIC + k: v for k, v in critic.items()}
    shapes.update({_TARGET + k: v for k, v in critic.items()})
    shapes[_LOG_ALPHA] = (1,)
    return shapes


@dataclass(frozen=True)
class PolicyBundle:
    """A verified bundle in memory: its manifest, actor weights and optional training state."""

    manifest: BundleManifest
    actor_state: StateDict
    training: TrainingState | None = None
    path: Path | None = None

    @property
    def version(self) -> VersionInfo:
        return self.manifest.version

    @property
    def architecture(self) -> ActorArchitecture:
        return self.manifest.architecture

    @property
    def robot_spec(self) -> RobotSpec | None:
        return self.manifest.robot_spec

    @property
    def horizon(self) -> int:
        return self.manifest.horizon

    def build_actor(self) -> Actor:
        """A fresh :class:`Actor` (eval mode) holding this bundle's weights.

        Only a vector ``mlp_gaussian`` bundle has one (learning and export use it); a chunk
        bundle's network is :meth:`build_chunk_actor`.
        """
        if self.architecture.kind != "mlp_gaussian":
            raise BundleSpecError(
                f"{self.path or 'this bundle'}: a {self.architecture.kind!r} bundle has no "
                "MLP actor; learning and export take 'mlp_gaussian' bundles only"
            )
        actor = Actor(self.architecture)
        actor.load_state_dict(dict(self.actor_state))
        return actor.eval()

    def build_chunk_actor(self) -> ChunkActor:
        """A fresh :class:`ChunkActor` (eval mode) of a ``cnn_chunk_gaussian`` bundle."""
        actor = ChunkActor(self.architecture)
        actor.load_state_dict(dict(self.actor_state))
        return actor.eval()


def save_bundle(
    path: str | os.PathLike[str],
    *,
    actor_state: StateDict,
    architecture: ActorArchitecture,
    observation: ObservationSpec,
    action: ActionSpec,
    normalizer: Normalizer,
    version_id: int,
    version_name: str,
    parent: int | None = None,
    robot_spec: RobotSpec | None = None,
    training: TrainingState | None = None,
    metadata: TrainingMetadata = TrainingMetadata(),  # noqa: B008 - frozen, safe to share
    inputs: tuple[InputSpec, ...] = (),
    overwrite: bool = False,
) -> PolicyBundle:
    """Write a bundle directory atomically and return it as :func:`load_bundle` would.

    ``inputs`` declares named inputs (the state vector first, then images); empty keeps
    the one vector input (see :mod:`tether.policy.manifest`)."""
    target = Path(path)
    check_state(actor_state, actor_parameter_shapes(architecture), f"{target}/{WEIGHTS_FILE}")
    weights_bytes = serialize_state(actor_state)
    weights = FileDigest(
        WEIGHTS_FILE, hashlib.sha256(weights_bytes).hexdigest(), len(weights_bytes)
    )
    training_bytes: bytes | None = None
    training_digest: FileDigest | None = None
    if training is not None:
        tensors = training.to_tensors()
        check_state(tensors, training_tensor_shapes(architecture), f"{target}/{TRAINING_FILE}")
        training_bytes = serialize_state(tensors)
        training_digest = FileDigest(
            TRAINING_FILE, hashlib.sha256(training_bytes).hexdigest(), len(training_bytes)
        )
    manifest = BundleManifest(
        version=VersionInfo(version_id, version_name, weights.sha256, parent),
        observation=observation,
        action=action,
        normalizer=normalizer,
        architecture=architecture,
        inputs=tuple(inputs),
        weights=weights,
        training=training_digest,
        robot_fingerprint=None if robot_spec is None else robot_spec.fingerprint(),
        robot_spec=robot_spec,
        metadata=metadata,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    files = {MANIFEST_FILE: manifest.to_json().encode(), WEIGHTS_FILE: weights_bytes}
    if training_bytes is not None:
        files[TRAINING_FILE] = training_bytes
    _write_directory(target, files, overwrite=overwrite)
    return load_bundle(target)


def save_derived_bundle(
    path: str | os.PathLike[str],
    base: PolicyBundle,
    *,
    actor_state: StateDict,
    version_id: int,
    version_name: str,
    training: TrainingState | None = None,
    metadata: TrainingMetadata = TrainingMetadata(),  # noqa: B008 - frozen, safe to share
    overwrite: bool = False,
) -> PolicyBundle:
    """A new version of ``base``: same specs, normalizer and architecture, parent = base."""
    m = base.manifest
    return save_bundle(
        path,
        actor_state=actor_state,
        architecture=m.architecture,
        observation=m.observation,
        action=m.action,
        normalizer=m.normalizer,
        version_id=version_id,
        version_name=version_name,
        parent=m.version.id,
        robot_spec=m.robot_spec,
        training=training,
        metadata=metadata,
        inputs=m.inputs,
        overwrite=overwrite,
    )


def load_bundle(path: str | os.PathLike[str]) -> PolicyBundle:
    """Read and verify a bundle directory; raises a :class:`BundleError` subclass on any fault."""
    root = Path(path)
    if not root.is_dir():
        raise BundleNotFound(
            f"{root}: no bundle directory here; expected a directory holding {MANIFEST_FILE} "
            f"and {WEIGHTS_FILE} (create one with init_bundle or save_bundle)"
        )
    manifest_path = root / MANIFEST_FILE
    raw = _read_bounded(manifest_path, MAX_MANIFEST_BYTES, "the manifest limit")
    try:
        manifest_text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BundleFormatError(f"{manifest_path}: not UTF-8 text ({exc})") from exc
    manifest = manifest_from_json(manifest_text, str(manifest_path))
    arch = manifest.architecture
    actor_shapes = actor_parameter_shapes(arch)
    actor_state = _read_tensors(root, manifest.weights, actor_shapes)
    training = None
    if manifest.training is not None:
        tensors = _read_tensors(root, manifest.training, training_tensor_shapes(arch))
        training = TrainingState(
            critic={k[len(_CRITIC) :]: v for k, v in tensors.items() if k.startswith(_CRITIC)},
            critic_target={
                k[len(_TARGET) :]: v for k, v in tensors.items() if k.startswith(_TARGET)
            },
            log_alpha=float(tensors[_LOG_ALPHA][0]),
        )
    return PolicyBundle(manifest=manifest, actor_state=actor_state, training=training, path=root)


def _read_tensors(
    root: Path, digest: FileDigest, shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, torch.Tensor]:
    file = root / digest.file
    limit = expected_file_bytes(shapes)
    if limit > MAX_WEIGHTS_BYTES:
        raise BundleSizeError(
            f"{root / MANIFEST_FILE}: the architecture needs {limit} bytes for {digest.file}, "
            f"over the {MAX_WEIGHTS_BYTES}-byte ceiling for a served policy; refusing to read it"
        )
    if digest.size_bytes > limit:
        raise BundleSizeError(
            f"{root / MANIFEST_FILE}: field '{digest.file}.size_bytes' is {digest.size_bytes} "
            f"but the architecture needs at most {limit} bytes; refusing to read it"
        )
    data = _read_bounded(file, limit, "what the architecture needs")
    if len(data) != digest.size_bytes:
        raise BundleSizeError(
            f"{file}: size is {len(data)} bytes but the manifest records {digest.size_bytes}; "
            "the file was replaced or truncated after the bundle was written"
        )
    found = hashlib.sha256(data).hexdigest()
    if found != digest.sha256:
        raise BundleHashMismatch(
            f"{file}: sha256 is {found} but the manifest expects {digest.sha256}; the weights "
            "were modified or belong to another bundle"
        )
    state = parse_state(data, str(file))
    check_state(state, shapes, str(file))
    return state


def _read_bounded(file: Path, limit: int, what: str) -> bytes:
    """Read ``file`` only if it is a regular file inside its bundle of at most ``limit``
    bytes, checked before and while reading.

    Opened non-blocking and checked on the open descriptor, so a FIFO put where the
    weights belong is refused instead of hanging the reader, and a symbolic link that
    leads out of the bundle directory is refused instead of followed.
    """
    root = file.parent.resolve()
    try:
        resolved = file.resolve(strict=True)
    except FileNotFoundError as exc:
        raise BundleNotFound(f"{file}: missing; a bundle needs this file") from exc
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise BundleFormatError(f"{file}: cannot be resolved ({exc})") from exc
    if resolved.parent != root:
        raise BundleFormatError(
            f"{file}: a link to {resolved}, outside the bundle directory; a bundle's files "
            "must lie in it (copy the file in instead of linking it)"
        )
    try:
        fd = os.open(resolved, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise BundleNotFound(f"{file}: missing; a bundle needs this file") from exc
    except OSError as exc:
        raise BundleFormatError(f"{file}: cannot be opened ({exc.strerror})") from exc
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise BundleFormatError(f"{file}: {kind}; a bundle's files are regular files")
    with os.fdopen(fd, "rb") as fh:
        if info.st_size > limit:
            raise BundleSizeError(
                f"{file}: {info.st_size} bytes exceeds {limit} bytes ({what}); refusing to read it"
            )
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise BundleSizeError(f"{file}: grew past {limit} bytes ({what}) while being read")
    return data


def check_bundle_target(path: str | os.PathLike[str], *, overwrite: bool) -> None:
    """Raise :class:`BundleExists` if ``save_bundle(path, overwrite=overwrite)`` would refuse.

    Callers that work for minutes before they save (pretraining) check first, so the
    refusal comes before the work, not after it.
    """
    target = Path(path)
    if target.exists() and not overwrite:
        raise BundleExists(
            f"{target}: already exists; pass overwrite=True or choose another directory"
        )


def _write_directory(target: Path, files: Mapping[str, bytes], *, overwrite: bool) -> None:
    check_bundle_target(target, overwrite=overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        for name, data in files.items():
            with (tmp / name).open("wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        old: Path | None = None
        if target.exists():
            old = target.parent / f"{tmp.name}.old"
            target.rename(old)
        tmp.rename(target)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
