"""``tether report RUN_DIR``: (re)build a run's report.html and print its summary table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from tether.runtime.report import ReportConfig, ReportError, build_report, summarize_run
from tether.runtime.report_summary import headline
from tether.runtime.report_table import rich_facts, rich_summary

_FIELDS = ReportConfig.model_fields
_DEFAULTS = ReportConfig()


def report(
    run_dir: Annotated[
        Path, typer.Argument(help="run directory written by `tether run` (runs/<timestamp>/)")
    ],
    return_window_episodes: Annotated[
        int, typer.Option(help=str(_FIELDS["return_window_episodes"].description))
    ] = _DEFAULTS.return_window_episodes,
    post_drift_fraction: Annotated[
        float, typer.Option(help=str(_FIELDS["post_drift_fraction"].description))
    ] = _DEFAULTS.post_drift_fraction,
) -> None:
    """Regenerate RUN_DIR/report.html (plots in RUN_DIR/plots/) and print the summary."""
    console = Console()
    try:
        config = ReportConfig(
            return_window_episodes=return_window_episodes, post_drift_fraction=post_drift_fraction
        )
        path = build_report(run_dir, config)
        summary = summarize_run(run_dir, config)
    except (ReportError, ValueError) as exc:
        Console(stderr=True).print(
            f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(code=1) from exc
    console.print(headline(summary), markup=False, highlight=False, soft_wrap=True)
    console.print(rich_facts(summary))
    console.print(rich_summary(summary))
    for line in summary.notes + summary.unreadable:
        console.print(f"note: {line}", markup=False, highlight=False)
    if summary.missing:
        console.print(f"missing: {', '.join(summary.missing)}", markup=False, highlight=False)
    console.print(f"report: {path}", markup=False, highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command(name="report", help="Regenerate a run's report.html and print its summary.")(report)
