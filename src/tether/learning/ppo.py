"""Proximal Policy Optimization behind the same narrow interface as SAC.

:class:`PPO` trains the bundle's own ``Actor`` (a tanh-squashed Gaussian) and a value
network with the clipped surrogate objective (Schulman et al. 2017), advantages from
GAE(lambda) (Schulman et al. 2016), a Gaussian entropy bonus and a KL early stop. Its
data is :class:`Rollouts`: on-policy transitions of exactly one *behaviour version*.

Version purity (docs/learning.md): the behaviour version is the version whose weights
the learner deployed and follows (``LearnerCore.follow``); every transition names the
version that produced it (``policy_versions``, stamped at the edge), and
:meth:`Rollouts.extend` keeps only rows stamped with the behaviour version whose action
the policy chose (a person's override was not sampled from it). When the behaviour
version changes, the partial rollout of the old one is dropped. Old log-probabilities
are computed from the behaviour version's weights, which the learner holds, so the
ratio ``pi_learner / pi_behaviour`` is exact for every row of a batch.

The learner's actor is not reset to the behaviour weights per rollout: what is deployed
is a Polyak step toward it (``tether.learning.publication``), so it runs ahead of the
behaviour version; the ratio's clip and the KL early stop (measured against the
behaviour version) bound how far.

Trajectories are rebuilt without session ids: row ``j`` follows row ``i`` iff ``i`` did
not end its episode, ``ingress_ns[j] == next_ingress_ns[i]`` (the recorder stamps both
from the same step) and ``observations[j] == next_observations[i]`` bit for bit. A row
whose successor is not in the rollout bootstraps from ``V(next_observation)``; only
``terminated`` cuts the return to zero.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from tether.data.columns import TransitionArrays
from tether.data.step import HUMAN_SOURCE_CODE
from tether.learning.config import PPOConfig
from tether.policy.bundle import PolicyBundle
from tether.policy.networks import (
    Actor,
    ActorArchitecture,
    TwinCritic,
    activation_module,
    gaussian_log_prob,
)

StateDict = dict[str, torch.Tensor]

# atanh(±1) is infinite; stored actions at the bound are read as just inside it.
_ACTION_EDGE = 1.0 - 1e-6
_HALF_LOG_2PI_E = 0.5 * math.log(2 * math.pi * math.e)


class PPOBatch(NamedTuple):
    """One mini-batch of a rollout, everything the clipped objective reads."""

    observations: np.ndarray  # (B, obs_dim) float32, normalized
    actions: np.ndarray  # (B, act_dim) float32, the actor's output in [-1, 1]
    old_log_probs: np.ndarray  # (B,) float32, pre-squash log pi_behaviour(a|s)
    advantages: np.ndarray  # (B,) float32, GAE
    returns: np.ndarray  # (B,) float32, value targets
    policy_versions: np.ndarray  # (B,) int64, every one the behaviour version

    def __len__(self) -> int:
        return int(self.returns.shape[0])


@dataclass(frozen=True)
class PPOStats:
    """What one update did; means over the mini-batch."""

    updates: int  # total updates so far, including this one
    policy_loss: float  # NaN during the value warm-up
    value_loss: float
    entropy: float  # Gaussian entropy of the pre-squash policy (nats)
    approx_kl: float  # KL(behaviour || learner) estimate before this step (nats)
    clip_fraction: float  # share of rows whose ratio was clipped
    stopped: bool  # the KL early stop fired: no step taken, the rollout is done


class ValueNetwork(nn.Module):
    """``V(s)`` over normalized observations: the actor's hidden widths, one output."""

    def __init__(self, arch: ActorArchitecture) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        last = arch.obs_dim
        for h in arch.hidden_sizes:
            layers += [nn.Linear(last, h), activation_module(arch.activation)]
            last = h
        self.body = nn.Sequential(*layers)
        self.out = nn.Linear(last, 1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.out(self.body(obs)).squeeze(-1)  # type: ignore[no-any-return]


def _tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))


def pre_squash(actions: torch.Tensor) -> torch.Tensor:
    """The Gaussian sample behind tanh-squashed ``actions`` (the Jacobian of tanh does not
    depend on the parameters, so it cancels in every ratio)."""
    return torch.atanh(actions.clamp(-_ACTION_EDGE, _ACTION_EDGE))


class Rollouts:
    """On-policy transitions of one behaviour version, handed out ``rollout_length`` at
    a time (rows past a full rollout start the next one of the same version).

    Invariant: every row held was stamped with ``version`` and chosen by the policy."""

    def __init__(self, obs_dim: int, act_dim: int, rollout_length: int) -> None:
        self.length = rollout_length
        self._empty = TransitionArrays.empty(0, obs_dim, act_dim)
        self._parts: list[TransitionArrays] = []
        self._size = 0
        self.version: int | None = None
        self.behaviour: StateDict | None = None
        self.dropped_other_version = 0  # rows stamped with another version (never used)
        self.dropped_human = 0  # rows whose action a person chose
        self.dropped_partial = 0  # rows of a behaviour version that stopped being deployed

    def __len__(self) -> int:
        return self._size

    def follow(self, version: int, weights: StateDict) -> None:
        """Train on ``version`` (its ``weights``) from now on; a partial rollout of another
        version is dropped."""
        if version == self.version:
            return
        self.dropped_partial += self._size
        self._parts, self._size = [], 0
        self.version = version
        self.behaviour = {k: v.detach().clone() for k, v in weights.items()}

    def extend(self, rows: TransitionArrays) -> None:
        """Keep the rows of ``rows`` (normalized) that the behaviour version chose."""
        if self.version is None:
            self.dropped_other_version += len(rows)
            return
        same = rows.policy_versions == self.version
        human = rows.action_sources == HUMAN_SOURCE_CODE
        self.dropped_other_version += int((~same).sum())
        self.dropped_human += int((same & human).sum())
        keep = np.flatnonzero(same & ~human)
        if len(keep):
            self._parts.append(rows.take(keep))
            self._size += len(keep)

    def full(self) -> bool:
        return self._size >= self.length

    def take(self) -> tuple[int, StateDict, TransitionArrays]:
        """The oldest full rollout, with its version and that version's weights."""
        assert self.full()
        assert self.version is not None
        assert self.behaviour is not None
        held = TransitionArrays.concat(self._parts)
        rest = held.take(np.arange(self.length, self._size))
        self._parts = [rest] if len(rest) else []
        self._size = len(rest)
        return self.version, self.behaviour, held.take(np.arange(self.length))


def successors(rows: TransitionArrays) -> np.ndarray:
    """Index of the row that continues each row's trajectory inside ``rows``; -1 where
    none does (see the module doc for the rule)."""
    n = len(rows)
    out = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return out
    order = np.argsort(rows.ingress_ns, kind="stable")
    stamps = rows.ingress_ns[order]
    start = np.searchsorted(stamps, rows.next_ingress_ns, side="left")
    ended = rows.terminated | rows.truncated
    for i in np.flatnonzero(~ended & (start < n)):
        p = int(start[i])
        while p < n and stamps[p] == rows.next_ingress_ns[i]:
            j = int(order[p])
            if rows.ingress_ns[j] > rows.ingress_ns[i] and np.array_equal(
                rows.observations[j], rows.next_observations[i]
            ):
                out[i] = j
                break
            p += 1
    return out


def gae(
    rows: TransitionArrays,
    values: np.ndarray,
    next_values: np.ndarray,
    *,
    gamma: float,
    lam: float,
) -> np.ndarray:
    """GAE(lambda) advantages of ``rows`` (values of their observations and next ones)."""
    following = successors(rows)
    not_terminal = (~rows.terminated).astype(np.float64)
    delta = rows.rewards + gamma * not_terminal * next_values - values
    advantages = np.zeros(len(rows), dtype=np.float64)
    # A successor has a later ingress stamp, so latest-first visits it before its parent.
    for i in np.argsort(rows.ingress_ns, kind="stable")[::-1]:
        j = following[i]
        advantages[i] = delta[i] + (gamma * lam * advantages[j] if j >= 0 else 0.0)
    return advantages.astype(np.float32)


class PPO:
    """PPO over an :class:`ActorArchitecture`; CPU, single process."""

    name = "ppo"

    def __init__(
        self,
        arch: ActorArchitecture,
        config: PPOConfig | None = None,
        *,
        actor: Actor | None = None,
    ) -> None:
        self.config = config or PPOConfig()
        cfg = self.config
        self.arch = arch
        self._generator = torch.Generator().manual_seed(cfg.seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            self.actor = actor if actor is not None else Actor(arch)
            self.value = ValueNetwork(arch)
        if cfg.freeze_trunk:
            self.actor.trunk.requires_grad_(False)
        self._behaviour = Actor(arch).eval().requires_grad_(False)
        params = [p for p in self.actor.parameters() if p.requires_grad]
        params += list(self.value.parameters())
        self._params = params
        self.optimizer = _adam(params, cfg.learning_rate * cfg.lr_scale)
        self.updates = 0
        self.rollouts = 0  # rollouts whose schedule finished (value warm-up counts them)

    # --- the narrow interface ----------------------------------------------------------

    def update(self, batch: PPOBatch, *, train_actor: bool = True) -> PPOStats:
        """One gradient step of the clipped objective (unless the KL early stop fires)."""
        cfg = self.config
        obs = _tensor(batch.observations)
        u = pre_squash(_tensor(batch.actions))
        old = _tensor(batch.old_log_probs)
        adv = _tensor(batch.advantages)
        if cfg.normalize_advantages and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        returns = _tensor(batch.returns)

        mu, log_std = self.actor(obs)
        log_ratio = gaussian_log_prob(u, mu, log_std) - old
        ratio = log_ratio.exp()
        with torch.no_grad():
            approx_kl = float(((ratio - 1) - log_ratio).mean())
            clip_fraction = float(((ratio - 1).abs() > cfg.clip_range).float().mean())
        value_loss = nn.functional.mse_loss(self.value(obs), returns)
        entropy = (log_std + _HALF_LOG_2PI_E).sum(-1).mean()
        if train_actor and cfg.kl_target is not None and approx_kl > cfg.kl_target:
            return PPOStats(
                self.updates,
                math.nan,
                float(value_loss.detach()),
                float(entropy.detach()),
                approx_kl,
                clip_fraction,
                stopped=True,
            )
        loss = cfg.value_coef * value_loss
        policy_loss_value = math.nan
        if train_actor:
            clipped = ratio.clamp(1 - cfg.clip_range, 1 + cfg.clip_range)
            policy_loss = -torch.min(adv * ratio, adv * clipped).mean()
            loss = loss + policy_loss - cfg.entropy_coef * entropy
            policy_loss_value = float(policy_loss.detach())
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        nn.utils.clip_grad_norm_(self._params, cfg.max_grad_norm)
        self.optimizer.step()
        self.updates += 1
        return PPOStats(
            self.updates,
            policy_loss_value,
            float(value_loss.detach()),
            float(entropy.detach()),
            approx_kl,
            clip_fraction,
            stopped=False,
        )

    def schedule(self, rows: TransitionArrays, behaviour: StateDict) -> Iterator[PPOStats]:
        """Every update of one rollout: advantages and old log-probs from ``behaviour``
        (the weights of the version that produced ``rows``), then ``epochs`` shuffled
        passes of mini-batches; ends early when the KL early stop fires."""
        cfg = self.config
        self._behaviour.load_state_dict(behaviour)
        obs, nxt = _tensor(rows.observations), _tensor(rows.next_observations)
        with torch.no_grad():
            mu, log_std = self._behaviour(obs)
            old = gaussian_log_prob(pre_squash(_tensor(rows.actions)), mu, log_std).numpy()
            values = self.value(obs).numpy().astype(np.float64)
            next_values = self.value(nxt).numpy().astype(np.float64)
        advantages = gae(rows, values, next_values, gamma=cfg.gamma, lam=cfg.gae_lambda)
        returns = (advantages + values).astype(np.float32)
        train_actor = self.rollouts >= cfg.value_warmup_rollouts
        n = len(rows)
        try:
            for _ in range(cfg.epochs):
                order = torch.randperm(n, generator=self._generator).numpy()
                for start in range(0, n - cfg.minibatch_size + 1, cfg.minibatch_size):
                    idx = order[start : start + cfg.minibatch_size]
                    batch = PPOBatch(
                        rows.observations[idx],
                        rows.actions[idx],
                        old[idx],
                        advantages[idx],
                        returns[idx],
                        rows.policy_versions[idx],
                    )
                    stats = self.update(batch, train_actor=train_actor)
                    yield stats
                    if stats.stopped:
                        return
        finally:
            self.rollouts += 1

    def actor_state(self) -> StateDict:
        """A detached copy of the actor's parameters, named as in the bundle's weights file."""
        return {k: v.detach().clone() for k, v in self.actor.state_dict().items()}

    def load_actor_state(self, state: StateDict) -> None:
        self.actor.load_state_dict(state, strict=True)

    def gate_critic(self) -> TwinCritic | None:
        """PPO has no action-value critic for the gate's offline Q check."""
        return None

    # --- checkpoints --------------------------------------------------------------------

    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "value": self.value}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"ppo": self.optimizer}

    def extra_tensors(self) -> dict[str, torch.Tensor]:
        return {"rollouts": torch.tensor([self.rollouts], dtype=torch.int64)}

    def load_extra_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        self.rollouts = int(tensors["rollouts"][0])

    def checkpoint_shape(self) -> dict[str, int | bool | str]:
        return {"algorithm": self.name}


def ppo_from_bundle(bundle: PolicyBundle, config: PPOConfig) -> PPO:
    """PPO continuing ``bundle``'s actor; its value network starts fresh (the value
    warm-up, ``PPOConfig.value_warmup_rollouts``, fits it before the actor moves)."""
    return PPO(bundle.architecture, config, actor=bundle.build_actor().train())


def _adam(params: list[nn.Parameter], lr: float) -> torch.optim.Adam:
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):  # pragma: no cover - depends on the torch build
        return torch.optim.Adam(params, lr=lr, foreach=True)
