"""The recorder: the control path hands over what each batch answered, a worker thread
pairs the steps and feeds sinks.

``Recorder.record_steps(steps)`` runs on the serving layer's control path (the batch
that answered the steps), so it does only an ``append`` to a deque under a lock. The
worker wakes when ``nudge`` finds ``wake_after_steps`` queued or the oldest queued step
``wake_interval_s`` old (the serving loop nudges once a reply was sent), and by itself
every ``2 * wake_interval_s``: a wake per step was a thread switch and a GIL hand-over on
every served action, and each wake has a fixed cost and delays the step that arrives
during it, so wakes are kept few (one per 256 steps under load, ~5 a second at a few
robots' control rate). Everything else happens on the recorder's
own thread, one wake's steps at a time: they are joined into one ``StepBlock`` of typed
columns, the pairer sees each step's key and row number, and the transitions' columns
are gathered from the blocks in one pass per column, not an object per step and per
transition (docs/benchmarks.md). Each sink (the experience log, the learner channel)
then takes one ``TransitionTable``. Invariants: ``record_steps`` never blocks and never
raises for a full queue; every step it cannot take is counted in ``dropped_queue_full``,
every step the worker refuses (shapes other than the first steps', values beyond their
columns) in ``pairing.malformed``, alone; a sink that raises is counted and logged and
never stops the worker, so one broken sink cannot stall control or starve the other
sinks; and a fault of the worker's own (pairing, gathering) loses that wake's steps,
counted in ``worker_faults`` and ``lost_to_faults``, and never the worker: recording goes
on with the next wake, and a ``flush`` waiting behind the fault returns False.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import operator
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.data.columns import TransitionArrays, TransitionTable
from tether.data.errors import DataError
from tether.data.pairing import PairingStats, Pairs, StepPairer
from tether.data.step import HUMAN_SOURCE_CODE, AnsweredSteps, StepBlock, StepRecord

logger = logging.getLogger(__name__)

# How often the worker forgets blocks no step can pair with any more and refreshes the
# pairing counters ``stats`` reports (and at every flush).
_TIDY_INTERVAL_S = 0.05
# What joining steps that do not fit their columns raises.
_UNJOINABLE = (ValueError, TypeError, OverflowError)


class TransitionSink(Protocol):
    """Anything that takes finished transitions: ``ExperienceLog``, ``TransitionChannel``."""

    def put(self, transitions: TransitionTable) -> object:
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
        description="steps the worker pairs before handing transitions to sinks (steps; "
        "whole blocks, so a hand-over may hold one block more)",
    )
    wake_after_steps: int = Field(
        default=256,
        ge=1,
        description="queued steps that wake the worker when nudged; fewer wait for its next "
        "turn (steps)",
    )
    wake_interval_s: float = Field(
        default=0.2,
        gt=0.0,
        le=1.0,
        description="age of the oldest queued step at which the next reply wakes the worker; "
        "with no replies flowing it wakes by itself after twice that (s)",
    )


@dataclass(frozen=True)
class RecorderStats:
    """The recorder's counters; ``pairing`` says what happened to every step it took."""

    pairing: PairingStats
    queued: int  # steps waiting for the worker now
    dropped_queue_full: int  # steps record() refused because the queue was full
    sink_errors: int  # sink calls that raised
    last_sink_error: str  # "" if none
    worker_faults: int  # wakes of the worker that raised (pairing, gathering); it went on
    lost_to_faults: int  # steps those wakes had taken: not paired, in no sink
    last_worker_fault: str  # "" if none
    worker_alive: bool  # False once closed (a fault does not end it)

    def losses(self) -> dict[str, int]:
        """What kept steps from the sinks, beside ``pairing``'s counts (for run reports)."""
        return {
            "dropped_queue_full": self.dropped_queue_full,
            "sink_errors": self.sink_errors,
            "worker_faults": self.worker_faults,
            "lost_to_faults": self.lost_to_faults,
        }


@dataclass(frozen=True)
class _EndSession:
    session_id: str


@dataclass
class _Barrier:
    done: threading.Event
    intact: bool = True  # False if a fault lost steps queued before it


class Recorder:
    """Pairs steps into transitions off the control path and hands them to ``sinks``."""

    def __init__(
        self, sinks: Sequence[TransitionSink], config: RecorderConfig | None = None
    ) -> None:
        self.config = config or RecorderConfig()
        self._sinks = tuple(sinks)
        self._pairer = StepPairer(self.config.reorder_window_steps)
        self._store = _BlockStore()
        self._queue: deque[AnsweredSteps | _EndSession | _Barrier] = deque()
        # Steps queued = appended (by record_steps, under the lock) - consumed (by the worker).
        self._appended = 0
        self._consumed = 0
        self._first_queued = 0.0  # when the oldest step still queued was (monotonic s)
        self._dims: tuple[int, int] | None = None  # every step's, fixed by the first (worker)
        self._wake = threading.Event()
        self._closed = False
        self._count_lock = threading.Lock()
        self._dropped = 0
        self._refused = 0
        self._sink_errors = 0
        self._last_sink_error = ""
        self._faults = 0
        self._lost_to_faults = 0
        self._last_fault = ""
        self._faulted = False  # since the last barrier: a barrier after it is not intact
        self._stats_lock = threading.Lock()
        self._pairing = self._pairer.stats()
        self._next_tidy = 0.0  # when the worker next forgets spent blocks and snapshots stats
        self._worker = threading.Thread(target=self._run, name="tether-recorder", daemon=True)
        self._worker.start()

    def record_steps(self, steps: AnsweredSteps) -> bool:
        """Enqueue the steps a batch answered (stamped with ``ingress_ns()`` at arrival);
        False if they were dropped because the queue is full."""
        if self._closed:
            self._check_open(f"{len(steps)} answered step(s)")
        rows = len(steps)
        with self._count_lock:
            if self._appended + rows - self._consumed > self.config.max_pending_steps:
                self._dropped += rows
                return False
            if self._appended == self._consumed:
                self._first_queued = time.monotonic()
            self._queue.append(steps)
            self._appended += rows
        return True

    def nudge(self) -> None:
        """Wake the worker if ``wake_after_steps`` are queued, or the oldest queued step
        waited ``wake_interval_s`` (its own timer wakes it after twice that).

        The serving loop calls it once a reply was handed to grpc (``after_reply``), not
        ``record_steps`` from the batch: woken there, the worker took the GIL while the
        batch's replies were still to be sent and delayed them; and a worker woken by its
        timer in the middle of a step delayed that step (docs/benchmarks.md). Nudged,
        it runs while the robots turn around."""
        wake = self._wake
        queued = self._appended - self._consumed
        # set() takes a lock and notifies; while the worker has not woken yet, once is enough.
        if queued and not wake.is_set():
            due = self._first_queued + self.config.wake_interval_s
            if queued >= self.config.wake_after_steps or time.monotonic() >= due:
                wake.set()

    def record(self, step: StepRecord) -> bool:
        """Enqueue one step (see ``record_steps``) and ``nudge``."""
        self._check_open(f"step {step.step_index} of session {step.session_id!r}")
        taken = self.record_steps(AnsweredSteps.from_records([step]))
        self.nudge()
        return taken

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise DataError(
                f"Recorder is closed; {what} not recorded. Create a new Recorder before "
                "recording again."
            )

    def end_session(self, session_id: str) -> None:
        """The session's stream closed: pair what is left of it and forget it (in order)."""
        if self._closed:
            return  # nothing of the session can reach a sink any more
        self._queue.append(_EndSession(session_id))
        self._wake.set()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything enqueued so far reached the sinks; False on timeout, or if
        a fault of the worker lost steps since the previous flush (``worker_faults``)."""
        if self._closed:
            return not self._queue
        barrier = _Barrier(threading.Event())
        self._queue.append(barrier)
        self._wake.set()
        return barrier.done.wait(timeout_s) and barrier.intact

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
            faults, lost, last_fault = self._faults, self._lost_to_faults, self._last_fault
        with self._count_lock:
            refused, queued = self._refused, self._appended - self._consumed
        return RecorderStats(
            pairing=dataclasses.replace(pairing, malformed=pairing.malformed + refused),
            queued=queued,
            dropped_queue_full=self._dropped,
            sink_errors=sink_errors,
            last_sink_error=last,
            worker_faults=faults,
            lost_to_faults=lost,
            last_worker_fault=last_fault,
            worker_alive=self._worker.is_alive(),
        )

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while not (self._closed and not self._queue):
            self._wake.wait(2 * self.config.wake_interval_s)
            self._wake.clear()
            while self._queue:
                self._process_some()

    def _process_some(self) -> None:
        """One wake's worth of the queue, up to ``max_batch_steps`` or a barrier. A fault
        (a defect in pairing or gathering, not a sink's: those are caught per sink) loses
        the steps taken, is counted and logged, and leaves the worker running."""
        barriers: list[_Barrier] = []
        consumed = self._consumed
        try:
            self._pair_and_deliver(barriers)
        except Exception as exc:
            lost = self._consumed - consumed  # the steps this wake took from the queue
            with self._stats_lock:
                self._faults += 1
                self._lost_to_faults += lost
                self._last_fault = repr(exc)
            self._faulted = True
            logger.exception(
                "recorder worker fault: %d step(s) of this wake are lost (not paired, in no "
                "sink); recording goes on",
                lost,
            )
        finally:
            for barrier in barriers:
                barrier.intact = not self._faulted
                self._faulted = False
                barrier.done.set()

    def _pair_and_deliver(self, barriers: list[_Barrier]) -> None:
        pairs = Pairs()
        parts: list[AnsweredSteps] = []
        steps = 0
        while self._queue and steps < self.config.max_batch_steps:
            item = self._queue.popleft()
            if isinstance(item, AnsweredSteps):
                rows = len(item)
                self._consumed += rows
                steps += rows
                parts.append(item)
                continue
            # A session's end or a barrier: the steps before it are paired first.
            self._pair(parts, pairs)
            parts = []
            if isinstance(item, _EndSession):
                self._pairer.end_session(item.session_id, pairs)
            else:
                barriers.append(item)
                break  # a barrier promises that everything before it reached the sinks
        self._pair(parts, pairs)
        if len(pairs):
            table = self._store.gather(pairs)
            for sink in self._sinks:
                self._deliver(sink, table)
        now = time.monotonic()
        if barriers or now >= self._next_tidy or self._closed:
            # Both walk every session: once per interval, not per wake (a wake per 64 steps
            # of 64 robots made them a step's worth of work each).
            self._next_tidy = now + _TIDY_INTERVAL_S
            self._store.keep(self._pairer.live_refs())
            with self._stats_lock:
                self._pairing = self._pairer.stats()

    def _pair(self, parts: list[AnsweredSteps], pairs: Pairs) -> None:
        """Join ``parts`` into one block of columns and pair its steps; parts that cannot
        be joined (shapes other than the first steps', values beyond their columns) are
        refused alone and counted as malformed."""
        if not parts:
            return
        if self._dims is None:  # the first steps of numbers fix them
            self._dims = next((p.dims for p in parts if p.dims[0] >= 0), None)
        if all(part.dims == self._dims for part in parts):
            try:
                block = StepBlock.join(parts)
            except _UNJOINABLE:
                blocks = self._join_each(parts)
            else:
                blocks = [block]
        else:
            blocks = self._join_each(parts)
        for block in blocks:
            self._pairer.add_block(block, self._store.add(block), pairs)

    def _join_each(self, parts: list[AnsweredSteps]) -> list[StepBlock]:
        blocks: list[StepBlock] = []
        for part in parts:
            try:
                if part.dims != self._dims:
                    raise ValueError(f"(obs_dim, act_dim) {part.dims}, the recorder's {self._dims}")
                blocks.append(StepBlock.join([part]))
            except _UNJOINABLE as exc:
                with self._count_lock:
                    self._refused += len(part)
                logger.error("recorder refused %d step(s): %s", len(part), exc)
        return blocks

    def _deliver(self, sink: TransitionSink, transitions: TransitionTable) -> None:
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


class _BlockStore:
    """The blocks whose rows the pairer may still pair, each row numbered in arrival order.

    ``gather`` builds the transitions of a wake's pairs, column by column; ``keep`` then
    drops every block none of whose rows is still held or pending (a robot that pauses
    keeps its block, not the ones after it).
    """

    def __init__(self) -> None:
        self._blocks: list[tuple[int, StepBlock]] = []  # (number of its first row, block)
        self._next = 0

    def add(self, block: StepBlock) -> int:
        """Keep ``block``; the number of its first row."""
        first = self._next
        self._blocks.append((first, block))
        self._next += len(block)
        return first

    def keep(self, live: Iterator[int] | Sequence[int]) -> None:
        """Forget the blocks holding none of the ``live`` row numbers."""
        firsts = [first for first, _ in self._blocks]
        used = {bisect.bisect_right(firsts, ref) - 1 for ref in live}
        self._blocks = [b for i, b in enumerate(self._blocks) if i in used]

    def gather(self, pairs: Pairs) -> TransitionTable:
        """The transitions ``pairs`` name: each from its held step's action to its next
        step's observation, reward and end (a person's override becoming the action)."""
        firsts = np.array([first for first, _ in self._blocks], dtype=np.int64)
        held = np.array(pairs.held, dtype=np.int64)
        nexts = np.array(pairs.nexts, dtype=np.int64)
        # Only the blocks the pairs name are joined (a wake's own and the held steps').
        which_held = np.searchsorted(firsts, held, side="right") - 1
        which_next = np.searchsorted(firsts, nexts, side="right") - 1
        used = np.zeros(len(firsts), dtype=bool)
        used[which_held] = True
        used[which_next] = True
        named = np.flatnonzero(used).tolist()
        blocks = [self._blocks[i][1] for i in named]
        starts = np.zeros(len(self._blocks), dtype=np.int64)
        starts[named] = np.cumsum([0] + [len(b) for b in blocks[:-1]])
        now = starts[which_held] + (held - firsts[which_held])
        then = starts[which_next] + (nexts - firsts[which_next])

        def column(name: str, at: np.ndarray) -> np.ndarray:
            parts = [getattr(b, name) for b in blocks]
            joined = parts[0] if len(parts) == 1 else np.concatenate(parts)
            return joined.take(at, axis=0)

        at_now = now.tolist()
        pick = operator.itemgetter(*at_now) if len(at_now) > 1 else None

        def names(name: str) -> Sequence[str]:
            joined = [v for b in blocks for v in getattr(b, name)]
            return pick(joined) if pick is not None else [joined[at_now[0]]]

        observations = np.concatenate([b.observations for b in blocks])
        safe = column("safe_actions", now)
        sources = column("action_sources", now)
        overridden = column("overridden", then)
        if overridden.any():
            # What the robot did, whatever the server proposed: a person's action.
            safe = np.where(overridden[:, None], column("executed", then), safe)
            sources = np.where(overridden, np.uint8(HUMAN_SOURCE_CODE), sources)
        arrays = TransitionArrays(
            observations.take(now, axis=0),
            column("proposed_actions", now),
            safe,
            column("rewards", then),
            observations.take(then, axis=0),
            column("terminated", then),
            column("truncated", then),
            sources,
            column("safety_checks", now),
            column("policy_versions", now),
            column("ingress_ns", now),
            column("ingress_ns", then),
        )
        return TransitionTable(
            arrays,
            names("session_ids"),
            names("robot_ids"),
            names("episode_ids"),
            column("step_indices", now),
            names("weights_sha256"),
            column("client_timestamp_ns", now),
        )
