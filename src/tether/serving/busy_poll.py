"""Busy polling: the serving event loop keeps polling for a bounded time after each request
instead of going to sleep.

Between two messages of one robot a server idles for a few hundred microseconds. When its
thread sleeps in ``epoll_wait``, the core goes idle and the next message pays the wake-up
(an inter-processor interrupt, in a VM a VM exit) and runs its code with cold caches: the
same supervisor call measured 13 µs in a tight loop, 24 µs with 0.3 ms sleeps between
calls and 42 µs with 1 ms sleeps (docs/benchmarks.md, issue 22). Linux offers busy polling
for sockets of real NICs (``SO_BUSY_POLL``), not for loopback or for the event fds grpc.aio
wakes its loop with, so tether does it in the loop, on any loop (uvloop or asyncio's):
each request that reaches the batcher ``touch``es a ``BusyPoll``, which keeps one callback
scheduled on the loop until ``spin_s`` after the last touch. A loop with a callback ready
polls its file descriptors with a zero timeout instead of blocking, so for that long the
loop iterates (events and timers handled as always) and never sleeps; then the callback
stops re-scheduling itself and the loop blocks as before.

The loop releases the GIL in each zero-timeout poll, so the recorder, the log flusher and
the batch thread keep running while it spins (tests/serving/test_busy_poll.py).

What it costs: after each request the loop's thread keeps one core busy for up to
``spin_s``. A robot at 50 Hz with 0.5 ms costs a few percent of a core; a closed loop of
replies keeps the thread always busy. It is off unless ``ServerConfig.busy_poll_us`` is
set: for a server with a core to spare.
"""

from __future__ import annotations

import asyncio
import time


class BusyPoll:
    """Keeps ``loop`` polling without sleeping until ``spin_s`` after the last ``touch``."""

    __slots__ = ("_budget_ns", "_loop", "_spinning", "_until_ns", "spins")

    def __init__(self, loop: asyncio.AbstractEventLoop, spin_s: float) -> None:
        if not spin_s > 0:
            raise ValueError(f"spin_s must be positive, got {spin_s}")
        self._loop = loop
        self._budget_ns = int(spin_s * 1e9)
        self._until_ns = 0
        self._spinning = False
        self.spins = 0  # loop iterations kept awake, for tests and curiosity

    @property
    def spinning(self) -> bool:
        return self._spinning

    def touch(self) -> None:
        """A request arrived: keep the loop awake until ``spin_s`` from now (loop thread)."""
        self._until_ns = time.perf_counter_ns() + self._budget_ns
        if not self._spinning:
            self._spinning = True
            self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        if time.perf_counter_ns() < self._until_ns:
            self.spins += 1
            self._loop.call_soon(self._spin)
        else:
            self._spinning = False
