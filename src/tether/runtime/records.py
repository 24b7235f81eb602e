"""What a ``tether run`` leaves behind, as typed records and one JSON-lines file per kind.

The run directory is the contract between the running system, the live dashboard and
``tether report``: the system appends records while it runs, the dashboard reads the
latest snapshot, the report reads everything afterwards. Each record is a frozen
dataclass written as one JSON object per line, so a run killed mid-write loses at most
its last line and every earlier line stays readable (a torn last line is skipped).

    runs/<timestamp>/
      config.yaml          the resolved configuration
      events.jsonl         RunEvent: promotions, rejections, rollbacks, degradation, drift, crashes
      episodes.jsonl       EpisodeRecord: one per finished episode per robot
      snapshots.jsonl      SystemSnapshot: the system and every robot, every few seconds
      latency_ms.npy       round-trip latency samples of every robot (ms), written at the end
      experience/          the experience log (tether.data)
      final_bundle/        the live bundle at shutdown
      report.html, plots/  made by ``tether report``
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

import numpy as np

EVENTS_FILE = "events.jsonl"
EPISODES_FILE = "episodes.jsonl"
SNAPSHOTS_FILE = "snapshots.jsonl"
LATENCY_FILE = "latency_ms.npy"
CONFIG_FILE = "config.yaml"
EXPERIENCE_DIR = "experience"
FINAL_BUNDLE_DIR = "final_bundle"
REPORT_FILE = "report.html"
SUMMARY_FILE = "summary.json"
# Written by the Ray backend (tether.fleet): the backend, the cluster, where each actor ran.
FLEET_FILE = "fleet.json"
PLOTS_DIR = "plots"


@dataclass(frozen=True)
class RunEvent:
    """Something that happened to the system, with the numbers that explain it.

    ``kind`` is one of: ``start``, ``stop``, ``drift`` (dynamics changed; ``details`` has
    the new knobs), ``candidate`` (the learner published one), ``promotion``,
    ``rejection`` (``details`` names the gate stage and its numbers), ``rollback``,
    ``rollback_check`` (the last-known-good served beside live before a rollback: its
    verdict and numbers),
    ``degradation`` (one robot's level; ``robot_id`` names it, ``details`` has
    ``from``/``to`` level and the reason), ``learning_level`` (the learning-wide level the
    learner obeys, aggregated over the robots; same details), ``learner_crash``, ``learner_restart``, ``interrupted`` (a signal stopped the run early).
    ``t_s`` is wall time since the run's start; ``control_s`` is the robots' control time
    then (steps served / robots / control rate), the clock every window of the system runs
    on, so a ``--fast`` run reads the same as a real-time one.
    """

    t_s: float
    kind: str
    message: str
    version: int | None = None
    robot_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    control_s: float | None = None


@dataclass(frozen=True)
class EpisodeRecord:
    """One finished episode of one simulated robot.

    ``role`` is ``learning`` (follows the live version) or ``baseline`` (pinned to the
    initial version). ``violations`` and ``contacts`` are measured by MuJoCo.
    """

    t_s: float
    robot_id: str
    role: str
    episode: int
    episode_return: float
    success: bool
    steps: int
    interventions: int
    backups: int
    policy_version: int
    violations: int
    contacts: int
    drift_phase: str
    final_distance_m: float | None = None  # end effector to target at the episode's end


@dataclass(frozen=True)
class RobotSnapshot:
    """A robot's moving statistics at one moment (for the dashboard)."""

    robot_id: str
    role: str
    control_rate_hz: float
    latency_p50_ms: float
    latency_p99_ms: float
    return_avg: float
    success_rate: float
    interventions: int
    episodes: int
    policy_version: int


@dataclass(frozen=True)
class SystemSnapshot:
    """The whole system at one moment: what the dashboard draws and the report plots."""

    t_s: float
    live_version: int
    live_version_age_s: float
    degradation_level: str
    candidates_passed: int
    candidates_rejected: int
    last_rejection: str
    rollbacks: int
    learner_updates_per_s: float
    learner_updates_total: int
    replay_size: int
    experience_log_bytes: int
    robots: tuple[RobotSnapshot, ...]
    canary_version: int | None = None  # the version in its canary now, if one is
    check_version: int | None = None  # the last-known-good in a rollback check now, if one is


RecordT = TypeVar("RecordT", RunEvent, EpisodeRecord, SystemSnapshot)


class JsonlWriter(Generic[RecordT]):
    """Appends records to a JSON-lines file, one flushed line per record, thread-safe."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fh = path.open("a", encoding="utf-8")

    def append(self, record: RecordT) -> None:
        line = json.dumps(asdict(record), separators=(",", ":"), allow_nan=False)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()

    def close(self) -> None:
        with self._lock:
            if not self._fh.closed:
                self._fh.close()


class RunJournal:
    """What a running system writes as it goes, in ``run_dir``: its events, the robots'
    episodes and its snapshots as JSON lines; beside them the latest snapshot of each
    robot and the last ``RECENT_EVENTS`` events, which the dashboard shows."""

    RECENT_EVENTS = 8

    def __init__(self, run_dir: Path) -> None:
        self.events = JsonlWriter[RunEvent](run_dir / EVENTS_FILE)
        self.episodes = JsonlWriter[EpisodeRecord](run_dir / EPISODES_FILE)
        self.snapshots = JsonlWriter[SystemSnapshot](run_dir / SNAPSHOTS_FILE)
        self.recent: deque[RunEvent] = deque(maxlen=self.RECENT_EVENTS)
        self._robots: dict[str, RobotSnapshot] = {}

    def event(self, event: RunEvent) -> None:
        self.events.append(event)
        self.recent.append(event)

    def take(self, reports: Iterable[EpisodeRecord | RobotSnapshot | RunEvent]) -> None:
        """File what the robots reported: episodes, their latest snapshots, events."""
        for item in reports:
            if isinstance(item, EpisodeRecord):
                self.episodes.append(item)
            elif isinstance(item, RobotSnapshot):
                self._robots[item.robot_id] = item
            else:
                self.event(item)

    def robots(self) -> tuple[RobotSnapshot, ...]:
        """Each robot's latest snapshot, by robot id."""
        return tuple(self._robots[k] for k in sorted(self._robots))

    def close(self) -> None:
        for writer in (self.events, self.episodes, self.snapshots):
            writer.close()


def read_jsonl(path: Path, kind: type[RecordT]) -> Iterator[RecordT]:
    """Yield records from ``path``; a torn last line (a killed writer) is skipped."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                continue
            yield _build(kind, raw)


def _build(kind: type[RecordT], raw: dict[str, Any]) -> RecordT:
    if kind is SystemSnapshot:
        robots = tuple(RobotSnapshot(**r) for r in raw.pop("robots", []))
        return SystemSnapshot(robots=robots, **raw)
    return kind(**raw)


def collect_latency(run_dir: Path, robots: Iterable[str]) -> None:
    """Join each robot's ``latency_<name>.npy`` into the run's :data:`LATENCY_FILE`."""
    parts = []
    for name in robots:
        path = run_dir / f"latency_{name}.npy"
        if path.exists():
            parts.append(np.load(path, allow_pickle=False))
            path.unlink()
    if parts:
        np.save(run_dir / LATENCY_FILE, np.concatenate(parts))
