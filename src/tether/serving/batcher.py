"""Dynamic batching: coalesce requests from every client into one forward pass.

Callers ``await submit(item, deadline)``; one worker task drains the queue, up to
``max_batch_size`` at a time, and runs ``run_batch`` on the list. With
``batch_timeout_s = 0`` nothing waits for time: batches form from what queued while the
previous one computed, and, under load (several requests queued, or the last batch had
several), from what the next turns of the event loop read: the worker lets up to
``gather_turns`` turns pass while each one queued more and the batch is not full; a turn
that queues nothing ends the wait, so a light load waits one turn at most. A turn that
runs a batch leaves other robots' messages half read, and every batch pays its fixed cost
(the pipeline, one compiled call per stage, the replies) once: at 64 robots a batch taken
at once holds ~17 requests on average, one gathered over the next turns ~28, for 7-13 %
more actions/s (docs/benchmarks.md). Before each batch the optional ``before_batch`` hook
runs on the thread that runs the batch (the runtime applies new weights there, so a swap
lands between batches).

Invariants: each caller gets exactly its own result or its own exception; an item whose
deadline passed while queued is answered with ``DeadlineExpired`` and never computed;
one item's error (returned in its slot) never fails the others; a batch function that
returns the wrong number of results or raises fails every caller of that batch with
``BatchFailed``, and the worker keeps serving.

Where a batch runs is chosen per batch: a thread hand-off costs tens of microseconds,
more than a small MLP's forward, and the batch's own Python (supervision, bookkeeping)
holds the GIL the loop needs, so the loop reads little meanwhile. In ``auto`` mode a lone
robot's requests run on the event loop; with other robots about, so does any batch,
of one request or several, while the measured compute time is below
``inline_threshold_s`` (5 ms: at 64 robots on 2 cores the shipped arm's batches of ~30
served 38 % more actions/s inline than threaded, and two robots, whose batches are often
of one, twice as many, docs/benchmarks.md); slower batches (a large network, a GPU
forward that releases the GIL) run in a worker thread so the loop keeps reading the next
requests meanwhile. Concurrency is judged from evidence: batches of several, or requests
that queued while a threaded batch computed; ``_QUIET_TO_INLINE`` lone batches in a row
with nothing queued end it. A robot served alone runs each request at once, with the
loop blocked, so others' requests that arrive meanwhile would run alone after it, one
by one; to see them, one lone request in ``_PROBE_EVERY`` queues instead, and the worker
lets the loop turn (as it gathers a loaded batch) before taking it: whatever the loop
had read by then joins it, and a batch of several is the evidence. The probe then runs
on the loop like any lone batch: a thread hand-off, once per probe, cost the lone robot
more CPU than its other steps' hand-offs to the recorder (docs/benchmarks.md).
benchmarks/bench_serving.py measures all three choices.

A lone robot's request does not even queue: when auto mode has no evidence of other
robots and nothing is queued or computing, ``submit`` runs the batch of one right there,
in the caller's coroutine. That skips a future, a wake-up of the worker task and two
turns of the event loop (tens of microseconds on a busy machine) and changes nothing a
caller can see: same hook, same checks, same result or error, same statistics.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Generic, NamedTuple, TypeVar

from tether.serving.busy_poll import BusyPoll
from tether.serving.config import BatcherConfig
from tether.serving.errors import AdmissionRefused, BatchFailed, DeadlineExpired

In = TypeVar("In")
Out = TypeVar("Out")

# Auto mode: one lone batch in this many runs threaded, to see whether requests queue up
# behind it; this many lone threaded batches with nothing queued return to inline.
_PROBE_EVERY = 16
_QUIET_TO_INLINE = 8

RunBatch = Callable[[list[In]], Sequence[Out | Exception]]


class Batched(NamedTuple, Generic[Out]):
    """One caller's result and how its batch went."""

    value: Out
    queue_ns: int  # from submit to the start of its batch
    batch_ns: int  # the whole batch's compute time
    batch_size: int


class BatchStats(NamedTuple):
    """What the batcher reports after every batch (for metrics)."""

    size: int
    compute_ns: int
    inline: bool
    expired: int


@dataclass(slots=True)
class _Pending(Generic[In, Out]):
    item: In
    future: asyncio.Future[Batched[Out]]
    deadline: float | None  # time.monotonic() seconds
    enqueued_ns: int = field(default_factory=time.perf_counter_ns)


class DynamicBatcher(Generic[In, Out]):
    """Coalesces awaited requests into batches for ``run_batch`` (see module docstring)."""

    def __init__(
        self,
        run_batch: RunBatch[In, Out],
        config: BatcherConfig | None = None,
        *,
        max_queued: int = 1024,
        before_batch: Callable[[], None] | None = None,
        on_batch: Callable[[BatchStats], None] | None = None,
        busy_poll_s: float = 0.0,
    ) -> None:
        self._run_batch = run_batch
        self._busy_poll_s = busy_poll_s
        self._poll: BusyPoll | None = None  # made on the loop, by start
        self._streams = 0  # clients connected with a stream of requests (stream_opened)
        self._config = config or BatcherConfig()
        self._max_queued = max_queued
        self._before_batch = before_batch
        self._on_batch = on_batch
        self._queue: deque[_Pending[In, Out]] = deque()
        self._wakeup = asyncio.Event()
        self._full = asyncio.Event()
        self._busy = False
        self._worker: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        # Exponential average of batch compute time, the basis of the inline/thread choice.
        # Starts at the threshold, so an unknown engine is assumed slow until measured.
        self._compute_ema_s = self._config.inline_threshold_s
        # Auto mode's evidence of concurrent robots (see runs_inline).
        self._concurrent = False
        self._lone_batches = 0
        self._quiet_batches = 0
        self._probe_queued = False  # submit queued a lone request to see who joins it
        self._last_size = 0  # requests in the last batch taken (the evidence of load)

    @property
    def busy_poll(self) -> BusyPoll | None:
        """What keeps the loop polling after each request (``busy_poll_s`` > 0, once started)."""
        return self._poll

    def stream_opened(self) -> None:
        """A client that sends a stream of requests connected (a Control session, an openpi
        connection). Busy polling serves one such client's fast loop: with several, each
        one's requests wake the loop for the others, and spins between them cost more
        than they save (``tether.serving.busy_poll``)."""
        self._streams += 1
        self._arm_poll()

    def stream_closed(self) -> None:
        """The client of a ``stream_opened`` left."""
        self._streams -= 1
        self._arm_poll()

    @property
    def streams(self) -> int:
        """Clients connected with a stream of requests (the ``tether_sessions_open`` gauge)."""
        return self._streams

    def _arm_poll(self) -> None:
        if self._poll is not None:
            self._poll.armed = self._streams <= 1

    @property
    def queued(self) -> int:
        return len(self._queue)

    def runs_inline(self, batch_size: int) -> bool:
        """Whether a batch of ``batch_size`` runs on the event loop (see the module docstring)."""
        mode = self._config.execution
        if mode != "auto":
            return mode == "inline"
        if batch_size > 1:
            self._concurrent = True
        if self._concurrent:  # others about: on the loop only while batches are fast
            return self._compute_ema_s < self._config.inline_threshold_s
        return True  # one robot alone (a probe nobody joined included): on the loop

    def _probe_due(self) -> bool:
        """Whether this lone request queues, to see whether others are waiting behind the
        loop (see the module docstring)."""
        self._lone_batches += 1
        return self._lone_batches % _PROBE_EVERY == 0

    def _alone(self) -> bool:
        """Whether a request arriving now may run at once (see the module docstring)."""
        return (
            self._config.execution == "auto"
            and not self._concurrent
            and not self._busy
            and not self._queue
            and self._config.batch_timeout_s == 0
            and self._worker is not None
        )

    def _after_batch(self, size: int) -> None:
        """Requests queued by the time a batch is done show concurrency (a threaded batch
        leaves the loop reading meanwhile); ``_QUIET_TO_INLINE`` lone batches in a row
        with nothing queued end it."""
        if self._queue:
            self._concurrent = True
            self._quiet_batches = 0
        elif size == 1:
            self._quiet_batches += 1
            if self._quiet_batches >= _QUIET_TO_INLINE:
                self._concurrent = False
                self._quiet_batches = 0
        else:
            self._quiet_batches = 0

    def start(self) -> None:
        """Start the worker task on the running event loop."""
        if self._worker is None:
            loop = asyncio.get_running_loop()
            if self._busy_poll_s > 0:
                self._poll = BusyPoll(loop, self._busy_poll_s)
                self._arm_poll()
            self._worker = loop.create_task(self._work())

    async def close(self) -> None:
        """Stop the worker; callers still queued get ``BatchFailed``."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        while self._queue:
            pending = self._queue.popleft()
            if not pending.future.done():
                pending.future.set_exception(
                    BatchFailed("the server is shutting down; the request was not computed")
                )
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    async def submit(self, item: In, deadline: float | None = None) -> Batched[Out]:
        """Queue ``item`` and wait for its own result; ``deadline`` is a monotonic time."""
        if len(self._queue) >= self._max_queued:
            raise AdmissionRefused(
                f"request queue is full: {len(self._queue)} queued, the bound is "
                f"{self._max_queued}; retry with backoff or raise admission.max_queued_requests"
            )
        if self._poll is not None and not self._concurrent:
            # One robot's loop sleeps through each of its turn-arounds; with others about,
            # their messages wake it, and a spin takes a core from the robots' own work.
            self._poll.touch()
        if self._alone():
            if not self._probe_due():
                return self._run_alone(item, deadline)
            self._probe_queued = True
        pending = self._pending(item, deadline)
        self._queue.append(pending)
        if len(self._queue) >= self._config.max_batch_size:
            self._full.set()
        self._wakeup.set()
        return await pending.future

    def _run_alone(self, item: In, deadline: float | None) -> Batched[Out]:
        """A batch of one computed in the caller's coroutine; the queue stays untouched."""
        if deadline is not None and time.monotonic() >= deadline:
            self._report(0, 0, True, 1)
            raise DeadlineExpired(
                "the request's deadline had passed when it arrived; it was not computed. "
                "Allow a longer deadline"
            )
        outcome, _, elapsed = self._hooked_call([item])
        self._report(1, elapsed, True, 0)
        result = _settled(outcome, 0)
        if isinstance(result, BaseException):
            raise result
        return Batched(result, 0, elapsed, 1)

    def _pending(self, item: In, deadline: float | None) -> _Pending[In, Out]:
        return _Pending(item, asyncio.get_running_loop().create_future(), deadline)

    async def _work(self) -> None:
        cfg = self._config
        while True:
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            if cfg.batch_timeout_s > 0 and len(self._queue) < cfg.max_batch_size:
                first = self._queue[0].enqueued_ns
                remaining = cfg.batch_timeout_s - (time.perf_counter_ns() - first) / 1e9
                if remaining > 0:
                    self._full.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._full.wait(), remaining)
            elif cfg.gather_turns and (
                len(self._queue) > 1 or self._last_size > 1 or self._probe_queued
            ):
                await self._gather(cfg.gather_turns, cfg.max_batch_size)
            self._probe_queued = False
            n = min(len(self._queue), cfg.max_batch_size)
            batch = [self._queue.popleft() for _ in range(n)]
            if not batch:
                continue
            self._last_size = n
            self._busy = True
            try:
                if self.runs_inline(len(batch)):
                    self._execute_inline(batch)
                else:
                    await self._execute_threaded(batch)
            finally:
                self._busy = False

    async def _gather(self, turns: int, full: int) -> None:
        """Let up to ``turns`` turns of the event loop pass while each one queues more
        requests and fewer than ``full`` are queued."""
        queue = self._queue
        for _ in range(turns):
            queued = len(queue)
            if queued >= full:
                return
            await asyncio.sleep(0)
            if len(queue) == queued:
                return

    def _live(self, batch: list[_Pending[In, Out]]) -> tuple[list[_Pending[In, Out]], int]:
        """Drop callers that went away and answer expired ones without computing them."""
        now = time.monotonic()
        live: list[_Pending[In, Out]] = []
        expired = 0
        for p in batch:
            if p.future.done():  # cancelled: the client disconnected
                continue
            if p.deadline is not None and now >= p.deadline:
                expired += 1
                waited_ms = (time.perf_counter_ns() - p.enqueued_ns) / 1e6
                p.future.set_exception(
                    DeadlineExpired(
                        f"the request's deadline passed after {waited_ms:.2f} ms in the queue; "
                        "it was not computed. Allow a longer deadline or reduce load"
                    )
                )
                continue
            live.append(p)
        return live, expired

    def _execute_inline(self, batch: list[_Pending[In, Out]]) -> None:
        live, expired = self._live(batch)
        if not live:
            self._report(0, 0, True, expired)
            return
        outcome, start, elapsed = self._hooked_call([p.item for p in live])
        self._deliver(live, outcome, start, elapsed)
        self._report(len(live), elapsed, True, expired)
        self._after_batch(len(live))

    async def _execute_threaded(self, batch: list[_Pending[In, Out]]) -> None:
        live, expired = self._live(batch)
        if not live:
            self._report(0, 0, False, expired)
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="tether-batch")
        items = [p.item for p in live]
        start = time.perf_counter_ns()
        # before_batch runs in the worker thread too: a slow weight swap then delays only
        # this batch, while the event loop keeps accepting (and expiring) requests.
        outcome, _, elapsed = await asyncio.get_running_loop().run_in_executor(
            self._executor, self._hooked_call, items
        )
        self._deliver(live, outcome, start, elapsed)
        self._report(len(live), elapsed, False, expired)
        self._after_batch(len(live))

    def _hooked_call(
        self, items: list[In]
    ) -> tuple[Sequence[Out | Exception] | Exception, int, int]:
        """``before_batch``, then the batch: (outcome, start, elapsed), in ns; one
        sequence for every way a batch runs (alone, inline, in the worker thread)."""
        if self._before_batch is not None:
            self._before_batch()
        start = time.perf_counter_ns()
        outcome = self._call(items)
        return outcome, start, time.perf_counter_ns() - start

    def _call(self, items: list[In]) -> Sequence[Out | Exception] | Exception:
        try:
            results = self._run_batch(items)
        except Exception as exc:  # a broken batch must not kill the worker
            return exc
        if len(results) != len(items):
            return BatchFailed(
                f"the batch function returned {len(results)} results for {len(items)} "
                "requests; every request needs exactly one"
            )
        return results

    def _deliver(
        self,
        live: list[_Pending[In, Out]],
        outcome: Sequence[Out | Exception] | Exception,
        start_ns: int,
        elapsed_ns: int,
    ) -> None:
        n = len(live)
        for i, p in enumerate(live):
            if p.future.done():
                continue
            result = _settled(outcome, i)
            if isinstance(result, BaseException):
                p.future.set_exception(result)
            else:
                p.future.set_result(Batched(result, start_ns - p.enqueued_ns, elapsed_ns, n))

    def _report(self, size: int, compute_ns: int, inline: bool, expired: int) -> None:
        if size:
            self._compute_ema_s += 0.2 * (compute_ns / 1e9 - self._compute_ema_s)
        if self._on_batch is not None:
            self._on_batch(BatchStats(size, compute_ns, inline, expired))


def _settled(outcome: Sequence[Out | Exception] | Exception, i: int) -> Out | BaseException:
    """What the ``i``-th caller of a batch gets: its result, its own error, or its own
    ``BatchFailed`` (a fresh object per caller, chained to the shared cause)."""
    if isinstance(outcome, Exception):
        err = (
            BatchFailed(str(outcome))
            if isinstance(outcome, BatchFailed)
            else BatchFailed(f"the batch this request was in failed: {outcome!r}")
        )
        err.__cause__ = outcome
        return err
    return outcome[i]
