"""The outcome of one episode on the built-in arm: did it settle on the target, how close.

``EpisodeOutcome`` is the record every layer judges an episode by (gate, report,
benchmarks): **success** means the end effector stayed within the success radius over
the episode's last ``settle_steps`` steps (settled, not passing through), and
**final distance** is where it ended. An episode may end early once the arm has also
come to rest there (``at_rest``): a task that is done. The return rides along as a
secondary figure: a threshold in the reward makes it noisy, the two above are not.

Invariant: an outcome is built from what the physics reported step by step
(``OutcomeTracker.record``), never from what a policy believed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EpisodeOutcome:
    """How one episode (or the part of it run so far) turned out."""

    success: bool
    """Within the success radius on each of the last ``settle_steps`` steps."""
    final_distance_m: float
    """End-effector distance to the target after the last step (m)."""
    episode_return: float
    """Sum of the rewards (secondary: noisy where the reward has a threshold)."""
    steps: int
    settled_steps: int
    """Consecutive steps within the radius at the end (the streak ``success`` reads)."""
    obstacle_contact_steps: int
    joint_limit_violation_steps: int
    velocity_limit_violation_steps: int


class OutcomeTracker:
    """Accumulates an :class:`EpisodeOutcome` step by step; ``reset`` starts a new episode."""

    def __init__(self, success_radius_m: float, settle_steps: int, settle_speed: float) -> None:
        self._radius = success_radius_m
        self._settle = settle_steps
        self._speed = settle_speed
        self.reset()

    def reset(self) -> None:
        self._return = 0.0
        self._steps = 0
        self._streak = 0
        self._rest_streak = 0
        self._distance = float("nan")
        self._contacts = self._limits = self._too_fast = 0

    def record(
        self,
        distance_m: float,
        reward: float,
        contact: bool,
        limit: bool,
        too_fast: bool,
        top_speed: float,
    ) -> None:
        """One step: the end effector's distance, the reward, what the physics flagged and
        the fastest joint's speed (rad/s)."""
        self._steps += 1
        self._return += reward
        self._distance = distance_m
        inside = distance_m < self._radius
        self._streak = self._streak + 1 if inside else 0
        self._rest_streak = self._rest_streak + 1 if inside and top_speed < self._speed else 0
        self._contacts += contact
        self._limits += limit
        self._too_fast += too_fast

    @property
    def settled(self) -> bool:
        return self._streak >= self._settle

    @property
    def at_rest(self) -> bool:
        """Settled with every joint slower than the settle speed over the settle steps."""
        return self._rest_streak >= self._settle

    def outcome(self) -> EpisodeOutcome:
        return EpisodeOutcome(
            success=self.settled,
            final_distance_m=self._distance,
            episode_return=self._return,
            steps=self._steps,
            settled_steps=self._streak,
            obstacle_contact_steps=self._contacts,
            joint_limit_violation_steps=self._limits,
            velocity_limit_violation_steps=self._too_fast,
        )
