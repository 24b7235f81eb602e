"""The server side of the gate: a candidate goes shadow → canary → live, or is rejected.

The learner runs the offline and simulation stages and hands over a candidate with
their verdicts (:meth:`ServerGate.submit`); a candidate loaded by an operator
arrives with none. From there it runs the shadow stage (the candidate
never acts), then the canary stage (it acts for a share of episodes under tightened
limits), and promotes on a pass or rejects with the failing stage and its numbers.
Invariant: a version reaches a robot only after every stage before the canary passed,
and becomes live only after the canary passed too; one candidate is evaluated at a
time, and a newer one supersedes it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.versions.errors import VersionError
from tether.versions.protocols import Supervises
from tether.versions.records import EpisodeOutcome, LiveChange, StageVerdict, VersionState
from tether.versions.registry import ModelRegistry
from tether.versions.routing import TrafficRouter
from tether.versions.stages.canary import CanaryConfig, CanaryEvaluator
from tether.versions.stages.shadow import ShadowConfig, ShadowEvaluator, ShadowRunner


class ServerGateConfig(BaseModel):
    """Which server-side gate stages run, and their criteria."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    shadow: ShadowConfig = Field(default_factory=ShadowConfig, description="Shadow stage")
    canary: CanaryConfig = Field(default_factory=CanaryConfig, description="Canary stage")


@dataclass(frozen=True)
class GateOutcome:
    """The end of one candidate's evaluation: promoted, or rejected at ``verdicts[-1]``."""

    version: int
    promoted: bool
    verdicts: tuple[StageVerdict, ...]

    def describe(self) -> str:
        if self.promoted:
            # The last stage's numbers (the canary's, normally) say how sure the promotion is.
            last = f": {self.verdicts[-1].describe()}" if self.verdicts else ""
            return f"version {self.version} promoted after {len(self.verdicts)} stages{last}"
        return f"version {self.version} rejected: {self.verdicts[-1].describe()}"


class ServerGate:
    """Drives one candidate at a time through the server-side stages."""

    def __init__(
        self,
        registry: ModelRegistry[Any],
        router: TrafficRouter,
        supervisor: Supervises,
        config: ServerGateConfig,
    ) -> None:
        self._registry = registry
        self._router = router
        self._supervisor = supervisor
        self.config = config
        self._lock = threading.Lock()
        self._candidate: int | None = None
        self._verdicts: dict[int, list[StageVerdict]] = {}
        self._shadow: ShadowRunner | None = None
        self._canary: CanaryEvaluator | None = None
        self._listeners: list[Callable[[GateOutcome], None]] = []
        self.outcomes: list[GateOutcome] = []
        registry.add_listener(self._on_live_change)

    def add_listener(self, listener: Callable[[GateOutcome], None]) -> None:
        self._listeners.append(listener)

    def verdicts(self, version: int) -> tuple[StageVerdict, ...]:
        with self._lock:
            return tuple(self._verdicts.get(version, ()))

    @property
    def candidate(self) -> int | None:
        with self._lock:
            return self._candidate

    def submit(self, version: int, prior: Sequence[StageVerdict] = ()) -> GateOutcome | None:
        """Start evaluating ``version`` (a registered candidate) after its learner-side stages.

        A failed prior verdict rejects it at once; otherwise it enters the shadow stage.
        """
        record = self._registry.get(version)
        if record.state is not VersionState.CANDIDATE:
            raise VersionError(
                f"version {version} is {record.state.value}; only a candidate can enter the gate"
            )
        live = self._registry.live()
        if live is None:
            raise VersionError(
                f"version {version} cannot be gated: no version is live to compare it with; "
                "load a bundle live first"
            )
        with self._lock:
            self._verdicts[version] = list(prior)
        failed = [v for v in prior if not v.passed]
        if failed:
            return self._finish(version, promoted=False)
        self._supersede()
        self._registry.transition(version, VersionState.SHADOW, "shadow stage started")
        evaluator = ShadowEvaluator(
            self._registry.engine(version),
            self._supervisor,
            baseline=live.id,
            config=self.config.shadow,
            live=self._registry.engine(live.id),
        )
        with self._lock:
            self._candidate = version
            self._shadow = ShadowRunner(evaluator, self._on_shadow_verdict)
        return None

    def on_batch(
        self,
        observations: np.ndarray,
        live_actions: np.ndarray,
        previous_actions: np.ndarray | None = None,
    ) -> None:
        """Feed a live batch to the shadow stage (never blocks; see ShadowRunner)."""
        with self._lock:
            runner = self._shadow
        if runner is not None:
            runner.offer(observations, live_actions, previous_actions)

    def on_episode(self, outcome: EpisodeOutcome) -> GateOutcome | None:
        """Feed a finished episode to the canary stage; returns the outcome when it ends."""
        with self._lock:
            canary = self._canary
        if canary is None:
            return None
        verdict = canary.add(outcome)
        if verdict is None:
            return None
        self._router.stop_canary()
        with self._lock:
            self._verdicts[verdict.candidate].append(verdict)
            self._canary = None
        return self._finish(verdict.candidate, promoted=verdict.passed)

    def wait_shadow(self, timeout_s: float) -> None:
        """Block until the shadow thread has worked off every batch offered so far."""
        with self._lock:
            runner = self._shadow
        if runner is not None:
            runner.wait_idle(timeout_s)

    def _on_shadow_verdict(self, verdict: StageVerdict) -> None:
        with self._lock:
            if self._candidate != verdict.candidate:
                return  # superseded while the shadow thread finished
            self._verdicts[verdict.candidate].append(verdict)
            self._shadow = None
        if not verdict.passed:
            self._finish(verdict.candidate, promoted=False)
            return
        self._registry.transition(verdict.candidate, VersionState.CANARY, verdict.describe())
        c = self.config.canary
        # The share may wait for a rollback check to end; its trial number keeps the
        # check's live episodes out of the canary's control arm.
        share = self._router.start_canary(verdict.candidate, c.fraction, c.safety_tightening)
        canary = CanaryEvaluator(
            candidate=verdict.candidate, baseline=verdict.baseline, config=c, trial=share.trial
        )
        with self._lock:
            if self._candidate == verdict.candidate:  # not superseded meanwhile
                self._canary = canary

    def _finish(self, version: int, *, promoted: bool) -> GateOutcome:
        with self._lock:
            verdicts = tuple(self._verdicts.get(version, ()))
            if self._candidate == version:
                self._candidate = None
        outcome = GateOutcome(version, promoted, verdicts)
        if promoted:
            self._registry.promote(version, outcome.describe())
        else:
            self._registry.transition(version, VersionState.REJECTED, outcome.describe())
        self.outcomes.append(outcome)
        for listener in list(self._listeners):
            listener(outcome)
        return outcome

    def close(self) -> None:
        """Stop the shadow evaluator's thread (at shutdown): no stage thread may still be
        running the candidate when the process exits."""
        with self._lock:
            runner, self._shadow = self._shadow, None
        if runner is not None:
            runner.stop()

    def _supersede(self, why: str = "superseded by a newer candidate") -> None:
        with self._lock:
            old, runner = self._candidate, self._shadow
            self._candidate, self._shadow, self._canary = None, None, None
        if runner is not None:
            runner.stop()
        if old is not None:
            self._router.stop_canary()
            state = self._registry.get(old).state
            if state in (VersionState.SHADOW, VersionState.CANARY):
                self._registry.transition(old, VersionState.RETIRED, why)

    def _on_live_change(self, change: LiveChange) -> None:
        # An operator promotion or a rollback happened while a candidate was being
        # judged: its numbers compare it with a version that is no longer live, so the
        # evaluation is abandoned (the gate's own promotions clear the candidate first).
        with self._lock:
            candidate = self._candidate
        if candidate is None:
            return
        if change.current.id == candidate:
            with self._lock:
                self._candidate, runner = None, self._shadow
                self._shadow, self._canary = None, None
            if runner is not None:
                runner.stop()
            self._router.stop_canary()
            return
        self._supersede(
            f"evaluation abandoned: the live version changed to {change.current.id} "
            f"({change.kind}) while it was judged against the previous one"
        )
