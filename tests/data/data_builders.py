"""Builders of realistic steps and transitions for the data-layer tests.

Observations encode their own identity (``[session, episode, step, ...]``) so a test can
check from a transition alone which two steps it joined.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import numpy as np

from tether.data import StepRecord, Transition, TransitionArrays, TransitionTable

OBS_DIM = 5
ACT_DIM = 3


def make_step(
    index: int,
    *,
    session: str = "s0",
    episode: str = "e0",
    last: bool = False,
    override: bool = False,
    source: str = "policy",
    checks: int = 0,
    ingress_ns: int | None = None,
) -> StepRecord:
    obs = np.array([hash(session) % 97, hash(episode) % 89, index, 0, 0], dtype=np.float32)
    action = np.full(ACT_DIM, index / 1000.0, dtype=np.float32)
    return StepRecord(
        session_id=session,
        robot_id=f"robot-{session}",
        episode_id=episode,
        step_index=index,
        observation=obs,
        reward=float(index) - 0.5,  # the reward of action index-1
        terminated=last,
        truncated=False,
        executed_previous_action=np.full(ACT_DIM, -0.5, dtype=np.float32) if override else None,
        proposed_action=action * 2,
        safe_action=action,
        action_source=source,
        safety_checks=checks,
        policy_version=7,
        weights_sha256="ab" * 32,
        ingress_ns=1_000_000 * index if ingress_ns is None else ingress_ns,
        client_timestamp_ns=index,
    )


def make_transitions(
    count: int,
    *,
    start: int = 0,
    step_ns: int = 1_000_000,
    source: str = "policy",
    checks: int = 0,
    version: int = 1,
) -> list[Transition]:
    """``count`` transitions of one episode, ``step_ns`` apart on the ingress clock."""
    out = []
    for i in range(start, start + count):
        obs = np.full(OBS_DIM, i, dtype=np.float32)
        out.append(
            Transition(
                session_id="s0",
                robot_id="r0",
                episode_id="e0",
                step_index=i,
                observation=obs,
                proposed_action=np.full(ACT_DIM, 0.1, dtype=np.float32),
                action=np.full(ACT_DIM, (i % 200) / 200.0, dtype=np.float32),
                reward=float(i),
                next_observation=obs + 1,
                terminated=False,
                truncated=False,
                action_source=source,
                safety_checks=checks,
                policy_version=version,
                weights_sha256="cd" * 32,
                ingress_ns=i * step_ns,
                next_ingress_ns=(i + 1) * step_ns,
            )
        )
    return out


def table_of(transitions: Sequence[Transition]) -> TransitionTable:
    """``transitions`` as the table a recorder sink takes."""
    return TransitionTable.from_transitions(transitions, OBS_DIM, ACT_DIM)


def make_table(count: int, **kwargs: object) -> TransitionTable:
    """:func:`make_transitions` as the table a recorder sink takes."""
    return table_of(make_transitions(count, **kwargs))  # type: ignore[arg-type]


class CollectingSink:
    """A recorder sink that keeps every transition it is handed, row by row."""

    def __init__(self) -> None:
        self.received: list[Transition] = []
        self.puts = 0

    def put(self, transitions: TransitionTable) -> None:
        self.puts += 1
        self.received.extend(transitions.transitions())


def make_arrays(
    count: int, *, start: int = 0, step_ns: int = 1_000_000, version: int = 1
) -> TransitionArrays:
    """Like :func:`make_transitions`, already columnar (fast, for large counts)."""
    rows = TransitionArrays.empty(count, OBS_DIM, ACT_DIM)
    index = np.arange(start, start + count)
    rows.observations[:] = index[:, None]
    rows.next_observations[:] = index[:, None] + 1
    rows.rewards[:] = index
    rows.policy_versions[:] = version
    rows.ingress_ns[:] = index * step_ns
    rows.next_ingress_ns[:] = (index + 1) * step_ns
    return rows


def produce_into_channel(channel: object, count: int, batch: int) -> None:
    """Child-process body: put ``count`` rows numbered by their reward, ``batch`` at a time."""
    from tether.data import TransitionChannel

    assert isinstance(channel, TransitionChannel)
    sent = 0
    while sent < count:
        n = min(batch, count - sent)
        accepted = channel.put_arrays(make_arrays(n, start=sent))
        sent += accepted
        if accepted < n:  # the ring is full: this test's producer waits instead of dropping
            time.sleep(0.001)
    channel.close()


def die_holding_the_channel_lock(channel: object) -> None:
    """Child-process body: a learner killed inside the channel's critical section."""
    channel._lock.acquire()  # type: ignore[attr-defined]
    os._exit(0)
