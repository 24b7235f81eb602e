"""A bundle loaded into a running server must be made for the robot the server serves.

Every path that loads a bundle into a running server (AdminService LoadBundle and
Reload, SIGHUP, the model directory) builds its engine through the versions layer's
engine factory; :func:`for_robot` wraps that factory so a bundle whose robot spec differs
from the served robot's is refused with ``SpecMismatch`` (FAILED_PRECONDITION) naming
both fingerprints, before an engine is built. Without it a bundle for another robot with
the same dims went live and drove the arm, and one with other dims failed every request.
The same wrapper refuses a bundle whose request signature (its named inputs: name,
dtype, shape; and its action horizon) differs from the served bundle's: the protocol
front ends read that signature once at start-up, so such a version could only fail
every request sent to it.
"""

from __future__ import annotations

from typing import Any

from tether.policy.bundle import PolicyBundle
from tether.serving.errors import SpecMismatch
from tether.spec import RobotSpec
from tether.versions.model_dir import EngineFactory


def check_bundle_robot(bundle: PolicyBundle, served: RobotSpec) -> None:
    """Raise ``SpecMismatch`` unless ``bundle`` records ``served``'s robot spec."""
    want = served.fingerprint()
    robot = bundle.robot_spec
    if robot is None:
        raise SpecMismatch(
            f"bundle {bundle.path} records no robot spec; this server serves robot "
            f"{served.name!r} (spec fingerprint {want}); export the bundle with the robot spec"
        )
    found = robot.fingerprint()
    if found != want:
        raise SpecMismatch(
            f"bundle {bundle.path} was made for robot {robot.name!r} (spec fingerprint "
            f"{found}), but this server serves robot {served.name!r} (spec fingerprint {want}); "
            "load a bundle exported for the served robot, or serve it on its own server"
        )


def _signature(bundle: PolicyBundle) -> tuple[tuple[str, str, tuple[int, ...]], ...]:
    return tuple((t.name, t.dtype, tuple(t.shape)) for t in bundle.manifest.input_specs)


def check_bundle_signature(bundle: PolicyBundle, like: PolicyBundle) -> None:
    """Raise ``SpecMismatch`` unless ``bundle`` takes the inputs and returns the action
    horizon of ``like`` (the bundle the server started with)."""

    def describe(b: PolicyBundle) -> str:
        inputs = ", ".join(f"{n} {d}{list(s)}" for n, d, s in _signature(b))
        return f"inputs ({inputs}), action horizon {b.manifest.horizon}"

    if _signature(bundle) != _signature(like) or bundle.manifest.horizon != like.manifest.horizon:
        raise SpecMismatch(
            f"bundle {bundle.path} takes {describe(bundle)}, but this server serves "
            f"{describe(like)}; a running server keeps its request signature, so serve "
            "that bundle on its own server"
        )


def for_robot(factory: EngineFactory, served: RobotSpec, like: PolicyBundle) -> EngineFactory:
    """``factory`` that first refuses bundles made for another robot than ``served`` or
    with another request signature than ``like``'s."""

    def build(bundle: PolicyBundle) -> Any:
        check_bundle_robot(bundle, served)
        check_bundle_signature(bundle, like)
        return factory(bundle)

    return build
