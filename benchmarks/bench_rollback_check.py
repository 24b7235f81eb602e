"""How often the rollback monitor rolls back, with and without its check, under a drift.

The real registry, router and rollback monitor (``tether run``'s windows: 15 episodes,
8 to compare, 3 sustained) over many seeds. Version 1 serves a full window on the
nominal arm, version 2 is promoted and serves 10 episodes there, then the arm drifts
and every later episode is drawn from what its version does on the drifted arm. Robots
run tasks 0..9 in turn, each twice in a row, as ``tether run``'s fleet does. Per
scenario (what each version does after the drift) and per monitor (the check on, as
``tether run`` configures it, with ``--checks`` other sizes, or off: the windows alone),
printed: the share of seeds
rolled back, the median episodes from the drift to the rollback, the checks run and
the last-known-good's episodes served in them.

With ``--canaries L:G`` a learner's candidate (version 3, as good as version 2 on either
arm, never promoted) holds a canary for L episodes at ``tether run``'s canary settings
(fraction 0.5, the live limits) with G episodes between canaries, from version 2's
promotion on: the live version is then served mostly as a canary's control arm.

    python benchmarks/bench_rollback_check.py [--seeds 200] [--episodes 150] [--checks 6:6,12:12]
        [--canaries 16:2]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from tether.policy import EngineConfig, PolicyEngine, init_bundle
from tether.policy.bundle import save_derived_bundle
from tether.runtime.config import RunConfig
from tether.sim import arm_spec
from tether.versions.records import EpisodeOutcome, VersionSource, VersionState
from tether.versions.registry import ModelRegistry
from tether.versions.rollback import RollbackCheckConfig, RollbackMonitor
from tether.versions.routing import TrafficRouter

# (success probability, mean final distance m) of versions 1 and 2 on the drifted arm;
# on the nominal arm both succeed 95 % of the time and end 2 cm off.
NOMINAL = (0.95, 0.02)
SCENARIOS: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {
    "drift hurts both alike": ((0.3, 0.12), (0.3, 0.12)),
    "drift, version 2 adapted (better)": ((0.3, 0.12), (0.7, 0.05)),
    "drift, version 2 subtly worse": ((0.6, 0.06), (0.35, 0.10)),
    "drift, version 2 regressed": ((0.9, 0.03), (0.0, 0.30)),
    "no drift, version 2 subtly worse": (NOMINAL, (0.7, 0.06)),
    "no drift, version 2 much worse": (NOMINAL, (0.4, 0.12)),
}


@dataclass
class Run:
    rolled_back: bool
    episodes_to_rollback: int | None
    checks: int
    lkg_episodes: int


def one_run(
    engines: tuple[PolicyEngine, PolicyEngine, PolicyEngine],
    drifted: tuple[tuple[float, float], tuple[float, float]],
    check: RollbackCheckConfig,
    seed: int,
    episodes: int,
    canaries: tuple[int, int] | None,
) -> Run:
    reg: ModelRegistry[PolicyEngine] = ModelRegistry()
    reg.register(engines[0], source=VersionSource.BUNDLE)
    reg.register(engines[1], source=VersionSource.LEARNER)
    router = TrafficRouter(reg)
    run = RunConfig().versions
    config = run.rollback.model_copy(update={"check": check})
    monitor = RollbackMonitor(reg, config, router=router)
    rng = np.random.default_rng(seed)
    k = 0
    lkg_episodes = 0
    # drifted skill per version; the candidate (3) does what version 2 does
    skills = (*drifted, drifted[1])
    canary = run.promotion.canary
    cycle = 0 if canaries is None else sum(canaries)

    def episode(after_drift: bool) -> bool:
        nonlocal k, lkg_episodes
        if cycle and k >= 15:  # from version 2's promotion on
            phase = (k - 15) % cycle
            if phase == 0:
                router.start_canary(3, canary.fraction, canary.safety_tightening)
            elif phase == canaries[0]:  # type: ignore[index]  # cycle: canaries given
                router.stop_canary()
        task = f"task-{(k // 2) % 10}"
        robot = f"robot-{k % 2}"
        decision = router.route(robot, f"ep-{k}", task)
        k += 1
        live = reg.live()
        assert live is not None
        version = live.id if decision.version is None else decision.version
        lkg_episodes += decision.version == 1
        p, distance = skills[version - 1] if after_drift else NOMINAL
        outcome = EpisodeOutcome(
            version=version,
            episode_return=float(rng.normal(-50.0, 5.0)),
            success=bool(rng.random() < p),
            steps=200,
            interventions=int(rng.binomial(200, 0.01)),
            backups=0,
            tightened=decision.tightened,
            trial=decision.trial,
            task_id=task,
            final_distance_m=abs(float(rng.normal(distance, 0.01))),
        )
        router.forget(robot)
        return monitor.add(outcome) is not None

    for _ in range(15):
        episode(False)
    reg.promote(2, "gate passed")
    if cycle:
        reg.register(engines[2], source=VersionSource.LEARNER)
        reg.transition(3, VersionState.CANARY, "shadow passed")
    for _ in range(10):
        episode(False)
    lkg_episodes = 0
    for n in range(1, episodes + 1):
        if episode(True):
            return Run(True, n, len(monitor.checks), lkg_episodes)
    return Run(False, None, len(monitor.checks), lkg_episodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=200, help="runs per scenario and monitor")
    parser.add_argument("--episodes", type=int, default=150, help="episodes after the drift")
    parser.add_argument(
        "--checks",
        default="",
        help="more checks to compare, comma-separated pairs:max_pairs (e.g. 6:6,12:12)",
    )
    parser.add_argument(
        "--canaries",
        default="",
        help="L:G, a candidate's canary for L episodes every L+G from version 2's promotion",
    )
    args = parser.parse_args()
    canaries = None
    if args.canaries:
        length, gap = (int(x) for x in args.canaries.split(":"))
        canaries = (length, gap)
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp())
    spec = arm_spec()
    base = init_bundle(tmp / "v1", spec, seed=0)
    second = save_derived_bundle(
        tmp / "v2", base, actor_state=base.actor_state, version_id=2, version_name="v2"
    )
    third = save_derived_bundle(
        tmp / "v3", base, actor_state=base.actor_state, version_id=3, version_name="v3"
    )
    engines = (
        PolicyEngine(base, EngineConfig(execution="eager")),
        PolicyEngine(second, EngineConfig(execution="eager")),
        PolicyEngine(third, EngineConfig(execution="eager")),
    )
    run_check = RunConfig().versions.rollback.check
    checks = [run_check] + [
        run_check.model_copy(update={"pairs": int(p), "max_pairs": int(m)})
        for p, m in (c.split(":") for c in args.checks.split(",") if c)
    ]
    monitors = {f"check ({c.pairs}-{c.max_pairs} pairs)": c for c in checks}
    monitors["windows alone"] = RollbackCheckConfig(pairs=0)
    during = "no canaries" if canaries is None else f"canaries {canaries[0]}:{canaries[1]}"
    print(f"# {platform.processor() or platform.machine()}, {args.seeds} seeds per row, {during}")
    print(
        "| after the drift (v1 / v2: success, distance) | monitor | rolled back | "
        "median episodes to it | checks per run | v1 episodes in checks per run |"
    )
    print("|---|---|---|---|---|---|")
    for name, drifted in SCENARIOS.items():
        label = f"{name} ({drifted[0][0]:.2f}, {drifted[0][1]:.2f} / {drifted[1][0]:.2f}, "
        label += f"{drifted[1][1]:.2f})"
        for monitor_name, check in monitors.items():
            runs = [
                one_run(engines, drifted, check, s, args.episodes, canaries)
                for s in range(args.seeds)
            ]
            fired = [r.episodes_to_rollback for r in runs if r.episodes_to_rollback is not None]
            median = f"{statistics.median(fired):.0f}" if fired else "-"
            print(
                f"| {label} | {monitor_name} | {len(fired) / len(runs):.0%} | {median} | "
                f"{statistics.mean(r.checks for r in runs):.2f} | "
                f"{statistics.mean(r.lkg_episodes for r in runs):.1f} |"
            )


if __name__ == "__main__":
    main()
