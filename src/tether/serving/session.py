"""One robot's Control session: the per-robot state the server keeps between steps.

A session owns its own supervisor (the supervisor remembers where its robot was last
seen, which must never leak to another robot) and the previous executed action, which
the supervisor's rate and acceleration checks compare against. The batch that answers a
step records it (``tether.serving.inference``), not the session.

Invariants: the previous action is the one the robot reported executing (a person's
override) or else the last safe action this session sent in the same episode; a new
episode starts with no previous action.
"""

from __future__ import annotations

import uuid

import numpy as np

from tether.safety.verdict import ActionSource
from tether.serving.inference import ActionOutcome
from tether.serving.supervision import SessionSupervisor
from tether.versions.records import EpisodeOutcome


class ControlSession:
    """State of one open ``Control`` stream."""

    def __init__(
        self, robot_id: str, supervisor: SessionSupervisor, pinned_version: int | None = None
    ) -> None:
        self.session_id = uuid.uuid4().hex
        self.robot_id = robot_id
        self.supervisor = supervisor
        self.pinned_version = pinned_version  # every step is served by this version
        self._episode = _EpisodeTally()
        self.steps = 0
        self.watchdog_misses = 0
        self._received = 0  # steps received, each with its watchdog total
        self._episode_id: str | None = None
        self._last_sent: np.ndarray | None = None
        self._episode_over = False

    def previous_action(self, episode_id: str, executed: np.ndarray | None) -> np.ndarray | None:
        """The action the robot executed before this step's observation, if known."""
        if episode_id != self._episode_id or self._episode_over:
            # A new episode: the robot was reset, nothing executed before it counts.
            return None
        if executed is not None:
            return executed
        return self._last_sent

    def answered(
        self, episode_id: str, outcome: ActionOutcome, terminated: bool, truncated: bool
    ) -> None:
        """Remember what was sent for this step."""
        self._episode_id = episode_id
        self._last_sent = outcome.action
        self._episode_over = terminated or truncated
        self.steps += 1

    def tally(
        self,
        episode_id: str,
        outcome: ActionOutcome,
        reward: float,
        done: bool,
        success: bool,
        *,
        task_id: str = "",
        final_distance_m: float | None = None,
    ) -> EpisodeOutcome | None:
        """Count this step into its episode; the finished episode when ``done``.

        A step's reward is for the previous action, so the first step of an episode
        brings none and the step that ends it brings the last one; the episode belongs to
        the version that served its first step (routing is sticky per episode), and to the
        task its first step declared; ``final_distance_m`` is read on the step that ends it.
        """
        tally = self._episode
        if tally.episode_id != episode_id:
            tally = self._episode = _EpisodeTally(
                episode_id, outcome.version.id, outcome.tightened, outcome.trial, task_id
            )
        else:
            tally.episode_return += reward
        if not done:
            tally.steps += 1
            tally.interventions += outcome.verdict.intervened
            tally.backups += outcome.verdict.source is ActionSource.BACKUP
            return None
        self._episode = _EpisodeTally()
        return EpisodeOutcome(
            version=tally.version,
            episode_return=tally.episode_return,
            success=success,
            steps=tally.steps,
            interventions=tally.interventions,
            backups=tally.backups,
            tightened=tally.tightened,
            trial=tally.trial,
            task_id=tally.task_id,
            final_distance_m=final_distance_m,
        )

    def misses_reported(self, cumulative: int) -> int:
        """New watchdog misses since the last step (clients report a running total).

        A miss is a step the robot ran on its backup, so the total can never exceed the
        steps this session has received; a larger claim is cut to that. Without the bound
        one step claiming 2**63 misses kept the event loop counting them one by one.
        """
        self._received += 1
        if not cumulative:  # the common step: no misses reported, nothing can be new
            return 0
        bounded = min(cumulative, self._received)
        new = max(0, bounded - self.watchdog_misses)
        self.watchdog_misses = max(self.watchdog_misses, bounded)
        return new


class _EpisodeTally:
    """Running totals of the episode a session is in."""

    def __init__(
        self,
        episode_id: str = "",
        version: int = 0,
        tightened: bool = False,
        trial: int = 0,
        task_id: str = "",
    ) -> None:
        self.episode_id = episode_id
        self.version = version
        # Routing is sticky per episode: its first step decides these.
        self.tightened = tightened
        self.trial = trial
        self.task_id = task_id  # as declared on the episode's first step (routing read it)
        self.episode_return = 0.0
        self.steps = 0
        self.interventions = 0
        self.backups = 0
