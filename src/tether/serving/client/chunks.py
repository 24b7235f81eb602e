"""Action chunks on the robot side: a chunk record and the broker that executes it.

A policy with an action horizon ``H`` answers one observation with ``H`` supervised
steps meant for consecutive control cycles. :class:`ActionChunkBroker` turns that into
one action per cycle: it executes step ``i`` of the current chunk, fetches the next
chunk in a background thread while steps remain (``prefetch_steps`` before the end), and
switches to a fresher chunk as soon as it arrives, at the step due now.

Each step ``i`` of a chunk is due at ``observed_at_s + i * step_period_s``. The broker
never goes back in a chunk and never executes a step more than ``staleness_s`` past its
due time: late steps are skipped; when no chunk holds a step fresh enough it fetches one
from the current observation, and if even that arrives too late it returns no action
(``BrokeredStep.action is None``, with the reason) so the robot's watchdog or backup
acts instead. This is what keeps chunk seams smooth:
the jumps users see with other servers come from executing the old chunk's leftovers,
or a new chunk's first step, long after the moment they were planned for.

Invariant: every action the broker returns is a step of a chunk the server supervised,
executed within ``staleness_s`` of its due time, in increasing step order per chunk.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from tether.serving.client.records import ActionResult, PolicyVersionInfo, VerdictInfo
from tether.serving.errors import ServingError


@dataclass(frozen=True)
class ActionChunk:
    """``H`` supervised steps computed from one observation."""

    actions: np.ndarray  # (H, act_dim) float32: the steps that may be executed, in order
    observed_at_s: float  # the client's clock (time.monotonic) when the observation was taken
    version: PolicyVersionInfo | None = None
    verdicts: tuple[VerdictInfo, ...] = ()  # one per step, when the server reports them

    def __post_init__(self) -> None:
        if self.actions.ndim != 2 or self.actions.shape[0] < 1:
            raise ServingError(
                f"an action chunk must have shape (H, act_dim) with H >= 1, got "
                f"{self.actions.shape}"
            )

    @property
    def horizon(self) -> int:
        return int(self.actions.shape[0])

    @classmethod
    def from_result(cls, result: ActionResult, observed_at_s: float) -> ActionChunk:
        """The chunk of a ``GetAction`` reply: its ``chunk`` for a policy with an action
        horizon, else the one step ``action``."""
        if result.chunk is not None:
            return cls(result.chunk.copy(), observed_at_s, result.version, result.chunk_verdicts)
        verdicts = (result.verdict,) if result.verdict is not None else ()
        return cls(result.action[None].copy(), observed_at_s, result.version, verdicts)


@dataclass(frozen=True)
class BrokeredStep:
    """What the broker gives the robot for one control cycle."""

    action: np.ndarray | None  # None: no fresh step; use the backup action
    step_index: int  # index in its chunk (-1 without an action)
    lateness_s: float  # how long after its due time it is executed
    chunk: ActionChunk | None
    reason: str = ""  # why there is no action


Fetch = Callable[[np.ndarray], ActionChunk]


class ActionChunkBroker:
    """Executes action chunks one step per control cycle; see the module docstring."""

    def __init__(
        self,
        fetch: Fetch,
        *,
        step_period_s: float,
        staleness_s: float,
        prefetch_steps: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (math.isfinite(step_period_s) and step_period_s > 0):
            raise ValueError(f"step_period_s must be positive, got {step_period_s}")
        if not (math.isfinite(staleness_s) and staleness_s >= 0):
            raise ValueError(f"staleness_s must be >= 0, got {staleness_s}")
        if prefetch_steps < 0:
            raise ValueError(f"prefetch_steps must be >= 0, got {prefetch_steps}")
        self._fetch = fetch
        self._period = step_period_s
        self._staleness = staleness_s
        self._prefetch = prefetch_steps
        self._clock = clock
        self._chunk: ActionChunk | None = None
        self._next = 0  # the first step of the current chunk not yet passed
        self._pending: Future[ActionChunk] | None = None
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="chunk-fetch")
        self.fetch_errors = 0

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ActionChunkBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def reset(self) -> None:
        """Forget the current chunk (a new episode starts from a fresh one)."""
        self._chunk = None
        self._next = 0

    def act(self, observation: np.ndarray) -> BrokeredStep:
        """The step for this control cycle (see the module docstring).

        Fetches in the caller's thread only when no chunk holds a step fresh enough for
        now: at the start, after a stall, or every cycle for a one-step policy.
        """
        self._adopt_arrived()
        step = self._pick() if self._chunk is not None else None
        if step is None:
            self._chunk = self._fetch(observation)
            self._next = 0
            step = self._pick()
            if step is None:
                late = self._clock() - self._chunk.observed_at_s
                return BrokeredStep(
                    None,
                    -1,
                    0.0,
                    self._chunk,
                    f"the chunk took {late:.3f} s to arrive, more than staleness_s "
                    f"{self._staleness:.3f} s",
                )
        chunk = self._chunk
        assert chunk is not None
        # A one-step chunk is due when it is observed: one fetched ahead would be stale.
        if chunk.horizon > 1 and chunk.horizon - self._next <= self._prefetch:
            self._start_fetch(observation)
        return step

    def _pick(self) -> BrokeredStep | None:
        """The current chunk's step for now, or None when it has none fresh enough."""
        chunk = self._chunk
        assert chunk is not None
        now = self._clock()
        due_now = math.floor((now - chunk.observed_at_s) / self._period + 1e-9)
        index = max(self._next, due_now)
        # Each call is one control cycle: it takes the next step, or the one due now if the
        # robot fell behind; a step more than staleness_s past its due time is skipped,
        # never executed late.
        while index < chunk.horizon and now - self._due(chunk, index) > self._staleness:
            index += 1
        if index >= chunk.horizon:
            return None
        self._next = index + 1
        lateness = max(0.0, now - self._due(chunk, index))
        return BrokeredStep(chunk.actions[index], index, lateness, chunk)

    def _due(self, chunk: ActionChunk, index: int) -> float:
        return chunk.observed_at_s + index * self._period

    def _start_fetch(self, observation: np.ndarray) -> None:
        if self._pending is None:
            self._pending = self._executor.submit(self._fetch, np.array(observation, copy=True))

    def _adopt_arrived(self) -> None:
        """Switch to a fetched chunk once it is there: it was planned from a later state."""
        pending = self._pending
        if pending is None or not pending.done():
            return
        self._pending = None
        try:
            fresh = pending.result()
        except Exception:  # a failed prefetch: the current chunk goes on; count it
            self.fetch_errors += 1
            return
        if self._chunk is None or fresh.observed_at_s >= self._chunk.observed_at_s:
            self._chunk = fresh
            self._next = 0
