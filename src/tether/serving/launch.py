"""Build a ``PolicyServer`` from a bundle on disk and run it: what ``tether serve`` calls.

Loading order is the order of trust: the bundle is verified (hashes, shapes) by
``load_bundle``, the engine is built from it, the supervisor is built from the robot
spec the bundle records. A bundle without a robot spec cannot be served, because there
would be no limits to supervise its actions with (design invariant 1).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from pathlib import Path

from tether.data.step import AnsweredSteps
from tether.policy.bundle import PolicyBundle, load_bundle
from tether.policy.config import EngineConfig
from tether.policy.engine import PolicyEngine
from tether.safety.degradation import DegradationMachine
from tether.safety.for_spec import limits_for
from tether.safety.kinematics import Kinematics
from tether.safety.limits import SafetyLimits
from tether.serving.config import ServerConfig
from tether.serving.errors import ServerSetupError
from tether.serving.served_spec import ServedSpec
from tether.serving.server import PolicyServer, run_until_signal
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec
from tether.versions.facade import PolicyVersions


def robot_spec_of(bundle: PolicyBundle) -> RobotSpec:
    spec = bundle.robot_spec
    if spec is None:
        raise ServerSetupError(
            f"bundle {bundle.path} records no robot spec, so its actions cannot be "
            "supervised; re-export it with the robot spec (tether.policy.save_bundle(..., "
            "robot_spec=...))"
        )
    return spec


def build_server(
    bundle_path: Path,
    config: ServerConfig,
    *,
    engine_config: EngineConfig | None = None,
    degradation: DegradationMachine | None = None,
    limits: SafetyLimits | None = None,
    kinematics: Kinematics | None = None,
    record_steps: Callable[[AnsweredSteps], object] | None = None,
    end_session: Callable[[str], None] | None = None,
    after_reply: Callable[[], object] | None = None,
    versions: PolicyVersions | None = None,
) -> PolicyServer:
    """A ready-to-start server for the bundle at ``bundle_path``.

    ``tether run`` passes its degradation machine, the recorder's ``record_steps``,
    ``end_session`` and ``nudge`` (``after_reply``), and its policy versions; plain
    ``tether serve`` passes none of them, gets a fresh degradation machine and serves the
    bundle alone.
    """
    bundle = load_bundle(bundle_path)
    spec = robot_spec_of(bundle)
    engine_cfg = engine_config or EngineConfig.model_validate(
        {"max_batch_size": config.batcher.max_batch_size}
    )
    engine = PolicyEngine(bundle, engine_cfg)
    limits = limits if limits is not None else limits_for(spec)
    if degradation is None:
        degradation = DegradationMachine(limits=limits)
    return PolicyServer(
        config,
        spec=ServedSpec.from_robot_spec(spec),
        supervisors=SupervisorFactory(
            spec,
            limits=limits,
            kinematics=kinematics,
            degradation=degradation,
            supervision=config.supervision,
        ),
        engine=engine,
        record_steps=record_steps,
        end_session=end_session,
        after_reply=after_reply,
        cuda=engine.device.type == "cuda",
        versions=versions,
    )


async def serve(
    bundle_path: Path,
    config: ServerConfig,
    *,
    announce: Callable[[PolicyServer], None] | None = None,
) -> None:
    """Serve ``bundle_path`` until SIGTERM/SIGINT; returns after a graceful stop."""
    server = build_server(bundle_path, config)
    await server.start()
    freeze_startup_heap()
    if announce is not None:
        announce(server)
    await run_until_signal(server)


def freeze_startup_heap() -> None:
    """Move everything allocated so far out of the garbage collector's reach.

    A process that has imported torch, MuJoCo and grpc holds ~275,000 tracked objects;
    a full collection over them took 86 ms, and one that fired half a second into
    ``tether run`` stalled the event loop for ~120 ms: 5 missed control deadlines per
    robot, RESTRICTED for the next 40 s. Objects alive at start-up live as long as the
    process, so the collector has nothing to gain from them (``gc.freeze``).
    """
    gc.collect()
    gc.freeze()
