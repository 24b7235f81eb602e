"""``tether serve --bundle PATH``: serve one policy bundle over gRPC until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tether.errors import TetherError
from tether.serving.config import ServerConfig
from tether.serving.server import PolicyServer
from tether.serving.versions_launch import serve_versions
from tether.versions.facade import VersionsConfig

_FIELDS = ServerConfig.model_fields
_VERSIONS = VersionsConfig.model_fields


def _announce(server: PolicyServer, admin_port: int | None) -> None:
    engine = server.models.live_engine()
    version = "none" if engine is None else f"{engine.version.id} ({engine.version.name})"
    metrics = "off" if server.metrics_port is None else f"port {server.metrics_port}"
    admin = "off" if admin_port is None else f"port {admin_port}"
    # One line, flushed: scripts and tests read the bound port from it when --port 0.
    print(
        f"tether serve: listening on {server.address}, policy version {version}, "
        f"metrics {metrics}, admin {admin}",
        flush=True,
    )
    if server.exposure_warning is not None:
        Console(stderr=True).print(
            f"[bold red]WARNING:[/] {escape(server.exposure_warning)}", soft_wrap=True
        )


def serve(
    bundle: Annotated[Path, typer.Option(help="Policy bundle directory to serve (path)")],
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
    model_dir: Annotated[
        Path | None, typer.Option(help=str(_VERSIONS["model_dir"].description))
    ] = None,
    admin_tokens: Annotated[
        Path | None, typer.Option(help=str(_VERSIONS["admin_tokens_file"].description))
    ] = None,
    admin_port: Annotated[
        int, typer.Option(help=str(_VERSIONS["admin_port"].description))
    ] = VersionsConfig().admin_port,
) -> None:
    """Serve BUNDLE over gRPC (PolicyService, health, reflection) with Prometheus metrics.

    Versions live in a registry: SIGHUP re-reads --model-dir, and with --admin-tokens an
    AdminService on --admin-port lists, loads, splits, promotes, rolls back and resumes.
    """
    try:
        cfg = ServerConfig.from_yaml(config) if config is not None else ServerConfig()
        overrides = {"port": port, "metrics_port": metrics_port, "host": host}
        chosen = {k: v for k, v in overrides.items() if v is not None}
        if chosen:
            cfg = ServerConfig.model_validate({**cfg.model_dump(), **chosen})
        versions = VersionsConfig(
            model_dir=model_dir, admin_tokens_file=admin_tokens, admin_port=admin_port
        )
        asyncio.run(serve_versions(bundle, cfg, versions, announce=_announce))
    except (TetherError, ValueError) as exc:
        Console(stderr=True).print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(code=1) from exc


def register(app: typer.Typer) -> None:
    app.command(name="serve", help="Serve a policy bundle to robots over gRPC.")(serve)
