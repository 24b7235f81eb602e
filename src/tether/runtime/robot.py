"""One simulated robot of ``tether run``: its own process, a ``Control`` session, drifting dynamics.

The robot behaves like a real controller next to real hardware: it reads the arm,
sends the observation through a gRPC ``Control`` session, executes exactly the action
that comes back (the server's safe action, or the client watchdog's backup), and keeps
its control rate (or runs unthrottled with ``fast``). Its dynamics follow a drift
schedule on a clock of ``control_rate_hz`` ticks per wall second, so the drift happens at
the same moment of a run whether the robot is throttled or not.

What it reports goes to the parent through a queue of its own (``RobotProcesses``) as
typed records: one ``EpisodeRecord`` per finished episode (violations and contacts as
MuJoCo measured them), a ``RobotSnapshot`` every second, a ``RunEvent`` when its drift
phase changes, and its round-trip latencies (ms) in ``latency_<robot_id>.npy`` at the
end.
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import logging
import multiprocessing as mp
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tether.lifeline import die_with_parent
from tether.runtime.records import EpisodeRecord, RobotSnapshot, RunEvent
from tether.serving.client.options import ClientOptions
from tether.serving.client.sync import PolicyClient
from tether.shared_flag import SharedFlag
from tether.sim import ArmDynamics, ArmEnv, DriftSchedule

log = logging.getLogger(__name__)

_SNAPSHOT_INTERVAL_S = 1.0
_RECENT_EPISODES = 10
_WARMUP_CALLS = 20
# Each task runs this many episodes in a row, so the canary's router can give one to the
# canary and the next to its control: the same start pose and target, 4 s apart.
_TASK_REPEATS = 2


@dataclass(frozen=True)
class RobotPlan:
    """Everything one robot process needs; built by the parent, picklable."""

    robot_id: str
    role: str  # "learning" or "baseline"
    address: str
    run_dir: Path
    seed: int
    task_seeds: tuple[int, ...]  # episodes cycle through these env seeds; empty: fresh draws
    control_rate_hz: float
    fast: bool
    deterministic: bool
    duration_s: float
    drift: DriftSchedule
    pin_version: int | None
    client: ClientOptions  # the server's token and TLS root, if it has them
    parent_pid: int  # the run's main process: the robot dies with it


class StartSignal:
    """Robots report ready (session open); the parent then starts everyone's clock at once.

    ``t0`` is a ``time.monotonic()`` value, which is system-wide on Linux, so every
    process measures the run's time from the same instant. Nothing here takes a lock: a
    byte per robot (each written by its robot, through :meth:`for_robot`'s copy), ``t0``
    written by the parent before it sets the go flag, so a robot killed at any instant
    holds nothing the others or the parent wait on.
    """

    def __init__(self, ctx: Any, robots: int) -> None:
        self._ready = ctx.RawArray(ctypes.c_bool, robots)
        self._t0 = ctx.RawValue(ctypes.c_double, 0.0)
        self._go = SharedFlag(ctx)
        self._index = -1

    def for_robot(self, index: int) -> StartSignal:
        """The signal as robot ``index`` uses it (the same shared memory)."""
        mine = copy.copy(self)
        mine._index = index
        return mine

    def ready(self) -> None:
        self._ready[self._index] = True

    def all_ready(self) -> bool:
        return all(self._ready)

    def go(self, t0: float) -> None:
        self._t0.value = t0
        self._go.set()

    def wait(self, stop: SharedFlag) -> float | None:
        """The run's t0, or None when ``stop`` was set first."""
        while not self._go.wait(0.1):
            if stop.is_set():
                return None
        return float(self._t0.value)


def drift_phase(schedule: DriftSchedule, step: int) -> str:
    """``pre`` before any ramp starts, ``ramp`` while one runs, ``drifted`` after the last."""
    if not schedule.ramps:
        return "pre"
    first = min(r.start_step for r in schedule.ramps)
    if step < first:
        return "pre"
    return "drifted" if step >= schedule.last_step else "ramp"


class _Episode:
    """Running totals of the episode in progress."""

    def __init__(self) -> None:
        self.ret = 0.0
        self.steps = 0
        self.success = False
        self.interventions = 0
        self.backups = 0
        self.violations = 0
        self.contacts = 0
        self.version = 0
        self.final_distance_m: float | None = None


def run_robot(plan: RobotPlan, out: Any, stop: SharedFlag, start: StartSignal) -> None:
    """Process entry point: drive the arm until ``stop`` is set or the duration is over."""
    logging.basicConfig(level=logging.WARNING)
    # Ctrl-C reaches the whole process group; the parent decides when robots stop, and if
    # the parent dies its robots go with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(plan.parent_pid)
    base = ArmDynamics.nominal()
    env = ArmEnv(dynamics=base, seed=plan.seed)
    spec = env.robot_spec
    period = 0.0 if plan.fast else 1.0 / plan.control_rate_hz
    latencies: list[float] = []
    recent_lat: deque[float] = deque(maxlen=500)
    recent_eps: deque[_Episode] = deque(maxlen=_RECENT_EPISODES)
    total_interventions = 0
    episodes = 0
    steps_since_snapshot = 0
    control_steps = 0  # this robot's control time is control_steps / control_rate_hz
    last_snapshot = time.monotonic()
    phase = "pre"
    dynamics = base
    with PolicyClient(plan.address, options=plan.client) as client:
        session = client.session(
            spec,
            robot_id=plan.robot_id,
            control_deadline_s=max(spec.control_period_s, 0.25 if plan.fast else 0.0),
            pin_version=plan.pin_version,
        )
        try:
            # Warm the path (connection, server threads, first inference) with stateless
            # calls, which are not recorded: the first Control steps must not miss the
            # control deadline just because they are the first.
            warm, _ = env.reset(seed=plan.seed)
            for _ in range(_WARMUP_CALLS):
                client.get_action(warm, deterministic=True, client_id=plan.robot_id, timeout_s=5.0)
            start.ready()
            t0 = start.wait(stop)
            if t0 is None:
                return
            tasks = _TaskCycle(plan)
            obs, _ = tasks.reset(env, 0)
            reward, terminated, truncated = 0.0, False, False
            ep = _Episode()
            next_tick = time.monotonic()
            while not stop.is_set():
                now = time.monotonic()
                t_s = now - t0
                if t_s >= plan.duration_s:
                    break
                drift_step = int(t_s * plan.control_rate_hz)
                wanted = plan.drift.dynamics_at(drift_step, base)
                if wanted != dynamics:
                    env.set_dynamics(wanted)
                    dynamics = wanted
                new_phase = drift_phase(plan.drift, drift_step)
                if new_phase != phase:
                    phase = new_phase
                    out.put(
                        _drift_event(
                            plan, t_s, control_steps / plan.control_rate_hz, phase, dynamics
                        )
                    )
                sent = time.perf_counter()
                result = session.step(
                    obs,
                    reward=reward,
                    terminated=terminated,
                    truncated=truncated,
                    deterministic=plan.deterministic,
                    success=ep.success,
                    task_id=tasks.task_id,
                    final_distance_m=ep.final_distance_m,
                )
                rt_ms = (time.perf_counter() - sent) * 1e3
                latencies.append(rt_ms)
                recent_lat.append(rt_ms)
                steps_since_snapshot += 1
                control_steps += 1
                if terminated or truncated:
                    episodes += 1
                    recent_eps.append(ep)
                    out.put(_episode_record(plan, t_s, episodes, ep, phase))
                    ep = _Episode()
                    obs, _ = tasks.reset(env, episodes)
                    reward, terminated, truncated = 0.0, False, False
                else:
                    source = result.verdict.source if result.verdict is not None else "policy"
                    if result.status == "backup" or source == "backup":
                        ep.backups += 1
                    if source != "policy":
                        ep.interventions += 1
                        total_interventions += 1
                    if result.version is not None:
                        ep.version = result.version.id
                    obs, r, terminated, truncated, info = env.step(result.action)
                    reward = float(r)
                    ep.ret += reward
                    ep.steps += 1
                    # Success is the env's settled success (within the radius over the
                    # episode's last steps), as the gate and the evaluations judge it:
                    # reaching the target in passing does not count. The last step's
                    # outcome is the episode's.
                    ep.success = bool(info["settled"])
                    ep.final_distance_m = float(info["distance_m"])
                    if "outcome" in info:
                        outcome = info["outcome"]
                        ep.success = bool(outcome.success)
                        ep.final_distance_m = float(outcome.final_distance_m)
                    ep.violations += int(info["joint_limit_violation"])
                    ep.contacts += int(info["obstacle_contact"])
                if now - last_snapshot >= _SNAPSHOT_INTERVAL_S:
                    out.put(
                        _snapshot(
                            plan,
                            steps_since_snapshot / (now - last_snapshot),
                            recent_lat,
                            recent_eps,
                            total_interventions,
                            episodes,
                            ep.version,
                        )
                    )
                    steps_since_snapshot = 0
                    last_snapshot = now
                if period:
                    next_tick += period
                    delay = next_tick - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    else:
                        next_tick = time.monotonic()  # late: never try to catch up
        finally:
            session.close()
            path = plan.run_dir / f"latency_{plan.robot_id}.npy"
            with contextlib.suppress(OSError):
                np.save(path, np.asarray(latencies, dtype=np.float32))


class _TaskCycle:
    """The task of each episode, and the id the robot declares for it.

    A task is an env seed (same seed: same start pose and target), run ``_TASK_REPEATS``
    episodes in a row; the plan's fixed seeds in turn, or fresh seeds drawn from the
    robot's own seed. The id travels on every step, so the server can pair the episodes
    of one task (``tether.versions.routing``).
    """

    def __init__(self, plan: RobotPlan) -> None:
        self._plan = plan
        self._rng = np.random.default_rng(plan.seed)
        self._seed = plan.seed
        self.task_id = ""

    def reset(self, env: ArmEnv, episode: int) -> tuple[np.ndarray, dict[str, Any]]:
        """Start episode ``episode`` (0-based)."""
        turn, repeat = divmod(episode, _TASK_REPEATS)
        if self._plan.task_seeds:
            self._seed = self._plan.task_seeds[turn % len(self._plan.task_seeds)]
        elif repeat == 0 and episode > 0:
            self._seed = int(self._rng.integers(2**31))
        self.task_id = f"arm-seed-{self._seed}"
        return env.reset(seed=self._seed)


def _episode_record(plan: RobotPlan, t_s: float, n: int, ep: _Episode, phase: str) -> EpisodeRecord:
    return EpisodeRecord(
        t_s=t_s,
        robot_id=plan.robot_id,
        role=plan.role,
        episode=n,
        episode_return=ep.ret,
        success=ep.success,
        steps=ep.steps,
        interventions=ep.interventions,
        backups=ep.backups,
        policy_version=ep.version,
        violations=ep.violations,
        contacts=ep.contacts,
        drift_phase=phase,
        final_distance_m=ep.final_distance_m,
    )


def _drift_event(
    plan: RobotPlan, t_s: float, control_s: float, phase: str, d: ArmDynamics
) -> RunEvent:
    words = {"ramp": "drift begins", "drifted": "drift complete", "pre": "nominal dynamics"}
    return RunEvent(
        t_s=t_s,
        control_s=control_s,
        kind="drift",
        message=f"{plan.robot_id}: {words[phase]}",
        robot_id=plan.robot_id,
        details={
            "phase": phase,
            "actuator_gain": d.actuator_gain,
            "joint_friction": d.joint_friction,
            "payload_mass_kg": d.payload_mass_kg,
            "action_delay_steps": d.action_delay_steps,
        },
    )


def _snapshot(
    plan: RobotPlan,
    rate_hz: float,
    lat: deque[float],
    eps: deque[_Episode],
    interventions: int,
    episodes: int,
    version: int,
) -> RobotSnapshot:
    arr = np.asarray(lat) if lat else np.zeros(1)
    returns = [e.ret for e in eps]
    return RobotSnapshot(
        robot_id=plan.robot_id,
        role=plan.role,
        control_rate_hz=rate_hz,
        latency_p50_ms=float(np.percentile(arr, 50)),
        latency_p99_ms=float(np.percentile(arr, 99)),
        return_avg=float(np.mean(returns)) if returns else 0.0,
        success_rate=float(np.mean([e.success for e in eps])) if eps else 0.0,
        interventions=interventions,
        episodes=episodes,
        policy_version=version,
    )


RobotReport = EpisodeRecord | RobotSnapshot | RunEvent


class RobotProcesses:
    """The run's robots, each in a spawned process of its own, and what they report.

    Each robot writes to a queue of its own. A ``multiprocessing.Queue``'s writers share
    one lock, taken by each writer's feeder thread while it writes a record to the pipe;
    a robot killed in that instant would keep it, and every other robot's records would
    stop reaching the parent for good (and their exits, which wait for their feeders,
    would hang). With a queue each, a killed robot loses only its own. Nothing else the
    parent and the robots share takes a lock (:class:`StartSignal`, the stop flag).
    """

    def __init__(
        self,
        plans: list[RobotPlan],
        target: Callable[[RobotPlan, Any, SharedFlag, StartSignal], None] = run_robot,
    ) -> None:
        ctx = mp.get_context("spawn")
        self.stop = SharedFlag(ctx)
        self._start = StartSignal(ctx, len(plans))
        self._queues = [ctx.Queue() for _ in plans]
        self.processes = [
            ctx.Process(
                target=target,
                args=(plan, queue, self.stop, self._start.for_robot(i)),
                name=plan.robot_id,
                daemon=True,
            )
            for i, (plan, queue) in enumerate(zip(plans, self._queues, strict=True))
        ]

    def start(self) -> list[int]:
        """Start every robot; their pids."""
        for p in self.processes:
            p.start()
        return [p.pid for p in self.processes if p.pid is not None]

    def all_ready(self) -> bool:
        """Every robot has opened its session."""
        return self._start.all_ready()

    def go(self, t0: float) -> None:
        """Start every robot's clock at ``t0`` (``time.monotonic()``)."""
        self._start.go(t0)

    def names(self) -> list[str]:
        return [p.name for p in self.processes]

    def all_alive(self) -> bool:
        return all(p.is_alive() for p in self.processes)

    def any_alive(self) -> bool:
        return any(p.is_alive() for p in self.processes)

    def reports(self) -> list[RobotReport]:
        """What the robots reported since the last call, robot by robot."""
        out: list[RobotReport] = []
        for queue in self._queues:
            while True:
                try:
                    out.append(queue.get_nowait())
                except Exception:  # queue.Empty, or a queue closed under us at shutdown
                    break
        return out

    def winding_down(self, grace_s: float = 10.0, join_s: float = 5.0) -> Iterator[None]:
        """Set :attr:`stop`, then yield while a robot still runs, for up to ``grace_s``
        (the caller drains :meth:`reports` and sleeps between); then terminate the robots
        still running and join them."""
        self.stop.set()
        deadline = time.monotonic() + grace_s
        while self.any_alive() and time.monotonic() < deadline:
            yield
        for p in self.processes:
            if p.is_alive():
                p.terminate()
            p.join(timeout=join_s)
