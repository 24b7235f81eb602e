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
    "success pre / post / all",
    "success kept (95 % CI)",
    "final distance pre / post",
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
        success,
        _kept(r.success_kept),
        " / ".join(
            _distance(d) for d in (r.pre_drift_final_distance_m, r.post_drift_final_distance_m)
        ),
        str(r.interventions),
        str(r.backups),
        str(r.violations),
        str(r.contacts),
    )


def _kept(kept: tuple[float, float, float] | None) -> str:
    return UNDEFINED if kept is None else f"{kept[0]:.0%} ({kept[1]:.0%}–{kept[2]:.0%})"


def _distance(mean_se: tuple[float, float] | None) -> str:
    return UNDEFINED if mean_se is None else f"{mean_se[0] * 100:.1f} cm"


def gate_events(summary: RunSummary) -> tuple[GateEvent, ...]:
    """Promotions, rejections, rollbacks and rollback checks together, in time order."""
    s = summary
    return tuple(sorted(s.promotions + s.rejections + s.rollbacks + s.checks, key=lambda e: e.t_s))


def gate_row(e: GateEvent) -> tuple[str, ...]:
    version = UNDEFINED if e.version is None else f"v{e.version}"
    numbers = ", ".join(f"{k}={v}" for k, v in e.numbers)
    reason = f"{e.reason} ({numbers})" if numbers else e.reason
    return (f"{e.t_s:.1f}", e.kind, version, e.stage or UNDEFINED, reason)


def fact_rows(s: RunSummary) -> tuple[tuple[str, str], ...]:
    """The run as a whole, as (what, value) pairs."""
    drifts = ", ".join(f"{t:.1f} s" for t in s.drift_times_s) or "none"
    latency = (
        f"p50 {number(s.latency_p50_ms)} ms, p99 {number(s.latency_p99_ms)} ms "
        f"over {s.latency_samples} steps"
    )
    final = UNDEFINED if s.final_live_version is None else f"v{s.final_live_version}"
    rows = (
        ("backend", s.backend if not s.actors else f"{s.backend}: " + "; ".join(s.actors)),
        ("run time", f"{s.start_s:.1f} s to {s.end_s:.1f} s ({s.duration_s:.1f} s)"),
        (
            "ended",
            "ran its full duration"
            if s.interrupted_by is None
            else f"interrupted by {s.interrupted_by}; everything up to then is kept",
        ),
        ("drift events", drifts),
        ("post-drift window", f"from {s.post_drift_from_s:.1f} s"),
        ("final live version", final),
        (
            "promotions / rejections / rollbacks",
            f"{len(s.promotions)} / {len(s.rejections)} / {len(s.rollbacks)}",
        ),
        (
            "degradation",
            f"{s.degradation_transitions} transitions, worst {s.worst_degradation_level or UNDEFINED}",
        ),
        ("round-trip latency", latency),
        ("violations / contacts (MuJoCo)", f"{s.violations} / {s.contacts}"),
    )
    return rows


def rich_summary(summary: RunSummary) -> Table:
    """The per-role summary for a terminal: one row per quantity, one column per role, so
    it fits 80 columns however many numbers there are (violations and contacts red when not 0)."""
    table = Table(
        title=f"run {summary.run_dir.name}: {summary.duration_s:.0f} s", title_justify="left"
    )
    rows = [role_row(r) for r in summary.roles]
    table.add_column(ROLE_COLUMNS[0])
    for row in rows:
        table.add_column(escape(row[0]), justify="right")
    for i, quantity in enumerate(ROLE_COLUMNS[1:], start=1):
        cells = [escape(row[i]) for row in rows]
        if quantity in ("violations", "contacts"):
            cells = [c if c == "0" else f"[bold red]{c}[/]" for c in cells]
        table.add_row(quantity, *cells)
    return table


def rich_facts(summary: RunSummary) -> Table:
    """The run-wide facts (drift, gate events, latency, safety) for a terminal."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    for what, value in fact_rows(summary):
        table.add_row(escape(what), escape(value))
    return table
