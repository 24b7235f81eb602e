"""What the serving layer hands the recorder for every control step.

A :class:`StepRecord` is one message of a ``Control`` session after the server has
answered it: what the robot reported (observation, reward of its previous action,
episode end, the action it really executed if a person overrode it) and what the server
sent back (proposed and safe action, who chose it, which safety checks fired, which
policy version). Invariant: everything in it was fixed at ingress; the recorder never
reads a clock or a live object to fill it in later.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Storage code of each action source; the order is part of the log and channel format.
ACTION_SOURCES: tuple[str, ...] = ("policy", "clipped", "backup", "human")
HUMAN_SOURCE_CODE = ACTION_SOURCES.index("human")


def action_source_code(source: str) -> int:
    """The storage code of ``source``; an unknown source is a serving-layer bug."""
    try:
        return ACTION_SOURCES.index(source)
    except ValueError:
        raise ValueError(
            f"action_source must be one of {ACTION_SOURCES}, got {source!r}; "
            "use tether.safety.ActionSource values"
        ) from None


class StepRecord(NamedTuple):
    """One control step of one robot session, as answered by the server.

    ``reward``, ``executed_previous_action`` and the episode-end flags describe the
    *previous* action and this observation; ``proposed_action``/``safe_action`` and the
    fields after them describe the action chosen *for* this observation. Actions are
    normalized to [-1, 1]. A named tuple: immutable, and built on every step of every
    session for a quarter of a frozen dataclass's cost.
    """

    session_id: str
    robot_id: str
    episode_id: str
    step_index: int
    observation: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    executed_previous_action: np.ndarray | None
    proposed_action: np.ndarray
    safe_action: np.ndarray
    action_source: str
    safety_checks: int
    policy_version: int
    weights_sha256: str
    ingress_ns: int
    client_timestamp_ns: int = 0

    @property
    def episode_ended(self) -> bool:
        """True when this observation is the last of its episode."""
        return self.terminated or self.truncated
