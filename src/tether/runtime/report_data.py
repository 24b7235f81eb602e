"""Loads a run directory into one typed ``RunData`` for the summary and the plots.

Invariant: loading never fails on the run's own files. A file that is absent is named in
``missing``; a file that is present but cannot be read (a record of another shape, a
corrupt array) is named with the reason in ``unreadable``; a torn last JSON line is
skipped by ``read_jsonl``. Everything readable is still used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tether.runtime.records import (
    CONFIG_FILE,
    EPISODES_FILE,
    EVENTS_FILE,
    LATENCY_FILE,
    SNAPSHOTS_FILE,
    EpisodeRecord,
    RecordT,
    RunEvent,
    SystemSnapshot,
    read_jsonl,
)
from tether.runtime.report_config import ReportError

DRIFT_SAME_WITHIN_S = 1.0


@dataclass(frozen=True)
class RunData:
    """Everything the report reads from one run directory, sorted by time."""

    run_dir: Path
    events: tuple[RunEvent, ...]
    episodes: tuple[EpisodeRecord, ...]
    snapshots: tuple[SystemSnapshot, ...]
    latency_ms: npt.NDArray[np.float64]
    missing: tuple[str, ...]
    unreadable: tuple[str, ...]

    @property
    def start_s(self) -> float:
        """The run's start: its ``start`` event, else its earliest record, else 0."""
        starts = [e.t_s for e in self.events if e.kind == "start"]
        if starts:
            return min(starts)
        times = self._times()
        return min(times) if times else 0.0

    @property
    def end_s(self) -> float:
        """The run's end: its last ``stop`` event, else (a killed run) its latest record."""
        stops = [e.t_s for e in self.events if e.kind == "stop"]
        if stops:
            return max(stops)
        times = self._times()
        return max(times) if times else self.start_s

    @property
    def drifts(self) -> tuple[tuple[float, str], ...]:
        """(time, what changed) of each change of dynamics, in time order. Every robot
        reports the same change a moment apart ("robot-0: drift begins", "robot-1: drift
        begins"); reports of one phase within ``DRIFT_SAME_WITHIN_S`` count once, at the
        first, named without the robot."""
        marks: list[tuple[float, str]] = []
        last: dict[str, float] = {}
        for e in self.events:
            if e.kind != "drift":
                continue
            what = e.message.split(": ", 1)[1] if e.robot_id and ": " in e.message else e.message
            key = str(e.details.get("phase", what))
            if key not in last or e.t_s - last[key] >= DRIFT_SAME_WITHIN_S:
                marks.append((e.t_s, what))
            last[key] = e.t_s
        return tuple(marks)

    @property
    def drift_times_s(self) -> tuple[float, ...]:
        return tuple(t for t, _ in self.drifts)

    def _times(self) -> list[float]:
        return (
            [e.t_s for e in self.events]
            + [e.t_s for e in self.episodes]
            + [s.t_s for s in self.snapshots]
        )


# A directory holding none of these is not a run (a parent such as runs/, a typo).
_RUN_MARKERS = (CONFIG_FILE, EVENTS_FILE, EPISODES_FILE)


def load_run(run_dir: Path) -> RunData:
    """Read ``run_dir``; raises ``ReportError`` if it is not a run directory."""
    if not run_dir.is_dir():
        raise ReportError(
            f"run directory {str(run_dir)!r}: expected a directory written by `tether run`, "
            "found nothing there; pass the runs/<timestamp>/ folder of a run"
        )
    if not any((run_dir / name).is_file() for name in _RUN_MARKERS):
        runs = sorted(
            p.name for p in run_dir.iterdir() if any((p / n).is_file() for n in _RUN_MARKERS)
        )
        found = (
            f"it holds the runs {', '.join(runs[-5:])}; pass one of them, e.g. "
            f"{str(run_dir / runs[-1])!r}"
            if runs
            else "it holds none of a run's files"
        )
        raise ReportError(
            f"run directory {str(run_dir)!r}: expected a directory written by `tether run` "
            f"(with {', '.join(_RUN_MARKERS)}), but {found}"
        )
    missing: list[str] = []
    unreadable: list[str] = []
    events = _read_records(run_dir, EVENTS_FILE, RunEvent, missing, unreadable)
    episodes = _read_records(run_dir, EPISODES_FILE, EpisodeRecord, missing, unreadable)
    snapshots = _read_records(run_dir, SNAPSHOTS_FILE, SystemSnapshot, missing, unreadable)
    latency = _read_latency(run_dir / LATENCY_FILE, missing, unreadable)
    return RunData(
        run_dir=run_dir,
        events=tuple(sorted(events, key=lambda r: r.t_s)),
        episodes=tuple(sorted(episodes, key=lambda r: r.t_s)),
        snapshots=tuple(sorted(snapshots, key=lambda r: r.t_s)),
        latency_ms=latency,
        missing=tuple(missing),
        unreadable=tuple(unreadable),
    )


def _read_records(
    run_dir: Path,
    name: str,
    kind: type[RecordT],
    missing: list[str],
    unreadable: list[str],
) -> list[RecordT]:
    path = run_dir / name
    if not path.exists():
        missing.append(name)
        return []
    records: list[RecordT] = []
    try:
        # Collected one by one so that the lines before a bad one are kept.
        for record in read_jsonl(path, kind):
            records.append(record)
    except (TypeError, ValueError, OSError) as exc:
        unreadable.append(
            f"{name}: expected {kind.__name__} lines, stopped after {len(records)} "
            f"records at a line that is not one ({exc})"
        )
    return records


def _read_latency(path: Path, missing: list[str], unreadable: list[str]) -> npt.NDArray[np.float64]:
    empty = np.zeros(0, dtype=np.float64)
    if not path.exists():
        missing.append(path.name)
        return empty
    try:
        # allow_pickle=False: a run directory is data, never code (invariant 6).
        values = np.asarray(np.load(path, allow_pickle=False), dtype=np.float64).ravel()
    except (TypeError, ValueError, OSError, EOFError) as exc:
        unreadable.append(f"{path.name}: expected a .npy array of latencies in ms ({exc})")
        return empty
    return values[np.isfinite(values)]
