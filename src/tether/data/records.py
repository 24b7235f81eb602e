"""Typed records of experience: one transition, and a batch of them for a learner.

A :class:`Transition` is ``(s_t, a_t, r_t, s_{t+1})`` from one robot session, assembled
by the recorder from two consecutive steps of the same episode; it names the policy
version that produced ``a_t`` and how the safety layer treated it. A
:class:`TransitionBatch` is the columnar form the replay buffer samples and the learner
consumes. Actions are stored in the policy's normalized space ([-1, 1]).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Transition(NamedTuple):
    """One paired step. ``step_index`` is the index of ``observation`` in its episode.

    A named tuple: the recorder builds one per served step on a thread that shares the
    GIL with the event loop, and a frozen dataclass costs four times as much to build.
    """

    session_id: str
    robot_id: str
    episode_id: str
    step_index: int
    observation: np.ndarray
    proposed_action: np.ndarray
    action: np.ndarray
    reward: float
    next_observation: np.ndarray
    terminated: bool
    truncated: bool
    action_source: str
    safety_checks: int
    policy_version: int
    weights_sha256: str
    ingress_ns: int
    next_ingress_ns: int
    client_timestamp_ns: int = 0


class TransitionBatch(NamedTuple):
    """Columns of ``B`` transitions; what ``ReplayBuffer.sample`` returns."""

    observations: np.ndarray  # (B, obs_dim) float32
    actions: np.ndarray  # (B, act_dim) float32, the executed action
    rewards: np.ndarray  # (B,) float32
    next_observations: np.ndarray  # (B, obs_dim) float32
    terminated: np.ndarray  # (B,) bool
    truncated: np.ndarray  # (B,) bool
    policy_versions: np.ndarray  # (B,) int64
    ingress_ns: np.ndarray  # (B,) int64
    safety_checks: np.ndarray  # (B,) int64
    human: np.ndarray  # (B,) bool: the executed action came from a person, not the policy

    def __len__(self) -> int:
        return int(self.rewards.shape[0])
