"""The bundle manifest: what a policy expects, what it produces, and which weights it is.

``manifest.json`` is the only metadata file of a bundle. This module turns it into typed
frozen records and back. Invariant: a :class:`BundleManifest` that exists is internally
consistent (dims agree with the architecture, names unique, normalizer finite with
positive variance, action low < high, robot spec matching its fingerprint); anything else
raises a :class:`~tether.policy.errors.BundleSpecError` or ``BundleFormatError`` that
names the field.

Inputs: every bundle has the robot-state vector (``observation.names``, normalized by the
normalizer, read by the action frame and the supervisor). A bundle may declare named
``inputs``: the first is that state vector under a name of the bundle's choosing
(float32, shape ``(obs_dim,)``), the others uint8 images ``(H, W, C)`` for a
``cnn_chunk_gaussian`` actor. Without ``inputs`` the one input is the vector named
:data:`DEFAULT_INPUT`, and the document is the one older bundles have (same bytes, same
hashes). The action horizon is ``architecture.horizon`` (1 unless the actor outputs
chunks); ``action`` names one step of a chunk.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from tether.errors import SpecError
from tether.policy.action_frame import CommandStepFrame
from tether.policy.errors import BundleFormatError, BundleSpecError
from tether.policy.networks import ARCHITECTURE_KINDS, ActorArchitecture, GoalShift
from tether.spec import RobotSpec

FORMAT_NAME = "tether.policy-bundle"
FORMAT_VERSION = 1
MANIFEST_FILE = "manifest.json"
WEIGHTS_FILE = "weights.safetensors"
TRAINING_FILE = "training.safetensors"

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_INPUT_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]{0,63}$")

DEFAULT_INPUT = "observation"  # the one input of a bundle that declares none
InputDtype = Literal["float32", "uint8"]
MAX_IMAGE_SIDE = 1024


@dataclass(frozen=True)
class VersionInfo:
    """One published weight version: every reply and recorded transition names it."""

    id: int
    name: str
    weights_sha256: str
    parent: int | None = None

    def __post_init__(self) -> None:
        if self.id < 0:
            raise BundleSpecError(f"version.id must be >= 0, got {self.id}")
        if self.parent is not None and self.parent < 0:
            raise BundleSpecError(f"version.parent must be >= 0 or null, got {self.parent}")
        if not _SHA256.match(self.weights_sha256):
            raise BundleSpecError(
                f"version.weights_sha256 must be 64 lowercase hex digits, got {self.weights_sha256!r}"
            )


def learner_version_name(version: int) -> str:
    """The name of a version the online learner published (the one place that names it)."""
    return f"learner-v{version}"


@dataclass(frozen=True)
class ObservationSpec:
    """Names of the observation entries, in vector order."""

    names: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_names("observation.names", self.names)

    @property
    def dim(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class InputSpec:
    """One named input of the policy: what each request carries under ``name``."""

    name: str
    dtype: InputDtype
    shape: tuple[int, ...]  # one item's shape, without a batch dimension

    def __post_init__(self) -> None:
        if not _INPUT_NAME.match(self.name):
            raise BundleSpecError(
                f"inputs: name {self.name!r} must be 1-64 letters, digits or '_./-', "
                "starting with a letter or '_'"
            )
        if self.dtype not in ("float32", "uint8"):
            raise BundleSpecError(
                f"inputs.{self.name}.dtype must be 'float32' or 'uint8', got {self.dtype!r}"
            )
        if not self.shape or any(d <= 0 for d in self.shape):
            raise BundleSpecError(
                f"inputs.{self.name}.shape must list positive sizes, got {list(self.shape)}"
            )

    @property
    def is_image(self) -> bool:
        return self.dtype == "uint8"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}


def default_inputs(obs_dim: int) -> tuple[InputSpec, ...]:
    """The inputs of a bundle that declares none: the state vector as ``observation``."""
    return (InputSpec(DEFAULT_INPUT, "float32", (obs_dim,)),)


def _check_inputs(inputs: tuple[InputSpec, ...], arch: ActorArchitecture) -> None:
    """Declared ``inputs`` agree with the architecture (see the module docstring)."""
    names = [t.name for t in inputs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BundleSpecError(f"inputs must have unique names; {dupes} appear more than once")
    state = inputs[0]
    if state.dtype != "float32" or state.shape != (arch.obs_dim,):
        raise BundleSpecError(
            f"inputs[0] ({state.name!r}) must be the state vector: float32 of shape "
            f"[{arch.obs_dim}] (observation.names), got {state.dtype} {list(state.shape)}"
        )
    images = inputs[1:]
    for t in images:
        if t.dtype != "uint8" or len(t.shape) != 3 or max(t.shape[:2]) > MAX_IMAGE_SIDE:
            raise BundleSpecError(
                f"inputs.{t.name} must be a uint8 image of shape [H, W, C] with sides up to "
                f"{MAX_IMAGE_SIDE}, got {t.dtype} {list(t.shape)}; every input after the "
                "state vector is an image"
            )
    channels = tuple(t.shape[2] for t in images)
    if channels != arch.image_channels:
        raise BundleSpecError(
            f"inputs declare images with channels {list(channels)} but "
            f"architecture.image_channels is {list(arch.image_channels)}"
        )


@dataclass(frozen=True)
class ActionSpec:
    """Names and bounds of the action entries; the engine scales tanh outputs into them."""

    names: tuple[str, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    frame: CommandStepFrame | None = None
    """None: the actor's squashed output is the action. Else the actor steps from the
    observed previous command (:mod:`tether.policy.action_frame`)."""

    def __post_init__(self) -> None:
        _check_names("action.names", self.names)
        n = len(self.names)
        if self.frame is not None and len(self.frame.center_rad) != n:
            raise BundleSpecError(
                f"action.frame covers {len(self.frame.center_rad)} joints but the action has {n}"
            )
        for field_name, values in (("action.low", self.low), ("action.high", self.high)):
            _check_finite(field_name, values, n)
        bad = [i for i in range(n) if not self.low[i] < self.high[i]]
        if bad:
            raise BundleSpecError(
                f"action bounds need low < high on every entry; entries {bad} have "
                f"low={[self.low[i] for i in bad]} high={[self.high[i] for i in bad]}"
            )

    @property
    def dim(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class Normalizer:
    """Observation statistics: ``clip((obs - mean) / sqrt(var + epsilon), -clip, clip)``."""

    mean: tuple[float, ...]
    var: tuple[float, ...]
    clip: float = 10.0
    epsilon: float = 1e-8

    def __post_init__(self) -> None:
        if len(self.var) != len(self.mean):
            raise BundleSpecError(
                f"normalizer.var has {len(self.var)} entries but normalizer.mean has "
                f"{len(self.mean)}; both need one per observation entry"
            )
        _check_finite("normalizer.mean", self.mean, len(self.mean))
        _check_finite("normalizer.var", self.var, len(self.mean))
        bad = [i for i, v in enumerate(self.var) if not v > 0]
        if bad:
            raise BundleSpecError(
                f"normalizer.var must be positive on every entry; entries {bad} are "
                f"{[self.var[i] for i in bad]}"
            )
        for field_name, value in (("clip", self.clip), ("epsilon", self.epsilon)):
            if not (math.isfinite(value) and value > 0):
                raise BundleSpecError(
                    f"normalizer.{field_name} must be positive and finite, got {value}"
                )

    @property
    def dim(self) -> int:
        return len(self.mean)


@dataclass(frozen=True)
class FileDigest:
    """A file of the bundle, its sha256 and its exact size."""

    file: str
    sha256: str
    size_bytes: int

    def __post_init__(self) -> None:
        if "/" in self.file or "\\" in self.file or self.file in ("", ".", ".."):
            raise BundleSpecError(
                f"bundle file names must be plain names inside the bundle, got {self.file!r}"
            )
        if not _SHA256.match(self.sha256):
            raise BundleSpecError(
                f"sha256 of {self.file} must be 64 lowercase hex digits, got {self.sha256!r}"
            )
        if self.size_bytes <= 0:
            raise BundleSpecError(f"size of {self.file} must be positive, got {self.size_bytes}")


@dataclass(frozen=True)
class TrainingMetadata:
    """How the weights were produced; informative only, serving never reads it."""

    algorithm: str = "none"
    source: str = ""
    env_steps: int = 0
    gradient_updates: int = 0
    seed: int | None = None
    metrics: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        if self.env_steps < 0 or self.gradient_updates < 0:
            raise BundleSpecError(
                "training_metadata env_steps and gradient_updates must be >= 0, got "
                f"{self.env_steps} and {self.gradient_updates}"
            )
        bad = [k for k, v in self.metrics if not math.isfinite(v)]
        if bad:
            raise BundleSpecError(f"training_metadata.metrics must be finite; {bad} are not")


@dataclass(frozen=True)
class BundleManifest:
    """Everything ``manifest.json`` records, validated as a whole."""

    version: VersionInfo
    observation: ObservationSpec
    action: ActionSpec
    normalizer: Normalizer
    architecture: ActorArchitecture
    weights: FileDigest
    created_at: str
    training: FileDigest | None = None
    robot_fingerprint: str | None = None
    robot_spec: RobotSpec | None = None
    metadata: TrainingMetadata = TrainingMetadata()
    format_version: int = FORMAT_VERSION
    inputs: tuple[InputSpec, ...] = ()
    """Declared named inputs; empty: the one vector input :data:`DEFAULT_INPUT`."""

    @property
    def input_specs(self) -> tuple[InputSpec, ...]:
        """Every input a request carries, the state vector first."""
        return self.inputs if self.inputs else default_inputs(self.architecture.obs_dim)

    @property
    def horizon(self) -> int:
        """Actions per call: the length of the chunk the policy outputs."""
        return self.architecture.horizon

    def __post_init__(self) -> None:
        arch = self.architecture
        if self.inputs:
            _check_inputs(self.inputs, arch)
        elif arch.image_channels:
            raise BundleSpecError(
                f"architecture.image_channels is {list(arch.image_channels)} but the "
                "manifest declares no image inputs; list them in 'inputs'"
            )
        if self.training is not None and arch.kind != "mlp_gaussian":
            raise BundleSpecError(
                f"a {arch.kind!r} bundle has no training section (twin critics exist for "
                "'mlp_gaussian' actors only); drop 'training'"
            )
        for what, found, want in (
            ("observation.names", self.observation.dim, arch.obs_dim),
            ("normalizer.mean", self.normalizer.dim, arch.obs_dim),
            ("action.names", self.action.dim, arch.act_dim),
        ):
            if found != want:
                raise BundleSpecError(
                    f"{what} has {found} entries but the architecture needs {want}"
                )
        frame = self.action.frame
        if frame is not None and frame.obs_dim_needed > arch.obs_dim:
            raise BundleSpecError(
                f"action.frame reads observation entries up to {frame.obs_dim_needed} but the "
                f"observation has {arch.obs_dim}"
            )
        if self.version.weights_sha256 != self.weights.sha256:
            raise BundleSpecError(
                f"version.weights_sha256 {self.version.weights_sha256} differs from "
                f"weights.sha256 {self.weights.sha256}"
            )
        try:
            datetime.fromisoformat(self.created_at)
        except ValueError as exc:
            raise BundleSpecError(
                f"created_at must be an ISO 8601 time, got {self.created_at!r}"
            ) from exc
        spec = self.robot_spec
        if spec is not None:
            if self.robot_fingerprint != spec.fingerprint():
                raise BundleSpecError(
                    f"robot.fingerprint {self.robot_fingerprint!r} differs from the recorded "
                    f"robot spec's fingerprint {spec.fingerprint()!r}"
                )
            if spec.observation_names != self.observation.names:
                raise BundleSpecError(
                    "observation.names differ from the robot spec's observation_names: "
                    f"{list(self.observation.names)} vs {list(spec.observation_names)}"
                )
            if spec.action_names != self.action.names:
                raise BundleSpecError(
                    "action.names differ from the robot spec's action_names: "
                    f"{list(self.action.names)} vs {list(spec.action_names)}"
                )

    def to_json(self) -> str:
        """The manifest as JSON text; :func:`manifest_from_json` inverts it exactly."""
        arch = self.architecture
        doc: dict[str, Any] = {
            "format": FORMAT_NAME,
            "format_version": self.format_version,
            "created_at": self.created_at,
            "version": {
                "id": self.version.id,
                "name": self.version.name,
                "parent": self.version.parent,
            },
            "observation": {"dim": self.observation.dim, "names": list(self.observation.names)},
            "action": {
                "dim": self.action.dim,
                "names": list(self.action.names),
                "low": list(self.action.low),
                "high": list(self.action.high),
                # Only when there is one: a bundle without a frame keeps its old document.
                **({} if self.action.frame is None else {"frame": self.action.frame.to_dict()}),
            },
            "normalizer": {
                "mean": list(self.normalizer.mean),
                "var": list(self.normalizer.var),
                "clip": self.normalizer.clip,
                "epsilon": self.normalizer.epsilon,
            },
            # Only when there are some: a bundle without named inputs keeps its old document.
            **({"inputs": [t.to_dict() for t in self.inputs]} if self.inputs else {}),
            "architecture": {
                "kind": arch.kind,
                "obs_dim": arch.obs_dim,
                "act_dim": arch.act_dim,
                "hidden_sizes": list(arch.hidden_sizes),
                "activation": arch.activation,
                **(
                    {}
                    if arch.kind == "mlp_gaussian"
                    else {
                        "horizon": arch.horizon,
                        "image_channels": list(arch.image_channels),
                        "conv_channels": list(arch.conv_channels),
                    }
                ),
                # Only when there is one: a bundle without a goal shift keeps its old document.
                **(
                    {}
                    if arch.goal_shift is None
                    else {
                        "goal_shift": {
                            "goal": list(arch.goal_shift.goal),
                            "hidden_sizes": list(arch.goal_shift.hidden_sizes),
                            "bound": list(arch.goal_shift.bound),
                            "scale": list(arch.goal_shift.scale),
                        }
                    }
                ),
            },
            "weights": _digest_json(self.weights),
            "training": None if self.training is None else _digest_json(self.training),
            "robot": {
                "fingerprint": self.robot_fingerprint,
                "spec": None if self.robot_spec is None else self.robot_spec.to_dict(),
            },
            "training_metadata": {
                "algorithm": self.metadata.algorithm,
                "source": self.metadata.source,
                "env_steps": self.metadata.env_steps,
                "gradient_updates": self.metadata.gradient_updates,
                "seed": self.metadata.seed,
                "metrics": dict(self.metadata.metrics),
            },
        }
        return json.dumps(doc, indent=2, allow_nan=False) + "\n"


# Every field the format has, per section (``robot.spec`` is a RobotSpec document with its
# own reader). A field outside these is refused by name: it is a typo, or a newer format
# this tether would silently misread.
_FIELDS: dict[str, frozenset[str]] = {
    "": frozenset(
        {
            "format", "format_version", "created_at", "version", "observation", "action",
            "normalizer", "architecture", "weights", "training", "robot", "training_metadata",
            "inputs",
        }
    ),
    "version": frozenset({"id", "name", "parent"}),
    "observation": frozenset({"dim", "names"}),
    "action": frozenset({"dim", "names", "low", "high", "frame"}),
    "normalizer": frozenset({"mean", "var", "clip", "epsilon"}),
    "architecture": frozenset(
        {
            "kind", "obs_dim", "act_dim", "hidden_sizes", "activation", "horizon",
            "image_channels", "conv_channels", "goal_shift",
        }
    ),
    "weights": frozenset({"file", "sha256", "size_bytes"}),
    "training": frozenset({"file", "sha256", "size_bytes"}),
    "robot": frozenset({"fingerprint", "spec"}),
    "training_metadata": frozenset(
        {"algorithm", "source", "env_steps", "gradient_updates", "seed", "metrics"}
    ),
}  # fmt: skip


def _refuse_unknown_fields(source: str, root: dict[str, Any]) -> None:
    sections = [("", root)] + [
        (name, root[name]) for name in _FIELDS if name and isinstance(root.get(name), dict)
    ]
    for name, section in sections:
        unknown = sorted(set(section) - _FIELDS[name])
        if unknown:
            where = f"'{name}.{unknown[0]}'" if name else f"'{unknown[0]}'"
            raise BundleFormatError(
                f"{source}: field {where} is not part of {FORMAT_NAME} format "
                f"{FORMAT_VERSION} (unknown: {', '.join(unknown)}); a newer tether wrote "
                "this bundle, or the field is mistyped"
            )


def manifest_from_json(text: str, source: str = MANIFEST_FILE) -> BundleManifest:
    """Parse and validate manifest JSON; errors name ``source`` and the field."""
    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except (json.JSONDecodeError, ValueError) as exc:
        raise BundleFormatError(
            f"{source}: not valid JSON ({exc}); rewrite it with save_bundle"
        ) from exc
    except RecursionError:
        raise BundleFormatError(
            f"{source}: JSON nested too deeply to be a manifest; rewrite it with save_bundle"
        ) from None
    r = _Reader(source)
    root = r.obj(doc, "")
    _refuse_unknown_fields(source, root)
    fmt = r.get(root, "format", str)
    if fmt != FORMAT_NAME:
        raise BundleFormatError(f"{source}: field 'format' must be {FORMAT_NAME!r}, found {fmt!r}")
    fv = r.get(root, "format_version", int)
    if fv != FORMAT_VERSION:
        raise BundleFormatError(
            f"{source}: field 'format_version' must be {FORMAT_VERSION}, found {fv}; "
            "re-export the bundle with this tether version"
        )
    try:
        ver = r.obj(root.get("version"), "version")
        obs = r.obj(root.get("observation"), "observation")
        act = r.obj(root.get("action"), "action")
        norm = r.obj(root.get("normalizer"), "normalizer")
        arch = r.obj(root.get("architecture"), "architecture")
        robot = r.obj(root.get("robot"), "robot")
        meta = r.obj(root.get("training_metadata"), "training_metadata")
        weights = _digest_from(r, r.obj(root.get("weights"), "weights"), "weights")
        training_doc = root.get("training")
        training = (
            None
            if training_doc is None
            else _digest_from(r, r.obj(training_doc, "training"), "training")
        )
        obs_names = tuple(r.get_list(obs, "names", str, "observation"))
        act_names = tuple(r.get_list(act, "names", str, "action"))
        _check_dim(source, "observation.dim", r.get(obs, "dim", int, "observation"), len(obs_names))
        _check_dim(source, "action.dim", r.get(act, "dim", int, "action"), len(act_names))
        spec_doc = robot.get("spec")
        robot_spec = None
        if spec_doc is not None:
            try:
                robot_spec = RobotSpec.from_dict(r.obj(spec_doc, "robot.spec"))
            except (SpecError, TypeError, ValueError, AttributeError, IndexError, KeyError) as exc:
                # from_dict trusts its input's shape; anything malformed is a spec error here
                raise BundleSpecError(
                    f"{source}: field 'robot.spec' is not a valid robot spec: {exc}"
                ) from exc
        fingerprint = robot.get("fingerprint")
        if fingerprint is not None and not isinstance(fingerprint, str):
            raise BundleFormatError(
                f"{source}: field 'robot.fingerprint' must be a string or null, found {fingerprint!r}"
            )
        seed = meta.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise BundleFormatError(
                f"{source}: field 'training_metadata.seed' must be an int or null, found {seed!r}"
            )
        metrics = r.obj(meta.get("metrics", {}), "training_metadata.metrics")
        parent = ver.get("parent")
        if parent is not None and (not isinstance(parent, int) or isinstance(parent, bool)):
            raise BundleFormatError(
                f"{source}: field 'version.parent' must be an int or null, found {parent!r}"
            )
        kind = r.get(arch, "kind", str, "architecture")
        if kind not in ARCHITECTURE_KINDS:
            raise BundleSpecError(
                f"{source}: field 'architecture.kind' must be one of "
                f"{list(ARCHITECTURE_KINDS)}, found {kind!r}"
            )
        chunked = kind != "mlp_gaussian"
        try:
            goal_shift = _goal_shift_from(r, arch.get("goal_shift"))
        except BundleFormatError:
            raise
        except ValueError as exc:
            raise BundleSpecError(f"{source}: field 'architecture.goal_shift': {exc}") from exc
        try:
            architecture = ActorArchitecture(
                obs_dim=r.get(arch, "obs_dim", int, "architecture"),
                act_dim=r.get(arch, "act_dim", int, "architecture"),
                hidden_sizes=tuple(r.get_list(arch, "hidden_sizes", int, "architecture")),
                activation=r.get(arch, "activation", str, "architecture"),
                kind=kind,
                horizon=r.get(arch, "horizon", int, "architecture") if chunked else 1,
                image_channels=(
                    tuple(r.get_list(arch, "image_channels", int, "architecture"))
                    if chunked
                    else ()
                ),
                conv_channels=(
                    tuple(r.get_list(arch, "conv_channels", int, "architecture")) if chunked else ()
                ),
                goal_shift=goal_shift,
            )
        except ValueError as exc:
            raise BundleSpecError(f"{source}: field 'architecture': {exc}") from exc
        if not chunked and set(arch) & {"horizon", "image_channels", "conv_channels"}:
            raise BundleFormatError(
                f"{source}: field 'architecture' of kind 'mlp_gaussian' has no horizon, "
                "image_channels or conv_channels (those belong to 'cnn_chunk_gaussian')"
            )
        inputs = _inputs_from(r, root.get("inputs"))
        return BundleManifest(
            format_version=fv,
            created_at=r.get(root, "created_at", str),
            version=VersionInfo(
                id=r.get(ver, "id", int, "version"),
                name=r.get(ver, "name", str, "version"),
                weights_sha256=weights.sha256,
                parent=parent,
            ),
            observation=ObservationSpec(obs_names),
            action=ActionSpec(
                act_names,
                tuple(r.get_list(act, "low", float, "action")),
                tuple(r.get_list(act, "high", float, "action")),
                frame=(
                    None
                    if act.get("frame") is None
                    else CommandStepFrame.from_dict(r.obj(act["frame"], "action.frame"), source)
                ),
            ),
            normalizer=Normalizer(
                mean=tuple(r.get_list(norm, "mean", float, "normalizer")),
                var=tuple(r.get_list(norm, "var", float, "normalizer")),
                clip=r.get(norm, "clip", float, "normalizer"),
                epsilon=r.get(norm, "epsilon", float, "normalizer"),
            ),
            architecture=architecture,
            inputs=inputs,
            weights=weights,
            training=training,
            robot_fingerprint=fingerprint,
            robot_spec=robot_spec,
            metadata=TrainingMetadata(
                algorithm=r.get(meta, "algorithm", str, "training_metadata"),
                source=r.get(meta, "source", str, "training_metadata"),
                env_steps=r.get(meta, "env_steps", int, "training_metadata"),
                gradient_updates=r.get(meta, "gradient_updates", int, "training_metadata"),
                seed=seed,
                metrics=tuple(
                    (str(k), r.number(v, f"training_metadata.metrics.{k}"))
                    for k, v in metrics.items()
                ),
            ),
        )
    except BundleSpecError as exc:
        if str(exc).startswith(source):
            raise
        raise BundleSpecError(f"{source}: {exc}") from exc


class _Reader:
    """Typed field access on parsed JSON; every failure names the source and the field."""

    def __init__(self, source: str) -> None:
        self.source = source

    def _fail(self, path: str, want: str, found: Any) -> BundleFormatError:
        shown = repr(found)
        if len(shown) > 80:
            shown = shown[:77] + "..."
        return BundleFormatError(
            f"{self.source}: field {path!r} must be {want}, found {shown}; "
            "the manifest is damaged or was not written by save_bundle"
        )

    def obj(self, value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self._fail(path or "<root>", "an object", value)
        return value

    def number(self, value: Any, path: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._fail(path, "a number", value)
        return float(value)

    def _one(self, value: Any, kind: type, path: str) -> Any:
        if kind is float:
            return self.number(value, path)
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise self._fail(path, "an integer", value)
        if kind is str and not isinstance(value, str):
            raise self._fail(path, "a string", value)
        return value

    def get(self, d: dict[str, Any], key: str, kind: type, prefix: str = "") -> Any:
        path = f"{prefix}.{key}" if prefix else key
        if key not in d:
            raise self._fail(path, f"present ({kind.__name__})", "nothing")
        return self._one(d[key], kind, path)

    def get_list(self, d: dict[str, Any], key: str, kind: type, prefix: str) -> list[Any]:
        path = f"{prefix}.{key}"
        value = d.get(key)
        if not isinstance(value, list):
            raise self._fail(path, f"a list of {kind.__name__}", value)
        return [self._one(v, kind, f"{path}[{i}]") for i, v in enumerate(value)]


def _goal_shift_from(r: _Reader, doc: Any) -> GoalShift | None:
    if doc is None:
        return None
    path = "architecture.goal_shift"
    entry = r.obj(doc, path)
    unknown = sorted(set(entry) - {"goal", "hidden_sizes", "bound", "scale"})
    if unknown:
        raise BundleFormatError(
            f"{r.source}: field '{path}.{unknown[0]}' is not part of {FORMAT_NAME} format "
            f"{FORMAT_VERSION}; a goal shift has goal, hidden_sizes, bound and scale"
        )
    goal = r.get_list(entry, "goal", int, path)
    if len(goal) != 2:
        raise r._fail(f"{path}.goal", "a [start, stop] pair", goal)
    return GoalShift(
        goal=(goal[0], goal[1]),
        hidden_sizes=tuple(r.get_list(entry, "hidden_sizes", int, path)),
        bound=tuple(r.get_list(entry, "bound", float, path)),
        scale=tuple(r.get_list(entry, "scale", float, path)),
    )


def _inputs_from(r: _Reader, doc: Any) -> tuple[InputSpec, ...]:
    if doc is None:
        return ()
    if not isinstance(doc, list) or not doc or len(doc) > 64:
        raise r._fail("inputs", "a list of 1 to 64 input objects", doc)
    out: list[InputSpec] = []
    for i, item in enumerate(doc):
        path = f"inputs[{i}]"
        entry = r.obj(item, path)
        unknown = sorted(set(entry) - {"name", "dtype", "shape"})
        if unknown:
            raise BundleFormatError(
                f"{r.source}: field '{path}.{unknown[0]}' is not part of {FORMAT_NAME} format "
                f"{FORMAT_VERSION}; an input has name, dtype and shape"
            )
        out.append(
            InputSpec(
                name=r.get(entry, "name", str, path),
                dtype=r.get(entry, "dtype", str, path),
                shape=tuple(r.get_list(entry, "shape", int, path)),
            )
        )
    return tuple(out)


def _digest_json(d: FileDigest) -> dict[str, Any]:
    return {"file": d.file, "sha256": d.sha256, "size_bytes": d.size_bytes}


def _digest_from(r: _Reader, d: dict[str, Any], prefix: str) -> FileDigest:
    return FileDigest(
        file=r.get(d, "file", str, prefix),
        sha256=r.get(d, "sha256", str, prefix),
        size_bytes=r.get(d, "size_bytes", int, prefix),
    )


def _check_dim(source: str, field_name: str, dim: int, n_names: int) -> None:
    if dim != n_names:
        raise BundleSpecError(
            f"{source}: field {field_name!r} is {dim} but {n_names} names are listed"
        )


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"non-finite constant {name} is not allowed")


def _check_names(field_name: str, names: tuple[str, ...]) -> None:
    if not names:
        raise BundleSpecError(f"{field_name} must list at least one name, got none")
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise BundleSpecError(f"{field_name} must be unique; {dupes} appear more than once")


def _check_finite(field_name: str, values: tuple[float, ...], n: int) -> None:
    if len(values) != n:
        raise BundleSpecError(f"{field_name} needs {n} entries, got {len(values)}")
    bad = [i for i, v in enumerate(values) if not math.isfinite(v)]
    if bad:
        raise BundleSpecError(
            f"{field_name} must be finite; entries {bad} are {[values[i] for i in bad]}"
        )
