"""The busy-polling event loop: same events, same timers, same replies; bounded spins."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from tether.serving import busy_poll, event_loop
from tether.serving.busy_poll import BusyPollSelector
from tether.serving.config import ServerConfig


def test_a_ready_socket_is_reported_and_an_idle_one_waits_out_the_timeout() -> None:
    a, b = socket.socketpair()
    with a, b, BusyPollSelector(0.002) as sel:
        sel.register(a, 1)  # EVENT_READ
        start = time.perf_counter()
        assert sel.select(0.05) == []
        waited = time.perf_counter() - start
        assert 0.045 <= waited < 1.0  # the spin counts against the loop's timeout
        assert sel.select(0) == []
        b.send(b"x")
        ready = sel.select(1.0)
        assert [(key.fileobj, events) for key, events in ready] == [(a, 1)]
        assert sel.select(None) == ready  # level-triggered: still readable, nothing consumed


def test_an_event_during_the_spin_ends_it_at_once() -> None:
    a, b = socket.socketpair()
    with a, b, BusyPollSelector(5.0) as sel:
        sel.register(a, 1)
        threading.Timer(0.05, b.send, (b"x",)).start()
        start = time.perf_counter()
        assert len(sel.select(10.0)) == 1
        assert time.perf_counter() - start < 2.0  # not the 5 s spin, not the 10 s timeout


def test_other_threads_run_while_the_loop_spins() -> None:
    """Each poll releases the GIL: a Python thread keeps counting through a 0.3 s spin."""
    a, b = socket.socketpair()
    counted = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counted[0] += 1

    with a, b, BusyPollSelector(0.3) as sel:
        sel.register(a, 1)
        worker = threading.Thread(target=count)
        worker.start()
        time.sleep(0.05)
        before = counted[0]
        sel.select(0.3)
        during = counted[0] - before
        stop.set()
        worker.join()
    # A thread that got the GIL only at the switch interval would count ~60 times less.
    assert during > 10_000


def test_the_loop_runs_timers_and_readers_as_the_default_loop() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop._selector, BusyPollSelector)  # type: ignore[attr-defined]
        seen: list[str] = []
        a, b = socket.socketpair()
        got = asyncio.Event()
        loop.add_reader(a, lambda: (seen.append(a.recv(1).decode()), got.set()))
        loop.call_later(0.02, b.send, b"r")
        start = loop.time()
        await asyncio.wait_for(got.wait(), 5.0)
        await asyncio.sleep(0.01)
        seen.append("timer" if loop.time() - start >= 0.02 else "early")
        loop.remove_reader(a)
        a.close()
        b.close()
        return seen

    assert event_loop.run(main(), busy_poll_us=500.0) == ["r", "timer"]


def test_off_means_the_default_loop() -> None:
    assert busy_poll.loop_factory(0.0) is None
    with pytest.raises(ValueError, match="busy_poll_us"):
        ServerConfig(busy_poll_us=-1.0)
    with pytest.raises(ValueError, match="spin_s must be positive"):
        BusyPollSelector(0.0)
