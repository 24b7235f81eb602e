"""``tether run`` and ``tether config``: the whole system on the simulated arm fleet."""

from __future__ import annotations

import contextlib
import logging
import signal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from tether.errors import TetherError
from tether.learning.learner_config import LearnerConfig
from tether.runtime.config import RunConfig, config_reference
from tether.runtime.report import summarize_run
from tether.runtime.report_summary import headline
from tether.runtime.report_table import rich_facts, rich_summary
from tether.runtime.system import RunSystem, new_run_dir

_RUN = RunConfig.model_fields
_FLEET = RunConfig().fleet


def run(
    duration: Annotated[
        float | None,
        typer.Option(
            envvar="TETHER_RUN_DURATION",
            help=f"{_RUN['duration_s'].description} [default: 300]",
        ),
    ] = None,
    robots: Annotated[
        int | None,
        typer.Option(
            envvar="TETHER_RUN_ROBOTS",
            help=f"Simulated robots, one process each [default: {_FLEET.robots}]",
        ),
    ] = None,
    fast: Annotated[
        bool,
        typer.Option(
            "--fast",
            envvar="TETHER_RUN_FAST",
            help="Robots run unthrottled instead of in real time (tests, CI)",
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            envvar="TETHER_RUN_OUT",
            help="Directory that receives runs/<timestamp>/ [default: runs]",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", help="YAML run config (see `tether config`); options given here win"
        ),
    ] = None,
    bundle: Annotated[
        Path | None,
        typer.Option(
            envvar="TETHER_RUN_BUNDLE",
            help="Bundle to start from [default: the shipped pretrained arm]",
        ),
    ] = None,
    dashboard: Annotated[
        str | None,
        typer.Option(
            envvar="TETHER_RUN_DASHBOARD",
            help="Dashboard: auto, live, plain or off [default: auto]",
        ),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            envvar="TETHER_RUN_BACKEND",
            help="embedded (this machine, processes) or ray (actors; pip install -e '.[ray]') "
            "[default: embedded]",
        ),
    ] = None,
    address: Annotated[
        str | None,
        typer.Option(
            envvar="TETHER_RUN_RAY_ADDRESS",
            help="With --backend ray: the cluster to join ('auto' or host:port) "
            "[default: a local Ray instance]",
        ),
    ] = None,
    algorithm: Annotated[
        str | None,
        typer.Option(
            envvar="TETHER_RUN_ALGORITHM",
            help=f"{LearnerConfig.model_fields['algorithm'].description} [default: hindsight]",
        ),
    ] = None,
) -> None:
    """Serve the pretrained policy to drifting simulated arms while it learns online.

    Starts the gRPC server, the learner process, the promotion gate and the degradation machine, then N simulated robots (robot-0 pinned to the initial version as a frozen baseline). Ctrl-C stops cleanly at any time; the run directory keeps everything. Every option can also come from its TETHER_RUN_* environment variable.
    """
    overrides: dict[str, Any] = {}
    for key, value in (
        ("duration_s", duration),
        ("robots", robots),
        ("out_dir", out),
        ("bundle", bundle),
        ("dashboard", dashboard),
        ("backend", backend),
        ("ray_address", address),
        ("algorithm", algorithm),
    ):
        if value is not None:
            overrides[key] = value
    if fast:
        overrides["fast"] = True
    err = Console(stderr=True)
    try:
        cfg = RunConfig.from_yaml(config, **overrides) if config else RunConfig.build(**overrides)
        run_dir = new_run_dir(cfg.out_dir)
        try:
            system = _system_for(cfg, run_dir)
        except BaseException:
            _remove_if_empty(run_dir)
            raise
        report = system.run()
        summary = summarize_run(run_dir)
    except KeyboardInterrupt:
        err.print("interrupted before the run started; nothing to keep", highlight=False)
        raise typer.Exit(code=128 + signal.SIGINT) from None
    except (TetherError, OSError) as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from exc
    console = Console()
    console.print(headline(summary), markup=False, highlight=False, soft_wrap=True)
    console.print(rich_facts(summary))
    console.print(rich_summary(summary))
    placement = getattr(system, "placement_text", None)
    if placement is not None:
        console.print(f"backend: ray; {placement()}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"run directory: {run_dir}", markup=False, highlight=False, soft_wrap=True)
    console.print(f"report: {report}", markup=False, highlight=False, soft_wrap=True)
    if system.interrupted_by is not None:
        # As shells expect of a program stopped by a signal: 130 for Ctrl-C, 143 for SIGTERM.
        raise typer.Exit(code=128 + system.interrupted_by)


def _system_for(cfg: RunConfig, run_dir: Path) -> Any:
    """The backend's system: the embedded one, or the fleet on Ray (imported only then)."""
    if cfg.backend == "ray":
        from tether.fleet.system import FleetSystem

        return FleetSystem(cfg, run_dir)
    return RunSystem(cfg, run_dir)


def _remove_if_empty(run_dir: Path) -> None:
    """A run that could not start leaves no empty run directory behind."""
    with contextlib.suppress(OSError):
        run_dir.rmdir()


def show_config(
    markdown: Annotated[
        bool,
        typer.Option(
            "--markdown", help="Print the reference table (docs/configuration.md) instead"
        ),
    ] = False,
) -> None:
    """Print the default run configuration as YAML: every section `--config` accepts."""
    typer.echo(config_reference() if markdown else RunConfig().to_yaml(), nl=not markdown)


def register(app: typer.Typer) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app.command("run")(run)
    app.command("config")(show_config)
