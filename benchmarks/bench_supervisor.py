"""Supervisor cost per action: a 7-joint synthetic robot and the built-in MuJoCo arm,
and the supervisor for commanded positions beside the torque one on the arm.

Target (issue 4): tens of microseconds per action for a 7-joint spec. Cases: an action
already inside every limit (the common case, returned untouched), random actions that
need correcting, NaN actions replaced by the backup, and the built-in arm with its
MuJoCo kinematics (gravity, obstacle and workspace checks), both on unrelated random
states and along a closed-loop trajectory (what serving sees: each state follows the
last), and the shipped pretrained policy's own closed loop (what ``tether run`` sees).
Each case is timed for ``Supervisor`` and for ``ReferenceSupervisor``
(``tests/safety/reference.py``, the unoptimized oracle that decides identically), in the
same interleaved runs. With ``--baseline-src TREE`` (a checkout of an earlier commit),
the shipped policy's closed loop is also timed for that tree's supervisor and this
one's, each in a fresh process on its own closed loop, rounds alternating. Every figure
comes from one run of this script.

The second table times ``PositionSupervisor`` (commanded joint positions; target ≤ 20
µs per action at batch 1, issue 22) on its Python path, on its compiled path
(``tether.safety.position.kernel``, bit-identical) one call per action, and on the
compiled path per row of one ``filter_commands``/``filter_actions`` call for 64 robots
(``tether.safety.position.batch``), beside ``Supervisor`` (torques) on the built-in
arm, in the same interleaved runs: a
command or action inside every limit at the home pose, random ones at random states,
NaN, each shipped policy's closed loop (the position one through ``supervisor_for``, in
the action space serving runs), and each one's closed loop on the MuJoCo arm (the torque
supervisor's random policy as above; for positions a random-target policy tracked by
the joint impedance law τ = Kp·(q_cmd − q) − Kd·q̇ + g(q) at the physics rate, emulated
here until ``tether.sim`` has its own). With ``--physics STEPS`` it also counts MuJoCo's
obstacle contacts and joint-limit violations under a uniformly random command policy.

    python benchmarks/bench_supervisor.py [--calls 5000] [--repeats 7] [--baseline-src TREE]
        [--physics 10000]
    python benchmarks/bench_supervisor.py --serving-batch [--episodes 3] [--repeats 7]
        [--rounds 3] [--baseline-src TREE]
    python benchmarks/bench_supervisor.py --session-open

``--serving-batch`` times one engine batch of 64 robots per row as serving supervises
it (``SERVING_CASES``: one ``decide`` or ``filter`` call per row, ``filter_actions`` and
``decide_batch`` for the whole batch, and the harness alone), in ``--rounds`` fresh
runs; with ``--baseline-src`` each round runs this script against that tree's ``src``
and this one's, alternating, and the table puts their medians side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from trees import run_in_tree, tree_src

from tether.safety import LimitsConfig, SafetyLimits, Supervisor
from tether.safety.for_spec import limits_for, supervisor_for
from tether.safety.position import PositionActionSupervisor, PositionSupervisor, kernel
from tether.safety.position.batch import filter_actions, filter_commands
from tether.safety.position.presets import (
    arm_impedance,
    arm_position_limits,
    arm_position_supervisor,
)
from tether.safety.presets import arm_limits, arm_supervisor
from tether.sim import ArmEnv, ArmEnvConfig, ArmKinematics, arm_spec
from tether.spec import Box, CommandInterface, ObservationLayout, RobotSpec, Sphere

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from safety.reference import ReferenceSupervisor  # the test oracle, timed side by side

ARM_IMPEDANCE = arm_impedance()
BATCH = 64  # robots per batched call


def batched(
    items: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]],
    supervisors: list[Any],
    actions: bool,
) -> Callable[[], None]:
    """A call that filters the next ``len(supervisors)`` triples in one batched call,
    row ``r`` with its own supervisor. Where a triple has a previous command, row ``r``
    hands back what its own supervisor returned last (a copy, as a robot's message
    carries it): what serving hands the batch."""
    index = [0]
    rows = len(supervisors)
    run = filter_actions if actions else filter_commands
    last: list[np.ndarray | None] = [None] * rows

    def call() -> None:
        i = index[0]
        chosen = [items[(i + r) % len(items)] for r in range(rows)]
        proposals = [c for _, c, _ in chosen]
        previous = [
            None if p is None or last[r] is None else last[r].copy()  # type: ignore[union-attr]
            for r, (_, _, p) in enumerate(chosen)
        ]
        answers = run(
            supervisors,
            [o for o, _, _ in chosen],
            np.stack(proposals) if actions else proposals,
            previous,
        )
        for r, (action, _) in enumerate(answers):
            last[r] = action
        index[0] = (i + rows) % len(items)

    return call


def panda_like_spec() -> RobotSpec:
    """A 7-joint arm with Franka-Panda-like published limits."""
    n = 7
    names = tuple(f"q{i}" for i in range(n)) + tuple(f"qd{i}" for i in range(n))
    names += ("ee_x", "ee_y", "ee_z", "target_x", "target_y", "target_z")
    return RobotSpec(
        name="panda-like-7",
        joint_names=tuple(f"panda_joint{i + 1}" for i in range(n)),
        control_period_s=0.001,
        observation_names=names,
        layout=ObservationLayout((0, n), (n, 2 * n), (2 * n, 2 * n + 3), (2 * n + 3, 2 * n + 6)),
        joint_position_low_rad=(-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973),
        joint_position_high_rad=(2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973),
        joint_velocity_limit_rad_s=(2.175, 2.175, 2.175, 2.175, 2.61, 2.61, 2.61),
        joint_acceleration_limit_rad_s2=(15.0, 7.5, 10.0, 12.5, 15.0, 20.0, 20.0),
        torque_limit_nm=(87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0),
        home_position_rad=(0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785),
        workspace=Box((-0.9, -0.9, 0.0), (0.9, 0.9, 1.2)),
        obstacles=(Sphere((0.5, 0.0, 0.3), 0.1),),
    )


def per_call_us(
    cases: list[tuple[str, Callable[[], object]]], calls: int, repeats: int
) -> list[tuple[str, float]]:
    """Microseconds per call of each case: the best of ``repeats`` timed runs of ``calls``
    calls. Runs are interleaved case by case, so a burst of load on the shared machine
    hits every case alike instead of one."""
    best = [float("inf")] * len(cases)
    for _ in range(repeats):
        for i, (_, fn) in enumerate(cases):
            best[i] = min(best[i], timeit.timeit(fn, number=calls) / calls * 1e6)
    return [(name, us) for (name, _), us in zip(cases, best, strict=True)]


def cycling(
    items: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]], supervisor: Any
) -> Callable[[], None]:
    """A call that filters the next (observation, action, previous) triple each time."""
    index = [0]

    def call() -> None:
        i = index[0]
        obs, action, previous = items[i]
        supervisor.filter(obs, action, previous)
        index[0] = (i + 1) % len(items)

    return call


def trajectory(
    steps: int, seed: int, command_interface: CommandInterface = "torque", hold_steps: int = 1
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """(observation, proposal, previous executed) along a random policy's closed loop on
    the MuJoCo arm through the arm's supervisor for ``command_interface``: consecutive
    states, as a served robot sends. The policy draws a fresh uniform action every
    ``hold_steps`` steps."""
    env = ArmEnv(seed=seed, config=ArmEnvConfig(command_interface=command_interface))
    supervisor = (
        arm_supervisor()
        if command_interface == "torque"
        else supervisor_for(arm_spec(command_interface))
    )
    rng = np.random.default_rng(seed)
    obs, _ = env.reset()
    previous: np.ndarray | None = None
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
    action = np.zeros(4, dtype=np.float32)
    for step in range(steps):
        if step % hold_steps == 0:
            action = rng.uniform(-1.0, 1.0, 4).astype(np.float32)
        out.append((obs, action, previous))
        previous, _ = supervisor.filter(obs, action, previous)
        obs, _, terminated, truncated, _ = env.step(previous)
        if terminated or truncated:
            obs, _ = env.reset()
            previous = None
    return out


class ImpedanceArm:
    """The MuJoCo arm tracking joint-position commands with the impedance law at the
    physics rate (ARM_IMPEDANCE, nominal gravity, saturated at the torque limits), as
    ``tether.sim`` will; ``drifted`` applies ``DriftSchedule.demo()`` at its end (gain,
    friction, payload; its one step of delay is left out)."""

    def __init__(self, drifted: bool = False) -> None:
        import mujoco

        from tether.sim.drift import DriftSchedule
        from tether.sim.dynamics import ArmDynamics, apply_dynamics
        from tether.sim.geometry import ARM
        from tether.sim.mjcf import build_model

        self._mujoco = mujoco
        self.spec = spec = arm_spec("position")
        self._model = build_model(ARM)
        if drifted:
            apply_dynamics(self._model, DriftSchedule.demo().dynamics_at(10**9, ArmDynamics()))
        self._data = mujoco.MjData(self._model)
        self._substeps = ARM.substeps
        self._kin = ArmKinematics(spec)
        self.low = np.asarray(spec.joint_position_low_rad)
        self.high = np.asarray(spec.joint_position_high_rad)
        self._limit = np.asarray(spec.torque_limit_nm)
        self._kp = np.asarray(ARM_IMPEDANCE.stiffness_nm_per_rad)
        self._kd = np.asarray(ARM_IMPEDANCE.damping_nm_s_per_rad)
        self._data.qpos[:] = spec.home_position_rad
        mujoco.mj_forward(self._model, self._data)

    def observation(self) -> np.ndarray:
        obs = np.zeros(self.spec.obs_dim, dtype=np.float32)
        obs[slice(*self.spec.layout.joint_position)] = self._data.qpos
        obs[slice(*self.spec.layout.joint_velocity)] = self._data.qvel
        return obs

    def step(self, command: np.ndarray) -> tuple[bool, bool]:
        """One control period tracking ``command``: (any obstacle contact, any joint
        beyond its limits) during it."""
        data, touched, beyond = self._data, False, False
        for _ in range(self._substeps):
            tau = self._kp * (command - data.qpos) - self._kd * data.qvel
            tau += self._kin.gravity_torque(data.qpos)
            data.ctrl[:] = np.clip(tau, -self._limit, self._limit) / self._limit
            self._mujoco.mj_step(self._model, data)
            touched |= data.ncon > 0
            beyond |= bool(np.any((data.qpos < self.low) | (data.qpos > self.high)))
        return touched, beyond


def impedance_trajectory(
    steps: int, seed: int
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """(observation, proposed command, previous command) along a closed loop on the
    :class:`ImpedanceArm`: a policy that heads for a new random pose every 25 steps, in
    steps of up to 0.1 rad, through the position supervisor."""
    arm = ImpedanceArm()
    supervisor = arm_position_supervisor()
    rng = np.random.default_rng(seed)
    previous: np.ndarray | None = None
    target = np.asarray(arm.spec.home_position_rad)
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
    for step in range(steps):
        if step % 25 == 0:
            target = rng.uniform(arm.low, arm.high)
        obs = arm.observation()
        q = obs[slice(*arm.spec.layout.joint_position)].astype(np.float64)
        command = (q + np.clip(target - q, -0.1, 0.1)).astype(np.float32)
        out.append((obs, command, previous))
        previous, _ = supervisor.filter(obs, command, previous)
        arm.step(previous)
    return out


def physics_counts(steps: int, drifted: bool, supervised: bool, seed: int) -> tuple[int, int]:
    """(obstacle-contact steps, joint-limit-violation steps) of a uniformly random
    position-command policy on the :class:`ImpedanceArm`, with or without the position
    supervisor."""
    arm = ImpedanceArm(drifted)
    supervisor = arm_position_supervisor()
    rng = np.random.default_rng(seed)
    previous: np.ndarray | None = None
    contacts = violations = 0
    for _ in range(steps):
        command = rng.uniform(arm.low, arm.high).astype(np.float32)
        if supervised:
            command, _ = supervisor.filter(arm.observation(), command, previous)
        previous = command
        touched, beyond = arm.step(command)
        contacts += touched
        violations += beyond
    return contacts, violations


# The shipped policy's closed loop through a tree's own supervisor, then that supervisor
# timed on the recorded calls; runs in a fresh process with the tree's ``src`` first.
_SHIPPED_LOOP = """
import sys, timeit
import numpy as np, torch
torch.set_num_threads(1)
from tether.assets import load_pretrained_bundle
from tether.policy import EngineConfig, PolicyEngine
from tether.safety import ActionSource
from tether.safety.presets import arm_supervisor
from tether.sim import ArmEnv, ArmEnvConfig
episodes, repeats = int(sys.argv[1]), int(sys.argv[2])
engine = PolicyEngine(
    load_pretrained_bundle(command_interface="torque"), EngineConfig(execution="eager")
)
env = ArmEnv(seed=1, config=ArmEnvConfig(command_interface="torque"))
supervisor = arm_supervisor()
calls, corrected = [], 0
for seed in range(episodes):
    obs, _ = env.reset(seed=seed)
    previous = None
    for _ in range(200):
        action = engine.act(obs[None].astype(np.float32), True).actions[0]
        calls.append((obs, action, previous))
        previous, verdict = supervisor.filter(obs, action, previous)
        corrected += verdict.source is not ActionSource.POLICY
        obs, _, terminated, truncated, _ = env.step(previous)
        if terminated or truncated:
            break
def run():
    fresh = arm_supervisor()
    for obs, action, previous in calls:
        fresh.filter(obs, action, previous)
best = min(timeit.repeat(run, number=1, repeat=repeats)) / len(calls) * 1e6
print(best, corrected / len(calls), flush=True)
"""


def shipped_loop_us(src: Path, episodes: int, repeats: int) -> tuple[float, float]:
    """(µs per action, fraction corrected) of the supervisor of the tree at ``src`` on the
    shipped policy's closed loop (deterministic, nominal arm, episode seeds 0..)."""
    out = run_in_tree(src, [sys.executable, "-c", _SHIPPED_LOOP, str(episodes), str(repeats)])
    us, corrected = out.split()
    return float(us), float(corrected)


def shipped_trajectory(
    episodes: int,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """(observation, proposal, previous executed) along the shipped pretrained policy's
    closed loop (deterministic, nominal arm, episode seeds 0..) through the supervisor."""
    from tether.assets import load_pretrained_bundle
    from tether.policy import EngineConfig, PolicyEngine

    engine = PolicyEngine(
        load_pretrained_bundle(command_interface="torque"), EngineConfig(execution="eager")
    )
    env = ArmEnv(seed=1, config=ArmEnvConfig(command_interface="torque"))
    supervisor = arm_supervisor()
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        previous: np.ndarray | None = None
        for _ in range(200):
            action = engine.act(obs[None].astype(np.float32), True).actions[0]
            out.append((obs, action, previous))
            previous, _ = supervisor.filter(obs, action, previous)
            obs, _, terminated, truncated, _ = env.step(previous)
            if terminated or truncated:
                break
    return out


def shipped_position_trajectory(
    episodes: int,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
    """(observation, proposed action, previous executed action) along the shipped position
    policy's closed loop (deterministic, nominal arm, episode seeds 0..) through the
    supervisor serving runs for it (``supervisor_for``: positions in the action space)."""
    from tether.assets import load_pretrained_bundle
    from tether.policy import EngineConfig, PolicyEngine

    engine = PolicyEngine(
        load_pretrained_bundle(command_interface="position"), EngineConfig(execution="eager")
    )
    env = ArmEnv(seed=1, config=ArmEnvConfig(command_interface="position"))
    supervisor = supervisor_for(arm_spec("position"))
    out: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
    for seed in range(episodes):
        obs, _ = env.reset(seed=seed)
        previous: np.ndarray | None = None
        for _ in range(env.config.episode_steps):
            action = engine.act(obs[None].astype(np.float32), True).actions[0]
            out.append((obs, action, previous))
            previous, _ = supervisor.filter(obs, action, previous)
            obs, _, terminated, truncated, _ = env.step(previous)
            if terminated or truncated:
                break
    return out


def random_states(spec: RobotSpec, rng: np.random.Generator, count: int) -> list[np.ndarray]:
    low = np.asarray(spec.joint_position_low_rad)
    high = np.asarray(spec.joint_position_high_rad)
    vmax = np.asarray(spec.joint_velocity_limit_rad_s)
    out = []
    for _ in range(count):
        obs = np.zeros(spec.obs_dim, dtype=np.float32)
        obs[slice(*spec.layout.joint_position)] = rng.uniform(low, high)
        obs[slice(*spec.layout.joint_velocity)] = rng.uniform(-0.5, 0.5) * vmax
        out.append(obs)
    return out


# What --serving-batch times, per row of one engine batch of 64 robots.
SERVING_CASES = {
    "harness": "the harness alone (rows, their observations as one array, previous actions, answers; no supervision)",
    "decide": "one SessionSupervisor.decide call per row",
    "filter": "one PositionActionSupervisor.filter call per row (the supervisor alone)",
    "filter_actions": "filter_actions, the whole batch in one call (the supervisor alone)",
    "decide_batch": "decide_batch, the whole batch in one call (+ levels, degradation machine)",
}


def serving_batch_us(episodes: int, batches: int, repeats: int) -> dict[str, float]:
    """Per row µs (thread CPU time, best of ``repeats``, the cases interleaved) of one
    engine batch of 64 robots supervised as serving supervises it, along the shipped
    policy's closed loop: each robot its own stretch of the loop, handing back its own last
    action (a copy), each case with its own sessions (``SupervisorFactory``) and degradation
    machine (fed every verdict by the decide cases; warmed past one degradation window,
    so every robot's window is full). ``SERVING_CASES`` names the cases;
    every case includes the harness's own per-row work, timed alone as "harness"."""
    import time

    from tether.safety.degradation import DegradationMachine
    from tether.safety.levels import DegradationLevel
    from tether.safety.verdict import PASSED
    from tether.serving.supervision import SupervisedRow, SupervisorFactory, decide_batch

    spec = arm_spec("position")
    items = shipped_position_trajectory(episodes)

    def case(kind: str) -> Callable[[], None]:
        clock = [0.0]
        machine = DegradationMachine(limits=limits_for(spec), clock=lambda: clock[0])
        factory = SupervisorFactory(spec, degradation=machine)
        sessions = [factory(f"robot-{r}") for r in range(BATCH)]
        bases: list[Any] = [s._base for s in sessions]
        last: list[np.ndarray | None] = [None] * BATCH
        step = [0]
        normal = DegradationLevel.NORMAL

        def one() -> None:
            i = step[0]
            chosen = [items[(i + 9 * r) % len(items)] for r in range(BATCH)]
            proposed = np.stack([c[1] for c in chosen])
            stacked = np.array([c[0] for c in chosen])  # the engine's input, as serving has it
            previous = [
                None if c[2] is None or last[r] is None else last[r].copy()  # type: ignore[union-attr]
                for r, c in enumerate(chosen)
            ]
            got: list[tuple[np.ndarray, Any]]
            if kind == "harness":
                got = [(proposed[r], PASSED) for r in range(BATCH)]
            elif kind == "filter":
                got = [
                    bases[r].filter(c[0], proposed[r], previous[r], observation_age_s=0.001)
                    for r, c in enumerate(chosen)
                ]
            elif kind == "filter_actions":
                got = filter_actions(bases, stacked, proposed, previous, [0.001] * BATCH)
            elif kind == "decide":
                got = [
                    sessions[r].decide(
                        c[0],
                        proposed[r],
                        previous[r],
                        observation_age_s=0.001,
                        level=normal,
                        policy_version=1,
                    )
                    for r, c in enumerate(chosen)
                ]
            else:
                rows = [
                    SupervisedRow(sessions[r], c[0], previous[r], 0.001, normal)
                    for r, c in enumerate(chosen)
                ]
                got = decide_batch(rows, proposed, 1, stacked)
            for r in range(BATCH):
                last[r] = got[r][0]
            step[0] = i + 1
            clock[0] += 0.01

        # Past one degradation window (10 s of 0.01 s batches): every robot's window full,
        # so each step also drops its oldest, as in a server that has run a while.
        for _ in range(int(machine.config.window_s / 0.01) + 30):
            one()
        return one

    cases = {kind: case(kind) for kind in SERVING_CASES}
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeats):
        for kind, one in cases.items():
            start = time.thread_time()
            for _ in range(batches):
                one()
            best[kind] = min(best[kind], (time.thread_time() - start) / batches / BATCH * 1e6)
    return best


def serving_batch_side_by_side(
    trees: dict[str, Path], rounds: int, episodes: int, repeats: int
) -> dict[str, list[dict[str, float]]]:
    """``serving_batch_us`` of each tree's ``src`` (this script, run in a fresh process
    with that tree first on the path), the trees alternating round by round."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for _ in range(rounds):
        for name, src in trees.items():
            script = [sys.executable, str(Path(__file__).resolve()), "--serving-batch", "--json"]
            args = ["--episodes", str(episodes), "--repeats", str(repeats)]
            out = run_in_tree(src, [*script, *args])
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
    return runs


def print_serving_batch(runs: dict[str, list[dict[str, float]]]) -> None:
    """The per-row table: each tree's median over its runs (and every run's figure)."""
    names = list(runs)
    print(
        f"\nOne engine batch of {BATCH} robots on the shipped loop, per row (thread CPU µs; "
        "median of the runs, each run's best in brackets):"
    )
    print("| per row, µs | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for kind, label in SERVING_CASES.items():
        cells = []
        for name in names:
            values = [run[kind] for run in runs[name] if kind in run]
            if not values:
                cells.append("-")
                continue
            each = ", ".join(f"{v:.2f}" for v in values)
            cells.append(f"{statistics.median(values):.2f} ({each})")
        print(f"| {kind}: {label} | " + " | ".join(cells) + " |")


def session_open_us(opens: int, repeats: int) -> dict[str, float]:
    """µs (thread CPU, best of ``repeats``, interleaved) to give a new session of the
    position arm its supervisor: ``SupervisorFactory(...)(robot)`` as serving calls it on
    its event loop (a ``fresh()`` copy of the one built at start-up), against building one
    (``supervisor_for``, what a session's open cost before); and the same session's first
    step at RESTRICTED, whose supervisor under the tightened limits is a copy of the
    factory's (``SupervisorFactory.under``) or built from the session's own."""
    import time

    from tether.safety.degradation import DegradationMachine
    from tether.safety.for_spec import kinematics_for, limits_for, supervisor_for
    from tether.serving.supervision import SessionSupervisor, SupervisorFactory

    spec = arm_spec("position")
    limits = limits_for(spec)
    # As serving builds it: RESTRICTED's limits are the degradation machine's.
    factory = SupervisorFactory(spec, degradation=DegradationMachine(limits=limits))
    kinematics = kinematics_for(spec)
    cases: dict[str, Callable[[int], object]] = {
        "factory (fresh copy)": lambda i: factory(f"robot-{i}"),
        "supervisor_for (built)": lambda i: supervisor_for(spec, limits, kinematics=kinematics),
        # A session's first step at RESTRICTED: its supervisor under the tightened limits.
        "factory + RESTRICTED (fresh copies)": lambda i: factory(f"robot-{i}")._tight(),
        "factory + RESTRICTED (built)": lambda i: SessionSupervisor(
            factory(f"robot-{i}")._base, factory.degradation
        )._tight(),
    }
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeats):
        for name, make in cases.items():
            start = time.thread_time()
            for i in range(opens):
                make(i)
            best[name] = min(best[name], (time.thread_time() - start) / opens * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--session-open",
        action="store_true",
        help="only time what a new session's supervisor costs (fresh copy vs built)",
    )
    parser.add_argument(
        "--serving-batch",
        action="store_true",
        help="only time one engine batch of 64 robots supervised as serving does "
        "(filter_actions, then decide_batch with the degradation machine), per row",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="--serving-batch: fresh runs per tree (with --baseline-src, alternating)",
    )
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=2000, help="filter calls per timed run")
    parser.add_argument(
        "--repeats", type=int, default=25, help="timed runs per case, interleaved; the best is kept"
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="root of another checkout whose supervisor is timed beside this one on the "
        "shipped policy's closed loop, or with --serving-batch on the engine batch (before/after "
        "in one run)",
    )
    parser.add_argument(
        "--episodes", type=int, default=10, help="shipped-policy episodes per closed loop"
    )
    parser.add_argument(
        "--physics",
        type=int,
        default=0,
        help="also count obstacle contacts and joint-limit violations of this many steps "
        "of a uniformly random position-command policy, nominal and drifted arm, with and "
        "without the position supervisor (0: skip)",
    )
    args = parser.parse_args()
    if args.session_open:
        for name, us in session_open_us(200, 5).items():
            print(f"{name}: {us:.1f} µs per session")
        return
    if args.serving_batch:
        if args.json:
            print(json.dumps(serving_batch_us(args.episodes, 60, args.repeats)))
            return
        print(f"machine: nproc {os.cpu_count()}, load {os.getloadavg()}")
        if args.baseline_src is None:
            runs = {
                "this tree": [
                    serving_batch_us(args.episodes, 60, args.repeats) for _ in range(args.rounds)
                ]
            }
        else:
            here = Path(__file__).resolve().parents[1] / "src"
            trees = {"before": tree_src(args.baseline_src, "safety"), "after": here}
            runs = serving_batch_side_by_side(trees, args.rounds, args.episodes, args.repeats)
        print_serving_batch(runs)
        print(f"load after: {os.getloadavg()}")
        return
    rng = np.random.default_rng(0)

    spec7 = panda_like_spec()
    limits7 = SafetyLimits.from_spec(spec7, LimitsConfig(acceleration_per_action_scale=10.0))
    # The joint checks only (no kinematics given): what any 7-joint robot pays.
    sup7 = Supervisor(limits7)
    ref7 = ReferenceSupervisor(limits7)
    home = np.zeros(spec7.obs_dim, dtype=np.float32)
    home[:7] = spec7.home_position_rad
    inside = np.full(7, 0.01, dtype=np.float32)
    assert sup7.filter(home, inside)[1].source == "policy"
    states7 = random_states(spec7, rng, 256)
    random7 = [(s, rng.uniform(-1, 1, 7).astype(np.float32), None) for s in states7]
    corrected = sum(sup7.filter(o, a)[1].source != "policy" for o, a, _ in random7) / len(random7)
    nan = np.full(7, np.nan, dtype=np.float32)

    arm = arm_spec("torque")
    sup_arm, ref_arm = (
        arm_supervisor(),
        ReferenceSupervisor(arm_limits(), kinematics=ArmKinematics(arm)),
    )
    loop_sup, loop_ref = (
        arm_supervisor(),
        ReferenceSupervisor(arm_limits(), kinematics=ArmKinematics(arm)),
    )
    kin = ArmKinematics(arm)
    states_arm = random_states(arm, rng, 256)
    random_arm = [(s, rng.uniform(-1, 1, 4).astype(np.float32), None) for s in states_arm]
    loop = trajectory(2000, seed=0)
    shipped = shipped_trajectory(args.episodes)
    shipped_sup, shipped_ref = (
        arm_supervisor(),
        ReferenceSupervisor(arm_limits(), kinematics=ArmKinematics(arm)),
    )
    q_arm = states_arm[0][:4].astype(np.float64)
    a = np.ones(7)

    def kinematics() -> object:
        return kin.gravity_torque(q_arm), kin.end_effector(q_arm), kin.collision_spheres(q_arm)

    cases: list[tuple[str, Callable[[], object]]] = []
    for label, new, old in (
        (
            "7-joint, action inside every limit",
            lambda: sup7.filter(home, inside),
            lambda: ref7.filter(home, inside),
        ),
        (
            f"7-joint, random action ({corrected:.0%} corrected)",
            cycling(random7, sup7),
            cycling(random7, ref7),
        ),
        (
            "7-joint, NaN action -> backup",
            lambda: sup7.filter(home, nan),
            lambda: ref7.filter(home, nan),
        ),
        (
            "built-in arm (4 joints + MuJoCo kinematics), random action at random states",
            cycling(random_arm, sup_arm),
            cycling(random_arm, ref_arm),
        ),
        (
            "built-in arm, closed-loop trajectory (random policy, 2,000 steps)",
            cycling(loop, loop_sup),
            cycling(loop, loop_ref),
        ),
        (
            f"built-in arm, shipped policy's closed loop ({len(shipped)} steps)",
            cycling(shipped, shipped_sup),
            cycling(shipped, shipped_ref),
        ),
    ):
        cases += [(f"{label} | Supervisor", new), (f"{label} | reference", old)]
    # Position commands beside torques on the built-in arm: the Python path, the compiled
    # one per call, and the compiled one per row of a batch of 64 robots.
    pspec = arm_spec("position")
    pq, pv = slice(*pspec.layout.joint_position), slice(*pspec.layout.joint_velocity)
    warm_s = kernel.warm()

    def position(compiled: bool, limits: SafetyLimits | None = None) -> PositionSupervisor:
        supervisor = PositionSupervisor(
            limits or arm_position_limits(),
            ARM_IMPEDANCE,
            kinematics=ArmKinematics(pspec),
            compiled=compiled,
        )
        assert supervisor.compiled == compiled
        return supervisor

    def position_set() -> tuple[Any, Any, list[Any]]:
        return position(False), position(True), [position(True) for _ in range(BATCH)]

    def action_set() -> tuple[Any, Any, list[Any]]:
        limits = limits_for(pspec)
        return (
            PositionActionSupervisor(position(False, limits), pspec),
            PositionActionSupervisor(position(True, limits), pspec),
            [PositionActionSupervisor(position(True, limits), pspec) for _ in range(BATCH)],
        )

    def as_position(obs: np.ndarray) -> np.ndarray:
        out = np.zeros(pspec.obs_dim, dtype=np.float32)
        out[pq], out[pv] = (
            obs[slice(*arm.layout.joint_position)],
            obs[slice(*arm.layout.joint_velocity)],
        )
        return out

    pos_pass, pos_random_sup, pos_loop_sup, pos_nan_sup = (position_set() for _ in range(4))
    at_home = np.zeros(arm.obs_dim, dtype=np.float32)
    at_home[slice(*arm.layout.joint_position)] = arm.home_position_rad
    at_home_position = as_position(at_home)
    home_command = np.asarray(arm.home_position_rad, dtype=np.float32)
    hold_home = (
        kin.gravity_torque(np.asarray(arm.home_position_rad, dtype=np.float64))
        / arm.torque_limit_nm
    ).astype(np.float32)
    assert pos_pass[0].filter(at_home_position, home_command)[1].source == "policy"
    assert sup_arm.filter(at_home, hold_home)[1].source == "policy"
    random_commands = [
        (as_position(s), (s[pq] + rng.uniform(-0.1, 0.1, 4)).astype(np.float32), None)
        for s in states_arm
    ]
    pos_corrected = sum(
        pos_random_sup[0].filter(o, c)[1].source != "policy" for o, c, _ in random_commands
    ) / len(random_commands)
    pos_loop = impedance_trajectory(2000, seed=0)
    pos_shipped = shipped_position_trajectory(args.episodes)
    pos_shipped_corrected = sum(
        supervisor_for(pspec).filter(o, c, p)[1].source != "policy" for o, c, p in pos_shipped
    ) / len(pos_shipped)
    pos_shipped_sup = action_set()
    # The gate's shadow stage: one supervisor judging many robots' rows, each previous
    # action another robot's.
    pos_foreign = [
        (o, c, pos_shipped[(7 * i + 3) % len(pos_shipped)][1])
        for i, (o, c, _) in enumerate(pos_shipped)
    ]
    pos_foreign_sup = action_set()
    nan4 = np.full(4, np.nan, dtype=np.float32)
    torque_pass, torque_nan, torque_shipped = arm_supervisor(), arm_supervisor(), arm_supervisor()
    home_items = [(at_home_position, home_command, None)]
    nan_items = [(at_home_position, np.full(4, np.nan, dtype=np.float32), None)]
    for label, items, sups, actions, torque in (
        (
            "inside every limit at the home pose",
            home_items,
            pos_pass,
            False,
            lambda: torque_pass.filter(at_home, hold_home),
        ),
        (
            f"random at random states (positions: within 0.1 rad, {pos_corrected:.0%} corrected)",
            random_commands,
            pos_random_sup,
            False,
            cycling(random_arm, sup_arm),
        ),
        (
            "closed loop on the MuJoCo arm (2,000 steps)",
            pos_loop,
            pos_loop_sup,
            False,
            cycling(loop, loop_sup),
        ),
        (
            f"shipped policy's closed loop, action space as served ({len(pos_shipped)} steps; "
            f"positions {pos_shipped_corrected:.0%} corrected)",
            pos_shipped,
            pos_shipped_sup,
            True,
            cycling(shipped, torque_shipped),
        ),
        (
            "shipped loop's rows, each previous action another robot's (the shadow stage)",
            pos_foreign,
            pos_foreign_sup,
            True,
            cycling(shipped, arm_supervisor()),
        ),
        ("NaN -> backup", nan_items, pos_nan_sup, False, lambda: torque_nan.filter(at_home, nan4)),
    ):
        python_sup, compiled_sup, fleet = sups
        cases += [
            (f"{label} || python", cycling(items, python_sup)),
            (f"{label} || compiled", cycling(items, compiled_sup)),
            (f"{label} || batch", batched(items, fleet, actions)),
            (f"{label} || torque", torque),
        ]
    cases += [
        ("  of which kinematics: gravity + end effector + spheres | -", kinematics),
        ("reference: numpy add of two 7-vectors | -", lambda: a + a),
    ]
    rows = per_call_us(cases, args.calls, args.repeats)
    if args.baseline_src is not None:
        here = Path(__file__).resolve().parents[1] / "src"
        trees = {"before": tree_src(args.baseline_src, "safety"), "after": here}
        shipped_best: dict[str, tuple[float, float]] = {}
        for _ in range(3):  # rounds alternate, so a burst of load hits both alike
            for name, src in trees.items():
                timed = shipped_loop_us(src, args.episodes, args.repeats)
                shipped_best[name] = min(shipped_best.get(name, timed), timed)
    print(
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, python {platform.python_version()}, "
        f"numpy {np.__version__}, torch {torch.__version__}"
    )
    table: dict[str, dict[str, float]] = {}
    side_by_side: dict[str, dict[str, float]] = {}
    for name, us in rows:
        if " || " in name:
            label, which = name.split(" || ")
            side_by_side.setdefault(label, {})[which] = us
            continue
        label, which = name.split(" | ")
        table.setdefault(label, {})[which] = us
    print("| case | Supervisor µs | reference µs | speed-up |")
    print("|---|---|---|---|")
    for label, got in table.items():
        if "Supervisor" in got:
            new, old = got["Supervisor"], got["reference"]
            print(f"| {label} | {new:.1f} | {old:.1f} | {old / new:.1f}x |")
        else:
            print(f"| {label} | {got['-']:.1f} | | |")
    print(
        f"\nBuilt-in arm, commanded positions beside torques (same runs; kernel compile or "
        f"cache load before the first call: {warm_s:.2f} s):"
    )
    print(
        "| case | PositionSupervisor, Python path µs | compiled, batch 1 µs | compiled, per "
        f"row of a batch of {BATCH} µs | Python/compiled | Supervisor (torque) µs |"
    )
    print("|---|---|---|---|---|---|")
    for label, got in side_by_side.items():
        python_us, compiled_us = got["python"], got["compiled"]
        row_us = got["batch"] / BATCH
        print(
            f"| {label} | {python_us:.1f} | {compiled_us:.1f} | {row_us:.1f} "
            f"| {python_us / compiled_us:.1f}x | {got['torque']:.1f} |"
        )
    if args.physics:
        print(f"\nUniformly random position commands, {args.physics} steps (emulated impedance):")
        print("| arm | supervisor | obstacle-contact steps | joint-limit-violation steps |")
        print("|---|---|---|---|")
        for drifted in (False, True):
            for supervised in (False, True):
                contacts, violations = physics_counts(args.physics, drifted, supervised, 0)
                print(
                    f"| {'drifted' if drifted else 'nominal'} | {'on' if supervised else 'off'} "
                    f"| {contacts} | {violations} |"
                )
    if args.baseline_src is not None:
        print(f"\nShipped policy's closed loop ({args.episodes} episodes, deterministic, nominal):")
        print("| supervisor | µs per action | actions corrected |")
        print("|---|---|---|")
        for name, (us, corrected) in shipped_best.items():
            print(f"| {name} | {us:.1f} | {corrected:.0%} |")
        ratio = shipped_best["after"][0] / shipped_best["before"][0]
        print(f"after/before: {ratio:.2f}")


if __name__ == "__main__":
    main()
