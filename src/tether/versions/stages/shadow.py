"""The shadow stage: a candidate computes actions on live observations, none is executed.

For ``steps`` observations the candidate's deterministic action is computed beside the
live policy's deterministic action and handed to the supervisor *as if* it were to be
sent. With the live engine at hand, the live action is recomputed deterministically:
robots that ask for sampled actions are served exploration noise, and measured against
it even a copy of the live policy would diverge by the noise alone. How often the
supervisor would have intervened, how far the candidate's actions are from the live
policy's, and whether any was non-finite decide the verdict. Invariant: nothing the
candidate computes here leaves this module — the supervisor's corrected action is
discarded, only its verdict is counted. :class:`ShadowRunner` moves the work off the
control path (a bounded queue; full → dropped and counted, never blocking a batch).

The shadow sees each robot's previous executed command but not the one before it, and its
one supervisor judges every robot's rows in turn: a check that needs the command's
history beyond the previous command (the position supervisor's acceleration check, which
then falls back to the measured velocity as the previous change) is not judged here
(its ``checks_needing_history``, plus ``ShadowConfig.unjudged_checks``). Measured on a
default run's recorded traffic, the
live policy's own actions would have been "corrected" by it on 64 % of steps before any
drift (15 % with one supervisor per robot), where the robots' supervisors corrected
0.5 %: the check measured the shadow, not the policy. The canary runs every check on
the robots themselves.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from tether.safety.verdict import SafetyCheck
from tether.versions.protocols import EngineLike, Supervises
from tether.versions.records import GateStage, Measurement, StageVerdict


class ShadowConfig(BaseModel):
    """Pass criteria of the shadow stage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    steps: int = Field(
        default=500, ge=1, description="Live observations the candidate must see (steps)"
    )
    max_intervention_rate: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="Largest share of steps where the supervisor would have changed the "
        "candidate's action, when the live policy's own share is lower (ratio)",
    )
    intervention_margin: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="How much more often than the live policy's actions, on the same "
        "observations, the candidate's may need correcting (ratio)",
    )
    unjudged_checks: tuple[str, ...] = Field(
        default=(),
        description="Supervisor checks the shadow does not count (SafetyCheck names), beyond "
        "the ones the supervisor says need a robot's command history (names)",
    )
    max_mean_divergence: float = Field(
        default=0.25,
        ge=0.0,
        description="Largest mean RMS difference between candidate and live actions "
        "(normalized action units)",
    )
    queue_batches: int = Field(
        default=64,
        ge=1,
        description="Batches waiting for the shadow thread before new ones drop (batches)",
    )

    @field_validator("unjudged_checks")
    @classmethod
    def _known_checks(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        known = {c.name for c in SafetyCheck if c.name}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown SafetyCheck names {unknown}; known: {sorted(known)}")
        return names


class ActingEngine(EngineLike, Protocol):
    def act(self, observations: np.ndarray, deterministic: Any) -> Any: ...


class ShadowEvaluator:
    """Accumulates the shadow numbers of one candidate against the live version."""

    def __init__(
        self,
        candidate: ActingEngine,
        supervisor: Supervises,
        *,
        baseline: int,
        config: ShadowConfig,
        live: ActingEngine | None = None,
    ) -> None:
        self.candidate = candidate
        self.live = live
        self._supervisor = supervisor
        self._baseline = baseline
        self.config = config
        self._steps = 0
        self._interventions = 0
        self._live_interventions = 0
        self._non_finite = 0
        self._errors = 0
        self._divergence_sum = 0.0
        unjudged = int(getattr(supervisor, "checks_needing_history", SafetyCheck.NONE))
        for name in config.unjudged_checks:
            unjudged |= int(SafetyCheck[name])
        self._judged = ~unjudged

    @property
    def steps(self) -> int:
        return self._steps

    def observe(
        self,
        observations: np.ndarray,
        live_actions: np.ndarray,
        previous_actions: np.ndarray | None = None,
    ) -> StageVerdict | None:
        """Evaluate one batch; returns the verdict once ``config.steps`` are reached."""
        if self.done:
            return None
        try:
            out = self.candidate.act(observations, deterministic=True)
        except Exception:
            # The live engine served this batch; a candidate that cannot is a failure
            # of the candidate, counted in the verdict, never an error of the server.
            self._errors += 1
            self._steps += int(observations.shape[0]) if observations.ndim == 2 else 1
            return self.verdict() if self.done else None
        proposed = np.asarray(out.actions, dtype=np.float32)
        if self.live is not None:
            live_actions = np.asarray(
                self.live.act(observations, deterministic=True).actions, dtype=np.float32
            )
        for i in range(proposed.shape[0]):
            previous = None if previous_actions is None else previous_actions[i]
            finite = bool(np.isfinite(proposed[i]).all())
            self._non_finite += int(not finite)
            _, verdict = self._supervisor.filter(observations[i], proposed[i], previous)
            self._interventions += self._counts(verdict)
            # The live policy judged on the same observation: a candidate is compared with
            # what is serving now, not with a perfect policy.
            _, live_verdict = self._supervisor.filter(observations[i], live_actions[i], previous)
            self._live_interventions += self._counts(live_verdict)
            if finite:
                diff = proposed[i].astype(np.float64) - live_actions[i]
                self._divergence_sum += float(np.sqrt(np.mean(diff * diff)))
            else:
                self._divergence_sum += float("inf")
            self._steps += 1
        return self.verdict() if self.done else None

    def _counts(self, verdict: Any) -> int:
        """1 when the supervisor changed the action for a check the shadow judges."""
        return int(verdict.intervened and bool(int(verdict.checks) & self._judged))

    @property
    def done(self) -> bool:
        return self._steps >= self.config.steps

    def verdict(self) -> StageVerdict:
        n = max(self._steps, 1)
        return StageVerdict(
            stage=GateStage.SHADOW,
            candidate=self.candidate.version.id,
            baseline=self._baseline,
            measurements=(
                Measurement("non_finite_actions", float(self._non_finite), 0.0, "<="),
                Measurement("failed_batches", float(self._errors), 0.0, "<="),
                Measurement(
                    "would_intervene_rate",
                    self._interventions / n,
                    max(
                        self.config.max_intervention_rate,
                        self._live_interventions / n + self.config.intervention_margin,
                    ),
                    "<=",
                ),
                Measurement(
                    "mean_action_divergence",
                    self._divergence_sum / n,
                    self.config.max_mean_divergence,
                    "<=",
                ),
            ),
            samples=self._steps,
        )


_Batch = tuple[np.ndarray, np.ndarray, np.ndarray | None]


class ShadowRunner:
    """Runs a :class:`ShadowEvaluator` in its own thread, fed without ever blocking.

    ``on_verdict`` is called once, from the runner's thread, when the stage finishes.
    """

    def __init__(
        self, evaluator: ShadowEvaluator, on_verdict: Callable[[StageVerdict], None]
    ) -> None:
        self.evaluator = evaluator
        self._on_verdict = on_verdict
        self._queue: queue.Queue[_Batch | None] = queue.Queue(evaluator.config.queue_batches)
        self.dropped_batches = 0
        self._thread = threading.Thread(target=self._run, name="tether-shadow", daemon=True)
        self._thread.start()

    def offer(
        self,
        observations: np.ndarray,
        live_actions: np.ndarray,
        previous_actions: np.ndarray | None = None,
    ) -> bool:
        """Queue one batch (copied); False when the queue is full and it was dropped."""
        item = (
            np.array(observations, dtype=np.float32),
            np.array(live_actions, dtype=np.float32),
            None if previous_actions is None else np.array(previous_actions, dtype=np.float32),
        )
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            self.dropped_batches += 1
            return False
        return True

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every queued batch is processed (or the stage ended); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._queue.all_tasks_done:
            while self._queue.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._queue.all_tasks_done.wait(remaining)
        return True

    def stop(self, timeout_s: float = 5.0) -> None:
        self._discard_pending()
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _discard_pending(self) -> None:
        # Pending work of a finished or stopped stage is worthless; mark it done so
        # wait_idle() returns and there is room for the stop sentinel.
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                return
            self._queue.task_done()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None or self.evaluator.done:
                    return
                verdict = self.evaluator.observe(*item)
                if verdict is not None:
                    self._on_verdict(verdict)
                    return
            finally:
                self._queue.task_done()
                if item is None or self.evaluator.done:
                    self._discard_pending()
