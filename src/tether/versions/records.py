"""The versions layer's records: what a version is, where it stands, and how it was judged.

- a version as the registry knows it (:class:`VersionRecord`, its :class:`VersionState`
  and :class:`VersionSource`, its numbers :class:`VersionMetrics`), and a change of the
  live version (:class:`LiveChange`);
- what the robots report of an episode (:class:`EpisodeOutcome`), which the canary and
  the rollback monitor judge by;
- the gate's verdicts: one :class:`StageVerdict` per stage, each number a
  :class:`Measurement` with its threshold, and the learner's :class:`GateRecord` of one
  candidate. The offline and simulation stages run in the learner
  (``tether.versions.learner_gate``), the shadow and canary stages in the server
  (``tether.versions.server_gate``); both write these records, so an operator sees one
  history per candidate no matter where a stage ran. A rejection is never just
  "failed".
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Literal


class GateStage(StrEnum):
    OFFLINE = "offline"  # recent real transitions: finite, trust region, critic value
    SIMULATION = "simulation"  # episodes on the built-in arm under domain randomization
    SHADOW = "shadow"  # live observations, actions computed but never executed
    CANARY = "canary"  # acts for a fraction of episodes under tightened limits


@dataclass(frozen=True)
class Measurement:
    """One number a stage was judged on: ``value`` must be ``<=`` or ``>=`` ``threshold``."""

    name: str
    value: float
    threshold: float
    direction: Literal["<=", ">="]  # how value must relate to threshold to pass

    @property
    def passed(self) -> bool:
        if self.direction == "<=":
            return self.value <= self.threshold
        return self.value >= self.threshold

    def describe(self) -> str:
        mark = "ok" if self.passed else "FAIL"
        return (
            f"{self.name}={self.value:.4g} (must be {self.direction} {self.threshold:.4g}, {mark})"
        )


@dataclass(frozen=True)
class Figure:
    """A number a stage reports beside its verdict but does not judge by (e.g. the return)."""

    name: str
    value: float

    def describe(self) -> str:
        return f"{self.name}={self.value:.4g}"


@dataclass(frozen=True)
class StageVerdict:
    """The outcome of one gate stage for one candidate."""

    stage: GateStage
    candidate: int
    baseline: int  # the live version it was compared with
    measurements: tuple[Measurement, ...]  # the pass criteria: all must pass
    samples: int  # transitions, episodes or steps the numbers come from
    figures: tuple[Figure, ...] = ()  # reported alongside, never a pass criterion

    @property
    def passed(self) -> bool:
        return all(m.passed for m in self.measurements)

    def describe(self) -> str:
        verdict = "passed" if self.passed else "failed"
        numbers = "; ".join(m.describe() for m in self.measurements)
        reported = ""
        if self.figures:
            reported = " (reported: " + ", ".join(f.describe() for f in self.figures) + ")"
        return (
            f"{self.stage.value} stage {verdict} for version {self.candidate} vs "
            f"{self.baseline} over {self.samples} samples: {numbers}{reported}"
        )


@dataclass(frozen=True)
class EpisodeOutcome:
    """One finished episode as the rollout and rollback logic see it."""

    version: int
    episode_return: float
    success: bool
    steps: int
    interventions: int  # steps whose action the supervisor changed or replaced
    backups: int  # steps served by a backup action
    tightened: bool = False  # served under a canary's tightened limits (the canary or its control)
    # The paired share (a canary or a rollback check, ``tether.versions.routing``) whose
    # arm served it, at whatever limits; 0: none.
    trial: int = 0
    task_id: str = ""  # the task the robot declared (same id: same start and target); "" none
    final_distance_m: float | None = None  # the robot's final task error (m); None: not sent

    @property
    def experiment(self) -> bool:
        """Served as an arm of a paired share."""
        return self.trial != 0

    @property
    def intervention_rate(self) -> float:
        return self.interventions / self.steps if self.steps else 0.0

    @property
    def backup_rate(self) -> float:
        return self.backups / self.steps if self.steps else 0.0


@dataclass(frozen=True)
class GateRecord:
    """The learner-side gate's outcome for one candidate version."""

    version: int
    parent: int  # the live version the candidate was derived from and judged against
    passed: bool
    verdicts: tuple[StageVerdict, ...]


class VersionState(StrEnum):
    CANDIDATE = "candidate"
    SHADOW = "shadow"
    CANARY = "canary"
    LIVE = "live"
    RETIRED = "retired"
    REJECTED = "rejected"


class VersionSource(StrEnum):
    BUNDLE = "bundle"  # loaded from a bundle directory (startup, LoadBundle, reload)
    LEARNER = "learner"  # published by the online learner


@dataclass(frozen=True)
class VersionRecord:
    """One version as the registry knows it (a snapshot; the registry holds the truth)."""

    id: int
    name: str
    weights_sha256: str
    parent: int | None
    source: VersionSource
    created_at_s: float  # wall clock (time.time) when registered
    state: VersionState
    reason: str  # why it is in this state (gate verdict, operator, rollback numbers)
    loaded: bool  # an engine is resident and can serve
    declared_id: int  # the id its bundle or publication declared
    bundle_path: Path | None = None


@dataclass(frozen=True)
class VersionMetrics:
    """What one version did on the robots: the numbers the gate and the rollback use."""

    version: int
    steps: int = 0
    interventions: int = 0  # steps where the supervisor changed or replaced the action
    backups: int = 0
    interventions_by_check: tuple[tuple[str, int], ...] = ()
    episodes: int = 0
    return_sum: float = 0.0
    successes: int = 0

    @property
    def mean_return(self) -> float:
        return self.return_sum / self.episodes if self.episodes else 0.0

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0

    @property
    def intervention_rate(self) -> float:
        return self.interventions / self.steps if self.steps else 0.0


@dataclass(frozen=True)
class LiveChange:
    """The live version changed; ``kind`` is ``initial``, ``promotion`` or ``rollback``."""

    kind: str
    previous: VersionRecord | None
    current: VersionRecord
    reason: str
    at_s: float
