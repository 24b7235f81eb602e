"""Files shipped inside the package: the pretrained policy bundle for the built-in arm.

``src/tether/assets/pretrained/arm/`` was written by ``tether pretrain`` (the exact
command is in docs/learning.md); it is a normal bundle, verified on every load like any
other, with its critics in the training section so fine-tuning starts from them.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from tether.policy import PolicyBundle, load_bundle
from tether.policy.errors import BundleNotFound

_PRETRAINED = ("arm",)


def pretrained_bundle_path(robot: str = "arm") -> Path:
    """Directory of the shipped pretrained bundle for ``robot``."""
    if robot not in _PRETRAINED:
        raise BundleNotFound(
            f"no pretrained bundle for robot {robot!r}; shipped bundles: {list(_PRETRAINED)}"
        )
    return Path(str(files("tether.assets") / "pretrained" / robot))


def load_pretrained_bundle(robot: str = "arm") -> PolicyBundle:
    """The shipped pretrained bundle for ``robot``, loaded and verified."""
    return load_bundle(pretrained_bundle_path(robot))
