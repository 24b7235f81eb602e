"""The run report's PNG plots, drawn with matplotlib's Agg canvas and no global state.

Each plot is drawn only from what the run directory holds; a plot without data is not
drawn and says why, so a run killed early still gets a report. Figures are built with
``matplotlib.figure.Figure`` rather than pyplot, so drawing is thread-safe and never
touches a display or the process-wide backend.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from tether.runtime.degradation_view import LEVEL_NAMES, level_style
from tether.runtime.records import EpisodeRecord
from tether.runtime.report_config import ReportConfig
from tether.runtime.report_data import RunData
from tether.runtime.report_summary import RunSummary, role_order

RECOVERY_TARGET = 0.9  # issue 8's acceptance bar for the learning robots after drift
_LEARNING_COLORS = ("#1565c0", "#2e7d32", "#6a1b9a", "#00838f", "#4e342e")
_BASELINE_COLORS = ("#e65100", "#757575", "#ad1457")
_EVENT_MARKERS = {
    "promotion": ("^", "#2e7d32", "promotion"),
    "rejection": ("x", "#c62828", "rejection"),
    "rollback": ("v", "#ef6c00", "rollback"),
}


@dataclass(frozen=True)
class Plot:
    """One plot of the report: its PNG (relative to the run directory) or why there is none."""

    title: str
    file: str | None
    caption: str


def draw_plots(
    data: RunData, summary: RunSummary, config: ReportConfig, plots_dir: Path
) -> tuple[Plot, ...]:
    """Draw every plot that has data into ``plots_dir``; return them in report order."""
    plots_dir.mkdir(parents=True, exist_ok=True)
    drawers: tuple[tuple[str, str, Callable[[], Figure | str]], ...] = (
        ("Return over time", "returns.png", lambda: _returns(data, summary, config)),
        ("Round-trip latency", "latency.png", lambda: _latency(summary, data, config)),
        ("Version timeline", "versions.png", lambda: _versions(data)),
        ("Interventions and degradation", "safety.png", lambda: _safety(data)),
    )
    plots = []
    for title, name, draw in drawers:
        drawn = draw()
        if isinstance(drawn, str):
            plots.append(Plot(title=title, file=None, caption=drawn))
            continue
        path = plots_dir / name
        drawn.savefig(path, dpi=config.plot_dpi)
        plots.append(Plot(title=title, file=f"{plots_dir.name}/{name}", caption=_captions[name]))
    return tuple(plots)


_captions = {
    "returns.png": "Episode return of each robot (dots) and its moving average (line). "
    "Dashed lines mark drift events; the shaded span is the post-drift window of the summary.",
    "latency.png": "Round-trip latency of every control step of every robot, p50 and p99 marked.",
    "versions.png": "Live version over time, with promotions, rejected candidates and rollbacks.",
    "safety.png": "Supervisor interventions of each robot, cumulative (top), and the degradation level (bottom).",
}


def moving_average(values: Sequence[float], window: int) -> npt.NDArray[np.float64]:
    """Trailing mean over up to ``window`` values (fewer at the start, never padded)."""
    x = np.asarray(values, dtype=np.float64)
    sums = np.cumsum(np.concatenate(([0.0], x)))
    idx = np.arange(1, x.size + 1)
    lo = np.maximum(idx - window, 0)
    return np.asarray((sums[idx] - sums[lo]) / (idx - lo), dtype=np.float64)


def _returns(data: RunData, summary: RunSummary, config: ReportConfig) -> Figure | str:
    if not data.episodes:
        return "No episodes: episodes.jsonl is missing or empty."
    fig, ax = _figure()
    robots = _by_robot(data.episodes)
    colors = _robot_colors(robots)
    for robot, episodes in robots.items():
        role, color = episodes[0].role, colors[robot]
        t = [e.t_s for e in episodes]
        r = [e.episode_return for e in episodes]
        ax.scatter(t, r, s=14, color=color, alpha=0.35, linewidths=0)
        ax.plot(
            t,
            moving_average(r, config.return_window_episodes),
            color=color,
            lw=2.0,
            label=f"{robot} ({role})",
        )
    ax.axvspan(
        summary.post_drift_from_s,
        summary.end_s,
        color="#9e9e9e",
        alpha=0.12,
        label="post-drift window",
    )
    _mark_target(ax, summary)
    _mark_drifts(ax, data)
    ax.set_xlabel("run time (s)")
    ax.set_ylabel(f"episode return (moving avg of {config.return_window_episodes})")
    ax.set_title("Return over time: learning robots vs frozen baseline")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def _latency(summary: RunSummary, data: RunData, config: ReportConfig) -> Figure | str:
    if summary.latency_p50_ms is None or summary.latency_p99_ms is None:
        return "No latency samples: latency_ms.npy is missing, unreadable or empty."
    latency = data.latency_ms
    fig, ax = _figure()
    # The far tail would squash the histogram into one bar; it is still counted in p99.
    upper = float(np.percentile(latency, 99.9)) * 1.1 + 1e-9
    ax.hist(
        latency[latency <= upper],
        bins=config.latency_bins,
        color="#90caf9",
        edgecolor="#1565c0",
        linewidth=0.4,
    )
    ax.axvline(
        summary.latency_p50_ms, color="#2e7d32", lw=2, label=f"p50 {summary.latency_p50_ms:.2f} ms"
    )
    ax.axvline(
        summary.latency_p99_ms, color="#c62828", lw=2, label=f"p99 {summary.latency_p99_ms:.2f} ms"
    )
    ax.set_xlabel("round-trip latency (ms)")
    ax.set_ylabel("control steps")
    ax.set_title(f"Round-trip latency, {latency.size} steps (max {latency.max():.1f} ms)")
    ax.legend(loc="upper right", fontsize=9)
    return fig


def _versions(data: RunData) -> Figure | str:
    marked = [(e.kind, e.t_s, e.version) for e in data.events if e.version is not None]
    marked = [m for m in marked if m[0] in _EVENT_MARKERS]
    if not data.snapshots and not marked:
        return "No version history: snapshots.jsonl and version events are missing."
    fig, ax = _figure()
    if data.snapshots:
        ax.step(
            [s.t_s for s in data.snapshots],
            [s.live_version for s in data.snapshots],
            where="post",
            color="#37474f",
            lw=2,
            label="live version",
        )
    for kind, (marker, color, label) in _EVENT_MARKERS.items():
        points = [(t, version) for k, t, version in marked if k == kind]
        if points:
            ax.scatter(
                [t for t, _ in points],
                [version for _, version in points],
                marker=marker,
                s=70,
                color=color,
                zorder=3,
                label=f"{label} ({len(points)})",
            )
    _mark_drifts(ax, data)
    versions = [s.live_version for s in data.snapshots] + [v for _, _, v in marked if v]
    # Whole versions only: a single version otherwise gets an axis of 0.95 .. 1.05.
    ax.set_ylim(min(versions, default=1) - 0.5, max(versions, default=1) + 0.5)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("run time (s)")
    ax.set_ylabel("policy version")
    ax.set_title("Version timeline")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return fig


def _safety(data: RunData) -> Figure | str:
    if not data.episodes and not data.snapshots:
        return "No interventions or degradation levels: episodes and snapshots are missing."
    fig = Figure(figsize=(9.0, 5.2), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2))
    robots = _by_robot(data.episodes)
    colors = _robot_colors(robots)
    for robot, episodes in robots.items():
        # Cumulative, because per-episode counts of several robots are unreadable
        # spaghetti; the slope is the intervention rate.
        top.step(
            [e.t_s for e in episodes],
            np.cumsum([e.interventions for e in episodes]),
            where="post",
            lw=1.8,
            color=colors[robot],
            label=f"{robot} ({episodes[0].role})",
        )
    _mark_drifts(top, data)
    top.set_ylabel("interventions (cumulative)")
    top.set_title("Supervisor interventions and degradation level")
    if data.episodes:
        top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    _degradation(bottom, data)
    bottom.set_xlabel("run time (s)")
    return fig


def _degradation(ax: Axes, data: RunData) -> None:
    ax.set_yticks(range(len(LEVEL_NAMES)), LEVEL_NAMES, fontsize=8)
    ax.set_ylim(-0.5, len(LEVEL_NAMES) - 0.5)
    snaps = data.snapshots
    if not snaps:
        ax.text(0.5, 0.5, "no snapshots", transform=ax.transAxes, ha="center", color="#757575")
        return
    times = [s.t_s for s in snaps]
    ranks = [level_style(s.degradation_level).rank for s in snaps]
    ax.step(times, ranks, where="post", color="#212121", lw=1.5)
    # Shade each stretch at one level in that level's colour, as the dashboard shows it.
    start = 0
    for i in range(1, len(snaps) + 1):
        if i == len(snaps) or ranks[i] != ranks[start]:
            end_t = times[i] if i < len(snaps) else times[-1]
            ax.axvspan(
                times[start],
                end_t,
                alpha=0.25,
                lw=0,
                color=level_style(snaps[start].degradation_level).plot_color,
            )
            start = i
    ax.set_ylabel("degradation")


def _mark_target(ax: Axes, summary: RunSummary) -> None:
    # The bar the learning robots are judged by: back to RECOVERY_TARGET of their own
    # pre-drift return. Drawn only where that is a meaningful (positive) reference.
    learning = [r for r in summary.roles if r.role == "learning"]
    if not learning or summary.first_drift_s is None:
        return
    pre = learning[0].pre_drift_return
    if pre is None or pre <= 0.0:
        return
    ax.hlines(
        RECOVERY_TARGET * pre,
        summary.first_drift_s,
        summary.end_s,
        colors="#1565c0",
        linestyles=":",
        lw=1.2,
        label=f"{RECOVERY_TARGET:.0%} of learning pre-drift return",
    )


def _mark_drifts(ax: Axes, data: RunData) -> None:
    for i, (t_s, message) in enumerate(data.drifts):
        ax.axvline(t_s, color="#c62828", ls="--", lw=1.2, label="drift" if i == 0 else None)
        ax.annotate(
            message,
            (t_s, 1.0),
            xycoords=("data", "axes fraction"),
            xytext=(3, -3),
            textcoords="offset points",
            va="top",
            fontsize=7,
            color="#c62828",
            rotation=90,
        )


def _by_robot(episodes: Sequence[EpisodeRecord]) -> dict[str, list[EpisodeRecord]]:
    robots: dict[str, list[EpisodeRecord]] = {}
    for e in sorted(episodes, key=lambda e: (role_order(e.role), e.robot_id)):
        robots.setdefault(e.robot_id, []).append(e)
    for eps in robots.values():
        eps.sort(key=lambda e: e.t_s)
    return robots


def _robot_colors(robots: dict[str, list[EpisodeRecord]]) -> dict[str, str]:
    """One colour per robot, the same in every plot: blues/greens learn, orange is the baseline."""
    learning, baseline = iter(_LEARNING_COLORS * 8), iter(_BASELINE_COLORS * 8)
    return {
        robot: next(baseline if episodes[0].role == "baseline" else learning)
        for robot, episodes in robots.items()
    }


def _figure() -> tuple[Figure, Axes]:
    fig = Figure(figsize=(9.0, 4.2), layout="constrained")
    ax = fig.add_subplot()
    ax.grid(True, alpha=0.3)
    return fig, ax
