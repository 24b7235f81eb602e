"""The live dashboard: what it draws on a terminal, the plain lines it prints elsewhere,
and that a broken output never reaches the run loop."""

from __future__ import annotations

import dataclasses
import io
import logging
import re

import pytest
from rich.console import Console

from tether.runtime.dashboard import Dashboard, DashboardConfig
from tether.runtime.dashboard_view import duration, size, version_label
from tether.runtime.degradation_view import level_style
from tether.runtime.records import RobotSnapshot, RunEvent, SystemSnapshot
from tether.safety.levels import DegradationLevel

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _snapshot(t_s: float = 265.0, level: str = "NORMAL", **changes: object) -> SystemSnapshot:
    base = SystemSnapshot(
        t_s=t_s,
        live_version=4,
        live_version_age_s=75.0,
        degradation_level=level,
        candidates_passed=3,
        candidates_rejected=2,
        last_rejection="safety stage: 3 interventions in 40 eval episodes [max 0]",
        rollbacks=1,
        learner_updates_per_s=118.5,
        learner_updates_total=31_400,
        replay_size=26_500,
        experience_log_bytes=2_600_000,
        robots=(
            RobotSnapshot("arm-0", "learning", 49.8, 1.21, 3.47, 95.25, 0.5, 26, 31, 4),
            RobotSnapshot("arm-1", "baseline", 49.9, 1.19, 3.52, 50.75, 0.25, 0, 31, 1),
        ),
    )
    return dataclasses.replace(base, **changes)


EVENTS = (
    RunEvent(100.0, "drift", "actuator gain 1.0 -> 0.6"),
    RunEvent(150.0, "promotion", "gate passed: return +12 %", version=2),
    RunEvent(170.0, "rejection", "safety stage: [bold]3[/] interventions", version=3),
    RunEvent(260.0, "rollback", "live return fell 40 %", version=2),
)


def _terminal(width: int = 110) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=width, color_system="standard"), out


def test_terminal_view_shows_every_field() -> None:
    console, out = _terminal()
    with Dashboard(console=console) as dash:
        assert not dash.plain
        dash.update(_snapshot(), EVENTS)
    text = ANSI.sub("", out.getvalue())
    for expected in (
        "live v4 (age 1 min 15 s)",
        "NORMAL",
        "arm-0",
        "learning",
        "49.8",
        "1.21",
        "3.47",
        "95.25",
        "50%",
        "26",
        "arm-1",
        "baseline",
        "v1 pinned",
        "50.75",
        "25%",
        "3 passed / 2 rejected",
        "rollbacks 1",
        "118.5 updates/s (31400 total)",
        "26500 transitions",
        "2.6 MB",
        "safety stage: 3 interventions in 40 eval episodes [max 0]",
        "promotion v2",
        "rollback v2",
        "live return fell 40 %",
        # Event text is shown as it is, never interpreted as rich markup.
        "[bold]3[/] interventions",
    ):
        assert expected in text, f"{expected!r} not in dashboard:\n{text}"


def test_only_the_latest_events_are_shown() -> None:
    console, out = _terminal()
    with Dashboard(DashboardConfig(recent_events=2), console=console) as dash:
        dash.update(_snapshot(), EVENTS)
    text = ANSI.sub("", out.getvalue())
    assert "rollback v2" in text
    assert "actuator gain" not in text


@pytest.mark.parametrize(
    ("level", "code"),
    [("NORMAL", "\x1b[1;32m"), ("RESTRICTED", "\x1b[1;33m"), ("TAKEOVER", "\x1b[1;37;41m")],
)
def test_degradation_level_is_coloured(level: str, code: str) -> None:
    console, out = _terminal()
    with Dashboard(console=console) as dash:
        dash.update(_snapshot(level=level))
    assert f"{code} {level} " in out.getvalue()


def test_plain_mode_when_not_a_terminal_prints_rate_limited_lines() -> None:
    out = io.StringIO()
    now = [0.0]
    dash = Dashboard(
        DashboardConfig(plain_interval_s=5.0),
        console=Console(file=out, force_terminal=False, width=80),
        clock=lambda: now[0],
    )
    with dash:
        assert dash.plain
        for t in (0.0, 1.0, 4.9, 5.0, 7.0, 10.5):
            now[0] = t
            dash.update(_snapshot(t_s=t), EVENTS[:1] if t < 7 else EVENTS[:3])
    lines = out.getvalue().splitlines()
    snapshot_lines = [line for line in lines if line.startswith("t=") and "live=" in line]
    # Printed at 0, 5 and 10.5 s: never two within plain_interval_s.
    assert [line.split()[0] for line in snapshot_lines] == ["t=0s", "t=5s", "t=10s"]
    # A whole snapshot is one line, however wide (no wrapping at 80 columns).
    assert "arm-0[learning] 49.8Hz p50=1.21ms p99=3.47ms return=95.25" in snapshot_lines[0]
    assert "level=NORMAL candidates=3/2 rollbacks=1" in snapshot_lines[0]
    # Each event once, as it arrives, however often it is passed in again.
    event_lines = [line for line in lines if "event=" in line]
    assert event_lines == [
        "t=100.0s event=drift: actuator gain 1.0 -> 0.6",
        "t=150.0s event=promotion v2: gate passed: return +12 %",
        "t=170.0s event=rejection v3: safety stage: [bold]3[/] interventions",
    ]
    assert "\x1b[" not in out.getvalue()


def test_plain_flag_overrides_a_terminal() -> None:
    console, out = _terminal()
    with Dashboard(DashboardConfig(plain=True, plain_interval_s=0.0), console=console) as dash:
        dash.update(_snapshot(t_s=1.0))
        dash.update(_snapshot(t_s=2.0))
    lines = [line for line in ANSI.sub("", out.getvalue()).splitlines() if "live=" in line]
    assert len(lines) == 2


@pytest.mark.parametrize("plain", [True, False])
def test_a_broken_output_is_logged_not_raised(
    plain: bool, caplog: pytest.LogCaptureFixture
) -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=not plain, width=100)
    dash = Dashboard(DashboardConfig(plain_interval_s=0.0), console=console)
    dash.start()
    out.close()  # the terminal went away: every write now raises ValueError
    with caplog.at_level(logging.DEBUG, logger="tether.runtime.dashboard"):
        for t in (1.0, 2.0, 3.0):
            dash.update(_snapshot(t_s=t), EVENTS)
        dash.stop()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    # Logged once with its traceback, not once per update.
    assert len([r for r in warnings if "dashboard update failed" in r.getMessage()]) == 1
    assert warnings[0].exc_info is not None


def test_a_snapshot_without_robots_still_draws() -> None:
    console, out = _terminal()
    with Dashboard(console=console) as dash:
        dash.update(_snapshot(robots=(), last_rejection=""), ())
    text = ANSI.sub("", out.getvalue())
    assert "no robots connected" in text
    assert "none yet" in text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.4, "0 s"),
        (59.4, "59 s"),
        (75.0, "1 min 15 s"),
        (3599.0, "59 min 59 s"),
        (7260.0, "2 h 01 min"),
    ],
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(
    ("n_bytes", "text"),
    [(999, "999 B"), (1_000, "1.0 kB"), (2_600_000, "2.6 MB"), (3 * 10**9, "3.0 GB")],
)
def test_size(n_bytes: int, text: str) -> None:
    assert size(n_bytes) == text


def test_levels_rank_as_the_degradation_machine_orders_them() -> None:
    assert [level_style(level.name).rank for level in DegradationLevel] == [0, 1, 2, 3]
    assert level_style(" restricted ").rank == int(DegradationLevel.RESTRICTED)


def test_an_unknown_level_is_shown_not_dropped() -> None:
    console, out = _terminal()
    with Dashboard(console=console) as dash:
        dash.update(_snapshot(level="DEGRADED_V2"))
    assert level_style("DEGRADED_V2").rank == -1
    assert "\x1b[1;35m DEGRADED_V2 " in out.getvalue()


def test_a_robot_without_a_reply_yet_shows_no_version_and_a_canary_robot_says_so() -> None:
    """The dashboard showed "v0 pinned" before the first reply, and a canary robot as "v2"."""
    waiting = RobotSnapshot("arm-1", "baseline", 0.0, 0.0, 0.0, 0.0, 0.0, 0, 0, 0)
    canary = RobotSnapshot("arm-0", "learning", 49.8, 1.2, 3.4, 10.0, 0.5, 3, 4, 5)
    assert version_label(waiting) == "—"
    assert version_label(canary, canary_version=5) == "v5 canary"
    assert version_label(canary, canary_version=None) == "v5"
    assert version_label(canary, check_version=5) == "v5 check"
    console, out = _terminal()
    with Dashboard(console=console) as dash:
        dash.update(_snapshot(robots=(canary, waiting), canary_version=5))
    text = ANSI.sub("", out.getvalue())
    assert "v5 canary" in text
    assert "v0" not in text


def test_the_dashboard_fits_80_columns_without_truncating_its_headers() -> None:
    console, out = _terminal(width=80)
    with Dashboard(console=console) as dash:
        dash.update(_snapshot(), EVENTS)
    text = ANSI.sub("", out.getvalue())
    robots = text.split("robots (", 1)[1].split("candidates", 1)[0]
    for cell in ("robot", "role", "p50", "p99", "return", "success", "ep.", "version"):
        assert cell in robots, f"{cell!r} truncated:\n{robots}"
    for cell in ("learning", "baseline", "v1 pinned", "95.25"):
        assert cell in robots, f"{cell!r} truncated:\n{robots}"
    assert "…" not in robots, robots
