"""What the live dashboard shows: a ``SystemSnapshot`` and the latest ``RunEvent``s as rich
renderables for a terminal, or as one plain line for logs.

Pure functions of the records: no clock, no I/O, so what is drawn can be tested as
text. Every string from the run is shown as text, never parsed as rich markup.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from tether.runtime.degradation_view import level_style
from tether.runtime.records import RobotSnapshot, RunEvent, SystemSnapshot

_EVENT_STYLES = {
    "promotion": "green",
    "rejection": "yellow",
    "rollback": "bold dark_orange",
    "degradation": "bold magenta",
    "drift": "cyan",
    "learner_crash": "bold red",
    "learner_restart": "yellow",
}


def waiting() -> RenderableType:
    """Shown between ``start`` and the first snapshot."""
    return Text("tether run: waiting for the first system snapshot…", style="dim")


def render(snapshot: SystemSnapshot, events: Sequence[RunEvent]) -> RenderableType:
    """The whole dashboard: header, robots, system, recent events."""
    gap = Text()
    return Group(
        _header(snapshot),
        gap,
        _robots(snapshot),
        gap,
        _system(snapshot),
        gap,
        _events(events),
    )


def level_text(level: str) -> Text:
    return Text(f" {level} ", style=level_style(level).rich_style)


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``, ``2 h 01 min``: short enough for a table cell."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def size(n_bytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{n_bytes} B"


def _header(s: SystemSnapshot) -> Text:
    return Text.assemble(
        ("tether run", "bold"),
        f"  t = {duration(s.t_s)}   live ",
        (f"v{s.live_version}", "bold cyan"),
        f" (age {duration(s.live_version_age_s)})   degradation ",
        level_text(s.degradation_level),
    )


def version_label(
    r: RobotSnapshot, canary_version: int | None = None, check_version: int | None = None
) -> str:
    """The version a robot's last reply named, and why it is that one."""
    if r.policy_version <= 0:  # no reply from the policy yet (or only watchdog backups)
        return "—"
    label = f"v{r.policy_version}"
    if r.role == "baseline":
        return f"{label} pinned"
    if canary_version is not None and r.policy_version == canary_version:
        return f"{label} canary"
    if check_version is not None and r.policy_version == check_version:
        return f"{label} check"
    return label


def _robots(s: SystemSnapshot) -> Table:
    # Short headers and unwrapped cells: the table fits 80 columns without truncating.
    table = Table(
        title="robots (latency p50/p99 in ms; return: moving average)",
        title_justify="left",
        box=None,
        header_style="bold underline",
        pad_edge=False,
    )
    for column in ("robot", "role"):
        table.add_column(column, no_wrap=True)
    for column in ("Hz", "p50", "p99", "return", "success", "interv.", "ep."):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("version", no_wrap=True)
    for r in s.robots:
        role_style = "dim" if r.role == "baseline" else ""
        table.add_row(
            Text(r.robot_id),
            Text(r.role, style=role_style),
            f"{r.control_rate_hz:.1f}",
            f"{r.latency_p50_ms:.2f}",
            f"{r.latency_p99_ms:.2f}",
            f"{r.return_avg:.2f}",
            f"{r.success_rate:.0%}",
            str(r.interventions),
            str(r.episodes),
            version_label(r, s.canary_version, s.check_version),
        )
    if not s.robots:
        table.add_row(Text("no robots connected", style="dim"), *([""] * 9))
    return table


def _system(s: SystemSnapshot) -> Group:
    rollbacks_style = "bold dark_orange" if s.rollbacks else ""
    return Group(
        Text.assemble(
            ("candidates ", "bold"),
            f"{s.candidates_passed} passed / {s.candidates_rejected} rejected   ",
            ("rollbacks ", "bold"),
            (str(s.rollbacks), rollbacks_style),
            "   ",
            ("learner ", "bold"),
            f"{s.learner_updates_per_s:.1f} updates/s ({s.learner_updates_total} total)",
        ),
        Text.assemble(
            ("replay ", "bold"),
            f"{s.replay_size} transitions   ",
            ("experience log ", "bold"),
            size(s.experience_log_bytes),
        ),
        Text.assemble(("last rejection ", "bold"), s.last_rejection or "—"),
    )


def _events(events: Sequence[RunEvent]) -> Table:
    table = Table(title="recent events", title_justify="left", show_header=False, box=None)
    table.add_column(justify="right", style="dim")
    table.add_column()
    table.add_column()
    for e in events:
        version = f" v{e.version}" if e.version is not None else ""
        robot = f" {e.robot_id}" if e.robot_id else ""
        table.add_row(
            f"{e.t_s:.1f} s",
            Text(e.kind + version + robot, style=_EVENT_STYLES.get(e.kind, "")),
            Text(e.message),
        )
    if not events:
        table.add_row("", Text("none yet", style="dim"), "")
    return table


def plain_line(s: SystemSnapshot) -> str:
    """The snapshot as one log line, robots after the system."""
    system = (
        f"t={s.t_s:.0f}s live=v{s.live_version} age={s.live_version_age_s:.0f}s "
        f"level={s.degradation_level} candidates={s.candidates_passed}/{s.candidates_rejected} "
        f"rollbacks={s.rollbacks} updates/s={s.learner_updates_per_s:.1f} "
        f"replay={s.replay_size} log={size(s.experience_log_bytes).replace(' ', '')}"
    )
    robots = (
        f"{r.robot_id}[{r.role}] {r.control_rate_hz:.1f}Hz p50={r.latency_p50_ms:.2f}ms "
        f"p99={r.latency_p99_ms:.2f}ms return={r.return_avg:.2f} success={r.success_rate:.0%} "
        f"interventions={r.interventions} "
        f"version={version_label(r, s.canary_version, s.check_version).replace(' ', '-')}"
        for r in s.robots
    )
    return " | ".join((system, *robots))


def plain_event(e: RunEvent) -> str:
    version = f" v{e.version}" if e.version is not None else ""
    robot = f" {e.robot_id}" if e.robot_id else ""
    return f"t={e.t_s:.1f}s event={e.kind}{version}{robot}: {e.message}"
