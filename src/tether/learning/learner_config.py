"""Configuration of the learner process: algorithm, publication, gate, pacing, placement, recovery."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tether.data.replay.buffer import ReplayBufferConfig
from tether.learning.config import PPOConfig, SACConfig
from tether.learning.hindsight import HindsightConfig
from tether.learning.prior import PriorDataConfig
from tether.learning.publication import PublicationConfig
from tether.versions.learner_gate import LearnerGateConfig


class LearnerConfig(BaseModel):
    """Everything the learner process reads; the runtime builds one from its YAML."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    algorithm: Literal["hindsight", "sac", "ppo"] = Field(
        default="hindsight",
        description="What learns from the robots' transitions: 'hindsight' trains a bounded "
        "shift of what the frozen actor reads (by default its command, from the arm's "
        "tracking error at rest) from where each episode ended "
        "(tether.learning.hindsight; the bundle is given a zero shift when it has none); "
        "'sac' fine-tunes the actor itself (off-policy, replay); 'ppo' too, on-policy from "
        "rollouts of the deployed version only (updates_per_transition, replay and prior "
        "apply to 'sac' only) (name)",
    )
    hindsight: HindsightConfig = Field(
        default_factory=HindsightConfig,
        description="The goal shift and its hindsight labels (algorithm 'hindsight')",
    )
    sac: SACConfig = Field(default_factory=SACConfig, description="SAC hyper-parameters")
    ppo: PPOConfig = Field(default_factory=PPOConfig, description="PPO hyper-parameters")
    publication: PublicationConfig = Field(
        default_factory=PublicationConfig,
        description="Polyak step, trust region and pacing of publications",
    )
    gate: LearnerGateConfig = Field(
        default_factory=LearnerGateConfig,
        description="Learner-side promotion-gate stages every candidate passes before it is published",
    )
    replay: ReplayBufferConfig = Field(
        default_factory=ReplayBufferConfig,
        description="Replay buffer sizes and sampling mix",
    )
    prior: PriorDataConfig = Field(
        default_factory=PriorDataConfig,
        description="Prior data from the nominal built-in arm mixed into every batch (RLPD)",
    )
    fine_tune: bool = Field(
        default=True,
        description="Freeze the actor trunk, scale learning rates by fine_tune_lr_scale and "
        "publish fine_tune_interval_factor times less often; start from the bundle's critics (flag)",
    )
    fine_tune_lr_scale: float = Field(
        default=0.2, gt=0.0, le=1.0, description="Learning-rate multiplier when fine-tuning (1)"
    )
    fine_tune_bc_weight: float = Field(
        default=0.4,
        ge=0.0,
        description="Behaviour-cloning pull toward the bundle's actor when fine-tuning "
        "(SACConfig.bc_weight; 0.4 is TD3+BC's strength): without it a few minutes of one "
        "arm's data drive the actor below the frozen policy (docs/learning.md) (1)",
    )
    fine_tune_autotune_alpha: bool = Field(
        default=False,
        description="Keep tuning the entropy coefficient when fine-tuning; off keeps the "
        "bundle's coefficient: SAC's default target entropy (-act_dim) lies far above a "
        "pretrained policy's, so alpha can only grow, and a larger alpha pulls the mean action "
        "toward the centre of the range, where the tanh squash has the most entropy (flag)",
    )
    fine_tune_interval_factor: float = Field(
        default=2.5,
        ge=1.0,
        description="Publication interval multiplier when fine-tuning (1)",
    )
    updates_per_transition: float | None = Field(
        default=1.0,
        gt=0.0,
        description="Update-to-data ratio: gradient updates per new transition; None updates "
        "as fast as possible (benchmarks) (updates/transition)",
    )
    drain_max_rows: int = Field(
        default=4096, ge=1, description="Most transitions taken from the channel per drain (rows)"
    )
    idle_poll_s: float = Field(
        default=0.005,
        gt=0.0,
        le=1.0,
        description="How long the learner waits for new transitions when it has no update to do (s)",
    )
    checkpoint_interval_s: float = Field(
        default=30.0, gt=0.0, description="Time between learner checkpoints (s)"
    )
    cores: tuple[int, ...] | None = Field(
        default=None,
        description="CPU cores the learner process is pinned to; None picks by learner_placement() (core ids)",
    )
    torch_threads: int | None = Field(
        default=None,
        ge=1,
        description="Torch intra-op threads in the learner; None picks by learner_placement() (threads)",
    )
    nice: int = Field(
        default=5,
        ge=0,
        le=19,
        description="Niceness added to the learner process so serving wins any contention (niceness)",
    )
    max_restarts: int = Field(
        default=5,
        ge=0,
        description="Restarts after crashes within restart_window_s before the supervisor gives up (restarts)",
    )
    restart_window_s: float = Field(
        default=300.0, gt=0.0, description="Window over which crashes are counted (s)"
    )
    restart_backoff_s: float = Field(
        default=1.0, ge=0.0, description="Wait before restarting a crashed learner (s)"
    )

    def effective_sac(self) -> SACConfig:
        if not self.fine_tune:
            return self.sac
        tuned = self.sac.fine_tuning(self.fine_tune_lr_scale, self.fine_tune_bc_weight)
        return tuned.model_copy(update={"autotune_alpha": self.fine_tune_autotune_alpha})

    def effective_ppo(self) -> PPOConfig:
        return self.ppo.fine_tuning(self.fine_tune_lr_scale) if self.fine_tune else self.ppo

    def effective_min_interval_s(self) -> float:
        factor = self.fine_tune_interval_factor if self.fine_tune else 1.0
        return self.publication.min_interval_s * factor
