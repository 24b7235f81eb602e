"""tether.policy: what a policy is and how it runs (see docs/architecture.md, docs/bundles.md).

- bundles on disk: :func:`load_bundle`, :func:`save_bundle`, :func:`save_derived_bundle`,
  :func:`init_bundle` (``manifest.json`` + ``weights.safetensors`` [+ ``training.safetensors``]);
- the networks: :class:`Actor`, :class:`TwinCritic`, :class:`ActorArchitecture`;
- the inference engine: :class:`PolicyEngine`, :class:`EngineConfig`, :class:`EngineOutput`;
- errors: :class:`PolicyError` → :class:`BundleError` / :class:`EngineError` subclasses.
"""

from typing import TYPE_CHECKING

from tether.lazy import lazy_exports

if TYPE_CHECKING:
    from tether.policy.bundle import (
        PolicyBundle,
        TrainingState,
        load_bundle,
        save_bundle,
        save_derived_bundle,
        training_tensor_shapes,
    )
    from tether.policy.config import EngineConfig
    from tether.policy.engine import EngineOutput, PolicyEngine
    from tether.policy.errors import (
        BundleError,
        BundleExists,
        BundleFormatError,
        BundleHashMismatch,
        BundleNotFound,
        BundleSizeError,
        BundleSpecError,
        BundleTensorError,
        EngineConfigError,
        EngineError,
        ObservationError,
        PolicyError,
        WeightSwapError,
    )
    from tether.policy.initialize import init_bundle, normalizer_from_spec
    from tether.policy.manifest import (
        ActionSpec,
        BundleManifest,
        FileDigest,
        Normalizer,
        ObservationSpec,
        TrainingMetadata,
        VersionInfo,
    )
    from tether.policy.networks import (
        Actor,
        ActorArchitecture,
        TwinCritic,
        actor_parameter_shapes,
        critic_parameter_shapes,
    )
    from tether.policy.numerics import BlasPin, BlasPinState, blas_pin
    from tether.policy.selection import PathMeasurement
    from tether.policy.tensors import serialize_state, state_sha256

__all__ = [
    "ActionSpec",
    "Actor",
    "ActorArchitecture",
    "BlasPin",
    "BlasPinState",
    "BundleError",
    "BundleExists",
    "BundleFormatError",
    "BundleHashMismatch",
    "BundleManifest",
    "BundleNotFound",
    "BundleSizeError",
    "BundleSpecError",
    "BundleTensorError",
    "EngineConfig",
    "EngineConfigError",
    "EngineError",
    "EngineOutput",
    "FileDigest",
    "Normalizer",
    "ObservationError",
    "ObservationSpec",
    "PathMeasurement",
    "PolicyBundle",
    "PolicyEngine",
    "PolicyError",
    "TrainingMetadata",
    "TrainingState",
    "TwinCritic",
    "VersionInfo",
    "WeightSwapError",
    "actor_parameter_shapes",
    "blas_pin",
    "critic_parameter_shapes",
    "init_bundle",
    "load_bundle",
    "normalizer_from_spec",
    "save_bundle",
    "save_derived_bundle",
    "serialize_state",
    "state_sha256",
    "training_tensor_shapes",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
