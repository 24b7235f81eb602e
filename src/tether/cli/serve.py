"""``tether serve --bundle PATH``: serve one policy bundle over gRPC until SIGTERM/SIGINT.

``tether serve --model-dir DIR`` alone (the container's entry point, the model mounted
as a volume) serves the bundle at DIR itself, or DIR's only bundle; with several, the
operator names the live one with ``--bundle``: picking one by name or version could put
a candidate the gate never passed in front of the robots after a restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tether.errors import TetherError
from tether.policy.manifest import MANIFEST_FILE
from tether.serving import event_loop
from tether.serving.config import ServerConfig
from tether.serving.server import PolicyServer
from tether.serving.versions_launch import serve_versions
from tether.versions.facade import VersionsConfig
from tether.versions.model_dir import bundle_directories

_FIELDS = ServerConfig.model_fields
_VERSIONS = VersionsConfig.model_fields


def _announce(server: PolicyServer, admin_port: int | None) -> None:
    engine = server.models.live_engine()
    version = "none" if engine is None else f"{engine.version.id} ({engine.version.name})"
    metrics = "off" if server.metrics_port is None else f"port {server.metrics_port}"
    admin = "off" if admin_port is None else f"port {admin_port}"
    openpi = "off" if server.openpi_port is None else f"port {server.openpi_port}"
    # One line, flushed: scripts and tests read the bound ports from it when --port 0.
    print(
        f"tether serve: listening on {server.address}, policy version {version}, "
        f"metrics {metrics}, admin {admin}, openpi {openpi}",
        flush=True,
    )
    for warning in server.warnings:
        Console(stderr=True).print(f"[bold red]WARNING:[/] {escape(warning)}", soft_wrap=True)


def startup_bundle(model_dir: Path) -> Path:
    """The bundle ``--model-dir`` alone serves at start (see the module docstring)."""
    found = bundle_directories(model_dir)
    if not found:
        raise ValueError(
            f"--model-dir {model_dir} holds no bundle (no {MANIFEST_FILE} in it or in a "
            "directory directly under it); mount a bundle there or pass --bundle"
        )
    if found[0] == Path(model_dir) or len(found) == 1:
        return found[0]
    names = ", ".join(p.name for p in found)
    raise ValueError(
        f"--model-dir {model_dir} holds {len(found)} bundles ({names}); pass --bundle to "
        "name the one that goes live at start (a reload registers the others as candidates)"
    )


def serve(
    bundle: Annotated[
        Path | None,
        typer.Option(
            help="Policy bundle directory to serve (path); default: the bundle in --model-dir"
        ),
    ] = None,
    port: Annotated[
        int | None, typer.Option(help=f"{_FIELDS['port'].description}; overrides --config")
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(help=f"{_FIELDS['metrics_port'].description}; overrides --config"),
    ] = None,
    host: Annotated[
        str | None, typer.Option(help=f"{_FIELDS['host'].description}; overrides --config")
    ] = None,
    config: Annotated[
        Path | None, typer.Option(help="YAML file of ServerConfig fields (see docs/protocol.md)")
    ] = None,
    openpi_port: Annotated[
        int | None,
        typer.Option(
            help="Port of the openpi websocket protocol (openpi_client); 0 picks a free "
            "one; overrides --config (port)"
        ),
    ] = None,
    model_dir: Annotated[
        Path | None, typer.Option(help=str(_VERSIONS["model_dir"].description))
    ] = None,
    admin_tokens: Annotated[
        Path | None, typer.Option(help=str(_VERSIONS["admin_tokens_file"].description))
    ] = None,
    admin_port: Annotated[
        int, typer.Option(help=str(_VERSIONS["admin_port"].description))
    ] = VersionsConfig().admin_port,
    limits: Annotated[
        Path | None,
        typer.Option(
            help="YAML file of safety-limit fields that make the served robot's limits "
            "stricter for this deployment; anything looser is refused (docs/safety.md) (path)"
        ),
    ] = None,
    kinematics: Annotated[
        Path | None,
        typer.Option(
            help="The robot's MuJoCo (MJCF) or URDF model, which places its body for the "
            "supervisor's workspace and obstacle checks; needs --end-effector (path)"
        ),
    ] = None,
    end_effector: Annotated[
        str | None,
        typer.Option(help="The --kinematics model's end-effector site (or body) name"),
    ] = None,
) -> None:
    """Serve BUNDLE (or --model-dir's bundle) over gRPC, with health, reflection and metrics.

    Versions live in a registry: SIGHUP re-reads --model-dir, and with --admin-tokens an
    AdminService on --admin-port lists, loads, splits, promotes, rolls back and resumes.
    """
    try:
        if bundle is None:
            if model_dir is None:
                raise ValueError("pass --bundle, or --model-dir holding the bundle to serve")
            bundle = startup_bundle(model_dir)
        cfg = ServerConfig.from_yaml(config) if config is not None else ServerConfig()
        overrides = {"port": port, "metrics_port": metrics_port, "host": host}
        chosen: dict[str, object] = {k: v for k, v in overrides.items() if v is not None}
        if openpi_port is not None:
            chosen["openpi"] = {**cfg.openpi.model_dump(), "port": openpi_port}
        if chosen:
            cfg = ServerConfig.model_validate({**cfg.model_dump(), **chosen})
        if (kinematics is None) != (end_effector is None):
            raise ValueError(
                "--kinematics and --end-effector go together: the robot's model file and "
                "the name of its end effector's site (or body) in it"
            )
        robot_model = None if kinematics is None else (kinematics, str(end_effector))
        versions = VersionsConfig(
            model_dir=model_dir, admin_tokens_file=admin_tokens, admin_port=admin_port
        )
        event_loop.run(
            serve_versions(
                bundle,
                cfg,
                versions,
                limits_file=limits,
                robot_model=robot_model,
                announce=_announce,
            ),
            cfg.event_loop,
        )
    except (TetherError, ValueError) as exc:
        Console(stderr=True).print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(code=1) from exc


def register(app: typer.Typer) -> None:
    app.command(name="serve", help="Serve a policy bundle to robots over gRPC.")(serve)
