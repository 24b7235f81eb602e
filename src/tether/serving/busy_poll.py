"""Busy polling: while requests come close together, the serving event loop keeps polling
for a bounded time after each one instead of going to sleep.

Between two messages of one robot a server idles for a few hundred microseconds. When its
thread sleeps in ``epoll_wait``, the core goes idle and the next message pays the wake-up
(an inter-processor interrupt, in a VM a VM exit) and runs its code with cold caches: the
same supervisor call measured 13 µs in a tight loop, 24 µs with 0.3 ms sleeps between
calls and 42 µs with 1 ms sleeps (docs/benchmarks.md, issue 22). Linux offers busy polling
for sockets of real NICs (``SO_BUSY_POLL``), not for loopback or for the event fds grpc.aio
wakes its loop with, so tether does it in the loop, on any loop (uvloop or asyncio's).
Each request that reaches the batcher while it sees no other robot's requests beside it
``touch``es a ``BusyPoll``; a request that came within ``spin_s`` of the one before keeps
one callback scheduled on the loop until ``spin_s`` after it. A loop with a callback ready
polls its file descriptors with a zero timeout instead of blocking, so for that long the
loop iterates (events and timers handled as always) and never sleeps; then the callback
stops re-scheduling itself and the loop blocks as before.

It serves one robot in a fast loop, and nothing else. Requests further apart than
``spin_s`` (a robot at 50 Hz) never start a spin: it would end before the next one came,
a core kept busy for nothing. Nor do several robots: the batcher disarms the poll while
more than one client with a stream of requests (a Control session, an openpi connection)
is connected. Each robot's messages wake the loop for the others, and at 50 Hz spins
between them made 8 and 64 robots' steps slower and dearer (docs/benchmarks.md).

Each turn of the spin hands the core to any other thread that is ready to run on it
(``sched_yield``) and the loop releases the GIL in each zero-timeout poll, so grpc's own
threads (which read and write the sockets), the recorder, the log flusher, the batch
thread and, on a shared machine, the robots' own processes run as soon as they are ready
instead of waiting for the scheduler to preempt the spinning thread: without the yield, a
closed-loop robot's p99 was 2-3 x the unpolled server's on 2 cores; with it, the same
(docs/benchmarks.md).

What it costs: while requests keep coming within ``spin_s`` of each other, the loop's
thread keeps a core busy (idle time given to nothing else that wants it: the spin yields).
``ServerConfig.busy_poll_us`` sets ``spin_s``; 0 turns it off.
"""

from __future__ import annotations

import asyncio
import os
import time

# Not every platform has it (Windows); there the spin only releases the GIL.
_yield_core = getattr(os, "sched_yield", lambda: None)


class BusyPoll:
    """Keeps ``loop`` polling without sleeping until ``spin_s`` after the last ``touch``
    that came within ``spin_s`` of the one before it."""

    __slots__ = ("_budget_ns", "_last_ns", "_loop", "_spinning", "_until_ns", "armed", "spins")

    def __init__(self, loop: asyncio.AbstractEventLoop, spin_s: float) -> None:
        if not spin_s > 0:
            raise ValueError(f"spin_s must be positive, got {spin_s}")
        self._loop = loop
        self._budget_ns = int(spin_s * 1e9)
        self._last_ns = -self._budget_ns - 1  # no request yet: the first one does not spin
        self._until_ns = 0
        self._spinning = False
        # False while several robots are served (the batcher sets it, stream_opened): each
        # one's messages wake the loop for the others, and spins cost more than they save.
        self.armed = True
        self.spins = 0  # loop iterations kept awake, for tests and curiosity

    @property
    def spinning(self) -> bool:
        return self._spinning

    def touch(self) -> None:
        """A request arrived (loop thread): if it came within ``spin_s`` of the previous
        one, and the poll is armed, keep the loop awake until ``spin_s`` from now."""
        if not self.armed:
            return
        now = time.perf_counter_ns()
        last, self._last_ns = self._last_ns, now
        if now - last > self._budget_ns:
            return
        self._until_ns = now + self._budget_ns
        if not self._spinning:
            self._spinning = True
            self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        if time.perf_counter_ns() < self._until_ns:
            self.spins += 1
            _yield_core()
            self._loop.call_soon(self._spin)
        else:
            self._spinning = False
