"""Does the demo drift defeat a frozen policy while a controller that knows it wins?

The position-commanded arm's task on ``--tasks`` paired fixed tasks (episode seeds
0..N-1: the same start pose and target in every row), on the nominal arm and on the arm
at the end of the demo drift (``DriftSchedule.demo()``: actuator gain 0.6, friction x4,
0.5 kg payload, one step of delay), for:

- the frozen shipped policy (deterministic actions; ``--bundle``, default the shipped
  position bundle; served by ``PolicyEngine.act``, so its action frame applies),
- the scripted controller (damped least-squares IK + the position interface, nominal
  model),
- the oracle (the same controller given the true dynamics: it commands the pose at which
  the impedance controller with the true gain, payload and bias comes to rest on the IK
  solution).

Outcome per episode: success (settled within the radius over the last steps) and final
distance, with standard errors over the tasks; return as a secondary figure. Targets
(issue 14): frozen drifted success <= 50 % of its nominal; oracle drifted >= 90 % of its
nominal. ``--supervised`` puts the position supervisor (``supervisor_for``, a fresh one per
episode) between every controller and the arm, as serving does, adds the share of
steps it corrected, and prints a second table instead of the preview below: on the
nominal arm (episode seeds 1000..), the share of steps corrected in all and per check,
for the policy's deterministic and sampled actions (the fleet sends sampled ones) and
the scripted controller.

Without it, a second table previews what that supervisor will see on the nominal arm: for the
policy (deterministic and sampled) and the scripted controller, the share of steps whose
command moves a joint by more than its velocity limit x period from the previous
command, demands more than the motor's torque from the impedance law
(``Kp (q_cmd − q) − Kd q̇ + g_nominal(q)``), or lies outside a joint's range.

    python benchmarks/bench_task.py [--tasks 100] [--bundle PATH] [--supervised]

Numbers are in docs/benchmarks.md ("Task: frozen vs oracle on the position arm").
"""

from __future__ import annotations

import argparse
import math
import platform
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np
import torch

from tether.policy.bundle import load_bundle
from tether.policy.config import EngineConfig
from tether.policy.engine import PolicyEngine
from tether.safety.for_spec import supervisor_for
from tether.safety.verdict import check_names
from tether.sim import ArmDynamics, ArmEnv, ArmEnvConfig, ArmKinematics, DriftSchedule, arm_spec
from tether.sim.controllers import ReachController
from tether.sim.episodes import Act, run_episodes
from tether.sim.outcome import EpisodeOutcome

POSITION = ArmEnvConfig(command_interface="position")
SHIPPED = Path(str(files("tether.assets") / "pretrained-position" / "arm"))
# A controller for one arm: its act(observation) and the reset before each episode.
Controller = tuple[Act, Callable[[], None] | None]


@dataclass(frozen=True)
class Row:
    successes: np.ndarray
    distances: np.ndarray
    returns: np.ndarray

    @classmethod
    def of(cls, outcomes: tuple[EpisodeOutcome, ...]) -> Row:
        return cls(
            np.array([float(o.success) for o in outcomes]),
            np.array([o.final_distance_m for o in outcomes]),
            np.array([o.episode_return for o in outcomes]),
        )


def mean_se(values: np.ndarray) -> tuple[float, float]:
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(len(values)))


def run(controller: Controller, dynamics: ArmDynamics, tasks: int) -> Row:
    env = ArmEnv(dynamics=dynamics, seed=0, config=POSITION)
    act, reset = controller
    return Row.of(run_episodes(env, act, range(tasks), reset=reset))


class Supervised:
    """``controller`` behind the position supervisor (a fresh one per episode), counting
    the steps it corrected."""

    def __init__(self, controller: Controller) -> None:
        self._act, self._reset = controller
        self.steps = self.corrected = 0
        self.by_check: Counter[str] = Counter()
        self._new()

    def _new(self) -> None:
        self._supervisor = supervisor_for(arm_spec("position"))
        self._previous: np.ndarray | None = None

    def reset(self) -> None:
        self._new()
        if self._reset is not None:
            self._reset()

    def act(self, obs: np.ndarray) -> np.ndarray:
        proposed = np.asarray(self._act(obs), dtype=np.float32)
        action, verdict = self._supervisor.filter(obs, proposed, self._previous)
        self._previous = action
        self.steps += 1
        self.corrected += bool(verdict.intervened)
        if verdict.intervened:
            self.by_check.update(check_names(int(verdict.checks)))
        return action

    @property
    def controller(self) -> Controller:
        return self.act, self.reset


def frozen_policy(bundle_path: Path, *, sampled: bool = False) -> Controller:
    """The bundle served as robots get it: ``PolicyEngine.act`` (its action frame included)."""
    bundle = load_bundle(bundle_path)
    if bundle.robot_spec != arm_spec("position"):
        raise SystemExit(f"{bundle_path} is not a bundle for the position-commanded arm")
    engine = PolicyEngine(bundle, EngineConfig(execution="eager", seed=0, num_threads=1))

    def act(obs: np.ndarray) -> np.ndarray:
        return engine.act(obs[None, :].astype(np.float32), deterministic=not sampled).actions[0]

    return act, None


CHECKS = ("VELOCITY", "ACCELERATION", "POSITION", "TORQUE", "WORKSPACE", "OBSTACLE")


def corrected_row(name: str, controller: Controller, tasks: int) -> str:
    """One markdown row: success and the share of steps the supervisor corrected, in all
    and per check, on the nominal arm (episode seeds 1000..)."""
    supervised = Supervised(controller)
    env = ArmEnv(seed=0, config=POSITION)
    act, reset = supervised.controller
    outcomes = run_episodes(env, act, range(1000, 1000 + tasks), reset=reset)
    steps = max(supervised.steps, 1)
    success = np.mean([o.success for o in outcomes])
    shares = " | ".join(f"{supervised.by_check[c] / steps:.1%}" for c in CHECKS)
    return f"| {name} | {success:.2f} | {supervised.corrected / steps:.1%} | {shares} |"


def command_preview(name: str, controller: Controller, tasks: int) -> str:
    """One markdown row: success and the shares of steps a position supervisor would
    have to correct (rate, torque, range), on the nominal arm, without one."""
    spec = arm_spec("position")
    kin = ArmKinematics(spec)
    kp, kd = np.array(spec.joint_stiffness_nm_rad), np.array(spec.joint_damping_nm_s_rad)
    tau = np.array(spec.torque_limit_nm)
    step = np.array(spec.joint_velocity_limit_rad_s) * spec.control_period_s
    low, high = np.array(spec.joint_position_low_rad), np.array(spec.joint_position_high_rad)
    lay = spec.layout.slices()
    act, reset = controller
    counts = np.zeros(3)
    previous: list[np.ndarray] = []

    def recording_reset() -> None:
        previous.clear()
        if reset is not None:
            reset()

    def recording(obs: np.ndarray) -> np.ndarray:
        action = act(obs)
        q = obs[lay["joint_position"]].astype(np.float64)
        qd = obs[lay["joint_velocity"]].astype(np.float64)
        command = spec.commanded_position(action)
        before = previous[0] if previous else q
        demand = kp * (command - q) - kd * qd + kin.gravity_torque(q)
        counts[:] += (
            bool((np.abs(command - before) > step).any()),
            bool((np.abs(demand) > tau).any()),
            bool(((command < low) | (command > high)).any()),
        )
        previous[:] = [command]
        return action

    env = ArmEnv(seed=0, config=POSITION)
    outcomes = run_episodes(env, recording, range(tasks), reset=recording_reset)
    steps = sum(o.steps for o in outcomes)
    rate, torque, outside = counts / steps
    success = np.mean([o.success for o in outcomes])
    return f"| {name} | {success:.2f} | {rate:.1%} | {torque:.1%} | {outside:.1%} |"


def controller(dynamics: ArmDynamics | None) -> Controller:
    c = ReachController(arm_spec("position"), dynamics=dynamics)
    return c.act, c.reset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100, help="paired fixed tasks (episodes)")
    parser.add_argument("--bundle", type=Path, default=SHIPPED, help="frozen policy's bundle")
    parser.add_argument(
        "--supervised", action="store_true", help="every controller through the supervisor"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    nominal = ArmDynamics.nominal()
    worn = DriftSchedule.demo().dynamics_at(10**9, nominal)
    print(
        f"machine: {platform.machine()}, python {platform.python_version()}, torch {torch.__version__}"
    )
    print(f"{args.tasks} paired tasks; drifted = {worn}")
    # Each row: a name and how to build the controller for an arm of given dynamics
    # (the oracle is told the truth; the others ignore it).
    makers: list[tuple[str, Callable[[ArmDynamics], Controller]]] = []
    if args.bundle.exists():
        frozen = frozen_policy(args.bundle)
        makers.append((f"frozen policy ({args.bundle.name})", lambda d: frozen))
    else:
        print(f"(no bundle at {args.bundle}: frozen policy row skipped)")
    makers.append(("scripted controller (nominal model)", lambda d: controller(None)))
    makers.append(("oracle (true dynamics)", controller))
    start = time.perf_counter()

    def measured(
        make: Callable[[ArmDynamics], Controller], dynamics: ArmDynamics
    ) -> tuple[Row, float]:
        """The controller's row on ``dynamics`` and the share of its steps corrected."""
        if not args.supervised:
            return run(make(dynamics), dynamics, args.tasks), float("nan")
        supervised = Supervised(make(dynamics))
        row = run(supervised.controller, dynamics, args.tasks)
        return row, supervised.corrected / max(supervised.steps, 1)

    rows = [(name, measured(make, nominal), measured(make, worn)) for name, make in makers]
    print(f"({time.perf_counter() - start:.0f} s)\n")
    where = "through the position supervisor" if args.supervised else "no supervisor"
    print(f"Outcomes, {where}:\n")
    print(
        "| controller | nominal success | drifted success | kept | nominal final distance (m) "
        "| drifted final distance (m) | nominal return | drifted return |"
        + (" corrected nominal / drifted |" if args.supervised else "")
    )
    print("|---|---|---|---|---|---|---|---|" + ("---|" if args.supervised else ""))
    for name, (before, c0), (after, c1) in rows:
        (s0, e0), (s1, e1) = mean_se(before.successes), mean_se(after.successes)
        (d0, f0), (d1, f1) = mean_se(before.distances), mean_se(after.distances)
        r0, r1 = before.returns.mean(), after.returns.mean()
        kept = s1 / s0 if s0 > 0 else float("nan")
        print(
            f"| {name} | {s0:.2f} ± {e0:.2f} | {s1:.2f} ± {e1:.2f} | {kept:.0%} | "
            f"{d0:.3f} ± {f0:.3f} | {d1:.3f} ± {f1:.3f} | {r0:.1f} | {r1:.1f} |"
            + (f" {c0:.1%} / {c1:.1%} |" if args.supervised else "")
        )
    if args.supervised:
        print(f"\nCorrected steps, nominal arm, {args.tasks} episodes (seeds 1000..):\n")
        print("| controller | success | corrected | " + " | ".join(CHECKS) + " |")
        print("|---|---|---|" + "---|" * len(CHECKS))
        corrected: list[tuple[str, Controller]] = []
        if args.bundle.exists():
            corrected.append(("frozen policy, deterministic", frozen_policy(args.bundle)))
            corrected.append(("frozen policy, sampled", frozen_policy(args.bundle, sampled=True)))
        corrected.append(("scripted controller", controller(None)))
        for name, c in corrected:
            print(corrected_row(name, c, args.tasks))
        return

    print("\nWhat a position supervisor would correct, nominal arm, no supervisor in the loop:\n")
    print(
        "| controller | success | steps over the rate limit | over the torque limit | outside the range |"
    )
    print("|---|---|---|---|---|")
    previews: list[tuple[str, Controller]] = []
    if args.bundle.exists():
        previews.append(("frozen policy, deterministic", frozen_policy(args.bundle)))
        previews.append(("frozen policy, sampled", frozen_policy(args.bundle, sampled=True)))
    previews.append(("scripted controller", controller(None)))
    for name, c in previews:
        print(command_preview(name, c, args.tasks))


if __name__ == "__main__":
    main()
