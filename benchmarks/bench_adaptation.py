"""How fast the learner's SAC adapts the shipped policy to a drifted arm, offline.

``tether run``'s acceptance asks the learning robots to recover to 90 % of their
pre-drift return while the frozen baseline stays at or below 70 %. Whether the learner
*can* do that is a property of the learning algorithm and the drift, not of the
serving system, so it is measured here without servers, gates or real time: one
simulated arm with the drift's final dynamics from the first step, the learner's own
SAC (``sac_from_bundle`` with ``LearnerConfig().effective_sac()``: fine-tuning, trunk
frozen, learning rates x 0.2, behaviour-cloning pull 0.4 toward the bundle's actor) and
its replay configuration, sampled actions as the
robots send, and optionally the arm's supervisor in the loop (SAC then learns the
proposed action, as the learner does).

Every ``--eval-every`` environment steps the deterministic policy is evaluated on the
same drifted episodes (same seeds each time), beside the frozen policy on the nominal
and on the drifted arm, so each figure is a same-seed comparison:

    python benchmarks/bench_adaptation.py [--drift actuator_gain=0.6,joint_damping=3]
        [--steps 12000] [--eval-every 2000] [--episodes 20] [--supervised]
        [--sac bc_weight=0.4,actor_objective=awac,...] [--learner fine_tune_lr_scale=1,...]
        [--learn-executed] [--deterministic]

``--sac`` and ``--learner`` override fields of ``SACConfig`` / ``LearnerConfig`` by name
(validated by their models), so a fine-tuning recipe is measured exactly as the learner
would run it. Fine-tuning sets ``bc_weight`` and ``lr_scale`` from the learner's
``fine_tune_bc_weight`` / ``fine_tune_lr_scale``: override those with ``--learner``.

Numbers are in docs/benchmarks.md ("Adaptation").
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import time

import numpy as np
import torch

from tether.assets import load_pretrained_bundle
from tether.data.columns import TransitionArrays
from tether.data.replay.buffer import ReplayBuffer
from tether.learning.evaluation import EvaluationResult, evaluate_actor
from tether.learning.learner_config import LearnerConfig
from tether.learning.sac import sac_from_bundle
from tether.policy.bundle import load_bundle
from tether.policy.networks import Actor
from tether.policy.transforms import ObservationNormalizer
from tether.safety.presets import arm_supervisor
from tether.sim import ArmDynamics, ArmEnv, DriftSchedule


def parse_drift(text: str | None) -> ArmDynamics:
    """``knob=value,...`` over the nominal arm; None: the demo drift's final dynamics."""
    nominal = ArmDynamics.nominal()
    if text is None:
        return DriftSchedule.demo(start_step=0, ramp_steps=2).dynamics_at(10, nominal)
    values: dict[str, float | int] = {
        knob: int(value) if knob == "action_delay_steps" else float(value)
        for knob, value in _overrides(text).items()
    }
    return dataclasses.replace(nominal, **values)  # type: ignore[arg-type]


def evaluate(
    actor: Actor,
    normalize: ObservationNormalizer,
    dynamics: ArmDynamics,
    episodes: int,
    supervised: bool,
) -> EvaluationResult:
    # A fresh env and supervisor per evaluation: the same episodes every time.
    return evaluate_actor(
        actor,
        normalize,
        ArmEnv(dynamics=dynamics, seed=4),
        episodes,
        supervisor=arm_supervisor() if supervised else None,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", default=None, help="bundle to adapt (default: shipped)")
    parser.add_argument("--drift", default=None, help="knob=value,... (default: demo drift)")
    parser.add_argument("--steps", type=int, default=12_000, help="environment steps")
    parser.add_argument("--eval-every", type=int, default=2_000, help="steps between evals")
    parser.add_argument("--episodes", type=int, default=20, help="episodes per evaluation")
    parser.add_argument("--supervised", action="store_true", help="supervisor in the loop")
    parser.add_argument("--seed", type=int, default=3, help="seed of the training arm")
    parser.add_argument(
        "--sac", default="", help="SACConfig overrides, knob=value,... (e.g. bc_weight=0.4)"
    )
    parser.add_argument(
        "--learner", default="", help="LearnerConfig overrides (e.g. fine_tune_lr_scale=1)"
    )
    parser.add_argument(
        "--deterministic",
        action="store_true",
        help="collect with the mean action, as robots with deterministic=true do",
    )
    parser.add_argument(
        "--learn-executed",
        action="store_true",
        help="learn the supervisor's executed action instead of the proposed one",
    )
    parser.add_argument(
        "--utd", type=float, default=None, help="updates per transition (default: learner's)"
    )
    args = parser.parse_args()

    torch.set_num_threads(1)
    bundle = load_pretrained_bundle() if args.bundle is None else load_bundle(args.bundle)
    config = LearnerConfig()
    config = config.model_validate(
        {
            **config.model_dump(),
            **_overrides(args.learner),
            "sac": {**config.sac.model_dump(), **_overrides(args.sac)},
        }
    )
    drifted = parse_drift(args.drift)
    normalize = ObservationNormalizer(bundle.manifest.normalizer)
    frozen = bundle.build_actor().eval()
    nominal_ref = evaluate(frozen, normalize, ArmDynamics.nominal(), args.episodes, args.supervised)
    drifted_ref = evaluate(frozen, normalize, drifted, args.episodes, args.supervised)

    effective = config.effective_sac()
    sac = sac_from_bundle(bundle, effective)
    arch = bundle.architecture
    replay = ReplayBuffer(arch.obs_dim, arch.act_dim, config.replay)
    env = ArmEnv(dynamics=drifted, seed=args.seed)
    supervisor = arm_supervisor() if args.supervised else None
    rows = TransitionArrays.empty(1, arch.obs_dim, arch.act_dim)
    # The learner's ratio; None there means "as fast as it can", which here is one.
    utd = args.utd or config.updates_per_transition or 1.0

    print(
        f"# machine: {platform.machine()}, python {platform.python_version()}, "
        f"torch {torch.__version__}"
    )
    print(f"# drift: {drifted}")
    print(f"# learner overrides: {args.learner or '-'}; sac overrides: {args.sac or '-'}")
    print(
        f"# effective: lr_scale {effective.lr_scale}, bc_weight {effective.bc_weight}, "
        f"actor_warmup_updates {effective.actor_warmup_updates}, "
        f"actor_objective {effective.actor_objective}, learn executed {args.learn_executed}, "
        f"collect deterministic {args.deterministic}"
    )
    print(f"# supervised: {args.supervised}; eval: {args.episodes} deterministic episodes")
    print(
        f"frozen, nominal arm: return {nominal_ref.mean_return:7.1f} "
        f"success {nominal_ref.success_rate:.2f}"
    )
    print(
        f"frozen, drifted arm: return {drifted_ref.mean_return:7.1f} "
        f"success {drifted_ref.success_rate:.2f} "
        f"({_ratio(drifted_ref, nominal_ref)} of nominal)"
    )
    print("| env steps | updates | return | success | of nominal frozen | wall s |")
    print("|---|---|---|---|---|---|")

    raw, _ = env.reset(seed=args.seed)
    previous: np.ndarray | None = None
    budget = 0.0
    start = time.monotonic()
    for step in range(1, args.steps + 1):
        obs = normalize(raw[None])
        proposed = sac.act(obs, deterministic=args.deterministic)
        executed = proposed[0]
        if supervisor is not None:
            executed, _ = supervisor.filter(raw, proposed[0], previous)
        rows.observations[:] = obs
        rows.proposed_actions[:] = proposed
        # The learner learns what the policy proposed, unless told to learn what ran.
        rows.actions[:] = executed if args.learn_executed else proposed
        nxt, reward, terminated, truncated, _ = env.step(executed)
        rows.next_observations[:] = normalize(nxt[None])
        rows.rewards[0] = reward
        rows.terminated[0] = terminated
        rows.truncated[0] = truncated
        replay.extend(rows)
        done = terminated or truncated
        previous = None if done else np.asarray(executed)
        raw = env.reset()[0] if done else nxt
        if len(replay) >= config.sac.batch_size:
            budget += utd
            while budget >= 1.0:
                sac.update(replay.sample(config.sac.batch_size))
                budget -= 1.0
        if step % args.eval_every == 0:
            result = evaluate(sac.actor, normalize, drifted, args.episodes, args.supervised)
            sac.actor.train()
            print(
                f"| {step} | {sac.updates} | {result.mean_return:.1f} | "
                f"{result.success_rate:.2f} | {_ratio(result, nominal_ref)} | "
                f"{time.monotonic() - start:.0f} |",
                flush=True,
            )


def _overrides(text: str) -> dict[str, str]:
    # Strings: pydantic parses them into each field's type and rejects unknown knobs.
    return dict(item.partition("=")[::2] for item in text.split(",") if item)


def _ratio(result: EvaluationResult, reference: EvaluationResult) -> str:
    if reference.mean_return <= 0:
        return "n/a (reference return <= 0)"
    return f"{result.mean_return / reference.mean_return:.0%}"


if __name__ == "__main__":
    main()
