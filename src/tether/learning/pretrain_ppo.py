"""Pretraining with PPO: on-policy rollouts of randomized arms, written as the same bundle.

``pretrain(config, out)`` comes here when ``config.algorithm == "ppo"``. The starting
actor is the scripted controller's clone (``demonstration_episodes``), a bundle's actor
(``init_from``) or a fresh one. Each iteration is one *version*: ``n_envs`` arms under
domain randomization play its actor with sampled actions (through the bundle's action
frame and, when ``supervised``, the supervisor, as in SAC's loop) until a rollout of
``ppo.rollout_length`` transitions of that version is collected, stamped with the
version and with per-arm ingress times as the recorder stamps them; PPO then runs its
epochs on it (:meth:`tether.learning.ppo.PPO.schedule`, the online learner's own code).
The deterministic policy is evaluated on the nominal arm every ``eval_interval_steps``
and the best evaluated actor is written.

The bundle has the format of every pretrained bundle (``mlp_gaussian`` actor, specs,
normalizer, action frame) and ``training_metadata.algorithm == "ppo"``; it has no
training section, which holds SAC's twin critics: PPO's value network is not stored
(docs/bundles.md), and a PPO learner fitting a bundle fits its value first
(``PPOConfig.value_warmup_rollouts``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

import numpy as np
import torch

from tether.data.columns import TransitionArrays
from tether.learning.errors import LearningError
from tether.learning.ppo import PPO, Rollouts
from tether.learning.pretrain import (
    EvalPoint,
    PretrainConfig,
    PretrainResult,
    PretrainSetup,
    SupervisorFactory,
    action_frame_for,
    cloned_actor,
    pretrain_replay,
    pretrain_source,
    write_pretrained_bundle,
)
from tether.policy.bundle import load_bundle
from tether.policy.networks import Actor, ActorArchitecture
from tether.policy.transforms import ObservationNormalizer
from tether.safety.for_spec import supervisor_for
from tether.sim.env import ArmEnv

CONTROL_PERIOD_NS = 20_000_000  # the arm's 50 Hz: ingress stamps of one arm's steps


def _initial_actor(
    config: PretrainConfig,
    arch: ActorArchitecture,
    envs: list[ArmEnv],
    normalize: ObservationNormalizer,
    make_supervisor: SupervisorFactory | None,
) -> Actor:
    spec = envs[0].robot_spec
    frame = action_frame_for(spec)
    if config.demonstration_episodes:
        demo_supervisor = make_supervisor or (
            (lambda: supervisor_for(spec)) if frame is not None else None
        )
        replay = pretrain_replay(config, spec.obs_dim, spec.act_dim)
        return cloned_actor(
            config, arch, envs, replay, normalize, frame=frame, make_supervisor=demo_supervisor
        )
    if config.init_from is not None:
        base = load_bundle(config.init_from)
        if base.architecture != arch:
            raise LearningError(
                f"{config.init_from}: bundle architecture {base.architecture} differs from the "
                f"requested {arch}; pass --hidden matching the bundle's hidden sizes"
            )
        return base.build_actor()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.ppo.seed)
        return Actor(arch)


def pretrain_ppo(
    config: PretrainConfig,
    out: str | os.PathLike[str],
    *,
    on_progress: Callable[[int, EvalPoint | None], None] | None = None,
    overwrite: bool = False,
    supervisor_factory: SupervisorFactory | None = None,
) -> PretrainResult:
    """PPO on the randomized arm; writes the best evaluated actor (see the module doc)."""
    setup = PretrainSetup.build(config, supervisor_factory)
    spec, frame, normalize, envs = setup.spec, setup.frame, setup.normalize, setup.envs
    make_supervisor, prior, evaluate = setup.make_supervisor, setup.prior, setup.evaluate
    arch = setup.architecture(config.ppo.hidden_sizes, config.ppo.activation)

    start = time.monotonic()
    ppo = PPO(
        arch, config.ppo, actor=_initial_actor(config, arch, envs, normalize, make_supervisor)
    )
    history: list[EvalPoint] = []
    best: tuple[dict[str, torch.Tensor], float] | None = None
    if config.demonstration_episodes or config.init_from is not None:
        result = evaluate(ppo.actor, config.eval_episodes)
        started = EvalPoint(0, 0, 0, time.monotonic() - start, result)
        history.append(started)
        best = (ppo.actor_state(), result.success_rate)
        if on_progress is not None:
            on_progress(0, started)

    supervisors = [make_supervisor() for _ in envs] if make_supervisor is not None else []
    previous: list[np.ndarray | None] = [None] * len(envs)
    generator = torch.Generator().manual_seed(config.seed)
    rollouts = Rollouts(spec.obs_dim, spec.act_dim, config.ppo.rollout_length)
    raw = np.stack([env.reset()[0] for env in envs])
    rows = TransitionArrays.empty(config.n_envs, spec.obs_dim, spec.act_dim)
    # Arm i's step k arrives at (k * n_envs + i) periods: unique, and each step's next
    # stamp is the following step's own, as the recorder pairs them.
    tick = 0
    steps = episodes = version = 0
    next_eval = config.eval_interval_steps
    stopped = False
    while (
        not stopped
        and steps < config.total_env_steps
        and time.monotonic() - start < config.time_budget_s
    ):
        version += 1
        rollouts.follow(version, ppo.actor_state())
        while not rollouts.full():
            obs = normalize(raw)
            with torch.no_grad():
                actions = ppo.actor.sample(torch.from_numpy(obs), generator=generator)[0].numpy()
            next_raw = np.empty_like(raw)
            reset_raw = np.empty_like(raw)
            for i, env in enumerate(envs):
                executed, penalty = actions[i], 0.0
                if frame is not None:
                    executed = frame.actions(raw[i : i + 1], actions[i : i + 1])[0]
                if supervisors:
                    executed, verdict = supervisors[i].filter(raw[i], executed, previous[i])
                    penalty = config.intervention_penalty * verdict.correction_norm
                o, reward, terminated, truncated, _ = env.step(executed)
                previous[i] = None if terminated or truncated else executed
                next_raw[i] = o
                rows.rewards[i] = float(reward) - penalty
                rows.terminated[i] = terminated
                rows.truncated[i] = truncated
                reset_raw[i] = env.reset()[0] if terminated or truncated else o
                episodes += int(terminated or truncated)
            rows.observations[:] = obs
            rows.proposed_actions[:] = actions
            rows.actions[:] = actions  # the actor's own output, as the online learner learns
            rows.next_observations[:] = normalize(next_raw)
            rows.policy_versions[:] = version
            rows.ingress_ns[:] = CONTROL_PERIOD_NS * (tick * config.n_envs + np.arange(len(envs)))
            rows.next_ingress_ns[:] = rows.ingress_ns + CONTROL_PERIOD_NS * config.n_envs
            tick += 1
            rollouts.extend(rows)
            raw = reset_raw
            steps += config.n_envs
        _, behaviour, data = rollouts.take()
        for _ in ppo.schedule(data, behaviour):
            pass

        point: EvalPoint | None = None
        if steps >= next_eval:
            next_eval += config.eval_interval_steps
            result = evaluate(ppo.actor, config.eval_episodes)
            point = EvalPoint(steps, episodes, ppo.updates, time.monotonic() - start, result)
            history.append(point)
            if best is None or result.success_rate >= best[1]:
                best = (ppo.actor_state(), result.success_rate)
            stopped = (
                config.stop_success_rate is not None
                and result.success_rate >= config.stop_success_rate
            )
        if on_progress is not None:
            on_progress(steps, point)

    chosen, _ = best if best is not None else (ppo.actor_state(), math.nan)
    ppo.load_actor_state(chosen)
    final = evaluate(ppo.actor, config.final_eval_episodes, seed=20_000)
    elapsed = time.monotonic() - start
    bundle = write_pretrained_bundle(
        out,
        config,
        actor_state=chosen,
        architecture=arch,
        training=None,
        source=pretrain_source(config, prior),
        env_steps=steps + prior.env_steps,
        gradient_updates=ppo.updates + prior.gradient_updates,
        final=final,
        elapsed_s=elapsed,
        overwrite=overwrite,
    )
    return PretrainResult(bundle, tuple(history), final, steps, episodes, ppo.updates, elapsed)
