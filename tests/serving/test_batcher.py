"""DynamicBatcher: every caller gets exactly its own result or error, deadlines, hooks."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from hypothesis import given, settings, strategies as st

from tether.serving.batcher import _PROBE_EVERY, _QUIET_TO_INLINE, BatchStats, DynamicBatcher
from tether.serving.config import BatcherConfig
from tether.serving.errors import (
    AdmissionRefused,
    BatchFailed,
    DeadlineExpired,
    RequestInvalid,
    ServingError,
)


def square_or_refuse(items: list[int]) -> list[int | ServingError]:
    """Squares, except negative inputs, which are refused one by one."""
    return [RequestInvalid(f"item {x} is negative") if x < 0 else x * x for x in items]


async def gather_all(batcher: DynamicBatcher[int, int], values: list[int]) -> list[object]:
    batcher.start()
    try:
        return await asyncio.gather(*(batcher.submit(v) for v in values), return_exceptions=True)
    finally:
        await batcher.close()


@settings(max_examples=25, deadline=None)
@given(
    values=st.lists(st.integers(-50, 50), min_size=1, max_size=80),
    max_batch=st.integers(1, 16),
    mode=st.sampled_from(["inline", "thread"]),
)
def test_each_caller_gets_exactly_its_own_result(
    values: list[int], max_batch: int, mode: str
) -> None:
    batches: list[int] = []
    batcher: DynamicBatcher[int, int] = DynamicBatcher(
        square_or_refuse,
        BatcherConfig(max_batch_size=max_batch, execution=mode),  # type: ignore[arg-type]
        on_batch=lambda s: batches.append(s.size),
    )
    results = asyncio.run(gather_all(batcher, values))
    for v, r in zip(values, results, strict=True):
        if v < 0:
            assert isinstance(r, RequestInvalid)
            assert str(v) in str(r)
        else:
            assert not isinstance(r, BaseException)
            assert r.value == v * v  # type: ignore[union-attr]
    assert max(batches) <= max_batch
    assert sum(batches) == len(values)


def test_requests_coalesce_while_a_batch_computes() -> None:
    def slow(items: list[int]) -> list[int | ServingError]:
        time.sleep(0.02)
        return list(items)

    sizes: list[int] = []
    batcher: DynamicBatcher[int, int] = DynamicBatcher(
        slow,
        BatcherConfig(max_batch_size=64, execution="thread"),
        on_batch=lambda s: sizes.append(s.size),
    )
    results = asyncio.run(gather_all(batcher, list(range(40))))
    assert [r.value for r in results] == list(range(40))  # type: ignore[union-attr]
    assert max(sizes) > 1, f"no batch formed: {sizes}"


def test_wrong_result_count_fails_each_caller_with_its_own_error() -> None:
    calls = 0

    def broken(items: list[int]) -> list[int | ServingError]:
        nonlocal calls
        calls += 1
        return list(items)[:-1] if calls == 1 else list(items)

    async def run() -> tuple[list[object], object]:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            broken, BatcherConfig(max_batch_size=8, execution="thread")
        )
        batcher.start()
        try:
            first = await asyncio.gather(
                *(batcher.submit(i) for i in range(4)), return_exceptions=True
            )
            after = await batcher.submit(7)  # the worker survived
            return first, after
        finally:
            await batcher.close()

    first, after = asyncio.run(run())
    errors = [e for e in first if isinstance(e, BatchFailed)]
    assert errors, first
    assert len({id(e) for e in errors}) == len(errors)  # one exception object per caller
    assert all("returned" in str(e) for e in errors)
    assert after.value == 7  # type: ignore[attr-defined]


def test_raising_batch_fails_its_callers_and_not_the_next_batch() -> None:
    def explode_on_13(items: list[int]) -> list[int | ServingError]:
        if 13 in items:
            raise RuntimeError("engine fell over")
        return list(items)

    async def run() -> tuple[object, object]:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(explode_on_13, BatcherConfig())
        batcher.start()
        try:
            bad = await asyncio.gather(batcher.submit(13), return_exceptions=True)
            good = await batcher.submit(5)
            return bad[0], good
        finally:
            await batcher.close()

    bad, good = asyncio.run(run())
    assert isinstance(bad, BatchFailed)
    assert "engine fell over" in str(bad)
    assert good.value == 5  # type: ignore[attr-defined]


def test_expired_requests_are_answered_and_never_computed() -> None:
    computed: list[int] = []
    gate = threading.Event()

    def record(items: list[int]) -> list[int | ServingError]:
        gate.wait(1.0)
        computed.extend(items)
        return list(items)

    async def run() -> list[object]:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            record, BatcherConfig(execution="thread")
        )
        batcher.start()
        try:
            first = asyncio.ensure_future(batcher.submit(1))  # occupies the worker
            await asyncio.sleep(0.01)
            expired = asyncio.ensure_future(batcher.submit(2, time.monotonic() + 0.02))
            alive = asyncio.ensure_future(batcher.submit(3, time.monotonic() + 10))
            await asyncio.sleep(0.05)  # the 20 ms deadline passes while queued
            gate.set()
            return await asyncio.gather(first, expired, alive, return_exceptions=True)
        finally:
            await batcher.close()

    first, expired, alive = asyncio.run(run())
    assert isinstance(expired, DeadlineExpired)
    assert "not computed" in str(expired)
    assert first.value == 1
    assert alive.value == 3
    assert 2 not in computed


def test_before_batch_runs_before_every_batch() -> None:
    order: list[str] = []

    def run_batch(items: list[int]) -> list[int | ServingError]:
        order.append(f"batch{len(items)}")
        return list(items)

    for mode in ("inline", "thread"):
        order.clear()
        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            run_batch,
            BatcherConfig(execution=mode),  # type: ignore[arg-type]
            before_batch=lambda: order.append("hook"),
        )
        asyncio.run(gather_all(batcher, [1, 2, 3]))
        assert order[0] == "hook"
        assert order.count("hook") == sum(1 for o in order if o.startswith("batch"))
        assert all(order[i] == "hook" for i in range(0, len(order), 2))


def test_queue_bound_refuses_with_resource_exhausted() -> None:
    gate = threading.Event()

    def blocked(items: list[int]) -> list[int | ServingError]:
        gate.wait(1.0)
        return list(items)

    async def run() -> list[object]:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            blocked, BatcherConfig(execution="thread"), max_queued=2
        )
        batcher.start()
        try:
            running = asyncio.ensure_future(batcher.submit(0))
            await asyncio.sleep(0.01)
            queued = [asyncio.ensure_future(batcher.submit(i)) for i in (1, 2)]
            await asyncio.sleep(0)
            with pytest.raises(AdmissionRefused, match="queue is full"):
                await batcher.submit(3)
            gate.set()
            return await asyncio.gather(running, *queued)
        finally:
            await batcher.close()

    assert [r.value for r in asyncio.run(run())] == [0, 1, 2]  # type: ignore[attr-defined]


def test_auto_mode_runs_lone_requests_inline_and_slow_batches_in_the_thread() -> None:
    stats: list[BatchStats] = []
    config = BatcherConfig(execution="auto")

    def run_batch(items: list[int]) -> list[int | ServingError]:
        if items[0] >= 100:
            time.sleep(2 * config.inline_threshold_s)  # a heavy policy
        return list(items)

    async def scenario() -> None:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(run_batch, config, on_batch=stats.append)
        batcher.start()
        try:
            for i in range(5):  # one robot: nothing to overlap with, so inline
                await batcher.submit(100 + i)
            for _ in range(5):  # many robots on a slow policy: off the loop
                await asyncio.gather(*(batcher.submit(100 + i) for i in range(8)))
            for _ in range(20):  # many robots on a fast policy: inline again
                await asyncio.gather(*(batcher.submit(i) for i in range(8)))
        finally:
            await batcher.close()

    asyncio.run(scenario())
    lone = [s for s in stats if s.size == 1]
    assert lone
    assert all(s.inline for s in lone)
    assert any(not s.inline for s in stats if s.size > 1)
    assert stats[-1].inline  # the fast batches brought the compute average down


def test_a_lone_request_runs_in_its_callers_coroutine_with_every_check() -> None:
    """Auto mode, one robot: no queue, no worker hand-off, and nothing a caller can see
    differs from a queued batch (hook, own result, own error, statistics)."""
    stats: list[BatchStats] = []
    hooks: list[str] = []
    threads: list[str] = []

    def run_batch(items: list[int]) -> list[int | ServingError]:
        threads.append(threading.current_thread().name)
        if items[0] == 13:
            raise RuntimeError("engine fell over")
        return square_or_refuse(items)

    async def scenario() -> tuple[list[object], int]:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            run_batch,
            BatcherConfig(execution="auto"),
            before_batch=lambda: hooks.append("hook"),
            on_batch=stats.append,
        )
        batcher.start()
        try:
            out: list[object] = []
            for v in (3, -2, 13, 4, 5):  # fewer than one probe period
                try:
                    out.append(await batcher.submit(v))
                except ServingError as exc:
                    out.append(exc)
            try:  # a deadline already past on arrival: refused, never computed
                await batcher.submit(6, time.monotonic() - 1.0)
            except DeadlineExpired as exc:
                out.append(exc)
            return out, batcher.queued
        finally:
            await batcher.close()

    out, queued = asyncio.run(scenario())
    ok3, refused, failed, ok4, ok5, expired = out
    assert ok3 == (9, 0, ok3.batch_ns, 1)  # type: ignore[union-attr]
    assert isinstance(refused, RequestInvalid)
    assert "-2" in str(refused)
    assert isinstance(failed, BatchFailed)
    assert "engine fell over" in str(failed)
    assert isinstance(failed.__cause__, RuntimeError)
    assert (ok4.value, ok5.value) == (16, 25)  # type: ignore[union-attr]
    assert isinstance(expired, DeadlineExpired)
    assert "not computed" in str(expired)
    assert queued == 0
    assert threads == ["MainThread"] * 5  # the expired one never reached the batch
    assert hooks == ["hook"] * 5
    assert [(s.size, s.inline, s.expired) for s in stats] == [(1, True, 0)] * 5 + [(0, True, 1)]


def test_lone_requests_still_probe_for_other_robots_and_then_batch() -> None:
    """Every _PROBE_EVERY-th lone request queues and waits a turn of the loop; robots
    that queue behind it join its batch and switch the batcher to batching, so many
    robots are not served one by one."""
    stats: list[BatchStats] = []
    config = BatcherConfig(execution="auto")

    def slow(items: list[int]) -> list[int | ServingError]:
        time.sleep(2 * config.inline_threshold_s)  # slower than inline batches may be
        return list(items)

    async def scenario() -> None:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(slow, config, on_batch=stats.append)
        batcher.start()
        try:
            for i in range(40):  # 40 robots, all at once, every round
                await asyncio.gather(*(batcher.submit(i * 100 + k) for k in range(40)))
        finally:
            await batcher.close()

    asyncio.run(scenario())
    # The first round: lone requests one by one until the probe, which the rest join.
    probe = _PROBE_EVERY - 1
    assert [s.size for s in stats[: probe + 1]] == [1] * probe + [40 - probe]
    assert sum(s.size for s in stats) == 40 * 40
    assert any(not s.inline for s in stats)  # batches of a slow policy: off the loop
    # Once batching took over, the later rounds are served in few batches each.
    assert len(stats) < 40 * 40 / 4


def test_a_lone_robots_probes_stay_on_the_loop() -> None:
    """One robot alone: its probes find nobody and run on the loop like its other
    requests, never handed to the worker thread."""
    threads: list[str] = []
    stats: list[BatchStats] = []

    def run_batch(items: list[int]) -> list[int | ServingError]:
        threads.append(threading.current_thread().name)
        return list(items)

    async def scenario() -> None:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(
            run_batch, BatcherConfig(execution="auto"), on_batch=stats.append
        )
        batcher.start()
        try:
            for i in range(4 * _PROBE_EVERY):
                assert (await batcher.submit(i)).value == i
        finally:
            await batcher.close()

    asyncio.run(scenario())
    assert threads == ["MainThread"] * (4 * _PROBE_EVERY)
    assert [(s.size, s.inline) for s in stats] == [(1, True)] * (4 * _PROBE_EVERY)


def test_with_other_robots_about_a_fast_policys_lone_batches_stay_on_the_loop() -> None:
    """Once requests were seen together, a lone batch of a fast policy runs on the loop
    like its batches do (a thread hand-off costs more than its compute), and after
    _QUIET_TO_INLINE lone batches in a row the robot is served in its own coroutine again."""
    threads: list[str] = []
    tasks: list[asyncio.Task[object] | None] = []

    def run_batch(items: list[int]) -> list[int | ServingError]:
        thread = threading.current_thread()
        threads.append(thread.name)
        tasks.append(asyncio.current_task() if thread is threading.main_thread() else None)
        return list(items)

    async def scenario() -> list[asyncio.Task[object] | None]:
        batcher: DynamicBatcher[int, int] = DynamicBatcher(run_batch, BatcherConfig())
        batcher.start()
        try:
            # Robots together: lone runs until the probe, which the rest join.
            await asyncio.gather(*(batcher.submit(i) for i in range(2 * _PROBE_EVERY)))
            callers = []
            for i in range(_QUIET_TO_INLINE + 3):  # then one robot at a time
                callers.append(asyncio.current_task())
                await batcher.submit(100 + i)
            return callers
        finally:
            await batcher.close()

    callers = asyncio.run(scenario())
    assert set(threads) == {"MainThread"}
    lone = tasks[-(_QUIET_TO_INLINE + 3) :]
    assert all(t is not c for t, c in zip(lone[:_QUIET_TO_INLINE], callers, strict=False))
    assert lone[-1] is callers[-1]  # concurrency lapsed: served in the caller's coroutine


async def _staggered_fleet(batcher: DynamicBatcher[int, int], robots: int) -> None:
    """Two rounds of ``robots`` requests: three arrive together, then one per turn of the
    loop (a server's loop reads a fleet's messages over several turns)."""

    async def robot(i: int) -> None:
        for _ in range(i - 2):
            await asyncio.sleep(0)
        await batcher.submit(i)

    batcher.start()
    try:
        for _ in range(2):
            await asyncio.gather(*(robot(i) for i in range(robots)))
    finally:
        await batcher.close()


@pytest.mark.parametrize(("turns", "largest"), [(0, 3), (1, 4), (8, 6)])
def test_under_load_a_batch_gathers_what_the_next_turns_queue(turns: int, largest: int) -> None:
    """With ``gather_turns`` the worker lets the loop turn while each turn queues more, so
    requests on their way join the batch instead of starting the next one; with 0 it takes
    what is queued at once. A lone request is not held back (one batch of one per round)."""
    sizes: list[int] = []
    config = BatcherConfig(execution="inline", gather_turns=turns)
    batcher: DynamicBatcher[int, int] = DynamicBatcher(
        square_or_refuse, config, on_batch=lambda s: sizes.append(s.size)
    )
    asyncio.run(_staggered_fleet(batcher, 6))
    assert sum(sizes) == 12
    assert max(sizes) == largest
    lone: list[int] = []
    batcher = DynamicBatcher(square_or_refuse, config, on_batch=lambda s: lone.append(s.size))
    asyncio.run(_staggered_fleet(batcher, 1))
    assert lone == [1, 1]
