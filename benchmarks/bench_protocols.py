"""The drop-in protocols beside what they replace, on the same policy, in one run (issue 18).

Two comparisons, each at 1, 8 and 64 concurrent clients (round trip p50/p99, actions/s):

- **openpi**: tether's openpi websocket endpoint (``tether serve --openpi-port``: batched
  across connections, every action through the supervisor) beside an *openpi-style
  server*, a small imitation of openpi's ``WebsocketPolicyServer`` as
  ``scripts/serve_policy.py`` runs it: a ``websockets`` asyncio server whose handler
  decodes msgpack-numpy, calls the policy synchronously inside the handler (so the event
  loop, and every other connection, waits for it: one client at a time), and answers
  ``{"actions", "server_timing": {"infer_ms", "prev_total_ms"}}``. It serves the same
  engine, without a supervisor, as openpi's server has none.
- **KServe**: tether's ``inference.GRPCInferenceService/ModelInfer`` beside its own
  ``tether.v1 GetAction`` on the same server: what the KServe decoding costs.

Every server runs in its own process; the load generator (one asyncio process, one
coroutine per client, closed loop: send, wait for the reply, send again) is the same for
both sides of a comparison. Clients send what ``openpi_client``'s packer sends (the same
msgpack-numpy layout, packed by ``tether.serving.openpi.pack``) and raw ModelInfer
requests as ``tritonclient`` builds them. The supervisor is the built-in arm's with its
MuJoCo kinematics; no degradation machine runs (a benchmark's request rate is far from
a robot's, and its windows would misread it). Both servers run the engine's eager path
(``execution: eager``): left to ``auto``, each process would pick its own path from
timings taken on a busy machine, and the two would not serve the same computation. Observations are the shipped policy's
closed loop on the built-in arm (``bench_serving.record_closed_loop``), each client
replaying it from its own offset, so the supervisor sees the states a robot under this
policy produces rather than random ones (on which it corrects every action).

    python benchmarks/bench_protocols.py [--seconds 2] [--clients 1,8,64] [--policy small|heavy]

Target: at 64 clients, tether's openpi endpoint ≥ the openpi-style server's actions/s.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import platform
import signal
import statistics
import time
from pathlib import Path
from typing import Any

import grpc
import msgpack
import numpy as np
import torch

from tether.assets import pretrained_bundle_path
from tether.kserve import grpc_predict_v2_pb2 as kpb, grpc_predict_v2_pb2_grpc as kpb_grpc
from tether.serving.openpi import pack, unpack_observation
from tether.sim import arm_spec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc

SPEC = arm_spec()


def _bundle(policy: str) -> Path:
    if policy == "small":
        return pretrained_bundle_path()
    from tether.policy.initialize import init_bundle

    path = Path(f"/tmp/bench_protocols_heavy_{os.getpid()}")
    if not path.exists():
        init_bundle(path, SPEC, hidden_sizes=(1024, 1024), seed=0)
    return path


def _tether_main(bundle: str, ports: Any) -> None:
    """Child: a tether server, gRPC (tether.v1 + KServe) and openpi, supervisor on."""
    from tether.policy.bundle import load_bundle
    from tether.policy.config import EngineConfig
    from tether.policy.engine import PolicyEngine
    from tether.safety.for_spec import limits_for
    from tether.serving.config import ServerConfig
    from tether.serving.launch import freeze_startup_heap
    from tether.serving.served_spec import ServedSpec
    from tether.serving.server import PolicyServer
    from tether.serving.supervision import SupervisorFactory

    torch.set_num_threads(1)

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        config = ServerConfig.model_validate(
            {
                "port": 0,
                "metrics_port": None,
                "admission": {"rate_limit_hz": 0, "max_queued_requests": 4096},
                "control_step_deadline_s": 0,
                "openpi": {"port": 0},
            }
        )
        engine = PolicyEngine(
            load_bundle(Path(bundle)), EngineConfig(max_batch_size=64, execution="eager")
        )
        server = PolicyServer(
            config,
            spec=ServedSpec.from_robot_spec(SPEC),
            supervisors=SupervisorFactory(SPEC, limits=limits_for(SPEC)),
            engine=engine,
        )
        await server.start()
        freeze_startup_heap()
        ports.put((server.port, server.openpi_port))
        await stop.wait()
        await server.stop(1.0)

    asyncio.run(run())


def _openpi_style_main(bundle: str, ports: Any) -> None:
    """Child: openpi's serving loop, imitated (see the module docstring)."""
    from websockets.asyncio.server import ServerConnection, serve
    from websockets.exceptions import ConnectionClosed

    from tether.policy.bundle import load_bundle
    from tether.policy.config import EngineConfig
    from tether.policy.engine import PolicyEngine

    torch.set_num_threads(1)
    engine = PolicyEngine(
        load_bundle(Path(bundle)), EngineConfig(max_batch_size=64, execution="eager")
    )

    def infer(obs: dict[str, Any]) -> dict[str, Any]:  # openpi's Policy.infer, synchronous
        state = np.asarray(obs["observation/state"], dtype=np.float32)
        out = engine.act(state[None], True)
        return {"actions": np.asarray(out.actions, dtype=np.float32)}

    async def handler(ws: ServerConnection) -> None:
        await ws.send(pack({"server": "openpi-style"}))
        prev_total: float | None = None
        while True:
            try:
                start = time.monotonic()
                obs = unpack_observation(await ws.recv())  # type: ignore[arg-type]
                t = time.monotonic()
                action = infer(obs)
                timing = {"infer_ms": (time.monotonic() - t) * 1000}
                if prev_total is not None:
                    timing["prev_total_ms"] = prev_total * 1000
                action["server_timing"] = timing
                await ws.send(pack(action))
                prev_total = time.monotonic() - start
            except ConnectionClosed:
                return

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with serve(handler, "127.0.0.1", 0, compression=None, max_size=None) as server:
            ports.put((0, next(iter(server.sockets)).getsockname()[1]))
            await stop.wait()

    asyncio.run(run())


class Child:
    def __init__(self, target: Any, bundle: str) -> None:
        ctx = mp.get_context("spawn")
        ports = ctx.Queue()
        self.proc = ctx.Process(target=target, args=(bundle, ports), daemon=True)
        self.proc.start()
        self.grpc_port, self.ws_port = ports.get(timeout=180)

    def stop(self) -> None:
        if self.proc.pid is not None:
            os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.join(30)
        if self.proc.is_alive():
            self.proc.kill()


_FEED: np.ndarray | None = None  # the recorded closed loop, (steps, obs_dim) float32
_CYCLE = 256  # observations each client cycles through


def _observations(client: int) -> np.ndarray:
    assert _FEED is not None
    start = (client * 97) % len(_FEED)
    return np.take(_FEED, range(start, start + _CYCLE), axis=0, mode="wrap")


# A server's threads by what they run: its main thread (every server here runs its event
# loop or, for the thread-pool server, only waits there), grpc core's own threads, the rest
# (Python threads: grpc.aio's poller, tether's recorder and log flusher, a thread pool).
THREAD_GROUPS = ("main", "grpc", "other")


def thread_cpu_ns(pid: int) -> dict[str, int]:
    """CPU time of process ``pid``'s threads so far by ``THREAD_GROUPS`` (ns, from /proc;
    zeros elsewhere); a thread that ended is no longer counted."""
    out = dict.fromkeys(THREAD_GROUPS, 0)
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as stat:
                ns = int(stat.read().split()[0])
            with open(f"/proc/{pid}/task/{task}/comm") as comm:
                name = comm.read().strip()
        except OSError:  # the thread ended meanwhile
            continue
        if task == str(pid):
            out["main"] += ns
        elif name.startswith(("event_engine", "grpc_")):
            out["grpc"] += ns
        else:
            out["other"] += ns
    return out


class _Window:
    """The measured window: it opens once every client has warmed up. With ``server_pid``
    it also reads the CPU the server process and this (the clients') process spend while it
    is open."""

    def __init__(
        self, clients: int, seconds: float, server_pid: int | None = None, period_s: float = 0.0
    ) -> None:
        self.clients = clients
        self.seconds = seconds
        # Robots at a control rate: each sends one step per period (0: as soon as answered).
        self.period_s = period_s
        self.ready = 0
        self.go = asyncio.Event()
        self.deadline = 0.0
        self.latencies: list[float] = []
        self.actions = 0
        self._pid = server_pid
        self._cpu: tuple[dict[str, int], int] = ({}, 0)
        # While the window was open: the server's threads by THREAD_GROUPS, the clients'.
        self.server_ns = dict.fromkeys(THREAD_GROUPS, 0)
        self.clients_ns = 0
        self.actions_in_window = 0  # actions when it closed (the CPU's denominator)
        self.closed = False

    def _cpu_now(self) -> tuple[dict[str, int], int]:
        server = (
            thread_cpu_ns(self._pid) if self._pid is not None else dict.fromkeys(THREAD_GROUPS, 0)
        )
        return server, time.process_time_ns()

    def close(self) -> None:
        """Read the CPU and the actions of the window now (once; later calls keep them)."""
        if self.closed:
            return
        self.closed = True
        server, clients = self._cpu_now()
        self.server_ns = {k: v - self._cpu[0].get(k, 0) for k, v in server.items()}
        self.clients_ns = clients - self._cpu[1]
        self.actions_in_window = self.actions

    async def opened(self) -> None:
        self.ready += 1
        if self.ready == self.clients:
            self.deadline = time.perf_counter() + self.seconds
            self._cpu = self._cpu_now()
            loop = asyncio.get_running_loop()
            loop.call_later(self.seconds, self.close)
            self.go.set()
        await self.go.wait()

    async def stagger(self, client: int) -> None:
        """A paced client's first step waits its share of a period, so the robots' steps
        spread over the period as a fleet's do, not all at its start."""
        if self.period_s:
            await asyncio.sleep(self.period_s * client / self.clients)

    async def pace(self, start: float) -> None:
        """A paced client waits for its next period (started at ``start``); a late step
        starts the next one at once, late steps never pile up."""
        if self.period_s:
            await asyncio.sleep(max(0.0, start + self.period_s - time.perf_counter()))


async def _closed_loop(
    clients: int,
    seconds: float,
    one_client: Any,
    server_pid: int | None = None,
    period_s: float = 0.0,
) -> dict[str, float]:
    """Run ``clients`` coroutines for ``seconds`` after their warm-up; every completed call,
    and with ``server_pid`` the server's CPU µs per action in the window (in all, and by
    ``THREAD_GROUPS``: ``<group>_cpu_us``) and the clients'. With ``period_s`` each client
    sends one step per period (a robot at its control rate)."""
    window = _Window(clients, seconds, server_pid, period_s)
    await asyncio.gather(*(one_client(i, window) for i in range(clients)))
    # The clients stop at the deadline, the close timer fires at it: when the last client
    # finished first, the window closes now (CPU and actions still over one interval).
    window.close()
    lat = sorted(window.latencies)
    done = max(1, window.actions_in_window)
    return {
        "p50_ms": 1000 * statistics.median(lat),
        "p99_ms": 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))],
        "actions_per_s": window.actions / seconds,
        "server_cpu_us": sum(window.server_ns.values()) / done / 1e3,
        **{f"{group}_cpu_us": ns / done / 1e3 for group, ns in window.server_ns.items()},
        "client_cpu_us": window.clients_ns / done / 1e3,
    }


def _websocket_client(port: int, warmup: int = 5) -> Any:
    from websockets.asyncio.client import connect

    async def one(i: int, window: _Window) -> None:
        obs = _observations(i)
        async with connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None) as ws:
            msgpack.unpackb(await ws.recv())
            for k in range(warmup):
                await ws.send(pack({"observation/state": obs[k % _CYCLE]}))
                await ws.recv()
            await window.opened()
            await window.stagger(i)
            k = 0
            while time.perf_counter() < window.deadline:
                start = time.perf_counter()
                await ws.send(pack({"observation/state": obs[k % _CYCLE], "prompt": "reach"}))
                reply = await ws.recv()
                window.latencies.append(time.perf_counter() - start)
                if isinstance(reply, str):
                    raise RuntimeError(f"server error: {reply}")
                window.actions += 1
                k += 1
                await window.pace(start)

    return one


def _grpc_client(port: int, kind: str, warmup: int = 5) -> Any:
    async def one(i: int, window: _Window) -> None:
        obs = _observations(i)
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            if kind == "kserve":
                stub: Any = kpb_grpc.GRPCInferenceServiceStub(channel)
                requests = []
                for row in obs:
                    message = kpb.ModelInferRequest(model_name="tether")
                    message.inputs.add(name="observation", datatype="FP32", shape=[1, SPEC.obs_dim])
                    message.raw_input_contents.append(row[None].tobytes())
                    requests.append(message)
                call = stub.ModelInfer
            else:
                stub = pb_grpc.PolicyServiceStub(channel)
                requests = [
                    pb.ActionRequest(observation=row.tolist(), deterministic=True) for row in obs
                ]
                call = stub.GetAction
            for k in range(warmup):
                await call(requests[k % _CYCLE])
            await window.opened()
            await window.stagger(i)
            k = 0
            while time.perf_counter() < window.deadline:
                start = time.perf_counter()
                await call(requests[k % _CYCLE])
                window.latencies.append(time.perf_counter() - start)
                window.actions += 1
                k += 1
                await window.pace(start)

    return one


def _row(label: str, clients: int, cell: dict[str, float]) -> str:
    return (
        f"| {label} | {clients} | {cell['p50_ms']:.2f} | {cell['p99_ms']:.2f} | "
        f"{cell['actions_per_s']:,.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--policy", choices=("small", "heavy"), default="small")
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    bundle = str(_bundle(args.policy))
    global _FEED
    from bench_serving import record_closed_loop

    recording = record_closed_loop(episodes=4)
    _FEED = np.concatenate(recording.episodes)
    print(
        f"# bench_protocols: policy {args.policy}, {args.seconds} s per cell, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"torch {torch.__version__}; feed: {len(_FEED)} recorded steps, "
        f"{recording.corrected:.0%} corrected by the supervisor when recorded"
    )
    print("| server | clients | p50 ms | p99 ms | actions/s |")
    print("|---|---|---|---|---|")
    results: dict[tuple[str, int], dict[str, float]] = {}
    tether = Child(_tether_main, bundle)
    style = Child(_openpi_style_main, bundle)
    try:
        for n in counts:
            # Interleaved per client count, so drifting machine load hits both alike.
            cells = (
                ("tether openpi", _websocket_client(tether.ws_port)),
                ("openpi-style", _websocket_client(style.ws_port)),
                ("tether KServe ModelInfer", _grpc_client(tether.grpc_port, "kserve")),
                ("tether.v1 GetAction", _grpc_client(tether.grpc_port, "v1")),
            )
            for label, client in cells:
                cell = asyncio.run(_closed_loop(n, args.seconds, client))
                results[(label, n)] = cell
                print(_row(label, n, cell), flush=True)
    finally:
        tether.stop()
        style.stop()
    top = max(counts)
    ours, theirs = results[("tether openpi", top)], results[("openpi-style", top)]
    ratio = ours["actions_per_s"] / theirs["actions_per_s"]
    kserve = results[("tether KServe ModelInfer", top)]["actions_per_s"]
    v1 = results[("tether.v1 GetAction", top)]["actions_per_s"]
    print(
        f"\nat {top} clients: tether openpi / openpi-style actions/s = {ratio:.2f} "
        f"(target >= 1: {'met' if ratio >= 1 else 'NOT met'}); "
        f"KServe / tether.v1 GetAction = {kserve / v1:.2f}"
    )


if __name__ == "__main__":
    main()
