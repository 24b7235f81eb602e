"""Soft Actor-Critic behind a narrow interface: ``update(batch) -> TrainingStats``.

A critic ensemble (two members by default: clipped double-Q targets; more: REDQ's
minimum over a random subset), a tanh-Gaussian actor, automatic entropy tuning and
Polyak-averaged target critics (Haarnoja et al. 2018; :mod:`tether.learning.critics`). Inputs are
*normalized* observations (the bundle's normalizer, applied by the caller) and actions
in [-1, 1]; a truncated episode still bootstraps, only ``terminated`` cuts the return.

Invariants: ``update`` never changes a parameter outside the optimizers it owns, so with
``freeze_trunk`` the actor trunk stays bit-identical, and during the critic-only warm-up
the actor does not move at all; the actor is the same ``Actor`` class the bundle stores,
so ``actor_state()`` loads into a ``PolicyEngine`` unchanged.

Fine-tuning options (``SACConfig``): ``bc_weight`` adds a TD3+BC pull of the mean action
toward ``reference``, a frozen copy of the actor SAC was built with (never updated);
``actor_warmup_updates`` trains only the critics first (WSRL's warm-up when the data
comes from the deployed policy); ``critic_ensemble_size`` / ``critic_target_subset`` /
``critic_layer_norm`` shape the critics (RLPD/REDQ); ``actor_objective="awac"``
replaces the reparameterized actor loss by advantage-weighted likelihood of the batch's
actions. docs/learning.md has what each did on a drifted arm.

Speed: the per-update work avoids what SB3 pays for -- the actor loss runs the critics
with their parameters' ``requires_grad`` off (no weight gradients computed and thrown
away), target updates are one fused ``_foreach_lerp_``, Adam runs its fused CPU kernel,
and batches enter as zero-copy views of the numpy columns.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from tether.data.records import TransitionBatch
from tether.learning.config import SACConfig
from tether.learning.critics import CriticEnsemble, EnsembleAsTwin
from tether.learning.errors import LearningError
from tether.learning.model import DynamicsModel, model_actor_loss
from tether.policy.bundle import PolicyBundle
from tether.policy.networks import (
    Actor,
    ActorArchitecture,
    TwinCritic,
    gaussian_log_prob,
    squashed_sample,
)

# atanh(±1) is infinite; stored actions at the bound are read as just inside it.
_ACTION_EDGE = 1.0 - 1e-6


@dataclass(frozen=True)
class TrainingStats:
    """What one update did; means over the mini-batch."""

    updates: int  # total updates so far, including this one
    critic_loss: float
    actor_loss: float  # NaN when the actor was not updated this step
    alpha_loss: float  # NaN when alpha is fixed or not updated this step
    alpha: float
    q_mean: float
    entropy: float  # -mean log pi(a|s) of fresh actions (nats); NaN without an actor step


def _adam(params: list[nn.Parameter], lr: float) -> torch.optim.Adam:
    # The fused kernel is a large win on CPU (one pass over all tensors); fall back on
    # builds that lack it rather than fail.
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):  # pragma: no cover - depends on the torch build
        return torch.optim.Adam(params, lr=lr, foreach=True)


class SAC:
    """Soft Actor-Critic over an :class:`ActorArchitecture`; CPU, single process."""

    name = "sac"

    def __init__(
        self,
        arch: ActorArchitecture,
        config: SACConfig | None = None,
        *,
        actor: Actor | None = None,
        log_alpha: float | None = None,
    ) -> None:
        self.config = config or SACConfig()
        cfg = self.config
        self.arch = arch
        self._generator = torch.Generator().manual_seed(cfg.seed)
        # fork_rng: seeding the initialization must not reseed the caller's global RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            self.actor = actor if actor is not None else Actor(arch)
            self.critic = self._ensemble()
            self.critic_target = self._ensemble()
        self.critic_target.load_state_dict(self.critic.state_dict())
        self.critic_target.requires_grad_(False)
        # The behaviour-cloning anchor is the actor as it was handed in (the deployed
        # policy when fine-tuning), frozen: on a few minutes of one arm's data the critic
        # is wrong away from the data, and an unanchored actor climbs those errors.
        self.reference: Actor | None = None
        if cfg.bc_weight > 0:
            self.reference = copy.deepcopy(self.actor).eval().requires_grad_(False)
        if cfg.freeze_trunk:
            self.actor.trunk.requires_grad_(False)
        self._actor_params = [p for p in self.actor.parameters() if p.requires_grad]
        self._critic_params: list[torch.Tensor] = list(self.critic.parameters())
        self._target_params: list[torch.Tensor] = list(self.critic_target.parameters())
        initial = math.log(cfg.initial_alpha) if log_alpha is None else log_alpha
        self.log_alpha = nn.Parameter(torch.tensor(initial, dtype=torch.float32))
        self.target_entropy = (
            float(-arch.act_dim) if cfg.target_entropy is None else cfg.target_entropy
        )
        self.actor_optimizer = _adam(self._actor_params, cfg.actor_lr * cfg.lr_scale)
        self.critic_optimizer = _adam(list(self.critic.parameters()), cfg.critic_lr * cfg.lr_scale)
        self.alpha_optimizer = _adam([self.log_alpha], cfg.alpha_lr * cfg.lr_scale)
        self.model: DynamicsModel | None = None
        if cfg.actor_objective == "model":
            self.model = DynamicsModel(
                arch.obs_dim,
                arch.act_dim,
                cfg.model_hidden_sizes,
                cfg.model_members,
                cfg.model_lr,
                cfg.seed,
            )
        self.model_loss = math.nan
        self.updates = 0

    def _ensemble(self) -> CriticEnsemble:
        cfg = self.config
        return CriticEnsemble(
            self.arch, size=cfg.critic_ensemble_size, layer_norm=cfg.critic_layer_norm
        )

    def load_twin_critics(
        self, critic: dict[str, torch.Tensor], critic_target: dict[str, torch.Tensor]
    ) -> None:
        """Warm-start critics and target critics from a bundle's ``TwinCritic`` states
        (:meth:`CriticEnsemble.load_twin`; the same perturbation for both, so each
        extra member's target starts where the member does)."""
        noise = self.config.critic_member_noise
        for module, state in ((self.critic, critic), (self.critic_target, critic_target)):
            module.load_twin(
                state, member_noise=noise, generator=torch.Generator().manual_seed(self.config.seed)
            )

    def twin_critic_states(self) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """Critics and target critics as a bundle's ``TwinCritic`` state dicts (for a
        training section); only a pair without LayerNorm has that shape."""
        if self.critic.size != 2 or self.critic.layer_norm:
            raise LearningError(
                f"a bundle's training section holds twin critics without LayerNorm; this SAC "
                f"has {self.critic.size} members, layer_norm={self.critic.layer_norm}; "
                "pretrain with critic_ensemble_size=2 and critic_layer_norm=false"
            )

        def twin(module: CriticEnsemble) -> dict[str, torch.Tensor]:
            return {
                f"q{i + 1}.{k}": v.detach().clone()
                for i, member in enumerate(module.members)
                for k, v in member.state_dict().items()
            }

        return twin(self.critic), twin(self.critic_target)

    def gate_critic(self) -> TwinCritic:
        """The critics as the gate's offline stage reads them (a ``TwinCritic`` call)."""
        return EnsembleAsTwin(self.critic)

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.detach().exp())

    def update(self, batch: TransitionBatch) -> TrainingStats:
        """One gradient step of critics, then (every ``actor_update_interval``) actor and alpha."""
        cfg = self.config
        obs = torch.from_numpy(np.ascontiguousarray(batch.observations, dtype=np.float32))
        act = torch.from_numpy(np.ascontiguousarray(batch.actions, dtype=np.float32))
        rew = torch.from_numpy(np.ascontiguousarray(batch.rewards, dtype=np.float32))
        nxt = torch.from_numpy(np.ascontiguousarray(batch.next_observations, dtype=np.float32))
        # Only a true terminal state has zero value; truncation (time limit) bootstraps.
        not_done = torch.from_numpy(~np.asarray(batch.terminated, dtype=bool)).to(torch.float32)
        alpha = self.log_alpha.detach().exp()

        with torch.no_grad():
            next_action, next_log_prob = self.actor.sample(nxt, generator=self._generator)
            next_q = self.critic_target.target_min(
                nxt, next_action, cfg.critic_target_subset, self._generator
            )
            target = rew + cfg.gamma * not_done * (next_q - alpha * next_log_prob)

        q = self.critic(obs, act)
        # Sum over members of each member's mean squared error, halved: for a pair this
        # is the twin critics' 0.5 * (mse1 + mse2).
        critic_loss = 0.5 * ((q - target) ** 2).mean(dim=1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        if self.model is not None:
            # Fitted from the first update, through the warm-up: the actor needs a model
            # of the arm as it is now before the first imagined rollout.
            self.model_loss = self.model.fit(obs, act, rew, nxt)

        actor_loss_value = alpha_loss_value = entropy = math.nan
        warm = self.updates >= cfg.actor_warmup_updates
        if self.model is not None:
            # The model is not checkpointed: a restored learner refits it for a whole
            # warm-up before its rollouts steer the actor again.
            warm = warm and self.model.fits > cfg.actor_warmup_updates
        if warm and self.updates % cfg.actor_update_interval == 0:
            actor_loss_value, alpha_loss_value, entropy = self._update_actor(obs, act, alpha)

        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._critic_params, cfg.tau)
        self.updates += 1
        return TrainingStats(
            updates=self.updates,
            critic_loss=float(critic_loss.detach()),
            actor_loss=actor_loss_value,
            alpha_loss=alpha_loss_value,
            alpha=float(alpha),
            q_mean=float(q[0].detach().mean()),
            entropy=entropy,
        )

    def _update_actor(
        self, obs: torch.Tensor, act: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[float, float, float]:
        # One forward serves the sample and the losses that need the mean (AWAC, the anchor).
        mu, log_std = self.actor(obs)
        action, log_prob = squashed_sample(mu, log_std, generator=self._generator)
        # The critics are a fixed function here: turning their weight gradients off saves
        # two backward matmuls per layer that SB3 computes and then discards.
        self.critic.requires_grad_(False)
        try:
            q = self.critic.actor_value(obs, action)
        finally:
            self.critic.requires_grad_(True)
        if self.config.actor_objective == "awac":
            actor_loss = self._awac_loss(obs, act, mu, log_std, q.detach())
        elif self.model is not None:
            actor_loss = self._model_loss(obs)
        else:
            actor_loss = (alpha * log_prob - q).mean()
        if self.reference is not None:
            actor_loss = actor_loss + self._bc_loss(self.reference, obs, mu, q)
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()  # type: ignore[no-untyped-call]
        self.actor_optimizer.step()

        log_prob = log_prob.detach()
        alpha_loss_value = math.nan
        if self.config.autotune_alpha:
            alpha_loss = -(self.log_alpha * (log_prob + self.target_entropy)).mean()
            self.alpha_optimizer.zero_grad(set_to_none=True)
            alpha_loss.backward()  # type: ignore[no-untyped-call]
            self.alpha_optimizer.step()
            alpha_loss_value = float(alpha_loss.detach())
        return float(actor_loss.detach()), alpha_loss_value, float(-log_prob.mean())

    def _model_loss(self, obs: torch.Tensor) -> torch.Tensor:
        """Minus the imagined return of the mean action (:func:`model_actor_loss`)."""
        assert self.model is not None
        cfg = self.config

        def policy(state: torch.Tensor) -> torch.Tensor:
            return torch.tanh(self.actor(state)[0])

        self.critic.requires_grad_(False)
        try:
            return model_actor_loss(
                self.model,
                policy,
                obs[: cfg.model_rollout_rows],
                horizon=cfg.model_horizon,
                gamma=cfg.gamma,
                generator=self._generator,
                terminal_value=self.critic.actor_value,
                terminal_weight=cfg.model_terminal_weight,
            )
        finally:
            self.critic.requires_grad_(True)

    def _awac_loss(
        self,
        obs: torch.Tensor,
        act: torch.Tensor,
        mu: torch.Tensor,
        log_std: torch.Tensor,
        value: torch.Tensor,
    ) -> torch.Tensor:
        """Advantage-weighted log-likelihood of the batch's actions (Nair et al. 2020).

        ``value`` is Q at a fresh policy sample, a one-sample estimate of V(s). Weights
        are a softmax over the batch of standardized advantages, times the batch size,
        so their mean is one whatever the reward scale.
        """
        with torch.no_grad():
            advantage = self.critic.actor_value(obs, act) - value
            scaled = self.config.awac_beta * advantage / (advantage.std() + 1e-6)
            weights = torch.softmax(scaled, dim=0) * len(scaled)
            # Pre-squash actions: the tanh Jacobian does not depend on the parameters.
            u = torch.atanh(act.clamp(-_ACTION_EDGE, _ACTION_EDGE))
        return -(weights * gaussian_log_prob(u, mu, log_std)).mean()

    def _bc_loss(
        self, reference: Actor, obs: torch.Tensor, mu: torch.Tensor, q: torch.Tensor
    ) -> torch.Tensor:
        """TD3+BC's anchor: squared distance of the mean actions, scaled by mean |Q|.

        Scaling by the (detached) Q magnitude makes ``bc_weight`` mean the same thing
        whatever the reward scale: 0.4 is TD3+BC's published alpha of 2.5.
        """
        with torch.no_grad():
            anchor = torch.tanh(reference(obs)[0])
        mean_action = torch.tanh(mu)
        scale = self.config.bc_weight * q.detach().abs().mean()
        return scale * nn.functional.mse_loss(mean_action, anchor)

    def actor_state(self) -> dict[str, torch.Tensor]:
        """A detached copy of the actor's parameters, named as in the bundle's weights file."""
        return {k: v.detach().clone() for k, v in self.actor.state_dict().items()}

    def load_actor_state(self, state: dict[str, torch.Tensor]) -> None:
        """Replace the actor's parameters (names and shapes must match the architecture)."""
        self.actor.load_state_dict(state, strict=True)

    # --- checkpoints (tether.learning.checkpoint) ---------------------------------------

    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "critic": self.critic, "critic_target": self.critic_target}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {
            "actor": self.actor_optimizer,
            "critic": self.critic_optimizer,
            "alpha": self.alpha_optimizer,
        }

    def extra_tensors(self) -> dict[str, torch.Tensor]:
        return {"log_alpha": self.log_alpha.detach().reshape(1)}

    def load_extra_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        with torch.no_grad():
            self.log_alpha.copy_(tensors["log_alpha"][0])

    def checkpoint_shape(self) -> dict[str, int | bool | str]:
        # No "algorithm" key: checkpoints written before PPO existed stay readable.
        return {"ensemble_size": self.critic.size, "layer_norm": self.critic.layer_norm}

    def act(self, observations: np.ndarray, *, deterministic: bool = False) -> np.ndarray:
        """Actions in [-1, 1] for normalized ``observations`` (B, obs_dim); for data collection."""
        with torch.no_grad():
            obs = torch.from_numpy(np.ascontiguousarray(observations, dtype=np.float32))
            action, _ = self.actor.sample(
                obs, deterministic=deterministic, generator=self._generator
            )
        return action.numpy()


def sac_from_bundle(bundle: PolicyBundle, config: SACConfig) -> SAC:
    """SAC continuing ``bundle``: its actor and, when it has a training section, the
    critics, target critics and entropy coefficient that judged that actor (every
    ensemble member warm-started from them, :meth:`SAC.load_twin_critics`).

    Fine-tuning must start from those critics, not random ones: a random critic drags a
    good actor toward whatever it happens to rate highest before it has learnt anything.
    Without a training section the critics start fresh (the caller decides whether that
    is acceptable).
    """
    training = bundle.training
    sac = SAC(
        bundle.architecture,
        config,
        actor=bundle.build_actor().train(),
        log_alpha=None if training is None else training.log_alpha,
    )
    if training is not None:
        sac.load_twin_critics(dict(training.critic), dict(training.critic_target))
    return sac
