"""The run summary as rows of text: one table, shown in the terminal and in report.html.

Both views take their cells from ``role_rows`` so the numbers a user reads in
``tether report`` and in the HTML are the same strings; an undefined number shows as
an em dash, never as 0.
"""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from tether.runtime.report_summary import GateEvent, RoleSummary, RunSummary

ROLE_COLUMNS: tuple[str, ...] = (
    "role",
    "robots",
    "episodes",
    "pre-drift return",
    "post-drift return",
    "recovery post/pre",
    "success pre / post / all",
    "interventions",
    "backups",
    "violations",
    "contacts",
)
GATE_COLUMNS: tuple[str, ...] = ("t (s)", "event", "version", "stage", "reason")
UNDEFINED = "—"


def number(value: float | None, digits: int = 2) -> str:
    return UNDEFINED if value is None else f"{value:.{digits}f}"


def percent(value: float | None) -> str:
    return UNDEFINED if value is None else f"{value:.0%}"


def role_row(r: RoleSummary) -> tuple[str, ...]:
    success = " / ".join(
        percent(v) for v in (r.pre_drift_success_rate, r.post_drift_success_rate, r.success_rate)
    )
    return (
        r.role,
        ", ".join(r.robots),
        f"{r.episodes} ({r.pre_drift_episodes} pre, {r.post_drift_episodes} post)",
        number(r.pre_drift_return),
        number(r.post_drift_return),
        percent(r.recovery_ratio),
        success,
        str(r.interventions),
        str(r.backups),
        str(r.violations),
        str(r.contacts),
    )


def gate_events(summary: RunSummary) -> tuple[GateEvent, ...]:
    """Promotions, rejections and rollbacks together, in time order."""
    return tuple(
        sorted(summary.promotions + summary.rejections + summary.rollbacks, key=lambda e: e.t_s)
    )


def gate_row(e: GateEvent) -> tuple[str, ...]:
    version = UNDEFINED if e.version is None else f"v{e.version}"
    return (f"{e.t_s:.1f}", e.kind, version, e.stage or UNDEFINED, e.reason)


def rich_summary(summary: RunSummary) -> Table:
    """The per-role summary as a rich table (violations and contacts red when not 0)."""
    table = Table(
        title=f"run {summary.run_dir.name}: {summary.duration_s:.0f} s", title_justify="left"
    )
    for column in ROLE_COLUMNS:
        table.add_column(column, justify="left" if column in ("role", "robots") else "right")
    for role in summary.roles:
        cells = [escape(cell) for cell in role_row(role)]
        for i in (-2, -1):
            if cells[i] != "0":
                cells[i] = f"[bold red]{cells[i]}[/]"
        table.add_row(*cells)
    return table
