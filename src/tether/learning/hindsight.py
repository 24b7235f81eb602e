"""Hindsight learning of a goal shift: what the frozen actor should read, from where the
robot came to rest.

An actor with a goal shift (``tether.policy.networks.GoalShift``) reads one slice of its
observation moved by a bounded learned shift; its own layers stay frozen. On a robot
whose dynamics drifted (an actuator that sags, a payload, friction), the same request
ends somewhere else, and every finished episode says in hindsight how to correct it.
Two labels (``HindsightConfig.label``):

- ``tracking`` (the default): the shift moves the *command* the actor reads, the one it
  steps its next command from (the bundle's action frame). The actor steps until the
  command it reads sits where it means the arm to be, so reading ``command + s`` it ends
  holding ``command = meant - s`` and the arm rests at ``meant - s - e``, where ``e`` is
  the arm's tracking error at rest (command minus pose: the sag of a weak actuator under
  gravity and payload, which depends on the pose). The label ``s = pose - command`` at
  rest (``-e``) lands the arm where the actor meant; to first order it does not depend on
  the shift that acted, so no version is needed. Every state of the episode as the robot
  saw it is labelled with it (nothing is relabelled). This is iterative learning control
  of the actuator's steady-state error, learned across tasks by regression.
- ``goal``: the shift moves the *goal* (the target the actor reaches for). The arm came
  to rest at ``achieved`` while the actor reached for ``asked = goal + shift``, so from
  any state of that episode, *to end at* ``achieved`` *ask* ``asked`` (goal-conditioned
  supervised learning with relabelled goals; Ghosh et al. 2021, "Learning to Reach Goals
  via Iterated Supervised Learning", and hindsight experience replay): every state is
  relabelled with ``achieved`` as its goal and regressed onto ``asked - achieved``. On
  the drifted arm this reaches less than ``tracking`` (docs/benchmarks.md): a cloned
  actor follows a moved goal less faithfully than its own command.

What this needs from the data, all of it in every transition the robots send:

- episodes: transitions are chained by observation and arrival (a transition's
  ``next_observation`` and ``next_ingress_ns`` are its robot's next ``observation`` and
  ``ingress_ns``, bit for bit: the recorder stamps them from the same steps), so the
  robots' interleaved streams come apart without a robot id, even when two robots run
  the same task with the same policy and see the same observations;
- for ``goal`` labels, the shift the deployed version used at the episode's last step:
  recomputed from that version's weights (``weights_of``, the learner's known versions;
  an episode of a version it does not hold is skipped and counted);
- that the arm came to rest (joint speeds below ``settle_speed`` over the last
  ``settle_steps``): a moving arm has no error at rest and no place it ended. A
  ``tracking`` label is read joint by joint, so a joint still moving (a weak wrist's
  limit cycle under the delay) only leaves its own entry unlabelled (weight 0 in the
  regression); a ``goal`` label needs every joint at rest;
- for ``goal`` labels, also no person driving and no supervisor holding the arm
  somewhere else at the end (a position, workspace, obstacle or torque correction, or a
  backup, over the last ``settle_steps``): such an episode says nothing about where a
  request ends. A rate correction (velocity, acceleration) only smooths the way there
  and does not disqualify it. A ``tracking`` label holds whoever set the command: the
  arm's error at rest is the same, and the episodes the supervisor holds near an
  obstacle are the drifted arm's hardest tasks.

Invariants: only the shift's parameters change; a label is bounded by the shift's
own bound, so the regression never asks for a shift the actor cannot make; the kept
episodes are the most recent ``episodes_kept`` (the dynamics drift: older endings are
stale).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from tether.data.columns import TransitionArrays
from tether.data.step import HUMAN_SOURCE_CODE
from tether.learning.errors import LearnerConfigError
from tether.policy.bundle import load_bundle
from tether.policy.goal_shift import goal_shift_for, with_goal_shift
from tether.policy.networks import Actor, GoalShiftNet
from tether.policy.tensors import StateDict
from tether.policy.transforms import ObservationNormalizer
from tether.safety.verdict import REPLACING_CHECKS, SafetyCheck
from tether.spec import RobotSpec

if TYPE_CHECKING:
    from tether.learning.learner_config import LearnerConfig

# Corrections that hold the arm away from where it was asked to go (a rate correction only
# changes how fast it gets there).
_HOLDING_CHECKS = int(
    REPLACING_CHECKS
    | SafetyCheck.POSITION
    | SafetyCheck.WORKSPACE
    | SafetyCheck.OBSTACLE
    | SafetyCheck.TORQUE
)

# Episodes still being assembled: more than this many open chains is a stream the
# chaining does not fit (a robot whose observations are not continuous); the oldest go.
_MAX_OPEN_EPISODES = 256


class HindsightConfig(BaseModel):
    """The goal shift the learner adds and how it learns it from finished episodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    label: Literal["tracking", "goal"] = Field(
        default="tracking",
        description="What an episode teaches the shift: 'tracking' shifts the command the "
        "actor reads by where the arm came to rest minus the command it held there (the "
        "arm's tracking error at rest); 'goal' relabels the goal with where the arm came to "
        "rest and shifts the goal by what was asked minus that",
    )
    goal: str = Field(
        default="command",
        description="Observation layout slice the shift moves (name): the command the actor "
        "steps from for 'tracking', the goal it reaches for ('target') for 'goal'",
    )
    achieved: str = Field(
        default="joint_position",
        description="Observation layout slice of where the robot is, in the shifted slice's "
        "unit (name): 'joint_position' for 'tracking', 'end_effector' for 'goal'",
    )
    settle: str = Field(
        default="joint_velocity",
        description="Observation layout slice whose magnitude says the robot is at rest (name)",
    )
    bound: float = Field(
        default=0.2,
        gt=0.0,
        description="Largest shift of each entry, in the shifted slice's unit (rad for the "
        "arm's command, m for its target)",
    )
    hidden_sizes: tuple[int, ...] = Field(
        default=(64, 64), description="Hidden layers of the shift's network (units)"
    )
    lr: float = Field(default=1e-3, gt=0.0, description="Adam learning rate of the shift (1)")
    batch_size: int = Field(default=256, ge=1, description="Relabelled states per update (rows)")
    episodes_kept: int = Field(
        default=72,
        ge=1,
        description="Most recent labelled episodes the regression draws from: enough to "
        "hold each task of a robot cell's cycle at least once (tether run's 16 tasks, each "
        "twice, on two robots: 64 episodes in about 128 s), few enough to follow a drift "
        "within a few minutes (episodes)",
    )
    settle_steps: int = Field(
        default=10, ge=1, description="Final steps that must be at rest for a label (steps)"
    )
    settle_speed: float = Field(
        default=0.1,
        gt=0.0,
        description="Largest |settle slice| entry over the final steps at rest (its unit, rad/s)",
    )
    updates_per_episode: int = Field(
        default=200,
        ge=0,
        description="Regression steps each labelled episode earns (updates)",
    )
    seed: int = Field(default=0, ge=0, description="Seed of the mini-batch sampling (1)")

    @classmethod
    def goal_relabelling(cls, **overrides: object) -> HindsightConfig:
        """The ``label='goal'`` learner on the arm: a shift of its target, at most 0.1 m,
        learned from where the end effector came to rest (``overrides`` on top)."""
        fields: dict[str, object] = {
            "label": "goal",
            "goal": "target",
            "achieved": "end_effector",
            "bound": 0.1,
        }
        return cls.model_validate({**fields, **overrides})


class _Step(NamedTuple):
    """What a finished episode's label needs of one of its transitions."""

    observation: np.ndarray
    next_observation: np.ndarray
    human: bool  # a person drove this step
    holding: bool  # the supervisor held the arm away from where it was asked to go
    version: int  # the policy version that acted


@dataclass(frozen=True)
class HindsightStats:
    """One regression step; ``loss`` in the shifted slice's unit squared."""

    updates: int
    loss: float
    episodes: int


class HindsightLearner:
    """Assembles episodes from transitions, labels them in hindsight, trains the shift.

    It is a learning algorithm behind :class:`tether.learning.algorithm.Algorithm` (the
    actor whose state is published, its update count, what checkpoints store); its data
    path is :meth:`observe`, not a replay buffer.
    """

    name = "hindsight"

    def __init__(
        self,
        actor: Actor,
        config: HindsightConfig,
        spec: RobotSpec,
        normalize: ObservationNormalizer,
    ) -> None:
        if actor.goal is None or actor.arch.goal_shift is None:
            raise LearnerConfigError(
                "learning.algorithm 'hindsight' trains a goal shift, but the bundle's actor has "
                "none; give the bundle one (tether.policy.goal_shift.with_goal_shift)"
            )
        if spec.layout is None:
            raise LearnerConfigError("hindsight learning needs the robot's observation layout")
        slices = spec.layout.slices()
        for name in (config.goal, config.achieved, config.settle):
            if name not in slices:
                raise LearnerConfigError(
                    f"hindsight: the observation layout has no {name!r} slice "
                    f"(it has {sorted(slices)})"
                )
        self.goal_slice = slices[config.goal]
        self.achieved_slice = slices[config.achieved]
        self.settle_slice = slices[config.settle]
        shift = actor.arch.goal_shift
        if (shift.goal[0], shift.goal[1]) != (self.goal_slice.start, self.goal_slice.stop):
            raise LearnerConfigError(
                f"hindsight: the actor's goal shift moves entries {shift.goal}, not the "
                f"{config.goal!r} slice {self.goal_slice}"
            )
        widths = {
            name: slices[name].stop - slices[name].start
            for name in (config.goal, config.achieved, config.settle)
        }
        if config.label == "tracking" and len(set(widths.values())) != 1:
            raise LearnerConfigError(
                "hindsight: a tracking label reads the shifted, achieved and settle slices "
                f"entry by entry (one per joint), but their widths differ: {widths}"
            )
        self.config = config
        self.actor = actor
        self.arch = actor.arch
        actor.requires_grad_(False)
        actor.goal.requires_grad_(True)
        self.net: GoalShiftNet = actor.goal
        self.normalize = normalize
        self._bound = np.asarray(shift.bound, dtype=np.float32)
        self.optimizer = torch.optim.Adam(self.net.net.parameters(), lr=config.lr)
        self._generator = torch.Generator().manual_seed(config.seed)
        self._scratch = Actor(actor.arch).eval().requires_grad_(False)
        self._open_rows: dict[tuple[bytes, int], list[_Step]] = {}
        # (inputs, labels, weights): a weight is 0 where an entry has no label (a joint
        # that had not come to rest)
        self._kept: deque[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = deque(
            maxlen=config.episodes_kept
        )
        # The kept episodes' rows joined, rebuilt only when an episode comes or goes (an
        # update draws from them hundreds of times per episode).
        self._rows: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self.weights_of: Callable[[int], StateDict | None] = lambda _version: None
        self.budget = 0.0
        self.updates = 0
        self.episodes = 0  # labelled
        self.skipped: dict[str, int] = {"moving": 0, "human": 0, "corrected": 0, "unknown": 0}

    # -- the algorithm interface ------------------------------------------------------
    def actor_state(self) -> dict[str, torch.Tensor]:
        """A detached copy of the actor's parameters, named as in the bundle."""
        return {k: v.detach().clone() for k, v in self.actor.state_dict().items()}

    def load_actor_state(self, state: StateDict) -> None:
        self.actor.load_state_dict(state, strict=True)

    def gate_critic(self) -> None:
        """No critics: nothing here rates actions (the gate's offline stage skips the value)."""
        return None

    def modules(self) -> dict[str, torch.nn.Module]:
        return {"actor": self.actor}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"goal": self.optimizer}

    def extra_tensors(self) -> dict[str, torch.Tensor]:
        return {}

    def load_extra_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        del tensors

    def checkpoint_shape(self) -> dict[str, int | bool | str]:
        return {"algorithm": self.name}

    # -- episodes ---------------------------------------------------------------------
    def observe(self, rows: TransitionArrays) -> None:
        """Chain raw transitions into episodes; label each one that finishes."""
        for i in range(len(rows)):
            chain = self._open_rows.pop(_link(rows.observations[i], int(rows.ingress_ns[i])), [])
            chain.append(
                _Step(
                    rows.observations[i].copy(),  # the caller may reuse its buffers
                    rows.next_observations[i].copy(),
                    int(rows.action_sources[i]) == HUMAN_SOURCE_CODE,
                    bool(int(rows.safety_checks[i]) & _HOLDING_CHECKS),
                    int(rows.policy_versions[i]),
                )
            )
            if bool(rows.terminated[i]) or bool(rows.truncated[i]):
                self._finish(chain)
                continue
            self._open_rows[_link(rows.next_observations[i], int(rows.next_ingress_ns[i]))] = chain
            if len(self._open_rows) > _MAX_OPEN_EPISODES:
                del self._open_rows[next(iter(self._open_rows))]

    def _finish(self, chain: list[_Step]) -> None:
        c = self.config
        tail = chain[-c.settle_steps :]
        speed = np.max([np.abs(step.next_observation[self.settle_slice]) for step in tail], axis=0)
        # A goal label needs the whole arm at rest; a tracking label is read per joint, so
        # a joint still moving (a weak wrist's limit cycle under a delay, say) only drops
        # its own entry.
        resting = speed < c.settle_speed
        if c.label == "goal":
            width = self.goal_slice.stop - self.goal_slice.start
            resting = np.full(width, bool(resting.all()))
        if len(chain) < c.settle_steps or not resting.any():
            self.skipped["moving"] += 1
            return
        # Where a request ends says nothing once a person or the supervisor moved it; the
        # arm's error at rest does not depend on who set the command (module docstring).
        if c.label == "goal" and any(step.human for step in chain):
            self.skipped["human"] += 1
            return
        if c.label == "goal" and any(step.holding for step in tail):
            self.skipped["corrected"] += 1
            return
        obs = np.stack([step.observation for step in chain])
        achieved = chain[-1].next_observation[self.achieved_slice]
        if c.label == "tracking":
            # Where the arm rests minus the command it holds there: reading its command
            # moved by this, the actor ends holding a command offset by the opposite,
            # and the arm then rests where the actor meant it to. To first order the
            # error depends on the pose, not on the shift in use, so no version is needed.
            error = achieved - chain[-1].next_observation[self.goal_slice]
            inputs = obs
        else:
            state = self.weights_of(chain[-1].version)
            if state is None:
                self.skipped["unknown"] += 1
                return
            self._scratch.load_state_dict(state)
            last = torch.from_numpy(self.normalize(obs[-1:]))
            assert self._scratch.goal is not None
            with torch.no_grad():
                used = self._scratch.goal.reach(last)[0].numpy()
            error = obs[-1, self.goal_slice] + used - achieved  # asked - achieved
            inputs = obs.copy()
            inputs[:, self.goal_slice] = achieved
        label = np.clip(error, -0.999 * self._bound, 0.999 * self._bound)
        x = torch.from_numpy(self.normalize(inputs))
        y = torch.from_numpy(np.repeat(label[None, :].astype(np.float32), len(x), axis=0))
        weight = torch.from_numpy(np.repeat(resting[None, :].astype(np.float32), len(x), axis=0))
        self._kept.append((x, y, weight))
        self._rows = None
        self.episodes += 1
        self.budget += c.updates_per_episode

    # -- learning ---------------------------------------------------------------------
    def ready(self) -> bool:
        """Whether at least one labelled episode is kept."""
        return len(self._kept) > 0

    def update(self) -> HindsightStats:
        """One regression step of the shift on relabelled states of the kept episodes."""
        if self._rows is None:
            inputs, labels, weights = zip(*self._kept, strict=True)
            self._rows = (torch.cat(inputs), torch.cat(labels), torch.cat(weights))
        xs, ys, ws = self._rows
        pick = torch.randint(0, len(xs), (self.config.batch_size,), generator=self._generator)
        predicted = self.net.reach(xs[pick])
        w = ws[pick]
        loss = ((predicted - ys[pick]).pow(2) * w).sum() / w.sum().clamp(min=1.0)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        self.optimizer.step()
        self.updates += 1
        return HindsightStats(self.updates, float(loss.detach()), len(self._kept))

    def run_updates(self, most: int) -> int:
        """Up to ``most`` of the updates the labelled episodes have earned."""
        if not self.ready():
            return 0
        n = min(int(self.budget), most)
        for _ in range(n):
            self.update()
        self.budget -= n
        return n


def _link(observation: np.ndarray, ingress_ns: int) -> tuple[bytes, int]:
    """Where a chain continues: an observation, bit for bit, and when it arrived."""
    return observation.tobytes(), ingress_ns


def bundle_for_learner(bundle_path: Path, config: LearnerConfig, directory: Path) -> Path:
    """The bundle a run serves and learns from: ``bundle_path`` itself, or, when
    ``config`` learns a goal shift the bundle does not carry, the same version with a
    zero shift (it acts exactly as ``bundle_path`` does), saved under ``directory``."""
    if config.algorithm != "hindsight":
        return bundle_path
    bundle = load_bundle(bundle_path)
    if bundle.architecture.goal_shift is not None:
        return bundle_path
    h = config.hindsight
    shift = goal_shift_for(bundle, goal=h.goal, bound=h.bound, hidden_sizes=h.hidden_sizes)
    target = directory / "start-bundle"
    with_goal_shift(target, bundle, shift, overwrite=True)
    return target
