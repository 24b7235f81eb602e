"""A bundle loaded into a running server must be made for the robot the server serves.

Every path that loads a bundle into a running server (AdminService LoadBundle and
Reload, SIGHUP, the model directory) builds its engine through the versions layer's
engine factory; :func:`for_robot` wraps that factory so a bundle whose robot spec differs
from the served robot's is refused with ``SpecMismatch`` (FAILED_PRECONDITION) naming
both fingerprints, before an engine is built. Without it a bundle for another robot with
the same dims went live and drove the arm, and one with other dims failed every request.
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


def for_robot(factory: EngineFactory, served: RobotSpec) -> EngineFactory:
    """``factory`` that first refuses bundles made for another robot than ``served``."""

    def build(bundle: PolicyBundle) -> Any:
        check_bundle_robot(bundle, served)
        return factory(bundle)

    return build
