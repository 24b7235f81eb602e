"""Files shipped inside the package: the pretrained policy bundles for the built-in arm.

One bundle per command interface of the arm, each written by ``tether pretrain`` (the
exact commands are in docs/learning.md): ``pretrained-position/arm/`` for the arm as it
is commanded by default (joint-position targets), ``pretrained/arm/`` for the torque
interface. Each is a normal bundle, verified on every load like any other, with its
critics in the training section so fine-tuning starts from them.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from tether.policy import PolicyBundle, load_bundle
from tether.policy.errors import BundleNotFound
from tether.spec import COMMAND_INTERFACES, CommandInterface

_PRETRAINED = ("arm",)
# The directory under tether/assets holding each interface's bundles.
_DIRECTORY: dict[str, str] = {"position": "pretrained-position", "torque": "pretrained"}


def pretrained_bundle_path(
    robot: str = "arm", command_interface: CommandInterface | None = None
) -> Path:
    """Directory of the shipped pretrained bundle for ``robot`` commanded by
    ``command_interface`` (default: the arm's default interface,
    ``tether.sim.spec.DEFAULT_COMMAND_INTERFACE``)."""
    if robot not in _PRETRAINED:
        raise BundleNotFound(
            f"no pretrained bundle for robot {robot!r}; shipped bundles: {list(_PRETRAINED)}"
        )
    if command_interface is None:
        # Imported here: tether.sim loads MuJoCo, which reading a path must not need
        # unless the default is asked for.
        from tether.sim.spec import DEFAULT_COMMAND_INTERFACE

        command_interface = DEFAULT_COMMAND_INTERFACE
    if command_interface not in _DIRECTORY:
        raise BundleNotFound(
            f"no pretrained bundle for command interface {command_interface!r}; "
            f"interfaces: {list(COMMAND_INTERFACES)}"
        )
    return Path(str(files("tether.assets") / _DIRECTORY[command_interface] / robot))


def load_pretrained_bundle(
    robot: str = "arm", command_interface: CommandInterface | None = None
) -> PolicyBundle:
    """The shipped pretrained bundle for ``robot`` and ``command_interface``, loaded and
    verified."""
    return load_bundle(pretrained_bundle_path(robot, command_interface))
