"""Replay: ring wrap-around, the recent/older mix, the reservoir's decay and priority, state round trips."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.data.data_builders import ACT_DIM, OBS_DIM, make_arrays, make_transitions
from tether.data import (
    DataError,
    RecentMixSampler,
    ReplayBuffer,
    ReplayBufferConfig,
    ReplayStateError,
    ReservoirWriter,
    SamplerConfig,
    StorageConfig,
    TransitionStorage,
    WriterConfig,
)


def buffer(
    ring: int, reservoir: int, *, admit: float = 1.0, recent: float = 0.7, window_s: float = 60.0
) -> ReplayBuffer:
    config = ReplayBufferConfig(
        storage=StorageConfig(ring_capacity=ring, reservoir_capacity=reservoir),
        writer=WriterConfig(admit_probability=admit, seed=1),
        sampler=SamplerConfig(recent_fraction=recent, recent_window_s=window_s, seed=2),
    )
    return ReplayBuffer(OBS_DIM, ACT_DIM, config)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12), st.lists(st.integers(0, 30), min_size=1, max_size=12))
def test_ring_keeps_the_newest_in_order_and_hands_back_the_rest_in_order(
    capacity: int, sizes: list[int]
) -> None:
    storage = TransitionStorage(
        OBS_DIM, ACT_DIM, StorageConfig(ring_capacity=capacity, reservoir_capacity=0)
    )
    evicted: list[float] = []
    start = 0
    for n in sizes:
        rows = make_arrays(n, start=start)
        evicted += storage.push_ring(rows, rows.ingress_ns).rewards.tolist()
        start += n
    ring = storage.rows.rewards[storage.ring_rows(np.arange(storage.ring_size))].tolist()
    assert ring == list(range(max(0, start - capacity), start))
    assert evicted == list(range(max(0, start - capacity)))
    head, tail = storage.ring_order_stamps()
    stamps = np.concatenate([head, tail])
    assert np.all(np.diff(stamps) >= 0)


def test_stamps_stay_sorted_when_rows_arrive_slightly_out_of_time_order() -> None:
    b = buffer(8, 0)
    rows = make_arrays(6)
    rows.ingress_ns[:] = [5, 3, 9, 8, 12, 11]
    b.extend(rows)
    head, tail = b.storage.ring_order_stamps()
    assert np.concatenate([head, tail]).tolist() == [5, 5, 9, 9, 12, 12]


def test_mixing_ratio_holds_within_statistical_tolerance() -> None:
    # 10 minutes of data at 100 Hz; the last 60 s are "recent".
    b = buffer(60_000, 10_000, recent=0.7, window_s=60.0)
    b.extend(make_arrays(60_000, step_ns=10_000_000))
    newest = 59_999 * 10_000_000
    draws, recent_rows = 0, 0
    for _ in range(200):
        batch, index = b.sample_rows(64)
        is_recent = batch.ingress_ns >= newest - 60 * 10**9
        # the sampler says which rows it took from the recent window, and the data agrees
        assert is_recent[: index.recent].all()
        assert not is_recent[index.recent :].any()
        draws += len(batch)
        recent_rows += int(is_recent.sum())
    share = recent_rows / draws
    sigma = math.sqrt(0.7 * 0.3 / draws)
    assert abs(share - 0.7) < 5 * sigma


def test_older_part_includes_the_reservoir_after_wrap_around() -> None:
    b = buffer(1_000, 1_000, recent=0.5, window_s=1.0)
    b.extend(make_arrays(5_000, step_ns=10_000_000))  # ring: last 10 s; window: last 1 s
    batch = b.sample(4_000)
    first_ring_row = 4_000
    from_reservoir = batch.rewards < first_ring_row
    assert 0.2 < from_reservoir.mean() < 0.4  # half of "older" (900 ring + 1000 reservoir)
    assert b.stats().reservoir_size == 1_000


def test_everything_recent_or_everything_old_still_fills_the_batch() -> None:
    b = buffer(100, 0, recent=0.7, window_s=3600)
    b.extend(make_arrays(50))
    batch, index = b.sample_rows(32)
    assert index.recent == 32
    assert len(batch) == 32
    c = buffer(100, 0, recent=1.0, window_s=0.001)
    c.extend(make_arrays(50, step_ns=10**9))
    _, index = c.sample_rows(10)
    assert index.recent == 10  # only the newest row is recent; it supplies all


def test_reservoir_keeps_an_old_item_with_the_expected_probability() -> None:
    capacity, later = 2_000, 2_000
    writer = ReservoirWriter(WriterConfig(admit_probability=1.0, seed=3))
    storage = TransitionStorage(
        OBS_DIM, ACT_DIM, StorageConfig(ring_capacity=1, reservoir_capacity=capacity)
    )
    writer.extend(
        storage, make_arrays(capacity + 1, version=1)
    )  # fills the reservoir with cohort 1
    writer.extend(storage, make_arrays(later, start=capacity + 1, version=2))
    assert writer.stats().replaced == later
    kept = float(np.mean(storage.rows.policy_versions[1 : 1 + capacity] == 1))
    expected = (1 - 1 / capacity) ** later  # ≈ e^-1
    assert abs(kept - expected) < 5 * math.sqrt(expected * (1 - expected) / capacity)


def test_admission_probability_and_priority_for_interventions_and_safety_events() -> None:
    writer = ReservoirWriter(
        WriterConfig(admit_probability=0.2, priority_admit_probability=1.0, seed=4)
    )
    storage = TransitionStorage(
        OBS_DIM, ACT_DIM, StorageConfig(ring_capacity=1, reservoir_capacity=100_000)
    )
    ordinary = make_arrays(20_001)
    writer.extend(storage, ordinary)
    rate = writer.stats().admitted / writer.stats().offered
    assert abs(rate - 0.2) < 5 * math.sqrt(0.2 * 0.8 / 20_000)
    before = writer.stats().admitted
    flagged = make_arrays(1_000, start=30_000)
    flagged.action_sources[:500] = 3  # human
    flagged.safety_checks[500:] = 2
    writer.extend(storage, flagged)
    # 999 flagged rows + the last ordinary row were pushed out of the one-row ring
    assert writer.stats().admitted - before >= 999


def test_without_priority_flagged_rows_are_admitted_like_any_other() -> None:
    # The priority is what keeps interventions: switched off, most of them are lost.
    writer = ReservoirWriter(
        WriterConfig(admit_probability=0.2, prioritize_interventions=False, seed=5)
    )
    storage = TransitionStorage(
        OBS_DIM, ACT_DIM, StorageConfig(ring_capacity=1, reservoir_capacity=10_000)
    )
    rows = make_arrays(2_001)
    rows.action_sources[:] = 3
    writer.extend(storage, rows)
    assert writer.stats().admitted < 0.3 * 2_000


def test_state_dict_round_trip_continues_identically(tmp_path) -> None:
    a = buffer(300, 200, admit=0.5)
    a.extend(make_transitions(700, step_ns=10**8))
    path = tmp_path / "replay.safetensors"
    a.save(path)
    b = buffer(300, 200, admit=0.5)
    b.load(path)
    for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        np.testing.assert_array_equal(x, y)
    more = make_arrays(250, start=700, step_ns=10**8)
    a.extend(more)
    b.extend(more)
    for x, y in zip(a.sample(64), b.sample(64), strict=True):
        np.testing.assert_array_equal(x, y)


def test_loading_a_state_of_another_size_says_what_differs_and_changes_nothing() -> None:
    a = buffer(300, 200)
    a.extend(make_arrays(50))
    b = buffer(300, 100)
    b.extend(make_arrays(20, start=1000))
    before = b.state_dict()
    with pytest.raises(ReplayStateError, match="shape"):
        b.load_state_dict(a.state_dict())
    for key, value in b.state_dict().items():
        np.testing.assert_array_equal(value, before[key], err_msg=key)


def test_sampling_an_empty_buffer_is_an_error() -> None:
    with pytest.raises(DataError, match="empty"):
        buffer(10, 10).sample(4)


def test_sample_returns_a_copy_with_versions_timestamps_and_flags() -> None:
    b = buffer(50, 0)
    b.extend(make_transitions(10, source="human", checks=2, version=9))
    batch = b.sample(16)
    assert batch.observations.shape == (16, OBS_DIM)
    assert batch.actions.dtype == np.float32
    assert (batch.policy_versions == 9).all()
    assert batch.human.all()
    assert (batch.safety_checks == 2).all()
    before = batch.rewards.copy()
    b.extend(make_transitions(50, start=100))
    np.testing.assert_array_equal(batch.rewards, before)


def test_sampler_alone_draws_from_a_storage() -> None:
    storage = TransitionStorage(
        OBS_DIM, ACT_DIM, StorageConfig(ring_capacity=10, reservoir_capacity=0)
    )
    rows = make_arrays(10)
    storage.push_ring(rows, rows.ingress_ns)
    index = RecentMixSampler(SamplerConfig(seed=0)).sample(storage, 100)
    assert set(index.rows.tolist()) <= set(range(10))


def test_an_infinite_window_samples_uniformly_over_everything() -> None:
    b = buffer(1_000, 0, recent=0.0, window_s=math.inf)
    b.extend(make_arrays(1_000, step_ns=10**9))  # 1000 s of data
    batch = b.sample(20_000)
    assert abs(float(np.mean(batch.rewards >= 500)) - 0.5) < 0.03


def test_replace_swaps_columns_and_keeps_the_rest() -> None:
    rows = make_arrays(4)
    swapped = rows.replace(rewards=np.zeros(4, np.float32))
    assert swapped.rewards.tolist() == [0, 0, 0, 0]
    assert swapped.observations is rows.observations
    with pytest.raises(TypeError, match="no columns"):
        rows.replace(reward=rows.rewards)
