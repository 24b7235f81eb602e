"""``tether serve`` with versions: a PolicyServer whose live policy the registry decides.

Assembles what ``tether.serving.launch.build_server`` builds with a
:class:`~tether.versions.facade.PolicyVersions` as its model source (pins to retired
versions, the shadow stage fed from live batches), an AdminService on its own port
(when an admin token file is configured; TLS with the server's certificate when it has
one), and a SIGHUP handler that re-reads the model directory. Invariant: an unpinned
request is served by the version the registry holds as live, a pinned one only by a
live or retired version; every swap lands between batches.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tether.policy.bundle import PolicyBundle
from tether.policy.config import EngineConfig
from tether.policy.engine import PolicyEngine
from tether.safety.degradation import DegradationMachine
from tether.safety.for_spec import kinematics_for, limits_for, supervisor_for
from tether.safety.limits_file import read_limits_file
from tether.serving.admin import admin_servicer, start_admin_server
from tether.serving.admin_auth import AdminAuth
from tether.serving.bundle_check import for_robot
from tether.serving.config import ServerConfig
from tether.serving.launch import build_server, freeze_startup_heap, robot_spec_of
from tether.serving.security import server_credentials
from tether.serving.server import PolicyServer, run_until_signal
from tether.versions.facade import PolicyVersions, VersionsConfig
from tether.versions.model_dir import install_sighup_reload


async def serve_versions(
    bundle_path: Path,
    config: ServerConfig,
    versions_config: VersionsConfig,
    *,
    limits_file: Path | None = None,
    robot_model: tuple[Path, str] | None = None,
    announce: Callable[[PolicyServer, int | None], None] | None = None,
) -> None:
    """Serve ``bundle_path`` (live at start) until SIGTERM/SIGINT, with versions and admin.

    ``limits_file`` makes the served robot's limits stricter for this deployment
    (:mod:`tether.safety.limits_file`); ``robot_model`` (a MJCF or URDF file and its end
    effector's site or body) gives the supervisor the robot's body
    (:mod:`tether.safety.model_kinematics`). ``announce(server, admin_port)`` is called
    once both servers listen.
    """
    from tether.policy.bundle import load_bundle

    first = load_bundle(bundle_path)
    spec = robot_spec_of(first)
    engine_cfg = EngineConfig.model_validate({"max_batch_size": config.batcher.max_batch_size})
    kinematics = kinematics_for(spec)
    if robot_model is not None:
        from tether.safety.model_kinematics import ModelKinematics

        kinematics = ModelKinematics(robot_model[0], spec, robot_model[1])
    limits = limits_for(spec)
    if limits_file is not None:
        limits = read_limits_file(limits_file, limits, cartesian=kinematics is not None)
    degradation = DegradationMachine(limits=limits)

    def engine_factory(bundle: PolicyBundle) -> PolicyEngine:
        return PolicyEngine(bundle, engine_cfg)

    versions = PolicyVersions(
        versions_config,
        engine_factory=for_robot(engine_factory, spec, first),
        shadow_supervisor=supervisor_for(
            spec, limits, kinematics=kinematics, supervision=config.supervision
        ),
        degradation=degradation,
    )
    versions.load(Path(bundle_path))
    server = build_server(
        bundle_path,
        config,
        engine_config=engine_cfg,
        degradation=degradation,
        limits=limits,
        kinematics=kinematics,
        versions=versions,
    )
    versions.drive(server.models)  # keeps the holder (health, announce) on the live version
    await server.start()
    admin = None
    admin_port: int | None = None
    try:
        if versions_config.admin_tokens_file is not None:
            auth = AdminAuth.from_file(versions_config.admin_tokens_file)
            servicer = admin_servicer(versions, auth)
            assert servicer is not None
            admin, admin_port = await start_admin_server(
                servicer,
                auth,
                host=versions_config.admin_host,
                port=versions_config.admin_port,
                credentials=server_credentials(config.security),
            )
        install_sighup_reload(versions.reload)
        freeze_startup_heap()
        if announce is not None:
            announce(server, admin_port)
        await run_until_signal(server)
    finally:
        if admin is not None:
            await admin.stop(config.grace_s)
        await server.stop()
        versions.close()
