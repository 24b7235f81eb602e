"""How far can a goal shift take a frozen actor on the drifted arm? The per-task ceiling.

The hindsight learner (``learning.algorithm: hindsight``) moves one slice of what a
frozen actor reads by a learned, bounded shift: the command it steps from (label
``tracking``, the default) or the goal it reaches for (label ``goal``). This bench asks
what the *best* shift per task could reach, with no learning in the way: on each of
``--tasks`` paired fixed tasks (episode seeds 0..N-1, the drifted arm of
``bench_adaptation.py``: ``DriftSchedule.demo()`` at its end) it repeats the same episode
``--iterations`` times, each time setting the shift from how the previous episode ended
(iterative learning control on one task), through the bundle's action frame and a fresh
position supervisor per episode, deterministic actions:

- ``goal``: ``shift += target - where the end effector came to rest``;
- ``command``: ``shift = where the joints came to rest - the command held there`` (the
  tracking label; the frame still steps from the command the robot reported).

A shift learned across tasks can do no better than what this finds for each task
separately.

Rows: the bundle's actor, and the scripted reaching controller with the nominal model
(``tether.sim.controllers.ReachController``: the teacher the shipped actor was cloned
from) under the same shifts, for each ``--shifts`` kind. Columns: success of the
unshifted episode (the frozen policy), of the episode after one correction, after the
last, and in any corrected episode (the optimistic ceiling), with the learner's shift
bound counted separately (a task whose best shift lies outside it on some axis:
``--bound`` m for the goal, ``--command-bound`` rad for the command).

    python benchmarks/bench_goal_shift_ceiling.py [--tasks 40] [--iterations 5]
        [--bundle PATH] [--shifts command,goal] [--bound 0.1] [--command-bound 0.2]

Numbers are in docs/benchmarks.md ("Adaptation on the position arm").
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from bench_adaptation import POSITION, SHIPPED

from tether.policy.bundle import load_bundle
from tether.policy.networks import Actor
from tether.policy.transforms import ObservationNormalizer
from tether.safety.for_spec import supervisor_for
from tether.sim import ArmDynamics, ArmEnv, DriftSchedule, arm_spec
from tether.sim.controllers import ReachController

# (what the controller reads, what the robot reported) -> normalized absolute command
Controller = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class Ceiling:
    unshifted: float
    first: float
    last: float
    any_corrected: float
    outside_bound: int


def actor_controller(bundle_path: Path) -> tuple[Controller, Callable[[], None]]:
    """The bundle's actor, deterministic, through its action frame."""
    bundle = load_bundle(bundle_path)
    actor = Actor(bundle.architecture).eval().requires_grad_(False)
    actor.load_state_dict(bundle.actor_state)
    normalize = ObservationNormalizer(bundle.manifest.normalizer)
    frame = bundle.manifest.action.frame

    def act(seen: np.ndarray, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            x = torch.from_numpy(normalize(seen[None, :]))
            out = actor.sample(x, deterministic=True)[0].numpy()
        return out[0] if frame is None else frame.actions(obs[None, :], out)[0]

    return act, lambda: None


def teacher_controller() -> tuple[Controller, Callable[[], None]]:
    """The scripted controller: it steps from the command it reads, so the command it
    answers is moved back by the shift of that command (none for a goal shift)."""
    spec = arm_spec("position")
    assert spec.layout is not None
    command = spec.layout.slices()["command"]
    teacher = ReachController(spec)

    def act(seen: np.ndarray, obs: np.ndarray) -> np.ndarray:
        shift = seen[command].astype(np.float64) - obs[command]
        target = spec.commanded_position(teacher.act(seen)) - shift
        return np.asarray(spec.action_for_position(target), dtype=np.float32)

    return act, teacher.reset


def ceiling(
    act: Controller,
    reset: Callable[[], None],
    kind: str,
    tasks: int,
    iterations: int,
    bound: float,
) -> Ceiling:
    spec = arm_spec("position")
    assert spec.layout is not None
    lay = spec.layout.slices()
    shifted = lay["target"] if kind == "goal" else lay["command"]
    drift = DriftSchedule.demo()
    worn = drift.dynamics_at(drift.last_step, ArmDynamics.nominal())
    env = ArmEnv(dynamics=worn, seed=0, config=POSITION)
    rows = []
    outside = 0
    for task in range(tasks):
        shift = np.zeros(shifted.stop - shifted.start)
        successes = []
        best: np.ndarray | None = None
        for _ in range(iterations + 1):
            obs, _ = env.reset(seed=task)
            reset()
            supervisor, previous = supervisor_for(spec), None
            target = obs[lay["target"]].astype(np.float64)
            done = False
            while not done:
                seen = obs.copy()
                seen[shifted] = obs[shifted] + shift
                executed, _ = supervisor.filter(obs, act(seen, obs), previous)
                previous = executed
                obs, _, terminated, truncated, _ = env.step(executed)
                done = terminated or truncated
            success = env.episode_outcome().success
            if success and best is None and successes:
                best = shift.copy()
            successes.append(success)
            if kind == "goal":
                shift = shift + (target - obs[lay["end_effector"]])
            else:
                shift = (obs[lay["joint_position"]] - obs[lay["command"]]).astype(np.float64)
        outside += best is not None and bool(np.abs(best).max() > bound)
        rows.append(successes)
    s = np.array(rows, dtype=float)
    return Ceiling(
        unshifted=float(s[:, 0].mean()),
        first=float(s[:, 1].mean()),
        last=float(s[:, -1].mean()),
        any_corrected=float(s[:, 1:].max(axis=1).mean()),
        outside_bound=outside,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40, help="paired fixed tasks (episodes)")
    parser.add_argument("--iterations", type=int, default=5, help="corrections per task")
    parser.add_argument("--bundle", type=Path, default=SHIPPED, help="position-arm bundle")
    parser.add_argument("--shifts", default="command,goal", help="comma list of command, goal")
    parser.add_argument("--bound", type=float, default=0.1, help="the goal shift's bound (m)")
    parser.add_argument(
        "--command-bound", type=float, default=0.2, help="the command shift's bound (rad)"
    )
    args = parser.parse_args()
    if args.tasks < 1 or args.iterations < 1:
        raise SystemExit("--tasks and --iterations must be at least 1")
    torch.set_num_threads(1)
    print(f"# {platform.machine()}, python {platform.python_version()}, torch {torch.__version__}")
    print(f"# {args.tasks} tasks, {args.iterations} corrections each, bundle {args.bundle}")
    kinds = [k for k in args.shifts.split(",") if k]
    if not kinds or set(kinds) - {"command", "goal"}:
        raise SystemExit("--shifts takes command and/or goal")
    print(
        "| shift | controller | unshifted | after 1 correction | after the last | any corrected "
        "| best shift outside the bound | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for kind in kinds:
        bound = args.bound if kind == "goal" else args.command_bound
        for name, (act, reset) in (
            (f"actor ({args.bundle.name})", actor_controller(args.bundle)),
            ("scripted controller (nominal model)", teacher_controller()),
        ):
            start = time.monotonic()
            c = ceiling(act, reset, kind, args.tasks, args.iterations, bound)
            print(
                f"| {kind} | {name} | {c.unshifted:.2f} | {c.first:.2f} | {c.last:.2f} | "
                f"{c.any_corrected:.2f} | {c.outside_bound} | {time.monotonic() - start:.0f} |"
            )


if __name__ == "__main__":
    main()
