"""Hyper-parameters of SAC and of PPO, one validated model each (CleanRL-style: read
them top to bottom).

Every field has a default, a unit and a help line; the CLI and YAML loading are built
from this model, so a hyper-parameter exists in exactly one place.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SACConfig(BaseModel):
    """Soft Actor-Critic: twin critics, automatic entropy tuning, Polyak target networks."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gamma: float = Field(
        default=0.99, gt=0.0, le=1.0, description="Discount factor per control step (1)"
    )
    tau: float = Field(
        default=0.005,
        gt=0.0,
        le=1.0,
        description="Polyak rate of the target critics per update (1)",
    )
    batch_size: int = Field(
        default=256, ge=1, le=65536, description="Mini-batch size per update (transitions)"
    )
    actor_lr: float = Field(
        default=3e-4, gt=0.0, description="Adam learning rate of the actor (1/update)"
    )
    critic_lr: float = Field(
        default=3e-4, gt=0.0, description="Adam learning rate of the critics (1/update)"
    )
    alpha_lr: float = Field(
        default=3e-4,
        gt=0.0,
        description="Adam learning rate of the log entropy coefficient (1/update)",
    )
    hidden_sizes: tuple[int, ...] = Field(
        default=(256, 256),
        min_length=1,
        description="Hidden layer widths of actor and critics (units)",
    )
    activation: Literal["relu", "tanh", "elu", "silu"] = Field(
        default="relu", description="Hidden activation of actor and critics (name)"
    )
    initial_alpha: float = Field(
        default=1.0, gt=0.0, description="Initial entropy coefficient before tuning (1)"
    )
    autotune_alpha: bool = Field(
        default=True, description="Tune the entropy coefficient toward target_entropy (flag)"
    )
    target_entropy: float | None = Field(
        default=None, description="Target policy entropy; None means -act_dim (nats)"
    )
    actor_update_interval: int = Field(
        default=1, ge=1, description="Update the actor and alpha every N critic updates (updates)"
    )
    freeze_trunk: bool = Field(
        default=False,
        description="Fine-tuning: keep the actor trunk fixed, train head and critics (flag)",
    )
    lr_scale: float = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="Multiplier on every learning rate, e.g. 0.2 when fine-tuning (1)",
    )
    bc_weight: float = Field(
        default=0.0,
        ge=0.0,
        description="Behaviour-cloning pull of the actor's mean action toward the reference "
        "(initial) actor's, as a multiple of mean |Q| so it is scale-free (TD3+BC); 0 disables (1)",
    )
    actor_objective: Literal["sac", "awac", "model"] = Field(
        default="sac",
        description="Actor update: 'sac' follows the critic's action gradient; 'awac' re-weights "
        "the log-likelihood of the batch's own actions by exp(advantage) (AWAC), so the actor "
        "never moves toward actions the data does not contain; 'model' maximizes the return of "
        "short rollouts through a dynamics model learnt from the replay buffer "
        "(tether.learning.model) (name)",
    )
    model_horizon: int = Field(
        default=10,
        ge=1,
        le=200,
        description="'model' objective: imagined steps per actor update (steps)",
    )
    model_rollout_rows: int = Field(
        default=64,
        ge=1,
        description="'model' objective: batch states each imagined rollout starts from (the "
        "first of the mini-batch, which is drawn at random) (transitions)",
    )
    model_members: int = Field(
        default=3,
        ge=1,
        le=16,
        description="'model' objective: dynamics ensemble members (networks)",
    )
    model_hidden_sizes: tuple[int, ...] = Field(
        default=(128, 128),
        min_length=1,
        description="'model' objective: hidden widths of each dynamics member (units)",
    )
    model_lr: float = Field(
        default=1e-3,
        gt=0.0,
        description="'model' objective: Adam rate of the dynamics model (1/update)",
    )
    model_terminal_weight: float = Field(
        default=0.0,
        ge=0.0,
        description="'model' objective: weight of the critics' value of the last imagined state; "
        "0 uses the imagined rewards alone (1)",
    )
    awac_beta: float = Field(
        default=1.0,
        gt=0.0,
        description="AWAC inverse temperature on advantages standardized per batch (1/std)",
    )
    actor_warmup_updates: int = Field(
        default=0,
        ge=0,
        description="Critic-only updates before the actor and alpha start learning; when "
        "fine-tuning, on the deployed policy's own transitions (WSRL's warm-up) (updates)",
    )
    critic_ensemble_size: int = Field(
        default=2,
        ge=2,
        le=32,
        description="Q networks in the critic ensemble; 2 is SAC's twin critics, more is "
        "REDQ/RLPD's ensemble (the actor then follows the members' mean) (networks)",
    )
    critic_target_subset: int = Field(
        default=2,
        ge=1,
        description="Members whose minimum forms each target, drawn at random per update; "
        "equal to critic_ensemble_size: the minimum of all (networks)",
    )
    critic_layer_norm: bool = Field(
        default=False,
        description="LayerNorm after each hidden linear layer of the critics (RLPD); the "
        "bundle's critics have none, so their warm start needs the critic-only warm-up (flag)",
    )
    critic_member_noise: float = Field(
        default=0.1,
        ge=0.0,
        description="Ensemble members past the bundle's two start from its weights times "
        "1 + this * N(0, 1), elementwise, so they are not identical copies (1)",
    )
    seed: int = Field(
        default=0, ge=0, description="Seed of network initialization and sampling noise (1)"
    )

    @model_validator(mode="after")
    def _check(self) -> SACConfig:
        if any(h <= 0 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must all be positive, got {self.hidden_sizes}")
        if self.critic_target_subset > self.critic_ensemble_size:
            raise ValueError(
                f"critic_target_subset ({self.critic_target_subset}) cannot exceed "
                f"critic_ensemble_size ({self.critic_ensemble_size})"
            )
        return self

    def fine_tuning(self, lr_scale: float = 0.2, bc_weight: float | None = None) -> SACConfig:
        """The same hyper-parameters for on-robot fine-tuning: frozen trunk, scaled-down
        rates and, when given, the behaviour-cloning pull toward the initial actor."""
        update: dict[str, object] = {"freeze_trunk": True, "lr_scale": lr_scale}
        if bc_weight is not None:
            update["bc_weight"] = bc_weight
        return self.model_copy(update=update)


class PPOConfig(BaseModel):
    """Proximal Policy Optimization: clipped ratio, GAE, a value network, entropy bonus,
    KL early stop; on-policy rollouts of exactly one deployed version (docs/learning.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gamma: float = Field(
        default=0.99, gt=0.0, le=1.0, description="Discount factor per control step (1)"
    )
    gae_lambda: float = Field(
        default=0.95, ge=0.0, le=1.0, description="GAE's lambda: bias/variance of advantages (1)"
    )
    clip_range: float = Field(
        default=0.2,
        gt=0.0,
        lt=1.0,
        description="Clip of the probability ratio to the behaviour version, 1 ± this (1)",
    )
    value_coef: float = Field(
        default=0.5, ge=0.0, description="Weight of the value loss in the joint loss (1)"
    )
    entropy_coef: float = Field(
        default=0.0, ge=0.0, description="Weight of the Gaussian entropy bonus (1/nats)"
    )
    epochs: int = Field(
        default=10, ge=1, le=1000, description="Passes over each rollout (epochs/rollout)"
    )
    minibatch_size: int = Field(
        default=64, ge=1, le=65536, description="Transitions per gradient step (transitions)"
    )
    kl_target: float | None = Field(
        default=0.02,
        gt=0.0,
        description="Stop a rollout's epochs once the approximate KL(behaviour || learner) of a "
        "mini-batch exceeds this; None never stops early (nats)",
    )
    rollout_length: int = Field(
        default=2048,
        ge=2,
        description="On-policy transitions of one version per rollout (transitions)",
    )
    learning_rate: float = Field(
        default=3e-4, gt=0.0, description="Adam rate of actor and value network (1/update)"
    )
    max_grad_norm: float = Field(
        default=0.5, gt=0.0, description="Global gradient-norm clip per update (1)"
    )
    normalize_advantages: bool = Field(
        default=True, description="Standardize advantages per mini-batch (flag)"
    )
    value_warmup_rollouts: int = Field(
        default=1,
        ge=0,
        description="First rollouts that train only the value network (a bundle with no value "
        "network starts it at random; its advantages would steer the actor) (rollouts)",
    )
    hidden_sizes: tuple[int, ...] = Field(
        default=(256, 256),
        min_length=1,
        description="Hidden widths of actor and value network when training from scratch; "
        "fine-tuning takes the bundle's (units)",
    )
    activation: Literal["relu", "tanh", "elu", "silu"] = Field(
        default="relu", description="Hidden activation when training from scratch (name)"
    )
    freeze_trunk: bool = Field(
        default=False,
        description="Fine-tuning: keep the actor trunk fixed, train head and value (flag)",
    )
    lr_scale: float = Field(
        default=1.0, gt=0.0, le=1.0, description="Multiplier on the learning rate (1)"
    )
    seed: int = Field(default=0, ge=0, description="Seed of initialization and shuffling (1)")

    @model_validator(mode="after")
    def _check(self) -> PPOConfig:
        if any(h <= 0 for h in self.hidden_sizes):
            raise ValueError(f"hidden_sizes must all be positive, got {self.hidden_sizes}")
        if self.minibatch_size > self.rollout_length:
            raise ValueError(
                f"minibatch_size ({self.minibatch_size}) cannot exceed rollout_length "
                f"({self.rollout_length})"
            )
        return self

    def fine_tuning(self, lr_scale: float = 0.2) -> PPOConfig:
        """The same hyper-parameters for on-robot fine-tuning: frozen trunk, scaled rate."""
        return self.model_copy(update={"freeze_trunk": True, "lr_scale": lr_scale})
