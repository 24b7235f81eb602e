"""The recorder: the control path enqueues steps, a worker thread pairs them and feeds sinks.

``Recorder.record(step)`` runs on the serving layer's control path, so it does only an
``append`` to a deque (atomic under the GIL); the worker wakes every ``wake_interval_s``
or as soon as ``wake_after_steps`` are queued (not per step: a wake per step was a thread
switch and a GIL hand-over on every served action), and pairing, building
transitions and handing them to sinks (the experience log, the learner channel) happen
on the recorder's own thread. Invariants: ``record`` never blocks and never raises for a
full queue; every step it cannot take is counted in ``dropped_queue_full``; a sink that
raises is counted and logged and never stops the worker, so one broken sink cannot stall
control or starve the other sinks.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from tether.data.errors import DataError
from tether.data.pairing import PairingStats, StepPairer
from tether.data.records import Transition
from tether.data.step import StepRecord

logger = logging.getLogger(__name__)


class TransitionSink(Protocol):
    """Anything that takes finished transitions: ``ExperienceLog``, ``TransitionChannel``."""

    def put(self, transitions: Sequence[Transition]) -> object:
        """Take ``transitions``; called from the recorder's worker thread only."""
        ...


class RecorderConfig(BaseModel):
    """How much the recorder buffers and how long it waits for reordered steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_pending_steps: int = Field(
        default=65536, ge=1, description="steps queued for the worker before record() drops (steps)"
    )
    reorder_window_steps: int = Field(
        default=8,
        ge=1,
        description="how far behind the newest step a late step may still be paired (steps)",
    )
    max_batch_steps: int = Field(
        default=4096,
        ge=1,
        description="steps the worker pairs before handing transitions to sinks (steps)",
    )
    wake_after_steps: int = Field(
        default=64,
        ge=1,
        description="queued steps that wake the worker at once; fewer wait for its next "
        "turn (steps)",
    )
    wake_interval_s: float = Field(
        default=0.02,
        gt=0.0,
        le=1.0,
        description="longest a queued step waits for the worker (s)",
    )


@dataclass(frozen=True)
class RecorderStats:
    """The recorder's counters; ``pairing`` says what happened to every step it took."""

    pairing: PairingStats
    queued: int  # steps waiting for the worker now
    dropped_queue_full: int  # steps record() refused because the queue was full
    sink_errors: int  # sink calls that raised
    last_sink_error: str  # "" if none
    worker_alive: bool  # False once closed, or if the worker died (then steps pile up and drop)


@dataclass(frozen=True)
class _EndSession:
    session_id: str


@dataclass(frozen=True)
class _Barrier:
    done: threading.Event


class Recorder:
    """Pairs steps into transitions off the control path and hands them to ``sinks``."""

    def __init__(
        self, sinks: Sequence[TransitionSink], config: RecorderConfig | None = None
    ) -> None:
        self.config = config or RecorderConfig()
        self._sinks = tuple(sinks)
        self._pairer = StepPairer(self.config.reorder_window_steps)
        self._queue: deque[StepRecord | _EndSession | _Barrier] = deque()
        self._wake = threading.Event()
        self._closed = False
        self._drop_lock = threading.Lock()
        self._dropped = 0
        self._sink_errors = 0
        self._last_sink_error = ""
        self._stats_lock = threading.Lock()
        self._pairing = self._pairer.stats()
        self._worker = threading.Thread(target=self._run, name="tether-recorder", daemon=True)
        self._worker.start()

    def record(self, step: StepRecord) -> bool:
        """Enqueue ``step`` (stamped with ``ingress_ns()`` by the caller); False if dropped."""
        if self._closed:
            raise DataError(
                f"Recorder is closed; step {step.step_index} of session {step.session_id!r} "
                "was not recorded. Create a new Recorder before recording again."
            )
        if len(self._queue) >= self.config.max_pending_steps:
            with self._drop_lock:
                self._dropped += 1
            return False
        self._queue.append(step)
        wake = self._wake
        # set() takes a lock and notifies; while the worker has not woken yet, once is enough.
        if len(self._queue) >= self.config.wake_after_steps and not wake.is_set():
            wake.set()
        return True

    def end_session(self, session_id: str) -> None:
        """The session's stream closed: pair what is left of it and forget it (in order)."""
        if self._closed:
            return  # nothing of the session can reach a sink any more
        self._queue.append(_EndSession(session_id))
        self._wake.set()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything enqueued so far reached the sinks; False on timeout."""
        if self._closed:
            return not self._queue
        barrier = _Barrier(threading.Event())
        self._queue.append(barrier)
        self._wake.set()
        return barrier.done.wait(timeout_s)

    def close(self, timeout_s: float = 5.0) -> None:
        """Process what is queued, then stop the worker. Sinks are not closed here."""
        if self._closed:
            return
        self.flush(timeout_s)
        self._closed = True
        self._wake.set()
        self._worker.join(timeout_s)

    def stats(self) -> RecorderStats:
        with self._stats_lock:
            pairing = self._pairing
            sink_errors, last = self._sink_errors, self._last_sink_error
        return RecorderStats(
            pairing=pairing,
            queued=len(self._queue),
            dropped_queue_full=self._dropped,
            sink_errors=sink_errors,
            last_sink_error=last,
            worker_alive=self._worker.is_alive(),
        )

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while not (self._closed and not self._queue):
            self._wake.wait(self.config.wake_interval_s)
            self._wake.clear()
            while self._queue:
                self._process_some()

    def _process_some(self) -> None:
        transitions: list[Transition] = []
        barriers: list[_Barrier] = []
        for _ in range(self.config.max_batch_steps):
            if not self._queue:
                break
            item = self._queue.popleft()
            if isinstance(item, StepRecord):
                transitions.extend(self._pairer.add(item))
            elif isinstance(item, _EndSession):
                transitions.extend(self._pairer.end_session(item.session_id))
            else:
                barriers.append(item)
                break  # a barrier promises that everything before it reached the sinks
        if transitions:
            for sink in self._sinks:
                self._deliver(sink, transitions)
        with self._stats_lock:
            self._pairing = self._pairer.stats()
        for barrier in barriers:
            barrier.done.set()

    def _deliver(self, sink: TransitionSink, transitions: list[Transition]) -> None:
        try:
            sink.put(transitions)
        except Exception as exc:  # the worker must outlive a broken sink; counted and logged
            with self._stats_lock:
                self._sink_errors += 1
                self._last_sink_error = f"{type(sink).__name__}: {exc!r}"
            logger.exception(
                "recorder sink %s failed on %d transitions; they are not in that sink",
                type(sink).__name__,
                len(transitions),
            )
