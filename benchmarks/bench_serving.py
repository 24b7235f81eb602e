"""Serving round trip and throughput beside the transport floor (issue 3).

Two policies: *small* is the shipped pretrained bundle (``tether.assets``, the MLP a robot
gets from ``tether serve`` / ``tether run``), whose forward is tens of microseconds, and
*heavy* is an ``init_bundle`` wide MLP whose batch-1 forward is ≥ 0.5 ms. Both are driven
by realistic observations: at start-up the built-in arm runs a closed loop under the
shipped policy (deterministic, nominal dynamics, through the arm's supervisor) and every
client replays that recording, each in its own session and episodes, so the server's
supervisor and degradation machine see the states a robot under this policy produces.
A secondary row (*small, random obs*, ``--no-random`` skips it) keeps the old stress
cells: random observations, on which nearly every action is corrected.

For 1, 8 and 64 concurrent clients, unary (GetAction) and streaming (Control), it
measures round-trip p50/p95/p99 and actions/s beside

- a bare ``grpc.aio`` echo server answering the same messages with a prebuilt reply of
  the same size and no model: the transport floor;
- the same policy server with batching off (``max_batch_size = 1``).

Every server runs in its own process; the load generator (one asyncio process, one
coroutine per client, raw stubs) is the same for all of them, so the ratios compare like
with like. It also measures what handing a batch to a worker thread costs against each
policy's forward (inline vs threaded), breaks the round trip down with the server's own
timings, and profiles the server process (event loop, batch thread, recorder worker) on the
single-robot and the many-robot streaming paths. Its transport probe (one streaming
client) runs echoes that sleep, spin, or compute the forward and the supervision for as
long as the policy handler takes, and the policy server with ``tether run``'s recorder,
to show what grpc and the machine add around a handler of that length.

The policy servers' degradation machines run on served-action time
(``served_time_machine``), so their windows hold as many actions as at a real robot's
rate, and every server
freezes its start-up heap as ``tether serve`` does.

Every reply carries the time its action spent in supervision (``timings.safety_ns``:
``Supervisor.filter`` and the degradation machine). The headline ratios are the real
ones, supervisor on, as the design requires of every action; beside them the report
subtracts that measured time to show what the serving layer itself reaches.

    python benchmarks/bench_serving.py [--seconds 2] [--clients 1,8,64] [--policies small,heavy]

Targets: small policy — streaming p50 at 1 client ≤ 1.25 × the echo floor's, 64-client
actions/s ≥ 0.8 × the echo floor's; heavy policy — 64 clients ≥ 2.5 × the actions/s of
batching off.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import json
import multiprocessing as mp
import os
import platform
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import torch
from trees import TREE_CWD, tree_env, tree_src

from tether.assets import pretrained_bundle_path
from tether.data import ExperienceLog, Recorder
from tether.policy.bundle import load_bundle
from tether.policy.config import EngineConfig
from tether.policy.engine import PolicyEngine
from tether.policy.initialize import init_bundle
from tether.safety.for_spec import supervisor_for
from tether.serving.busy_poll import BusyPoll
from tether.sim import ArmEnv, arm_spec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc

SPEC = arm_spec()
POLICIES = ("small", "heavy")
HEAVY_HIDDEN = (1280, 1280)
RANDOM = "small, random obs"  # the secondary row: the small server fed random observations


# --------------------------------------------------------------------------- servers


class EchoService(pb_grpc.PolicyServiceServicer):
    """The transport floor: answers with a prebuilt reply of the real reply's size.

    With ``work``, each Control step first runs ``work()`` (returns its ns, put in the
    reply's ``timings.total_ns``) and then answers the same prebuilt reply: the transport
    probe's echo that spends as long between messages as the policy server does. With
    ``poll``, each step touches it as tether's batcher touches its own (busy polling).
    """

    def __init__(self, work: Callable[[], int] | None = None, poll: BusyPoll | None = None) -> None:
        zeros = [0.125] * SPEC.act_dim
        self._work = work
        self._poll = poll
        self._action = pb.ActionResponse(
            action=zeros,
            proposed_action=zeros,
            log_prob=-1.0,
            status="ok",
            version=pb.PolicyVersion(policy_version=1, weights_sha256="0" * 64, name="echo"),
            safety=pb.SafetyVerdict(source=pb.ACTION_SOURCE_POLICY),
            timings=pb.ServerTimings(queue_ns=1, inference_ns=1, safety_ns=1, total_ns=1),
            degradation=pb.DEGRADATION_LEVEL_NORMAL,
        )

    async def GetAction(self, request: pb.ActionRequest, context: Any) -> pb.ActionResponse:
        return self._action

    async def Control(self, request_iterator: Any, context: Any) -> Any:
        work = self._work
        async for message in request_iterator:
            if message.WhichOneof("kind") == "open":
                yield pb.ControlReply(opened=pb.SessionOpened(session_id="echo"))
            else:
                if self._poll is not None:
                    self._poll.touch()
                step = message.step
                spent = work() if work is not None else 0
                reply = pb.ControlReply(
                    step_index=step.step_index, episode_id=step.episode_id, action=self._action
                )
                if work is not None:
                    reply.action.timings.total_ns = spent
                yield reply


def probe_work(kind: str, duration_ns: int, episodes: int) -> Callable[[], int] | None:
    """What a transport-probe echo does between receiving a step and answering it.

    ``sleep`` and ``spin`` wait ``duration_ns`` (GIL released / held, caches untouched);
    ``policy`` runs the small policy's batch-1 forward and the arm's supervision on the
    recorded closed loop (the answer is thrown away): the policy server's compute,
    without its serving code.
    """
    if kind == "none":
        return None
    if kind == "sleep":

        def sleep() -> int:
            start = time.perf_counter_ns()
            time.sleep(duration_ns / 1e9)
            return time.perf_counter_ns() - start

        return sleep
    if kind == "spin":

        def spin() -> int:
            start = time.perf_counter_ns()
            end = start + duration_ns
            while time.perf_counter_ns() < end:
                pass
            return time.perf_counter_ns() - start

        return spin
    from tether.safety.levels import DegradationLevel
    from tether.serving.supervision import SupervisorFactory

    rows = np.concatenate(record_closed_loop(episodes).episodes)
    engine = PolicyEngine(load_bundle(pretrained_bundle_path()), EngineConfig())
    supervisor = SupervisorFactory(SPEC)()
    state: list[Any] = [0, None]

    def policy() -> int:
        start = time.perf_counter_ns()
        obs = rows[state[0] % len(rows)]
        state[0] += 1
        proposed = engine.act(obs[None], True).actions[0]
        state[1], _ = supervisor.decide(
            obs,
            proposed,
            state[1],
            observation_age_s=0.0,
            level=DegradationLevel.NORMAL,
            policy_version=engine.version.id,
        )
        return time.perf_counter_ns() - start

    return policy


def served_time_machine(seconds_per_action: float) -> Any:
    """The benchmark server's degradation machine, on robot time advanced per served action.

    The degradation machine judges each robot on the events in its time window, with
    thresholds sized for a robot at its control rate. The benchmark serves each robot
    25-60x faster, so on the wall clock a policy whose corrections are normal for it would
    read as 25-60x too many and the server would sit at RESTRICTED, which no robot under
    this policy sees. Every step the machine observes advances its clock by
    ``seconds_per_action`` divided by the number of robots it has seen, so each robot's
    window holds the steps it would hold at the control rate.
    """
    from tether.safety.degradation import DegradationMachine
    from tether.safety.for_spec import limits_for

    class ServedTimeMachine(DegradationMachine):
        def __init__(self) -> None:
            self._served_s = 0.0
            self._seen: set[str] = set()
            super().__init__(limits=limits_for(SPEC), clock=lambda: self._served_s)

        def observe(self, *args: Any, **kwargs: Any) -> None:
            self._seen.add(kwargs.get("robot", ""))
            self._served_s += seconds_per_action / len(self._seen)
            super().observe(*args, **kwargs)

    return ServedTimeMachine()


def policy_config(max_batch: int, execution: str = "auto") -> dict[str, Any]:
    """The policy servers' ``ServerConfig``, as data (the baseline tree parses it too)."""
    return {
        "port": 0,
        "metrics_port": None,
        # Benchmark clients send as fast as they are answered: no rate limit, and no
        # staleness cut-off on queued steps (64 robots queue well past 5 periods).
        "admission": {"rate_limit_hz": 0, "max_queued_requests": 4096},
        "control_step_deadline_s": 0,
        "batcher": {"max_batch_size": max_batch, "execution": execution},
    }


def _server_main(
    kind: str,
    bundle: str,
    max_batch: int,
    ports: Any,
    profile: str,
    execution: str,
    work: tuple[str, int, int],
    recorder: bool,
    busy_poll_us: float | None = None,
    loop: str = "",
    gather_turns: int | None = None,
    gc_stats: str = "",
) -> None:
    """Child process: serve until SIGTERM; report the bound port through ``ports``.
    The loop is ``tether.serving.event_loop``'s choice for ``loop``, and with
    ``busy_poll_us`` it busy-polls (``tether.serving.busy_poll``), whatever the server
    (None: tether as ``ServerConfig`` has it by default, the echo not at all);
    ``gather_turns`` (tether only) replaces the batcher's default; with ``gc_stats`` (a
    path) the server times its garbage collections from start-up on and writes them there
    as JSON when it stops (``GcTimer``);
    ``loop`` empty: the echo on asyncio's own loop (bare grpc.aio as
    its users write it), tether on its default (``auto``: uvloop).

    Like ``tether serve``, a server freezes its start-up heap out of the garbage collector
    once it serves (``tether.serving.launch.freeze_startup_heap``)."""
    from tether.serving import event_loop
    from tether.serving.launch import freeze_startup_heap

    chosen: Any = loop or ("asyncio" if kind == "echo" else "auto")
    torch.set_num_threads(1)
    profiler = cProfile.Profile() if profile else None
    # cProfile sees one thread, and one profiler must not run in two: every thread the
    # server starts (the batch thread, the recorder's worker) gets its own, switched on by
    # its first profile event.
    thread_profilers: dict[str, cProfile.Profile] = {}

    def profile_this_thread(*_: Any) -> None:
        prof = cProfile.Profile()
        thread_profilers[threading.current_thread().name] = prof
        prof.enable()

    if profiler is not None:
        threading.setprofile(profile_this_thread)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        if kind == "echo":
            server = grpc.aio.server()
            poll = BusyPoll(loop, busy_poll_us / 1e6) if busy_poll_us else None
            echo = EchoService(probe_work(*work), poll)
            pb_grpc.add_PolicyServiceServicer_to_server(echo, server)  # type: ignore[no-untyped-call]
            port = server.add_insecure_port("127.0.0.1:0")
            await server.start()
            freeze_startup_heap()
            collections = GcTimer.start(gc_stats)
            ports.put(port)
            await stop.wait()
            await server.stop(1.0)
            collections.write()
            return
        from tether.serving.config import ServerConfig
        from tether.serving.launch import build_server

        settings = {
            **policy_config(max_batch, execution),
            "event_loop": chosen,
        }
        if busy_poll_us is not None:
            settings["busy_poll_us"] = busy_poll_us
        if gather_turns is not None:
            settings["batcher"] = {**settings["batcher"], "gather_turns": gather_turns}
        config = ServerConfig.model_validate(settings)
        # tether run's recorder: every batch's Control steps (AnsweredSteps) to the
        # experience log, paired by a worker thread (the transport probe measures what it
        # adds).
        log = (
            ExperienceLog(tempfile.mkdtemp(prefix="bench_log_"), SPEC.obs_dim, SPEC.act_dim)
            if recorder
            else None
        )
        steps = Recorder([log]) if log is not None else None
        policy = build_server(
            Path(bundle),
            config,
            degradation=served_time_machine(SPEC.control_period_s),
            record_steps=steps.record_steps if steps is not None else None,
            end_session=steps.end_session if steps is not None else None,
            after_reply=steps.nudge if steps is not None else None,
        )
        await policy.start()
        freeze_startup_heap()
        collections = GcTimer.start(gc_stats)
        ports.put(policy.port)
        if profiler is not None:
            profiler.enable()
        await stop.wait()
        if profiler is not None:
            profiler.disable()
        await policy.stop(1.0)
        collections.write()
        if steps is not None and log is not None:
            steps.close()
            log.close()

    event_loop.run(run(), chosen)
    if profiler is not None:
        threading.setprofile(None)
        out = io.StringIO()
        for name, prof in [("event loop thread", profiler), *sorted(thread_profilers.items())]:
            prof.disable()
            out.write(f"--- {name}\n")
            if prof.getstats():
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(18)
            else:
                out.write("(nothing ran here)\n")
        Path(profile).write_text(out.getvalue())


class GcTimer:
    """The garbage collections of this process by generation: how many, their total and
    their longest time (``gc.callbacks``), written as JSON to ``path`` by ``write``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.stats = {str(g): {"count": 0, "total_ms": 0.0, "longest_ms": 0.0} for g in range(3)}
        self._began = 0.0

    @classmethod
    def start(cls, path: str) -> GcTimer:
        timer = cls(path)
        if path:
            gc.callbacks.append(timer._on)
        return timer

    def _on(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        ms = (time.perf_counter() - self._began) * 1e3
        entry = self.stats[str(info["generation"])]
        entry["count"] += 1
        entry["total_ms"] += ms
        entry["longest_ms"] = max(entry["longest_ms"], ms)

    def write(self) -> None:
        if self.path:
            Path(self.path).write_text(json.dumps(self.stats))


class ServerProcess:
    def __init__(
        self,
        kind: str,
        bundle: str = "",
        max_batch: int = 64,
        profile: str = "",
        execution: str = "auto",
        work: tuple[str, int, int] = ("none", 0, 0),
        recorder: bool = False,
        busy_poll_us: float | None = None,
        loop: str = "",
        gather_turns: int | None = None,
        gc_stats: bool = False,
    ) -> None:
        ctx = mp.get_context("spawn")
        self.gc_stats_path = ""
        self.collections: dict[str, dict[str, float]] = {}  # by generation, after stop()
        if gc_stats:
            handle, self.gc_stats_path = tempfile.mkstemp(prefix="bench_gc_", suffix=".json")
            os.close(handle)
        ports = ctx.Queue()
        self.proc = ctx.Process(
            target=_server_main,
            args=(
                kind,
                bundle,
                max_batch,
                ports,
                profile,
                execution,
                work,
                recorder,
                busy_poll_us,
                loop,
                gather_turns,
                self.gc_stats_path,
            ),
            daemon=True,
        )
        self.proc.start()
        self.address = f"127.0.0.1:{ports.get(timeout=120)}"

    def stop(self) -> None:
        """Stop the server; with ``gc_stats``, read what its ``GcTimer`` wrote into
        ``collections`` (empty if it wrote nothing) and remove the file."""
        if self.proc.pid is not None:
            os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()
        if self.gc_stats_path:
            path, self.gc_stats_path = Path(self.gc_stats_path), ""
            text = path.read_text()
            path.unlink()
            self.collections = json.loads(text) if text else {}


# The same policy server from another source tree (``--baseline-src``, e.g. a checkout of
# an earlier commit), so before and after are measured side by side in one run.
_BASELINE_SERVER = """
import asyncio, json, signal, sys
from pathlib import Path
import torch
torch.set_num_threads(1)
from tether.serving.config import ServerConfig
from tether.serving.launch import build_server

async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    config = ServerConfig.model_validate(json.loads(sys.argv[2]))
    server = build_server(Path(sys.argv[1]), config)
    await server.start()
    print(server.port, flush=True)
    await stop.wait()
    await server.stop(1.0)

asyncio.run(main())
"""


class BaselineProcess:
    """The policy server of the tree at ``src_root`` (its ``src`` first on the path)."""

    def __init__(self, src_root: Path, bundle: str, max_batch: int) -> None:
        config = json.dumps(policy_config(max_batch))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BASELINE_SERVER, bundle, config],
            stdout=subprocess.PIPE,
            env=tree_env(tree_src(src_root, "serving")),
            cwd=TREE_CWD,
            text=True,
        )
        assert self.proc.stdout is not None
        self.address = f"127.0.0.1:{int(self.proc.stdout.readline())}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


# --------------------------------------------------------------------------- load


@dataclass(frozen=True)
class Measured:
    round_trips_s: list[float]
    elapsed_s: float
    queue_ns: list[int]
    inference_ns: list[int]
    safety_ns: list[int]
    total_ns: list[int]
    batch_sizes: list[int]
    levels: list[int]  # each reply's degradation level (wire enum: 1 NORMAL .. 4 TAKEOVER)

    def pct(self, q: float) -> float:
        return float(np.percentile(self.round_trips_s, q)) * 1e6

    @property
    def actions_per_s(self) -> float:
        return len(self.round_trips_s) / self.elapsed_s

    def __add__(self, other: Measured) -> Measured:
        """Two measurements of the same cell as one (samples pooled, time summed)."""
        return Measured(
            self.round_trips_s + other.round_trips_s,
            self.elapsed_s + other.elapsed_s,
            self.queue_ns + other.queue_ns,
            self.inference_ns + other.inference_ns,
            self.safety_ns + other.safety_ns,
            self.total_ns + other.total_ns,
            self.batch_sizes + other.batch_sizes,
            self.levels + other.levels,
        )


@dataclass(frozen=True)
class Recording:
    """The shipped policy's closed loop on the built-in arm, as clients replay it."""

    episodes: tuple[np.ndarray, ...]  # each (steps + 1, obs_dim) float32; the last row
    # is the observation after the episode's final action, sent with truncated=True
    corrected: float  # fraction of the recorded steps the supervisor changed

    @property
    def steps(self) -> int:
        return sum(len(e) for e in self.episodes)


def record_closed_loop(episodes: int, seed: int = 1) -> Recording:
    """Run the arm under the shipped policy (deterministic, nominal arm, episode seeds
    0..) through the arm's supervisor, executing the supervised action, and keep every
    observation. Deterministic: the same recording in every run."""
    from tether.safety.verdict import ActionSource

    engine = PolicyEngine(load_bundle(pretrained_bundle_path()), EngineConfig(execution="eager"))
    env = ArmEnv(seed=seed)
    supervisor = supervisor_for(SPEC)
    recorded: list[np.ndarray] = []
    corrected = steps = 0
    for episode in range(episodes):
        obs, _ = env.reset(seed=episode)
        rows = [obs]
        previous: np.ndarray | None = None
        truncated = terminated = False
        while not (terminated or truncated):
            proposed = engine.act(obs[None].astype(np.float32), True).actions[0]
            previous, verdict = supervisor.filter(obs, proposed, previous)
            corrected += verdict.source is not ActionSource.POLICY
            steps += 1
            obs, _, terminated, truncated, _ = env.step(previous)
            rows.append(obs)
        recorded.append(np.asarray(rows, np.float32))
    return Recording(tuple(recorded), corrected / steps)


def _random_observation(i: int) -> list[float]:
    rng = np.random.default_rng(i)
    return [float(v) for v in rng.uniform(-0.3, 0.3, SPEC.obs_dim).astype(np.float32)]


@dataclass(frozen=True)
class Feed:
    """What the clients send: the recording replayed (deterministic actions, as the
    recording asked for), or one fixed random observation per client (sampled actions)."""

    recording: Recording | None  # None: random observations

    def steps(self, client: int) -> Any:
        """Endless ``ControlStep``s for ``client``: its own episodes, starting at episode
        ``client`` of the recording and wrapping around with new episode ids."""
        if self.recording is None:
            obs = _random_observation(client)
            step = 0
            while True:
                yield pb.ControlStep(
                    step=pb.StepData(observation=obs, episode_id="e", step_index=step)
                )
                step += 1
        episodes = [e.tolist() for e in self.recording.episodes]
        played = 0
        while True:
            rows = episodes[(client + played) % len(episodes)]
            episode_id = f"c{client}-e{played}"
            last = len(rows) - 1
            for index, obs in enumerate(rows):
                yield pb.ControlStep(
                    step=pb.StepData(
                        observation=obs,
                        episode_id=episode_id,
                        step_index=index,
                        truncated=index == last,
                        deterministic=True,
                    )
                )
            played += 1

    def requests(self, client: int) -> Any:
        """Endless ``ActionRequest``s for ``client`` (GetAction is stateless)."""
        if self.recording is None:
            request = pb.ActionRequest(
                observation=_random_observation(client), client_id=f"c{client}"
            )
            while True:
                yield request
        rows = [row for e in self.recording.episodes for row in e.tolist()]
        start = client * len(rows) // 64
        while True:
            for obs in rows[start:] + rows[:start]:
                yield pb.ActionRequest(observation=obs, client_id=f"c{client}", deterministic=True)


def open_message(client: int) -> pb.ControlStep:
    """The ``Control`` stream's first message for robot ``client`` of the built-in arm."""
    return pb.ControlStep(
        open=pb.SessionOpen(
            robot_id=f"robot-{client}",
            spec_fingerprint=SPEC.fingerprint(),
            obs_dim=SPEC.obs_dim,
            act_dim=SPEC.act_dim,
            joint_names=list(SPEC.joint_names),
        )
    )


async def _load(address: str, mode: str, clients: int, seconds: float, feed: Feed) -> Measured:
    warmup = min(0.5, seconds / 4)
    channel = grpc.aio.insecure_channel(address)
    stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
    start = time.perf_counter()
    t_measure = start + warmup
    t_end = t_measure + seconds
    rtts: list[float] = []
    timings: list[pb.ServerTimings] = []
    levels: list[int] = []

    def keep(sent: float, got: float, reply: pb.ActionResponse) -> None:
        if sent >= t_measure:
            rtts.append(got - sent)
            timings.append(reply.timings)
            levels.append(reply.degradation)

    async def unary(i: int) -> None:
        requests = feed.requests(i)
        while True:
            request = next(requests)  # built before the clock starts, as streaming's
            if (now := time.perf_counter()) >= t_end:
                break
            reply = await stub.GetAction(request, timeout=30)
            keep(now, time.perf_counter(), reply)

    async def streaming(i: int) -> None:
        call = stub.Control()
        await call.write(open_message(i))
        await call.read()
        steps = feed.steps(i)
        while True:
            message = next(steps)
            if (now := time.perf_counter()) >= t_end:
                break
            await call.write(message)
            reply = await call.read()
            if reply.WhichOneof("kind") != "action":
                raise RuntimeError(
                    f"step {message.step.step_index} of robot {i} failed: {reply.error.message}"
                )
            keep(now, time.perf_counter(), reply.action)
        await call.done_writing()

    worker = unary if mode == "unary" else streaming
    await asyncio.gather(*(worker(i) for i in range(clients)))
    elapsed = time.perf_counter() - t_measure
    await channel.close(grace=None)
    return Measured(
        rtts,
        elapsed,
        [t.queue_ns for t in timings],
        [t.inference_ns for t in timings],
        [t.safety_ns for t in timings],
        [t.total_ns for t in timings],
        [t.batch_size for t in timings],
        levels,
    )


def measure(address: str, mode: str, clients: int, seconds: float, feed: Feed) -> Measured:
    return asyncio.run(_load(address, mode, clients, seconds, feed))


# --------------------------------------------------------------------------- engine


def forward_us(engine: PolicyEngine, batch: int, repeats: int = 200) -> float:
    obs = np.random.default_rng(0).uniform(-0.3, 0.3, (batch, SPEC.obs_dim)).astype(np.float32)
    for _ in range(20):
        engine.act(obs, True)
    t = time.perf_counter()
    for _ in range(repeats):
        engine.act(obs, True)
    return (time.perf_counter() - t) / repeats * 1e6


def interleaved_us(engine: PolicyEngine, recording: Recording, repeats: int = 300) -> float:
    """Mean µs of a deterministic batch-1 forward that alternates with the session's
    supervision (``Supervisor.filter`` with the arm's kinematics, and the degradation
    machine) along the recorded closed loop, as a lone robot's batches do in the server:
    it runs slower than a forward alone, because the supervisor evicts the weights from
    cache. (What supervision itself costs per action in the server is in every reply;
    see the breakdown.)"""
    from tether.safety.degradation import DegradationMachine
    from tether.safety.for_spec import limits_for
    from tether.safety.levels import DegradationLevel
    from tether.serving.supervision import SupervisorFactory

    limits = limits_for(SPEC)
    supervisor = SupervisorFactory(
        SPEC, limits=limits, degradation=DegradationMachine(limits=limits)
    )()
    rows = np.concatenate(recording.episodes)
    forward_ns = 0
    previous = None
    for i in range(repeats + 20):
        obs = rows[i % len(rows)]
        t0 = time.perf_counter_ns()
        proposed = engine.act(obs[None], True).actions[0]
        t1 = time.perf_counter_ns()
        previous, _ = supervisor.decide(
            obs,
            proposed,
            previous,
            observation_age_s=0.0,
            level=DegradationLevel.NORMAL,
            policy_version=engine.version.id,
        )
        if i >= 20:  # after a warm-up
            forward_ns += t1 - t0
    return forward_ns / repeats / 1e3


def handoff_us(engine: PolicyEngine, repeats: int = 300) -> tuple[float, float]:
    """Batch-1 act() called inline on an event loop vs handed to a worker thread."""
    obs = np.zeros((1, SPEC.obs_dim), np.float32)
    # As the server does: torch's thread count is per thread (see serving/server.py).
    pool = ThreadPoolExecutor(1, initializer=lambda: torch.set_num_threads(1))

    async def run() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        for _ in range(20):
            await loop.run_in_executor(pool, engine.act, obs, True)
        t = time.perf_counter()
        for _ in range(repeats):
            engine.act(obs, True)
        inline = (time.perf_counter() - t) / repeats * 1e6
        t = time.perf_counter()
        for _ in range(repeats):
            await loop.run_in_executor(pool, engine.act, obs, True)
        threaded = (time.perf_counter() - t) / repeats * 1e6
        return inline, threaded

    try:
        return asyncio.run(run())
    finally:
        pool.shutdown()


# --------------------------------------------------------------------------- report


def row(policy: str, server: str, mode: str, clients: int, m: Measured) -> str:
    return (
        f"| {policy} | {server} | {mode} | {clients} | {m.pct(50):.0f} | {m.pct(95):.0f} | "
        f"{m.pct(99):.0f} | {m.actions_per_s:,.0f} |"
    )


def _mean_us(values: list[int]) -> float:
    return statistics.mean(values) / 1e3 if values else 0.0


def breakdown(label: str, m: Measured) -> str:
    """One cell's round trip split by the server's own timings (means, µs).

    A reply names its own action's supervision time; its batch spent about that times
    the batch size supervising, and the rest of the batch compute is the engine and the
    pipeline. "outside the batch" is validation, admission, session bookkeeping and reply
    building; "transport + client" is everything the server did not time.
    """
    rtt = statistics.mean(m.round_trips_s) * 1e6
    server, queue, batch = _mean_us(m.total_ns), _mean_us(m.queue_ns), _mean_us(m.inference_ns)
    size = statistics.mean(m.batch_sizes) if m.batch_sizes else 0.0
    supervision = _mean_us(m.safety_ns)
    batch_supervision = min(batch, supervision * size)
    return (
        f"| {label} | {rtt:.0f} | {server:.0f} | {queue:.0f} | {batch:.0f} | "
        f"{supervision:.0f} | {batch_supervision:.0f} | {batch - batch_supervision:.0f} | "
        f"{server - queue - batch:.0f} | {rtt - server:.0f} | {size:.1f} |"
    )


def supervision_share(m: Measured) -> float:
    """Supervision time summed over every measured reply, per second of measurement."""
    return sum(m.safety_ns) / 1e9 / m.elapsed_s


def p50_without_supervision_us(m: Measured) -> float:
    """Median round trip minus its own batch's supervision (exact for batches of one)."""
    rows = [
        rtt * 1e9 - safety * size
        for rtt, safety, size in zip(m.round_trips_s, m.safety_ns, m.batch_sizes, strict=True)
    ]
    return float(np.percentile(rows, 50)) / 1e3


def actions_per_s_without_supervision(m: Measured) -> float:
    """Actions/s had the server's supervision time been free: an upper bound, because a
    threaded batch's supervision time also holds waits for the GIL the loop had."""
    busy = m.elapsed_s - sum(m.safety_ns) / 1e9
    return len(m.round_trips_s) / busy if busy > 0 else float("inf")


def transport_probe(bundle: str, seconds: float, episodes: int, feed: Feed) -> None:
    """Where the single-robot round trip goes outside the server's own timings.

    One streaming client against: the bare echo; echoes that, before answering, sleep or
    spin for as long as the policy server's handler takes, or run the small policy's
    forward and supervision (answer thrown away); and the policy server itself. Each
    row's "round trip − work" is what grpc, the OS and the client add around a handler
    that takes that long: the same for the policy server as for an echo doing the same
    work would mean none of it is the serving code's.
    """
    rows: list[tuple[str, Measured]] = []
    policy = ServerProcess("policy", bundle, 64)
    try:
        served = measure(policy.address, "streaming", 1, seconds, feed)
    finally:
        policy.stop()
    duration_ns = int(statistics.mean(served.total_ns))
    for kind, label in (
        ("none", "echo"),
        ("sleep", "echo + sleep"),
        ("spin", "echo + spin"),
        ("policy", "echo + forward and supervision"),
    ):
        echo = ServerProcess("echo", work=(kind, duration_ns, episodes))
        try:
            rows.append((label, measure(echo.address, "streaming", 1, seconds, feed)))
        finally:
            echo.stop()
    rows.append(("policy server (server total)", served))
    recording = ServerProcess("policy", bundle, 64, recorder=True)
    try:
        rows.append(
            (
                "policy server + recorder (server total)",
                measure(recording.address, "streaming", 1, seconds, feed),
            )
        )
    finally:
        recording.stop()
    print(
        f"\nTransport probe, streaming, 1 client (sleep/spin: {duration_ns / 1e3:.0f} µs, the "
        "policy server's mean handler time just measured):"
    )
    print(
        "| server | work between messages (µs) | round trip p50 (µs) | round trip mean (µs) | "
        "mean − work: transport + client (µs) |"
    )
    print("|---|---|---|---|---|")
    for label, m in rows:
        work = _mean_us(m.total_ns) if label != "echo" else 0.0
        rtt = statistics.mean(m.round_trips_s) * 1e6
        print(f"| {label} | {work:.0f} | {m.pct(50):.0f} | {rtt:.0f} | {rtt - work:.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measured time per cell (s)")
    parser.add_argument("--clients", default="1,8,64", help="concurrent clients per cell")
    parser.add_argument("--no-profile", action="store_true", help="skip the cProfile runs")
    parser.add_argument(
        "--no-random",
        action="store_true",
        help="skip the secondary 'small, random obs' cells (the old stress feed)",
    )
    parser.add_argument(
        "--no-transport-probe",
        action="store_true",
        help="skip the echo servers that spend the policy server's time between messages",
    )
    parser.add_argument(
        "--episodes", type=int, default=8, help="recorded closed-loop episodes the clients replay"
    )
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help="policies to serve (small, heavy)"
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also serve the small policy from this source tree (e.g. an earlier commit's "
        "checkout) in the same run, for before/after ratios; that server's degradation "
        "machine runs on the wall clock (it may sit at RESTRICTED where this tree's is NORMAL)",
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    policies = [name for name in args.policies.split(",") if name]
    unknown = set(policies) - set(POLICIES)
    if unknown or "small" not in policies:
        parser.error(f"--policies takes names from {list(POLICIES)} and needs 'small'")
    torch.set_num_threads(1)
    print(
        f"machine: {platform.machine()}, nproc {os.cpu_count()}, python "
        f"{platform.python_version()}, torch {torch.__version__}, grpcio {grpc.__version__}"
    )
    recording = record_closed_loop(args.episodes)
    print(
        f"recorded closed loop: shipped policy, {len(recording.episodes)} episodes, "
        f"{recording.steps} observations, {recording.corrected:.0%} of its steps corrected "
        "by the supervisor"
    )
    replay, random_feed = Feed(recording), Feed(None)
    work = Path(tempfile.mkdtemp(prefix="bench_serving_"))
    bundles: dict[str, str] = {"small": str(pretrained_bundle_path())}
    if "heavy" in policies:
        init_bundle(work / "heavy", SPEC, hidden_sizes=HEAVY_HIDDEN, seed=1)
        bundles["heavy"] = str(work / "heavy")
    print(
        "\n| policy | hidden | forward b=1 (µs) | forward b=64 (µs) | inline b=1 (µs) | "
        "thread hand-off b=1 (µs) | forward b=1 between supervisions (µs) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in policies:
        bundle = load_bundle(Path(bundles[name]))
        engine = PolicyEngine(bundle, EngineConfig(max_batch_size=64))
        inline, threaded = handoff_us(engine)
        between = interleaved_us(engine, recording)
        print(
            f"| {name} | {bundle.architecture.hidden_sizes} | {forward_us(engine, 1):.0f} | "
            f"{forward_us(engine, 64, 50):.0f} | {inline:.0f} | {threaded:.0f} | "
            f"{between:.0f} |"
        )

    results: dict[tuple[str, str, str, int], Measured] = {}
    # (row label, server label, bundle, max batch, feed); the echo gets the replayed feed.
    variants = [("echo", "echo", "", 64, replay)] + [
        (policy, server, bundles[policy], batch, replay)
        for policy in policies
        for server, batch in (("batched", 64), ("batching off", 1))
    ]
    if not args.no_random:
        variants.append((RANDOM, "batched", bundles["small"], 64, random_feed))
    if args.baseline_src is not None:
        # Before and after alternate cell by cell, in the order before, after, after, before,
        # so a load that drifts during the run (a shared machine) weighs on both alike.
        variants.remove(("small", "batched", bundles["small"], 64, replay))
        old = BaselineProcess(args.baseline_src, bundles["small"], 64)
        new = ServerProcess("policy", bundles["small"], 64)
        try:
            for mode in ("unary", "streaming"):
                for clients in counts:
                    b1, a1, a2, b2 = (
                        measure(proc.address, mode, clients, args.seconds / 2, replay)
                        for proc in (old, new, new, old)
                    )
                    results[("small", "baseline batched", mode, clients)] = b1 + b2
                    results[("small", "batched", mode, clients)] = a1 + a2
        finally:
            old.stop()
            new.stop()
    for policy, server, bundle_path, batch, feed in variants:
        for mode in ("unary", "streaming"):
            # A fresh server per mode: an overloaded cell (batching off, 64 clients queue
            # for ~100 ms, past the supervisor's staleness limit) degrades its server,
            # and the next mode's cells would start at that level.
            proc = ServerProcess("echo" if policy == "echo" else "policy", bundle_path, batch)
            try:
                for clients in counts:
                    results[(policy, server, mode, clients)] = measure(
                        proc.address, mode, clients, args.seconds, feed
                    )
            finally:
                proc.stop()

    print("\n| policy | server | mode | clients | p50 (µs) | p95 (µs) | p99 (µs) | actions/s |")
    print("|---|---|---|---|---|---|---|---|")
    for (policy, server, mode, clients), m in results.items():
        print(row(policy, server, mode, clients, m))

    print("\nDegradation level of the replies (share at NORMAL), policy cells:")
    for (policy, server, mode, clients), m in results.items():
        if policy != "echo" and m.levels:
            normal = m.levels.count(pb.DEGRADATION_LEVEL_NORMAL) / len(m.levels)
            print(f"- {policy} {server} {mode} x{clients}: {normal:.0%} NORMAL")

    def get(policy: str, server: str, mode: str, clients: int) -> Measured | None:
        return results.get((policy, server, mode, clients))

    print("\nRatios (same run):")
    lo, hi = min(counts), max(counts)
    for mode in ("streaming", "unary"):
        small, echo = get("small", "batched", mode, lo), get("echo", "echo", mode, lo)
        if small and echo:
            print(
                f"- small {mode} p50 at {lo} client / echo floor: "
                f"{small.pct(50) / echo.pct(50):.2f} (target ≤ 1.25)"
            )
        small, echo = get("small", "batched", mode, hi), get("echo", "echo", mode, hi)
        if small and echo:
            print(
                f"- small {mode} actions/s at {hi} clients / echo floor: "
                f"{small.actions_per_s / echo.actions_per_s:.2f} (target ≥ 0.8)"
            )
        heavy, off = get("heavy", "batched", mode, hi), get("heavy", "batching off", mode, hi)
        if heavy and off:
            print(
                f"- heavy {mode} actions/s at {hi} clients / batching off: "
                f"{heavy.actions_per_s / off.actions_per_s:.2f} (target ≥ 2.5)"
            )
        stress, echo = get(RANDOM, "batched", mode, lo), get("echo", "echo", mode, lo)
        stress_hi, echo_hi = get(RANDOM, "batched", mode, hi), get("echo", "echo", mode, hi)
        if stress and echo and stress_hi and echo_hi:
            print(
                f"- secondary, {RANDOM} ({mode}): p50 at {lo} client / echo "
                f"{stress.pct(50) / echo.pct(50):.2f}, actions/s at {hi} clients / echo "
                f"{stress_hi.actions_per_s / echo_hi.actions_per_s:.2f}"
            )
    if args.baseline_src is not None:
        print(f"\nBefore ({args.baseline_src}) and after (this tree), same run:")
        for mode in ("streaming", "unary"):
            for n in sorted({lo, hi}):
                before, after = (
                    get("small", "baseline batched", mode, n),
                    get("small", "batched", mode, n),
                )
                echo = get("echo", "echo", mode, n)
                if before and after and echo:
                    print(
                        f"- small {mode} x{n}: p50 / echo {before.pct(50) / echo.pct(50):.2f} → "
                        f"{after.pct(50) / echo.pct(50):.2f}, actions/s / echo "
                        f"{before.actions_per_s / echo.actions_per_s:.2f} → "
                        f"{after.actions_per_s / echo.actions_per_s:.2f}"
                    )

    print("\nWhere the time goes (means, µs; transport = round trip - server total):")
    print(
        "| cell | round trip | server total | queue | batch compute | supervision (this action) | "
        "supervision (its batch, ≈) | engine + pipeline | outside the batch | "
        "transport + client | mean batch |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    cells = [
        (policy, server, "streaming", n)
        for policy in [*policies, RANDOM]
        for server, n in (
            ("baseline batched", lo),
            ("batched", lo),
            ("baseline batched", hi),
            ("batched", hi),
            ("batching off", hi),
        )
    ]
    for key in cells:
        if key in results:
            print(breakdown(f"{key[0]} {key[1]} {key[2]} x{key[3]}", results[key]))

    print(
        "\nThe serving layer alone: the same cells with each reply's measured supervision "
        "time subtracted (the headline ratios above keep it: every action is supervised):"
    )
    for mode in ("streaming", "unary"):
        small, echo = get("small", "batched", mode, lo), get("echo", "echo", mode, lo)
        if small and echo:
            alone = p50_without_supervision_us(small)
            print(
                f"- small {mode} p50 at {lo} client without supervision: {alone:.0f} µs, "
                f"{alone / echo.pct(50):.2f} x the echo floor (supervision "
                f"{supervision_share(small):.0%} of the measured wall time)"
            )
        small, echo = get("small", "batched", mode, hi), get("echo", "echo", mode, hi)
        if small and echo:
            alone_aps = actions_per_s_without_supervision(small)
            print(
                f"- small {mode} actions/s at {hi} clients without supervision: "
                f"≤ {alone_aps:,.0f}, ≤ {alone_aps / echo.actions_per_s:.2f} x the echo floor "
                f"(supervision {supervision_share(small):.0%} of the measured wall time)"
            )

    if not args.no_transport_probe:
        transport_probe(bundles["small"], args.seconds, args.episodes, replay)

    if not args.no_profile:
        for clients in (lo, hi):
            profile = work / f"server-{clients}.prof.txt"
            proc = ServerProcess(
                "policy", bundles["small"], 64, profile=str(profile), recorder=True
            )
            try:
                measure(proc.address, "streaming", clients, args.seconds, replay)
            finally:
                proc.stop()
            text = profile.read_text() if profile.exists() else "(no profile written)"
            print(f"\nServer profile, small policy, streaming, {clients} clients (own time):")
            print("```")
            print("\n".join(line for line in text.splitlines() if line.strip())[:6000])
            print("```")


if __name__ == "__main__":
    main()
