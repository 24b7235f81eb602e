"""Does the learner recover the drifted position arm? Frozen vs adapted, per recipe.

One simulated position-commanded arm with the demo drift's final dynamics from the
first step (``DriftSchedule.demo()``: actuator gain 0.6, friction x4, 0.5 kg payload,
one step of delay) plays the *deployed* policy with sampled actions, as a learning
robot of ``tether run`` does: the bundle's action frame maps the actor's output to the
absolute command the engine serves (the proposed action, which is what robots record),
and the position supervisor filters it (``Robot``). Its transitions go into the learner's own core
(``tether.learning.core.LearnerCore``: normalization, replay with its recent/older mix,
prior data, SAC at the update-to-data ratio; the object ``Learner`` wraps), and every
``--publish-every`` environment steps the deployed policy takes the learner's
publication step (``TrustRegion.step``: a Polyak step toward the learner's actor, halved
until it fits the trust region on the recent states, withheld when none fits). The
gate's stages are not run: this measures the learner, not the promotion gate.

After ``--steps`` environment steps the deployed policy and the learner's own actor are
evaluated deterministically on ``--tasks`` paired fixed tasks (episode seeds 0..N-1,
the same start poses and targets in every row) of the drifted arm, beside the frozen
shipped policy on the same tasks: success (settled within the radius over the last
steps) and final distance, mean ± standard error over the tasks, and the paired
difference to frozen. ``--seeds`` training runs per recipe (seed s: its own arm noise,
sampling and initialization; the evaluation tasks are the same for every seed).

    python benchmarks/bench_adaptation.py [--recipes default,anchor,...] [--seeds 3]
        [--steps 20000] [--tasks 100] [--publish-every 500] [--set key=value,...]
        [--arm drifted|nominal] [--algorithm hindsight|sac|ppo]

A recipe is a named set of ``LearnerConfig`` overrides (``RECIPES`` below; dotted keys
reach nested models: ``sac.critic_ensemble_size=10``, ``prior.episodes=50``); ``--set``
adds overrides on top of every recipe, validated by the config models. The bundle is the
shipped position bundle and the arm the position interface, both chosen explicitly here;
``--arm nominal`` runs the same on the arm without drift (a control).
A smoke run takes about a minute:

    python benchmarks/bench_adaptation.py --recipes default --seeds 1 --steps 2000 --tasks 20

Numbers are in docs/benchmarks.md ("Adaptation on the position arm").
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tether.data.columns import TransitionArrays
from tether.learning.core import LearnerCore
from tether.learning.hindsight import HindsightConfig, bundle_for_learner
from tether.learning.learner_config import LearnerConfig
from tether.learning.publication import PublishOutcome, RecentStates, TrustRegion
from tether.policy.action_frame import CommandStepFrame
from tether.policy.bundle import PolicyBundle, load_bundle
from tether.policy.networks import Actor, squashed_sample
from tether.policy.transforms import ObservationNormalizer
from tether.safety.for_spec import supervisor_for
from tether.sim import ArmDynamics, ArmEnv, ArmEnvConfig, DriftSchedule, arm_spec

POSITION = ArmEnvConfig(command_interface="position")
SHIPPED = Path(str(files("tether.assets") / "pretrained-position" / "arm"))
CONTROL_PERIOD_NS = 20_000_000  # the arm's 50 Hz, as ingress stamps for the recency mix

# Each recipe: LearnerConfig overrides (dotted keys into nested models). "default" is
# LearnerConfig() as shipped; the others are measured against it.
RECIPES: dict[str, dict[str, Any]] = {
    "default": {},
    # Hindsight (the default): a bounded shift of the command the frozen actor reads,
    # regressed on the arm's tracking error (pose minus command) where each episode rested.
    "hindsight": {"algorithm": "hindsight"},
    # The same learner shifting the goal instead, from where the end effector came to rest
    # (goal relabelling; the default before the tracking label).
    "hindsight-goal": {
        "algorithm": "hindsight",
        **{
            f"hindsight.{key}": value
            for key, value in HindsightConfig.goal_relabelling(episodes_kept=30)
            .model_dump()
            .items()
            if key != "seed"  # learner_config sets the run's seed
        },
        "publication.max_goal_shift_change": 0.05,
        "gate.offline.max_goal_shift_change": 0.05,
    },
    # SAC fine-tuning of the actor itself, as shipped before hindsight: TD3+BC anchor 0.4,
    # rates x 0.2; every SAC recipe below is this one with its keys changed.
    "sac": {"algorithm": "sac"},
    # The fine-tuning default before this benchmark: TD3+BC anchor 0.4, rates x 0.2.
    "anchor": {"algorithm": "sac", "fine_tune_bc_weight": 0.4, "sac.actor_warmup_updates": 0},
    # WSRL: no anchor, critic-only warm-up on the deployed policy's fresh transitions.
    "wsrl": {"algorithm": "sac", "fine_tune_bc_weight": 0.0, "sac.actor_warmup_updates": 2000},
    "wsrl_utd4": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "sac.actor_warmup_updates": 8000,
        "updates_per_transition": 4.0,
    },
    "wsrl_bc01": {"algorithm": "sac", "fine_tune_bc_weight": 0.1, "sac.actor_warmup_updates": 2000},
    "wsrl_bc25": {"algorithm": "sac", "fine_tune_bc_weight": 2.5, "sac.actor_warmup_updates": 2000},
    "wsrl_lr1": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "fine_tune_lr_scale": 1.0,
        "sac.actor_warmup_updates": 2000,
    },
    # AWAC: the actor re-weights the likelihood of the data's own actions by advantage,
    # so it only moves toward actions the robots executed.
    "awac": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "sac.actor_warmup_updates": 2000,
        "sac.actor_objective": "awac",
        "sac.awac_beta": 1.0,
    },
    "awac_b3_lr1": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "fine_tune_lr_scale": 1.0,
        "sac.actor_warmup_updates": 2000,
        "sac.actor_objective": "awac",
        "sac.awac_beta": 3.0,
    },
    "awac_b3_lr1_utd2": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "fine_tune_lr_scale": 1.0,
        "updates_per_transition": 2.0,
        "sac.actor_warmup_updates": 4000,
        "sac.actor_objective": "awac",
        "sac.awac_beta": 3.0,
    },
    "awac_b3_lr1_prior": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "fine_tune_lr_scale": 1.0,
        "sac.actor_warmup_updates": 2000,
        "sac.actor_objective": "awac",
        "sac.awac_beta": 3.0,
        "prior.episodes": 50,
    },
    "awac_b3_lr1_ln_ens": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "fine_tune_lr_scale": 1.0,
        "sac.actor_warmup_updates": 2000,
        "sac.actor_objective": "awac",
        "sac.awac_beta": 3.0,
        "sac.critic_layer_norm": True,
        "sac.critic_ensemble_size": 4,
    },
    # A slow actor: the deployed policy can follow the learner's within the trust
    # region, so the robots' data stays on the learner's policy.
    "slow_actor": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "fine_tune_lr_scale": 1.0,
        "sac.actor_lr": 3e-6,
        "sac.actor_warmup_updates": 2000,
    },
    "slow_actor_anchor": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.4,
        "fine_tune_lr_scale": 1.0,
        "sac.actor_lr": 3e-6,
        "sac.actor_warmup_updates": 2000,
    },
    # Dyna: the actor maximizes short imagined rollouts through a dynamics model fitted on
    # the robots' transitions (tether.learning.model); the critics only judge.
    "model": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "sac.actor_warmup_updates": 1000,
        "sac.actor_objective": "model",
    },
    "model_lr1": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "fine_tune_lr_scale": 1.0,
        "sac.actor_warmup_updates": 1000,
        "sac.actor_objective": "model",
    },
    "model_h25": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "sac.actor_warmup_updates": 1000,
        "sac.actor_objective": "model",
        "sac.model_horizon": 25,
    },
    "model_bc": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.4,
        "sac.actor_warmup_updates": 1000,
        "sac.actor_objective": "model",
    },
    # The 25-step horizon, anchored: the bounded form of the same actor.
    "model_h25_bc": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.4,
        "sac.actor_warmup_updates": 1000,
        "sac.actor_objective": "model",
        "sac.model_horizon": 25,
    },
    "model_h25_bc25": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 2.5,
        "sac.actor_warmup_updates": 1000,
        "sac.actor_objective": "model",
        "sac.model_horizon": 25,
    },
    # Model-based value expansion: imagined rewards, then the critics' value of the last
    # imagined state (the horizon alone is myopic for an actor that sets an acceleration).
    "model_mve": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "sac.actor_warmup_updates": 1000,
        "sac.actor_objective": "model",
        "sac.model_terminal_weight": 1.0,
    },
    "model_mve_bc": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.4,
        "sac.actor_warmup_updates": 1000,
        "sac.actor_objective": "model",
        "sac.model_terminal_weight": 1.0,
    },
    # RLPD's symmetric sampling: half of each batch from the nominal arm.
    "wsrl_prior": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "sac.actor_warmup_updates": 2000,
        "prior.episodes": 50,
        "prior.fraction": 0.5,
    },
    # RLPD/REDQ critics: LayerNorm, 10 members, targets from the minimum of 2.
    "wsrl_ens": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "sac.actor_warmup_updates": 2000,
        "sac.critic_ensemble_size": 10,
        "sac.critic_target_subset": 2,
    },
    "wsrl_ln": {
        "algorithm": "sac",
        "fine_tune_bc_weight": 0.0,
        "sac.actor_warmup_updates": 2000,
        "sac.critic_layer_norm": True,
    },
}


def shifted_bundle(bundle: PolicyBundle, config: LearnerConfig) -> PolicyBundle:
    """``bundle`` with a zero goal shift, as ``tether run`` gives it to a hindsight learner."""
    assert bundle.path is not None
    where = Path(tempfile.mkdtemp(prefix="tether-bench-"))
    return load_bundle(bundle_for_learner(bundle.path, config, where))


def learner_config(overrides: dict[str, Any], seed: int) -> LearnerConfig:
    """``LearnerConfig()`` with ``overrides`` (dotted keys) and the run's seeds."""
    tree = LearnerConfig().model_dump()
    merged = {
        **overrides,
        "sac.seed": seed,
        "ppo.seed": seed,
        "replay.sampler.seed": seed,
        "hindsight.seed": seed,
    }
    for key, value in merged.items():
        node = tree
        *path, leaf = key.split(".")
        for part in path:
            node = node[part]
        if leaf not in node:
            raise SystemExit(f"unknown LearnerConfig key {key!r}")
        node[leaf] = value
    return LearnerConfig.model_validate(tree)


def parse_set(text: str) -> dict[str, Any]:
    # Strings: pydantic parses them into each field's type and rejects bad values.
    return dict(item.partition("=")[::2] for item in text.split(",") if item)


@dataclass(frozen=True)
class Scores:
    successes: np.ndarray
    distances: np.ndarray

    @property
    def success(self) -> str:
        return _mean_se(self.successes, "{:.2f}")

    @property
    def distance(self) -> str:
        return _mean_se(self.distances, "{:.3f}")


def _mean_se(values: np.ndarray, fmt: str) -> str:
    se = values.std(ddof=1) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return f"{fmt.format(values.mean())} ± {fmt.format(se)}"


class Robot:
    """What a learning robot of ``tether run`` does with an actor's output: the bundle's
    action frame maps the tanh output ``u`` to the absolute command the engine serves
    (the *proposed* action, which robots record and the learner maps back to ``u``), and
    the position supervisor (a fresh one per episode) filters it into the executed one."""

    def __init__(self, frame: CommandStepFrame | None) -> None:
        self.frame = frame
        self.spec = arm_spec("position")
        self.reset()

    def reset(self) -> None:
        self.supervisor = supervisor_for(self.spec)
        self.previous: np.ndarray | None = None
        self.checks = 0  # the last step's SafetyCheck bits

    def act(self, obs: np.ndarray, output: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(proposed, executed)`` absolute normalized actions for the actor's ``output``."""
        proposed = np.asarray(output, dtype=np.float32)
        if self.frame is not None:
            proposed = self.frame.actions(obs[None, :], proposed[None, :])[0]
        executed, verdict = self.supervisor.filter(obs, proposed, self.previous)
        self.previous = executed
        self.checks = int(verdict.checks)
        return proposed, executed


def evaluate(
    actor: Actor,
    normalize: ObservationNormalizer,
    worn: ArmDynamics,
    tasks: int,
    frame: CommandStepFrame | None,
) -> Scores:
    """Deterministic episodes on tasks 0..tasks-1, through the frame and the supervisor."""
    actor = actor.eval()
    robot = Robot(frame)
    env = ArmEnv(dynamics=worn, seed=0, config=POSITION)
    successes, distances = [], []
    for task in range(tasks):
        obs, _ = env.reset(seed=task)
        robot.reset()
        done = False
        while not done:
            with torch.no_grad():
                x = torch.from_numpy(normalize(obs[None, :]))
                output = actor.sample(x, deterministic=True)[0].numpy()[0]
            obs, _, terminated, truncated, _ = env.step(robot.act(obs, output)[1])
            done = terminated or truncated
        outcome = env.episode_outcome()
        successes.append(float(outcome.success))
        distances.append(outcome.final_distance_m)
    return Scores(np.array(successes), np.array(distances))


@dataclass(frozen=True)
class Run:
    deployed: Scores
    learner: Scores
    env_steps: int
    updates: int
    publications: dict[str, int]
    wall_s: float
    frame_mismatch: float  # share of rows whose stored action is not the policy's output


def adapt(
    bundle: PolicyBundle,
    config: LearnerConfig,
    worn: ArmDynamics,
    args: argparse.Namespace,
    seed: int,
) -> Run:
    """One training run: the drifted arm plays the deployed policy; the core learns."""
    start = time.monotonic()
    if config.algorithm == "hindsight" and bundle.architecture.goal_shift is None:
        bundle = shifted_bundle(bundle, config)
    core = LearnerCore(bundle, config)
    arch = bundle.architecture
    deployed_state = {k: v.detach().clone() for k, v in bundle.actor_state.items()}
    deployed = Actor(arch).eval().requires_grad_(False)
    deployed.load_state_dict(deployed_state)
    trust_region = TrustRegion(core.algorithm.actor, config.publication)
    # Version stamps as the server gives them: PPO keeps the deployed version's rows only,
    # hindsight labels an episode with the weights of the version that played it.
    version = bundle.version.id
    versions = {version: deployed_state}
    core.know_versions(versions.get)
    recent = RecentStates(config.publication.recent_states, arch.obs_dim)
    counts = {outcome.value: 0 for outcome in PublishOutcome}
    generator = torch.Generator().manual_seed(seed)
    env = ArmEnv(dynamics=worn, seed=1000 + seed, config=POSITION)
    robot = Robot(core.frame)
    mismatched = 0
    rows = TransitionArrays.empty(1, arch.obs_dim, arch.act_dim)
    raw, _ = env.reset(seed=100_000 + seed)
    for step in range(1, args.steps + 1):
        with torch.no_grad():
            x = torch.from_numpy(core.normalize(raw[None, :]))
            mu, log_std = deployed(x)
            if args.explore_std > 0:
                log_std = log_std.clamp(min=math.log(args.explore_std))
            output = squashed_sample(mu, log_std, generator=generator)[0].numpy()[0]
        proposed, executed = robot.act(raw, output)
        nxt, reward, terminated, truncated, _ = env.step(executed)
        rows.observations[:] = raw
        rows.proposed_actions[:] = proposed
        rows.actions[:] = executed
        rows.next_observations[:] = nxt
        rows.rewards[0] = reward
        rows.terminated[0], rows.truncated[0] = terminated, truncated
        rows.policy_versions[0] = version
        rows.safety_checks[0] = robot.checks
        rows.ingress_ns[0] = step * CONTROL_PERIOD_NS
        rows.next_ingress_ns[0] = (step + 1) * CONTROL_PERIOD_NS
        rows.policy_versions[0] = version
        stored = core.ingest(rows)
        recent.extend(stored.observations)
        # The learner must learn the output the policy produced in its frame: where the
        # frame's clips did not bind, the stored action maps back to it exactly.
        mismatched += bool(np.abs(stored.actions[0] - output).max() > 1e-3)
        core.run_updates(64)
        if terminated or truncated:
            raw = env.reset()[0]
            robot.reset()
        else:
            raw = nxt
        if step % args.publish_every == 0:
            decision, candidate = trust_region.step(
                deployed_state, core.algorithm.actor_state(), recent.states()
            )
            counts[decision.outcome.value] += 1
            if candidate is not None:
                deployed_state = candidate
                deployed.load_state_dict(deployed_state)
                version += 1
                versions[version] = deployed_state
                core.follow(version, deployed_state)
    normalize = core.normalize
    result_deployed = evaluate(deployed, normalize, worn, args.tasks, core.frame)
    result_learner = evaluate(core.algorithm.actor, normalize, worn, args.tasks, core.frame)
    return Run(
        result_deployed,
        result_learner,
        args.steps,
        core.algorithm.updates,
        counts,
        time.monotonic() - start,
        mismatched / args.steps,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", default="default", help=f"comma list of {sorted(RECIPES)}")
    parser.add_argument("--seeds", type=int, default=3, help="training runs per recipe")
    parser.add_argument("--first-seed", type=int, default=0, help="seed of the first run")
    parser.add_argument("--steps", type=int, default=20_000, help="environment steps per run")
    parser.add_argument("--tasks", type=int, default=100, help="paired evaluation tasks")
    parser.add_argument(
        "--publish-every", type=int, default=500, help="environment steps between publications"
    )
    parser.add_argument("--set", default="", help="LearnerConfig overrides on every recipe")
    parser.add_argument("--bundle", type=Path, default=SHIPPED, help="position-arm bundle")
    parser.add_argument(
        "--algorithm",
        choices=("hindsight", "sac", "ppo"),
        default=None,
        help="learning.algorithm on every recipe (default: each recipe's own)",
    )
    parser.add_argument(
        "--explore-std",
        type=float,
        default=0.0,
        help="collect with at least this pre-tanh standard deviation (0: the deployed "
        "policy's own, as a learning robot of tether run samples)",
    )
    parser.add_argument(
        "--arm",
        choices=("drifted", "nominal"),
        default="drifted",
        help="train and evaluate on the drifted arm, or on the nominal one (a control: "
        "what fine-tuning does where nothing drifted)",
    )
    args = parser.parse_args()
    names = [n for n in args.recipes.split(",") if n]
    unknown = [n for n in names if n not in RECIPES]
    if unknown:
        raise SystemExit(f"unknown recipes {unknown}; known: {sorted(RECIPES)}")
    torch.set_num_threads(1)
    bundle = load_bundle(args.bundle)
    if bundle.robot_spec != arm_spec("position"):
        raise SystemExit(f"{args.bundle} is not a bundle for the position-commanded arm")
    worn = ArmDynamics.nominal()
    if args.arm == "drifted":
        worn = DriftSchedule.demo().dynamics_at(10**9, worn)
    normalize = ObservationNormalizer(bundle.manifest.normalizer)
    extra = parse_set(args.set)
    if args.algorithm is not None:
        extra = {"algorithm": args.algorithm, **extra}
    print(f"# {platform.machine()}, python {platform.python_version()}, torch {torch.__version__}")
    print(f"# {' '.join(sys.argv)}")
    print(f"# {args.arm} arm: {worn}")
    frozen = evaluate(
        bundle.build_actor(), normalize, worn, args.tasks, bundle.manifest.action.frame
    )
    print(
        f"frozen on the {args.arm} arm, {args.tasks} tasks: success {frozen.success}, "
        f"final distance {frozen.distance} m"
    )
    print(
        "| recipe | seed | env steps | updates | publications acc/shrunk/withheld/unchanged "
        "| deployed success | Δ vs frozen | deployed final distance (m) | learner's actor success "
        "| learner's final distance (m) | wall s | stored ≠ output |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    summary: list[str] = []
    for name in names:
        deployed_means: list[float] = []
        distance_means: list[float] = []
        diffs: list[np.ndarray] = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            config = learner_config({**RECIPES[name], **extra}, seed)
            run = adapt(bundle, config, worn, args, seed)
            diff = run.deployed.successes - frozen.successes
            diffs.append(diff)
            deployed_means.append(float(run.deployed.successes.mean()))
            distance_means.append(float(run.deployed.distances.mean()))
            p = run.publications
            print(
                f"| {name} | {seed} | {run.env_steps} | {run.updates} | "
                f"{p['accepted']}/{p['shrunk']}/{p['withheld']}/{p['unchanged']} | "
                f"{run.deployed.success} | "
                f"{_mean_se(diff, '{:+.2f}')} | {run.deployed.distance} | "
                f"{run.learner.success} | {run.learner.distance} | {run.wall_s:.0f} | "
                f"{run.frame_mismatch:.1%} |",
                flush=True,
            )
        pooled = np.concatenate(diffs)
        summary.append(
            f"| {name} | {args.seeds} | {args.steps} | {frozen.success} | "
            f"{_mean_se(np.array(deployed_means), '{:.2f}')} | "
            f"{_mean_se(pooled, '{:+.2f}')} | {frozen.distance} | "
            f"{_mean_se(np.array(distance_means), '{:.3f}')} |"
        )
    print(
        "\n| recipe | seeds | env steps | frozen success | adapted success (± se over seeds) "
        "| Δ success (± se, paired over seeds × tasks) | frozen final distance (m) "
        "| adapted final distance (m, ± se over seeds) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
