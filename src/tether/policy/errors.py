"""The exceptions of ``tether.policy``: one root, one subclass per way things fail.

Every message names the thing (file, field, tensor), what was expected, what was found
and what to do, so an operator can fix a bundle without reading code.

    TetherError
    └── PolicyError                 anything tether.policy refuses
        ├── BundleError             a bundle on disk (or about to be written) is unusable
        │   ├── BundleNotFound      the directory or one of its files is missing
        │   ├── BundleExists        save_bundle would overwrite a bundle without overwrite=True
        │   ├── BundleSizeError     a file is far larger than the architecture needs
        │   ├── BundleFormatError   manifest JSON / safetensors structure / format version
        │   ├── BundleHashMismatch  a weights file does not hash to the manifest's sha256
        │   ├── BundleTensorError   tensor names, shapes, dtypes or non-finite values
        │   └── BundleSpecError     normalizer, action bounds, names or robot spec inconsistent
        ├── ExportError             an export that could not be written or does not match
        └── EngineError             the inference engine refused a call
            ├── EngineConfigError   a configuration the engine cannot run (e.g. cuda absent)
            ├── ObservationError    an act() input with the wrong shape, dtype or values
            └── WeightSwapError     swap_weights() with weights that do not fit the network
"""

from __future__ import annotations

from tether.errors import TetherError


class PolicyError(TetherError):
    """Root of every error raised on purpose by ``tether.policy``."""


class BundleError(PolicyError):
    """A policy bundle that cannot be loaded or written."""


class BundleNotFound(BundleError, FileNotFoundError):
    """The bundle directory or a file it names does not exist."""


class BundleExists(BundleError, FileExistsError):
    """save_bundle was pointed at an existing bundle without ``overwrite=True``."""


class BundleSizeError(BundleError):
    """A bundle file is larger than its architecture can justify; refused before reading."""


class BundleFormatError(BundleError, ValueError):
    """The manifest or a safetensors file is malformed or of an unsupported format version."""


class BundleHashMismatch(BundleError):
    """A weights file's sha256 differs from the one recorded in the manifest."""


class BundleTensorError(BundleError, ValueError):
    """A tensor is missing, unexpected, mis-shaped, of the wrong dtype, or not finite."""


class BundleSpecError(BundleError, ValueError):
    """Observation/action specs, normalizer or robot spec are inconsistent or out of range."""


class ExportError(PolicyError):
    """An export that could not be produced or does not reproduce the engine's actions."""


class EngineError(PolicyError):
    """The inference engine refused a call."""


class EngineConfigError(EngineError, ValueError):
    """An engine configuration that cannot run on this machine or with this bundle."""


class ObservationError(EngineError, ValueError):
    """An observation batch with the wrong shape, dtype or non-finite values."""


class WeightSwapError(EngineError, ValueError):
    """New weights that do not match the engine's architecture or their version's hash."""
