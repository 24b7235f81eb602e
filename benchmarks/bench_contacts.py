"""How often the position supervisor lets the built-in MuJoCo arm touch the obstacle or
pass a joint limit, over many seeds of a uniformly random command policy.

Each seed is one run of ``tests/safety/random_commands.py`` (the run the slow test makes
on five seeds per arm): a fresh target every 25 steps anywhere in the command range,
filtered by ``supervisor_for(arm_spec("position"))``, counted by MuJoCo. The drifted arm
(gain 0.6, friction x4, a 0.5 kg payload, one step of delay) is where what the
supervisor's model does not cover shows. With ``--hand H`` a person's hand pushes the arm
for 40 of every 120 steps, a random torque per joint up to H times its torque limit, and
lets go; what the arm touches while pushed, or until it is first clear after, is not
counted (``random_action_run``). With ``--baseline-src TREE`` (a checkout of an earlier
commit; with ``--hand``, one whose ``ArmEnv`` has ``set_external_torque``) the same
seeds run on that tree's ``src`` too, each tree in processes of its own, so the two rows
of an arm compare like with like.

    python benchmarks/bench_contacts.py [--seeds 100] [--steps 10000]
        [--arms nominal,drifted] [--hand 0.0] [--jobs 2] [--baseline-src TREE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from trees import run_in_tree, tree_src

ROOT = Path(__file__).resolve().parents[1]


def _one(job: tuple[str, int, int, float]) -> tuple[str, int, int, int]:
    from safety.random_commands import ARMS, random_command_run

    from tether.safety.for_spec import supervisor_for
    from tether.sim import arm_spec

    arm, seed, steps, hand = job
    contacts, violations = random_command_run(
        ARMS[arm], supervisor_for(arm_spec("position")), steps, seed, hand
    )
    return arm, seed, contacts, violations


def _counts(
    arms: list[str], seeds: int, steps: int, hand: float, jobs: int
) -> list[tuple[str, int, int, int]]:
    work = [(arm, seed, steps, hand) for arm in arms for seed in range(seeds)]
    with ProcessPoolExecutor(jobs) as pool:
        return list(pool.map(_one, work))


def _tree_counts(
    src: Path, arms: list[str], seeds: int, steps: int, hand: float, jobs: int
) -> list[tuple[str, int, int, int]]:
    """``_counts`` run with ``src`` as the package, in a process of its own."""
    args = ["--_json", "--seeds", str(seeds), "--steps", str(steps), "--hand", str(hand)]
    args += ["--jobs", str(jobs), "--arms", ",".join(arms)]
    out = run_in_tree(src, [sys.executable, __file__, *args], ROOT / "tests")
    return [tuple(row) for row in json.loads(out)]  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--arms", default="nominal,drifted")
    parser.add_argument("--hand", type=float, default=0.0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--_json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    arms = args.arms.split(",")
    if args._json:
        print(json.dumps(_counts(arms, args.seeds, args.steps, args.hand, args.jobs)))
        return
    trees = {"this tree": ROOT / "src"}
    if args.baseline_src is not None:
        trees = {"baseline": tree_src(args.baseline_src, "safety"), **trees}
    print(
        f"# bench_contacts: random commands, {args.seeds} seeds x {args.steps} steps, "
        f"hand {args.hand}, {args.jobs} processes; {platform.machine()}, "
        f"Python {platform.python_version()}\n"
    )
    print(
        "| tree | arm | seeds with contact | contact steps | limit-violation steps | worst seeds |"
    )
    print("|---|---|---|---|---|---|")
    for name, src in trees.items():
        start = time.perf_counter()
        rows = _tree_counts(src, arms, args.seeds, args.steps, args.hand, args.jobs)
        for arm in arms:
            mine = [r for r in rows if r[0] == arm]
            touched = sorted((r for r in mine if r[2]), key=lambda r: -r[2])
            worst = ", ".join(f"{r[1]}: {r[2]}" for r in touched[:4]) or "-"
            print(
                f"| {name} | {arm} | {len(touched)} / {len(mine)} | {sum(r[2] for r in mine)} "
                f"| {sum(r[3] for r in mine)} | {worst} |"
            )
        print(f"<!-- {name}: {time.perf_counter() - start:.0f} s -->")


if __name__ == "__main__":
    main()
