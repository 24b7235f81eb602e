"""Busy polling: the serving event loop spins on its epoll set for a bounded time before
it sleeps.

Between two messages of one robot a server idles for a few hundred microseconds. When its
thread sleeps in ``epoll_wait``, the core goes idle and the next message pays the wake-up
(an inter-processor interrupt, in a VM a VM exit) and runs its code with cold caches: the
same supervisor call measured 13 µs in a tight loop, 24 µs with 0.3 ms sleeps between
calls and 42 µs with 1 ms sleeps (docs/benchmarks.md, issue 22). Linux offers busy polling
for sockets of real NICs (``SO_BUSY_POLL``), not for loopback or for the event fds grpc.aio
wakes its loop with, so tether does it in the loop: ``BusyPollSelector.select`` asks the
kernel with a zero timeout until an event is ready or ``spin_s`` has passed, then blocks
as before for the rest of the loop's timeout.

Each zero-timeout ``epoll_wait`` releases the GIL, so the recorder, the log flusher and
the batch thread keep running while the loop spins (tests/serving/test_busy_poll.py). A
compiled spin holding no GIL at all (numba calling libc's ``epoll_wait``) measured the
same as this one, so there is one, in Python.

What it costs: after each burst of events the loop's thread keeps one core busy for up to
``spin_s``. A robot at 50 Hz with 0.5 ms costs at most a few percent of a
core; a closed loop of replies keeps the thread always busy. It is off unless
``ServerConfig.busy_poll_us`` is set: for a server with a core to spare.
"""

from __future__ import annotations

import asyncio
import logging
import select
import selectors
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class BusyPollSelector(selectors.EpollSelector):
    """An epoll selector whose ``select`` spins up to ``spin_s`` before it blocks."""

    def __init__(self, spin_s: float) -> None:
        super().__init__()
        if not spin_s > 0:
            raise ValueError(f"spin_s must be positive, got {spin_s}")
        self.spin_s = spin_s
        self._budget_ns = int(spin_s * 1e9)
        self._epoll: select.epoll = self._selector  # type: ignore[attr-defined]

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return super().select(0)
        budget = self._budget_ns if timeout is None else min(self._budget_ns, int(timeout * 1e9))
        if self._ready_within(budget):
            return super().select(0)
        return super().select(None if timeout is None else max(0.0, timeout - budget / 1e9))

    def _ready_within(self, budget_ns: int) -> bool:
        """Poll with a zero timeout until an fd is ready (True) or ``budget_ns`` passed."""
        end = time.perf_counter_ns() + budget_ns
        poll = self._epoll.poll
        while not poll(0, 1):
            if time.perf_counter_ns() >= end:
                return False
        return True


def loop_factory(busy_poll_us: float) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A factory of event loops that busy-poll for ``busy_poll_us`` (µs), or None for the
    default loop (0, or a platform without epoll)."""
    if busy_poll_us <= 0:
        return None
    if not hasattr(selectors, "EpollSelector"):
        log.warning("busy polling needs epoll (Linux); serving with the default event loop")
        return None

    def make() -> asyncio.AbstractEventLoop:
        return asyncio.SelectorEventLoop(BusyPollSelector(busy_poll_us / 1e6))

    return make
