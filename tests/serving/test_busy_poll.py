"""Busy polling: while requests come close together, the loop polls instead of sleeping for
a bounded time after each, on either event loop; events, timers and other threads run as
always meanwhile, and each turn of the spin hands the core to any thread ready for it."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from tether.serving import busy_poll, event_loop
from tether.serving.batcher import DynamicBatcher
from tether.serving.busy_poll import BusyPoll
from tether.serving.config import BatcherConfig, ServerConfig

LOOPS = pytest.mark.parametrize("kind", ["uvloop", "asyncio"])


@LOOPS
def test_close_requests_keep_the_loop_awake_for_the_budget_then_it_sleeps(
    kind: event_loop.EventLoopKind,
) -> None:
    async def main() -> tuple[int, bool, int, bool]:
        poll = BusyPoll(asyncio.get_running_loop(), 0.05)
        poll.touch()
        poll.touch()  # a request close behind the first
        assert poll.spinning
        await asyncio.sleep(0.02)
        early, awake = poll.spins, poll.spinning
        await asyncio.sleep(0.15)  # past the budget: the loop sleeps again
        return early, awake, poll.spins, poll.spinning

    early, awake, total, still = event_loop.run(main(), kind)
    # The loop iterated many times while nothing was ready: it polled, it did not sleep.
    assert awake
    assert early > 50
    assert not still
    assert total >= early


@LOOPS
def test_without_a_touch_the_loop_sleeps(kind: event_loop.EventLoopKind) -> None:
    async def main() -> int:
        poll = BusyPoll(asyncio.get_running_loop(), 0.05)
        await asyncio.sleep(0.05)
        return poll.spins

    assert event_loop.run(main(), kind) == 0


@LOOPS
def test_requests_further_apart_than_the_budget_never_spin(
    kind: event_loop.EventLoopKind,
) -> None:
    """A spin shorter than the gap to the next request would end before it came: a core
    kept busy for nothing (a few robots at 50 Hz), so the loop sleeps between them."""

    async def main() -> tuple[bool, bool, int]:
        poll = BusyPoll(asyncio.get_running_loop(), 0.01)
        poll.touch()
        first = poll.spinning  # nothing came before it
        await asyncio.sleep(0.03)
        poll.touch()  # 30 ms after the first, the budget is 10 ms
        later = poll.spinning
        await asyncio.sleep(0.02)
        return first, later, poll.spins

    assert event_loop.run(main(), kind) == (False, False, 0)


def test_each_turn_of_the_spin_hands_the_core_over(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the yield a spinning loop keeps its core until the scheduler preempts it,
    and grpc's threads (and the robots' processes on a shared machine) wait for a tick:
    the tail of every step (docs/benchmarks.md)."""
    yields = [0]

    def counted() -> None:
        yields[0] += 1

    monkeypatch.setattr(busy_poll, "_yield_core", counted)

    async def main() -> int:
        poll = BusyPoll(asyncio.get_running_loop(), 0.02)
        poll.touch()
        poll.touch()
        while poll.spinning:
            await asyncio.sleep(0)
        return poll.spins

    spins = event_loop.run(main(), "uvloop")
    assert spins > 0
    assert yields[0] == spins


@LOOPS
def test_each_touch_extends_the_spin(kind: event_loop.EventLoopKind) -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        poll = BusyPoll(loop, 0.03)
        poll.touch()
        start = time.perf_counter()
        for _ in range(4):  # touched every 20 ms: never 30 ms without one
            poll.touch()
            await asyncio.sleep(0.02)
            assert poll.spinning
        while poll.spinning:
            await asyncio.sleep(0.005)
        return time.perf_counter() - start

    # The last touch came at 60 ms: the spin ends 30 ms later, not 30 ms after the first.
    assert 0.085 <= event_loop.run(main(), kind) < 2.0


@LOOPS
def test_readers_and_timers_run_while_it_spins(kind: event_loop.EventLoopKind) -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        poll = BusyPoll(loop, 1.0)
        poll.touch()
        poll.touch()
        seen: list[str] = []
        a, b = socket.socketpair()
        got = asyncio.Event()
        loop.add_reader(a, lambda: (seen.append(a.recv(1).decode()), got.set()))
        loop.call_later(0.02, b.send, b"r")
        start = loop.time()
        await asyncio.wait_for(got.wait(), 5.0)
        await asyncio.sleep(0.01)
        seen.append("timer" if loop.time() - start >= 0.02 else "early")
        seen.append("spinning" if poll.spinning else "asleep")
        loop.remove_reader(a)
        a.close()
        b.close()
        return seen

    assert event_loop.run(main(), kind) == ["r", "timer", "spinning"]


@LOOPS
def test_other_threads_run_while_the_loop_spins(kind: event_loop.EventLoopKind) -> None:
    """The loop releases the GIL in each poll: a Python thread keeps counting through a
    0.3 s spin."""
    counted = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counted[0] += 1

    async def main() -> int:
        poll = BusyPoll(asyncio.get_running_loop(), 0.3)
        worker = threading.Thread(target=count)
        worker.start()
        await asyncio.sleep(0.05)
        before = counted[0]
        poll.touch()
        poll.touch()
        while poll.spinning:
            await asyncio.sleep(0)  # let the spin run; never sleep on a timer
        during = counted[0] - before
        stop.set()
        worker.join()
        return during

    # A thread that got the GIL only at the switch interval would count ~60 times less.
    assert event_loop.run(main(), kind) > 10_000


def test_on_by_default_off_at_zero_and_bad_values() -> None:
    assert ServerConfig().busy_poll_us == 1000.0
    assert ServerConfig(busy_poll_us=0.0).busy_poll_us == 0.0
    with pytest.raises(ValueError, match="busy_poll_us"):
        ServerConfig(busy_poll_us=-1.0)
    with pytest.raises(ValueError, match="spin_s must be positive"):
        BusyPoll(asyncio.new_event_loop(), 0.0)


def test_a_second_stream_disarms_the_poll_and_its_close_rearms_it() -> None:
    """The batcher counts clients with a stream of requests (Control sessions, openpi
    connections): busy polling serves one such client's fast loop only."""

    async def main() -> list[bool]:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            lambda items: items, BatcherConfig(), busy_poll_s=0.01
        )
        batcher.stream_opened()
        batcher.start()
        poll = batcher.busy_poll
        assert poll is not None
        seen = [poll.armed]
        batcher.stream_opened()
        seen.append(poll.armed)
        batcher.stream_closed()
        seen.append(poll.armed)
        await batcher.close()
        return seen

    assert event_loop.run(main(), "uvloop") == [True, False, True]
