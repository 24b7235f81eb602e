"""Pretraining: SAC on the built-in arm under domain randomization, written as a bundle.

``pretrain(config, out)`` trains for the arm's command interface
(``config.command_interface``, default the arm's). With ``demonstration_episodes`` it
first runs the scripted reaching controller (``tether.sim.controllers``) on randomized
arms, puts those transitions into the replay buffer and behaviour-clones the actor on
them, then lets SAC improve it (anchored to the cloned actor by ``sac.bc_weight`` when
set). It then collects experience from ``n_envs`` randomized arms with one
batched policy call per step, streams SAC updates at ``updates_per_step`` per
environment step, evaluates the deterministic policy on the *nominal* arm every
``eval_interval_steps``, keeps the best evaluated snapshot (actor with its critics and
entropy coefficient), and writes it as a bundle whose training section carries those
critics, so on-robot fine-tuning starts from them.

Invariant: the learner trains on observations normalized by the normalizer the bundle
ships (``normalizer_from_spec``), through the same function the engine applies.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from tether.data.columns import TransitionArrays
from tether.data.replay.buffer import ReplayBuffer, ReplayBufferConfig
from tether.data.replay.sampler import SamplerConfig
from tether.data.replay.storage import StorageConfig
from tether.learning.config import PPOConfig, SACConfig
from tether.learning.errors import LearningError
from tether.learning.evaluation import EvaluationResult, evaluate_actor
from tether.learning.sac import SAC, sac_from_bundle
from tether.policy.action_frame import CommandStepFrame, command_step_frame
from tether.policy.bundle import (
    PolicyBundle,
    TrainingState,
    check_bundle_target,
    load_bundle,
    save_bundle,
)
from tether.policy.initialize import normalizer_from_spec
from tether.policy.manifest import ActionSpec, ObservationSpec, TrainingMetadata
from tether.policy.networks import Activation, Actor, ActorArchitecture
from tether.policy.transforms import ObservationNormalizer
from tether.safety.for_spec import supervisor_for
from tether.safety.presets import arm_supervisor
from tether.safety.supervises import ActionSupervisor
from tether.sim.config import ArmEnvConfig
from tether.sim.controllers import ReachController
from tether.sim.env import ArmEnv
from tether.sim.randomization import DomainRandomization
from tether.sim.spec import DEFAULT_COMMAND_INTERFACE, arm_spec
from tether.spec import CommandInterface, RobotSpec

# The position bundle's actor steps its command's change by at most this share of the
# supervisor's acceleration cap per step, and its command by at most this share of the
# velocity cap: every output it can produce passes both rate checks, with a margin for
# the float32 round trip. The scripted controller moves at 0.7 and 0.5 of them
# (tether.sim.controllers), so its labels lie inside the frame's reach.
FRAME_ACCELERATION_FRACTION = 0.85
FRAME_VELOCITY_FRACTION = 0.6


def action_frame_for(spec: RobotSpec) -> CommandStepFrame | None:
    """The action frame pretraining gives a bundle for ``spec``: the command step for the
    position interface (the actor steps from the observed command), none for torque."""
    if spec.command_interface != "position":
        return None
    return command_step_frame(
        spec,
        acceleration_fraction=FRAME_ACCELERATION_FRACTION,
        velocity_fraction=FRAME_VELOCITY_FRACTION,
    )


class PretrainConfig(BaseModel):
    """How long and how pretraining runs; SAC's own hyper-parameters live in ``sac``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    algorithm: Literal["sac", "ppo"] = Field(
        default="sac",
        description="Pretraining algorithm: 'sac' (replay, critics in the bundle) or 'ppo' "
        "(on-policy rollouts; the bundle has no training section) (name)",
    )
    sac: SACConfig = Field(
        default_factory=lambda: SACConfig(hidden_sizes=(128, 128)),
        description="SAC hyper-parameters (128x128 networks keep pretraining short on a CPU)",
    )
    ppo: PPOConfig = Field(
        default_factory=lambda: PPOConfig(hidden_sizes=(128, 128)),
        description="PPO hyper-parameters when algorithm is 'ppo' (networks as for SAC)",
    )
    total_env_steps: int = Field(
        default=150_000, ge=1, description="Environment steps, all arms together (steps)"
    )
    time_budget_s: float = Field(
        default=1200.0, gt=0.0, description="Wall-clock limit; training stops when reached (s)"
    )
    n_envs: int = Field(default=4, ge=1, le=64, description="Arms stepped in lockstep (envs)")
    learning_starts: int = Field(
        default=5_000, ge=0, description="Uniform random steps before the first update (steps)"
    )
    updates_per_step: float = Field(
        default=0.5, gt=0.0, description="Gradient updates per environment step (updates/step)"
    )
    replay_capacity: int = Field(
        default=300_000, ge=1, description="Transitions the replay buffer keeps (transitions)"
    )
    randomize: bool = Field(
        default=True,
        description="Draw arm dynamics per episode from the randomization ranges (flag)",
    )
    randomization: Literal["default", "rated"] = Field(
        default="default",
        description="The ranges randomize draws from: DomainRandomization.default() (a "
        "healthy arm) or .rated() (every arm the built-in arm is rated to be) (name)",
    )
    eval_interval_steps: int = Field(
        default=10_000, ge=1, description="Environment steps between evaluations (steps)"
    )
    eval_episodes: int = Field(
        default=10,
        ge=1,
        description="Episodes per periodic evaluation on the nominal arm (episodes)",
    )
    final_eval_episodes: int = Field(
        default=50,
        ge=1,
        description="Episodes of the final evaluation on the nominal arm (episodes)",
    )
    stop_success_rate: float | None = Field(
        default=0.95,
        ge=0.0,
        le=1.0,
        description="Stop early once a periodic evaluation reaches this success rate; None never (fraction)",
    )
    seed: int = Field(
        default=0, ge=0, description="Seed of environments, networks and sampling (1)"
    )
    supervised: bool = Field(
        default=False,
        description="Every action passes the arm's safety supervisor, as on the robot, which "
        "is treated as part of the environment; with intervention_penalty the policy learns "
        "to live within the limits instead of relying on corrections (flag)",
    )
    intervention_penalty: float = Field(
        default=0.5,
        ge=0.0,
        description="Reward subtracted per unit of the supervisor's correction norm while "
        "pretraining, so proposals that need correcting cost something (1/action)",
    )
    init_from: Path | None = Field(
        default=None,
        description="Continue from this bundle's actor, critics and entropy coefficient instead "
        "of random networks; no uniform random warm-up then (path)",
    )
    command_interface: CommandInterface = Field(
        default=DEFAULT_COMMAND_INTERFACE,
        description="How the trained policy commands the arm: 'torque' or 'position' (name)",
    )
    demonstration_episodes: int = Field(
        default=0,
        ge=0,
        description="Episodes of the scripted reaching controller (position interface only) "
        "collected into the replay buffer and behaviour-cloned before SAC starts; no "
        "uniform random warm-up then; 0 disables (episodes)",
    )
    demonstration_noise: float = Field(
        default=0.1,
        ge=0.0,
        le=1.0,
        description="Std of Gaussian noise on the executed demonstration actions, so the "
        "clone sees states off the scripted path and how to return from them (normalized)",
    )
    bc_updates: int = Field(
        default=3000,
        ge=0,
        description="Behaviour-cloning gradient steps on the demonstrations, per round (updates)",
    )
    critic_warmup_updates: int = Field(
        default=0,
        ge=0,
        description="After the behaviour-cloned start: critic-only SAC updates on the "
        "demonstrations before the actor moves, so a random critic does not drag the clone "
        "(updates)",
    )
    clone_std: float = Field(
        default=0.1,
        gt=0.0,
        le=1.0,
        description="Std of the clone's Gaussian before the tanh, fitted with its mean: an "
        "absolute position target is jittered by this times half the joint's command range "
        "per step when actions are sampled (normalized)",
    )
    dagger_rounds: int = Field(
        default=0,
        ge=0,
        description="DAgger rounds after the first clone: the clone drives demonstration_episodes "
        "episodes, the scripted controller labels the states it reached, the clone trains "
        "on everything so far (rounds)",
    )


@dataclass(frozen=True)
class EvalPoint:
    env_steps: int
    episodes: int  # training episodes completed so far
    updates: int
    elapsed_s: float
    result: EvaluationResult


@dataclass(frozen=True)
class PretrainResult:
    bundle: PolicyBundle
    history: tuple[EvalPoint, ...]
    final: EvaluationResult  # of the written policy, final_eval_episodes on the nominal arm
    env_steps: int
    episodes: int
    updates: int
    elapsed_s: float


@dataclass(frozen=True)
class _Snapshot:
    actor: dict[str, torch.Tensor]
    critic: dict[str, torch.Tensor]
    critic_target: dict[str, torch.Tensor]
    log_alpha: float
    success_rate: float


def _snapshot(sac: SAC, success_rate: float) -> _Snapshot:
    def copy(module: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in module.state_dict().items()}

    critic, critic_target = sac.twin_critic_states()
    return _Snapshot(
        copy(sac.actor),
        critic,
        critic_target,
        float(sac.log_alpha.detach()),
        success_rate,
    )


def pretrain_replay(config: PretrainConfig, obs_dim: int, act_dim: int) -> ReplayBuffer:
    # Uniform sampling over everything collected: pretraining has no "recent" to favour.
    return ReplayBuffer(
        obs_dim,
        act_dim,
        ReplayBufferConfig(
            storage=StorageConfig(ring_capacity=config.replay_capacity, reservoir_capacity=0),
            sampler=SamplerConfig(recent_fraction=0.0, seed=config.seed),
        ),
    )


def _randomization_words(config: PretrainConfig) -> str:
    if not config.randomize:
        return "nominal dynamics"
    if config.randomization == "default":
        return "domain randomization"
    return f"{config.randomization} domain randomization"


def pretrain_source(config: PretrainConfig, prior: TrainingMetadata) -> str:
    """How the bundle was made, in words a reader of the manifest can reproduce."""
    parts = [
        f"{config.command_interface} interface",
        _randomization_words(config),
    ]
    if config.demonstration_episodes:
        parts.append(
            f"behaviour-cloned warm start from {config.demonstration_episodes} episodes of "
            f"the scripted DLS reaching controller (noise {config.demonstration_noise}, "
            f"{config.bc_updates} updates, clone std {config.clone_std}, "
            f"{config.dagger_rounds} DAgger rounds, "
            f"{config.critic_warmup_updates} critic-only updates)"
        )
    if config.supervised:
        parts.append(f"supervised, intervention penalty {config.intervention_penalty}")
    if config.algorithm == "ppo":
        p = config.ppo
        parts.append(
            f"PPO: rollouts of {p.rollout_length}, {p.epochs} epochs of {p.minibatch_size}, "
            f"clip {p.clip_range}, KL target {p.kl_target}, lr {p.learning_rate}"
        )
    elif config.sac.bc_weight:
        parts.append(f"anchored to the initial actor, bc_weight {config.sac.bc_weight}")
    if config.algorithm == "sac" and config.sac.target_entropy is not None:
        parts.append(f"target entropy {config.sac.target_entropy}")
    if config.algorithm == "sac" and config.sac.initial_alpha != SACConfig().initial_alpha:
        parts.append(f"initial alpha {config.sac.initial_alpha}")
    text = f"tether pretrain (tether/Arm-v0, {', '.join(parts)}, seed {config.seed})"
    if config.init_from is not None:
        text += f", continuing {prior.source!r} ({prior.env_steps} steps)"
    return text


def _initial_sac(config: PretrainConfig, arch: ActorArchitecture) -> SAC:
    if config.init_from is None:
        return SAC(arch, config.sac)
    base = load_bundle(config.init_from)
    if base.architecture != arch:
        raise LearningError(
            f"{config.init_from}: bundle architecture {base.architecture} differs from the "
            f"requested {arch}; pass --hidden matching the bundle's hidden sizes"
        )
    if base.training is None:
        raise LearningError(
            f"{config.init_from}: bundle has no training section (critics); continue only from "
            "a bundle written by tether pretrain"
        )
    return sac_from_bundle(base, config.sac)


SupervisorFactory = Callable[[], ActionSupervisor]


def supervisor_factory_for(
    config: PretrainConfig, factory: SupervisorFactory | None
) -> SupervisorFactory | None:
    """Which supervisor pretraining acts through (None: unsupervised).

    The torque arm has ``arm_supervisor``; the position arm the position supervisor on
    normalized actions (``supervisor_for``); ``supervisor_factory`` overrides either.
    """
    if not config.supervised:
        return None
    if factory is not None:
        return factory
    if config.command_interface == "torque":
        return arm_supervisor
    return lambda: supervisor_for(arm_spec("position"))


def _check_demonstrations(config: PretrainConfig) -> None:
    if config.demonstration_episodes and config.command_interface != "position":
        raise LearningError(
            "demonstration_episodes needs command_interface='position' (the scripted "
            f"reaching controller commands joint positions), got {config.command_interface!r}"
        )
    if config.demonstration_episodes and config.init_from is not None:
        raise LearningError(
            "demonstration_episodes and init_from both choose the starting actor; pass one"
        )


def _demonstrate(
    config: PretrainConfig,
    envs: list[ArmEnv],
    replay: ReplayBuffer,
    normalize: ObservationNormalizer,
    driver: Actor | None = None,
    round_index: int = 0,
    *,
    frame: CommandStepFrame | None = None,
    make_supervisor: SupervisorFactory | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Labelled episodes into ``replay``; returns (normalized observations, labels).

    The scripted controller labels every state with its action (in the actor's output
    space: through ``frame`` when the bundle has one). Who drives: the scripted
    controller itself (``driver`` None) or the clone (DAgger: the states the clone
    reaches, labelled with what the controller would do there). The executed action is
    the driver's plus noise (what the replay records, so the critics learn what really
    happened), so the clone also learns to come back to the path. With
    ``make_supervisor`` (one per arm and episode) every executed action passes the
    supervisor first, as on the robot, so the states are the ones it lets the arm reach.
    """
    spec = envs[0].robot_spec
    rng = np.random.default_rng([config.seed + 1, round_index])
    controllers = [ReachController(spec) for _ in envs]
    per_env = -(-config.demonstration_episodes // len(envs))
    observations: list[np.ndarray] = []
    labels: list[np.ndarray] = []
    rows = TransitionArrays.empty(1, spec.obs_dim, spec.act_dim)
    for env, controller in zip(envs, controllers, strict=True):
        for _ in range(per_env):
            raw, _ = env.reset()
            controller.reset()
            supervisor = make_supervisor() if make_supervisor is not None else None
            previous: np.ndarray | None = None
            done = False
            while not done:
                clean = controller.act(raw)
                if frame is not None:
                    clean = frame.outputs(raw[None, :], clean[None, :])[0]
                obs = normalize(raw[None, :])
                driven = clean
                if driver is not None:
                    with torch.no_grad():
                        mean, _ = driver.sample(torch.from_numpy(obs), deterministic=True)
                    driven = mean.numpy()[0]
                noise = rng.normal(0.0, config.demonstration_noise, spec.act_dim)
                executed = np.clip(driven + noise, -1.0, 1.0).astype(np.float32)
                proposed = executed
                if frame is not None:
                    executed = frame.actions(raw[None, :], executed[None, :])[0]
                if supervisor is not None:
                    executed, _ = supervisor.filter(raw, executed, previous)
                    previous = executed
                nxt, reward, terminated, truncated, _ = env.step(executed)
                observations.append(obs[0])
                labels.append(clean)
                rows.observations[:] = obs
                # As in the SAC loop: the replay holds the actor's own output.
                rows.proposed_actions[0] = proposed
                rows.actions[0] = proposed
                rows.rewards[0] = float(reward)
                rows.terminated[0] = terminated
                rows.truncated[0] = truncated
                rows.next_observations[:] = normalize(nxt[None, :])
                replay.extend(rows)
                raw = nxt
                done = terminated or truncated
    return np.stack(observations), np.stack(labels).astype(np.float32)


def _critic_warmup(sac: SAC, replay: ReplayBuffer, config: PretrainConfig) -> None:
    """SAC updates with the actor's and the entropy coefficient's learning rates at 0:
    the critics learn the clone's values (WSRL-style) while the clone stays as it is."""
    frozen = [
        group for opt in (sac.actor_optimizer, sac.alpha_optimizer) for group in opt.param_groups
    ]
    rates = [group["lr"] for group in frozen]
    for group in frozen:
        group["lr"] = 0.0
    try:
        for _ in range(config.critic_warmup_updates):
            sac.update(replay.sample(config.sac.batch_size))
    finally:
        for group, lr in zip(frozen, rates, strict=True):
            group["lr"] = lr


def _behaviour_clone(
    actor: Actor, observations: np.ndarray, labels: np.ndarray, config: PretrainConfig
) -> float:
    """Fit ``actor``'s mean action to ``labels`` (MSE after tanh); returns the last loss."""
    generator = torch.Generator().manual_seed(config.seed)
    optimizer = torch.optim.Adam(actor.parameters(), lr=1e-3)
    obs = torch.from_numpy(observations)
    act = torch.from_numpy(labels)
    loss = torch.zeros(())
    for _ in range(config.bc_updates):
        idx = torch.randint(0, len(obs), (config.sac.batch_size,), generator=generator)
        mu, log_std = actor(obs[idx])
        loss = torch.nn.functional.mse_loss(torch.tanh(mu), act[idx])
        loss = loss + 0.01 * torch.nn.functional.mse_loss(
            log_std, torch.full_like(log_std, math.log(config.clone_std))
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    return float(loss.detach())


def cloned_actor(
    config: PretrainConfig,
    arch: ActorArchitecture,
    envs: list[ArmEnv],
    replay: ReplayBuffer,
    normalize: ObservationNormalizer,
    *,
    frame: CommandStepFrame | None,
    make_supervisor: SupervisorFactory | None,
) -> Actor:
    """The scripted controller's clone (demonstrations, then DAgger rounds); ``replay``
    holds every demonstration transition."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.sac.seed)
        actor = Actor(arch)
    demo_obs, demo_act = _demonstrate(
        config, envs, replay, normalize, frame=frame, make_supervisor=make_supervisor
    )
    _behaviour_clone(actor, demo_obs, demo_act, config)
    for round_index in range(1, config.dagger_rounds + 1):
        more_obs, more_act = _demonstrate(
            config,
            envs,
            replay,
            normalize,
            driver=actor,
            round_index=round_index,
            frame=frame,
            make_supervisor=make_supervisor,
        )
        demo_obs = np.concatenate([demo_obs, more_obs])
        demo_act = np.concatenate([demo_act, more_act])
        _behaviour_clone(actor, demo_obs, demo_act, config)
    return actor


def _cloned_sac(
    config: PretrainConfig,
    arch: ActorArchitecture,
    envs: list[ArmEnv],
    replay: ReplayBuffer,
    normalize: ObservationNormalizer,
    *,
    frame: CommandStepFrame | None,
    make_supervisor: SupervisorFactory | None,
) -> SAC:
    """SAC whose actor is the scripted controller's clone and whose critics have learnt
    its values; ``replay`` holds the demonstrations."""
    actor = cloned_actor(
        config, arch, envs, replay, normalize, frame=frame, make_supervisor=make_supervisor
    )
    sac = SAC(arch, config.sac, actor=actor)
    _critic_warmup(sac, replay, config)
    return sac


@dataclass(frozen=True)
class PretrainSetup:
    """What every pretraining algorithm starts from: the arm (its spec, action frame and
    normalization), the training arms under the configured randomization, the
    supervisor factory, the prior bundle's metadata, and the evaluation."""

    spec: RobotSpec
    frame: CommandStepFrame | None
    normalize: ObservationNormalizer
    envs: list[ArmEnv]
    eval_env: ArmEnv
    make_supervisor: Callable[[], ActionSupervisor] | None
    prior: TrainingMetadata

    @classmethod
    def build(
        cls, config: PretrainConfig, supervisor_factory: SupervisorFactory | None
    ) -> PretrainSetup:
        spec = arm_spec(config.command_interface)
        env_config = ArmEnvConfig(command_interface=config.command_interface)
        randomization = (
            getattr(DomainRandomization, config.randomization)() if config.randomize else None
        )
        return cls(
            spec=spec,
            frame=action_frame_for(spec),
            normalize=ObservationNormalizer(normalizer_from_spec(spec)),
            envs=[
                ArmEnv(randomization=randomization, seed=config.seed * 1000 + i, config=env_config)
                for i in range(config.n_envs)
            ],
            eval_env=ArmEnv(seed=config.seed + 7, config=env_config),
            make_supervisor=supervisor_factory_for(config, supervisor_factory),
            prior=(
                TrainingMetadata()
                if config.init_from is None
                else load_bundle(config.init_from).manifest.metadata
            ),
        )

    def architecture(
        self, hidden_sizes: tuple[int, ...], activation: Activation
    ) -> ActorArchitecture:
        return ActorArchitecture(
            obs_dim=self.spec.obs_dim,
            act_dim=self.spec.act_dim,
            hidden_sizes=hidden_sizes,
            activation=activation,
        )

    def evaluate(self, actor: Actor, episodes: int, seed: int = 10_000) -> EvaluationResult:
        """Deterministic episodes on the nominal arm, through a fresh supervisor if any."""
        supervisor = None if self.make_supervisor is None else self.make_supervisor()
        return evaluate_actor(
            actor,
            self.normalize,
            self.eval_env,
            episodes,
            seed=seed,
            supervisor=supervisor,
            frame=self.frame,
        )


def pretrain(
    config: PretrainConfig,
    out: str | os.PathLike[str],
    *,
    on_progress: Callable[[int, EvalPoint | None], None] | None = None,
    overwrite: bool = False,
    supervisor_factory: SupervisorFactory | None = None,
) -> PretrainResult:
    """Train SAC on the arm and write the best evaluated policy as a bundle at ``out``.

    ``on_progress(env_steps, eval_point_or_None)`` is called every collection step and
    after each evaluation (the behaviour-cloned start is evaluated at step 0).
    ``supervisor_factory`` makes one supervisor per arm (and one for each evaluation)
    when ``config.supervised``; the torque arm's default is ``arm_supervisor``.
    """
    check_bundle_target(out, overwrite=overwrite)  # before the minutes of training, not after
    _check_demonstrations(config)
    if config.algorithm == "ppo":
        from tether.learning.pretrain_ppo import pretrain_ppo

        return pretrain_ppo(
            config,
            out,
            on_progress=on_progress,
            overwrite=overwrite,
            supervisor_factory=supervisor_factory,
        )
    setup = PretrainSetup.build(config, supervisor_factory)
    spec, frame, normalize, envs = setup.spec, setup.frame, setup.normalize, setup.envs
    make_supervisor, prior, evaluate = setup.make_supervisor, setup.prior, setup.evaluate
    arch = setup.architecture(config.sac.hidden_sizes, config.sac.activation)
    replay = pretrain_replay(config, spec.obs_dim, spec.act_dim)

    start = time.monotonic()
    history: list[EvalPoint] = []
    best: _Snapshot | None = None
    warm_started = config.init_from is not None
    if config.demonstration_episodes:
        # The demonstrations pass the supervisor whenever the position arm has one (the
        # scripted controller keeps within its rate limits), supervised run or not.
        demo_supervisor = make_supervisor or (
            (lambda: supervisor_for(spec)) if frame is not None else None
        )
        sac = _cloned_sac(
            config, arch, envs, replay, normalize, frame=frame, make_supervisor=demo_supervisor
        )
        warm_started = True
        result = evaluate(sac.actor, config.eval_episodes)
        cloned = EvalPoint(0, 0, sac.updates, time.monotonic() - start, result)
        history.append(cloned)
        best = _snapshot(sac, result.success_rate)
        if on_progress is not None:
            on_progress(0, cloned)
    else:
        sac = _initial_sac(config, arch)
    # One supervisor per arm: a supervisor keeps per-robot state (last pose, learnt load).
    supervisors = [make_supervisor() for _ in envs] if make_supervisor is not None else []
    previous: list[np.ndarray | None] = [None] * len(envs)
    rng = np.random.default_rng(config.seed)
    raw = np.stack([env.reset()[0] for env in envs])
    obs = normalize(raw)
    rows = TransitionArrays.empty(config.n_envs, spec.obs_dim, spec.act_dim)
    steps = episodes = 0
    budget = 0.0
    next_eval = config.eval_interval_steps

    while steps < config.total_env_steps and time.monotonic() - start < config.time_budget_s:
        if steps < config.learning_starts and not warm_started:
            actions = rng.uniform(-1.0, 1.0, (config.n_envs, spec.act_dim)).astype(np.float32)
        else:
            actions = sac.act(obs)
        rows.observations[:] = obs
        rows.proposed_actions[:] = actions
        next_raw = np.empty((config.n_envs, spec.obs_dim), dtype=np.float32)
        reset_raw = next_raw.copy()
        for i, env in enumerate(envs):
            executed, penalty = actions[i], 0.0
            if frame is not None:
                executed = frame.actions(raw[i : i + 1], actions[i : i + 1])[0]
            if supervisors:
                executed, verdict = supervisors[i].filter(raw[i], executed, previous[i])
                penalty = config.intervention_penalty * verdict.correction_norm
            # The supervisor is part of the environment the policy acts in: the critic
            # learns the value of what the policy proposed, whose consequences (after
            # correction) are the next state and reward; learning from the corrected
            # action instead teaches the actor about actions it never proposes.
            rows.actions[i] = actions[i]
            o, reward, terminated, truncated, _ = env.step(executed)
            previous[i] = None if terminated or truncated else executed
            next_raw[i] = o
            rows.rewards[i] = float(reward) - penalty
            rows.terminated[i] = terminated
            rows.truncated[i] = truncated
            reset_raw[i] = env.reset()[0] if terminated or truncated else o
            episodes += int(terminated or truncated)
        rows.next_observations[:] = normalize(next_raw)
        replay.extend(rows)
        raw = reset_raw
        obs = normalize(reset_raw)
        steps += config.n_envs

        # Demonstrations already fill the buffer: updates start at once.
        if steps > config.learning_starts or config.demonstration_episodes:
            budget += config.n_envs * config.updates_per_step
            n = int(budget)
            budget -= n
            for _ in range(n):
                sac.update(replay.sample(config.sac.batch_size))

        point = None
        if steps >= next_eval:
            next_eval += config.eval_interval_steps
            result = evaluate(sac.actor, config.eval_episodes)
            point = EvalPoint(steps, episodes, sac.updates, time.monotonic() - start, result)
            history.append(point)
            if best is None or result.success_rate >= best.success_rate:
                best = _snapshot(sac, result.success_rate)
        if on_progress is not None:
            on_progress(steps, point)
        if (
            point is not None
            and config.stop_success_rate is not None
            and point.result.success_rate >= config.stop_success_rate
        ):
            break

    chosen = best if best is not None else _snapshot(sac, math.nan)
    sac.actor.load_state_dict(chosen.actor)
    final = evaluate(sac.actor, config.final_eval_episodes, seed=20_000)
    elapsed = time.monotonic() - start
    bundle = write_pretrained_bundle(
        out,
        config,
        actor_state=chosen.actor,
        architecture=arch,
        training=TrainingState(
            critic=chosen.critic, critic_target=chosen.critic_target, log_alpha=chosen.log_alpha
        ),
        source=pretrain_source(config, prior),
        env_steps=steps + prior.env_steps,
        gradient_updates=sac.updates + prior.gradient_updates,
        final=final,
        elapsed_s=elapsed,
        overwrite=overwrite,
    )
    return PretrainResult(bundle, tuple(history), final, steps, episodes, sac.updates, elapsed)


def write_pretrained_bundle(
    out: str | os.PathLike[str],
    config: PretrainConfig,
    *,
    actor_state: dict[str, torch.Tensor],
    architecture: ActorArchitecture,
    training: TrainingState | None,
    source: str,
    env_steps: int,
    gradient_updates: int,
    final: EvaluationResult,
    elapsed_s: float,
    overwrite: bool,
) -> PolicyBundle:
    """The bundle every pretraining writes: the arm's specs, normalizer and action frame,
    version 1, and how it was made (``config.algorithm`` names the algorithm)."""
    spec = arm_spec(config.command_interface)
    suffix = "" if config.algorithm == "sac" else f"-{config.algorithm}"
    interface = "" if config.command_interface == "torque" else f"-{config.command_interface}"
    return save_bundle(
        Path(out),
        actor_state=actor_state,
        architecture=architecture,
        observation=ObservationSpec(spec.observation_names),
        action=ActionSpec(
            spec.action_names,
            (-1.0,) * spec.act_dim,
            (1.0,) * spec.act_dim,
            frame=action_frame_for(spec),
        ),
        normalizer=normalizer_from_spec(spec),
        version_id=1,
        version_name=f"pretrained-arm{interface}{suffix}-seed{config.seed}",
        robot_spec=spec,
        training=training,
        metadata=TrainingMetadata(
            algorithm=config.algorithm,
            source=source,
            env_steps=env_steps,
            gradient_updates=gradient_updates,
            seed=config.seed,
            metrics=(
                ("success_rate", final.success_rate),
                ("mean_return", final.mean_return),
                ("mean_final_distance_m", final.mean_final_distance_m),
                ("final_eval_episodes", float(final.episodes)),
                ("train_seconds", elapsed_s),
            ),
        ),
        overwrite=overwrite,
    )
