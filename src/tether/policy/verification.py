"""``tether inspect``: what a bundle claims and whether it passes every load-time check.

:func:`verify_bundle` never raises for a bad bundle: it returns a :class:`BundleReport`
holding the manifest when it could be parsed (so an operator sees what the bundle says
even when its weights are wrong) and the first refusal of :func:`load_bundle`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tether.policy.bundle import MAX_MANIFEST_BYTES, PolicyBundle, load_bundle
from tether.policy.errors import BundleError
from tether.policy.manifest import MANIFEST_FILE, BundleManifest, manifest_from_json
from tether.policy.networks import actor_parameter_shapes


@dataclass(frozen=True)
class BundleReport:
    """The outcome of verifying one bundle directory."""

    path: Path
    manifest: BundleManifest | None  # None when manifest.json itself is unusable
    bundle: PolicyBundle | None  # set only when every check passed
    error_type: str | None  # e.g. "BundleHashMismatch"
    error: str | None
    tensors_checked: int

    @property
    def ok(self) -> bool:
        return self.bundle is not None


def verify_bundle(path: str | os.PathLike[str]) -> BundleReport:
    """Run every check of :func:`load_bundle` on ``path`` and report instead of raising."""
    root = Path(path)
    try:
        bundle = load_bundle(root)
    except BundleError as exc:
        return BundleReport(
            path=root,
            manifest=_manifest_if_readable(root),
            bundle=None,
            error_type=type(exc).__name__,
            error=str(exc),
            tensors_checked=0,
        )
    n = len(actor_parameter_shapes(bundle.architecture))
    if bundle.training is not None:
        n += 2 * len(bundle.training.critic) + 1
    return BundleReport(root, bundle.manifest, bundle, None, None, n)


def _manifest_if_readable(root: Path) -> BundleManifest | None:
    file = root / MANIFEST_FILE
    try:
        if file.stat().st_size > MAX_MANIFEST_BYTES:
            return None
        return manifest_from_json(file.read_text(encoding="utf-8"), str(file))
    except (OSError, UnicodeDecodeError, BundleError):
        return None
