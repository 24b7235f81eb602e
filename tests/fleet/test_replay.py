"""The replay actor's queue: bounded, oldest dropped first, every row counted."""

from __future__ import annotations

import numpy as np
import pytest

from tether.data.columns import TransitionArrays
from tether.fleet.replay import ReplayService

OBS, ACT = 3, 2


def rows(start: int, n: int) -> TransitionArrays:
    batch = TransitionArrays.empty(n, OBS, ACT)
    batch.rewards[:] = np.arange(start, start + n, dtype=np.float32)
    return batch


def test_pull_returns_rows_oldest_first_across_batches() -> None:
    replay = ReplayService(OBS, ACT, capacity=100)
    replay.push("edge-0", rows(0, 5))
    replay.push("edge-1", rows(5, 5))
    first = replay.pull(7)
    rest = replay.pull(100)
    assert first.rewards.tolist() == list(range(7))
    assert rest.rewards.tolist() == [7, 8, 9]
    assert len(replay.pull(10)) == 0
    stats = replay.stats()
    assert stats.by_edge == {"edge-0": 5, "edge-1": 5}
    assert (stats.offered, stats.consumed, stats.dropped, stats.held) == (10, 10, 0, 0)


@pytest.mark.parametrize("sizes", [(4, 4, 4), (10,), (3, 9, 1, 7)])
def test_at_capacity_the_oldest_rows_go_and_are_counted(sizes: tuple[int, ...]) -> None:
    replay = ReplayService(OBS, ACT, capacity=6)
    start = 0
    for n in sizes:
        replay.push("edge-0", rows(start, n))
        start += n
    stats = replay.stats()
    assert stats.held == min(6, start)
    assert stats.offered == stats.consumed + stats.dropped + stats.held
    # What is left is the newest rows, in order.
    assert replay.pull(100).rewards.tolist() == list(range(max(0, start - 6), start))


def test_a_batch_of_another_robot_is_refused() -> None:
    replay = ReplayService(OBS, ACT, capacity=6)
    with pytest.raises(ValueError, match="obs_dim 4"):
        replay.push("edge-0", TransitionArrays.empty(2, 4, ACT))
