"""tether beside the servers robot teams run today, on the same policy, in one run (issue 22).

Four servers, each in its own process, each serving the shipped position policy (the
same ``PolicyEngine`` on the same weights, one torch thread) to 1, 8 and 64 concurrent
robots in a closed loop (send a step, wait for its action, send the next):

- **echo**: a bare ``grpc.aio`` bidi stream answering every ``Control`` step with a
  prebuilt reply of the real reply's size (``bench_serving.EchoService``): the floor of
  the transport tether uses, with no policy at all.
- **openpi-style**: openpi's ``WebsocketPolicyServer`` imitated (``bench_protocols``): a
  ``websockets`` asyncio server decoding msgpack-numpy and calling the policy
  synchronously inside its handler, so every other connection waits; no supervisor.
- **LeRobot-style**: LeRobot's async-inference ``PolicyServer`` imitated: a synchronous
  ``grpc.server`` on a ``ThreadPoolExecutor`` of 4 workers, each request running the one
  policy at batch 1 under a lock (one model, many handler threads); no supervisor, no
  recording. Its robots call the unary ``GetAction`` once per step, as LeRobot's robot
  client calls its unary ``GetActions``: a stream holds one of the 4 workers for its whole
  life, so a 5th robot's stream would wait for ever (at 64 robots the run hung).
- **tether**: ``tether.serving.launch.build_server`` as ``tether serve`` builds it, with
  every action through the arm's position supervisor and its degradation machine, and
  every step recorded to an experience log (``tether run``'s recorder), on the
  ``Control`` stream, on the loop ``tether serve`` runs (``ServerConfig.event_loop``'s
  default: uvloop, ``tether.serving.event_loop``).

Two more rows separate the loop from the server: **echo, uvloop** (the same echo on
uvloop) and **tether, asyncio loop** (tether on Python's own loop, where the echo runs).
The ratios stay against the plain echo, the floor a grpc.aio user starts from.

The clients replay the shipped policy's closed loop on the built-in arm
(``bench_serving.record_closed_loop``): each robot its own episodes, so the supervisor
sees the states a robot under this policy produces. ``--rounds`` repeats every cell with
the servers' order rotated, and the table keeps each cell's median over rounds, so a
neighbour's burst on a shared machine does not land on one server only; the ratios to
the echo are the median of each round's ratio (in a round the servers of one robot count
run one after another, so the host's slower and faster minutes cancel out of each),
followed by the range of those ratios over the rounds.

    python benchmarks/bench_peers.py [--seconds 2] [--clients 1,8,64] [--rounds 3]
        [--busy-poll-us 2000] [--busy-poll-off] [--spin-us 20,40] [--recorder-off]
        [--no-gathering] [--servers 'echo;tether'] [--period-ms 20] [--gc-stats]

With ``--period-ms`` the robots run at a control rate instead of a closed loop: each
sends one step per period (20: 50 Hz), their first steps spread over the period, and a
step's latency is still from its send to its action. Between two steps of a robot the
servers (and the clients) go idle, so each step meets a sleeping thread and cold caches,
as a fleet's steps do; actions/s is then the load offered, not a capacity.

tether busy-polls as ``tether serve`` does by default (``ServerConfig.busy_poll_us``:
while a lone robot's steps come within 1 ms of each other its event loop polls instead of
sleeping, ``tether.serving.busy_poll``); ``--busy-poll-off`` adds **tether, busy-poll
off**. With
``--busy-poll-us`` two more servers run: tether with that budget and the echo touching
the same ``BusyPoll`` on each step, so the table shows what busy polling gives the
transport floor too; the ratios stay against the plain echo.

With ``--recorder-off`` tether also serves without its recorder (what recording every
step costs the server), with ``--no-gathering`` with a batcher that takes each batch at
once (``batcher.gather_turns`` 0: what gathering a batch over the loop's next turns
gives). With ``--spin-us 20,40`` echoes that hold the GIL spinning that long before each
answer (``bench_serving.probe_work``) calibrate the table: how many actions/s any
grpc.aio server whose per-step Python costs that much can answer, against tether's.

Besides latency and actions/s, each cell reports the CPU the server process spends per
action (all its threads, ``/proc/PID/task/*/schedstat``), split into its main thread (the
event loop), grpc core's threads and its other threads (grpc.aio's poller, tether's
recorder and log flusher, a thread pool; ``bench_protocols.THREAD_GROUPS``), and the CPU
the clients (this process) spend, all over the measured window only: when the server and
the clients together keep every core busy, the actions/s ratio between servers is the
ratio of their CPU per action. With ``--gc-stats`` the grpc.aio servers (the echoes and
tether) also time their garbage collections from start-up to stop, and a second table
gives each one's collections per generation, the time they took and the longest.

Targets (issue 22): one robot, tether's p50 ≤ 1.25 × the echo's; 64 robots, tether's
actions/s ≥ 0.8 × the echo's and above both peers'.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import platform
import signal
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from pathlib import Path
from typing import Any

import bench_protocols
import grpc
import numpy as np
import torch
from bench_protocols import Child, _closed_loop, _openpi_style_main, _websocket_client, _Window
from bench_serving import Feed, ServerProcess, open_message, record_closed_loop

from tether.assets import pretrained_bundle_path
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc

SERVERS = (
    "echo",
    "openpi-style",
    "LeRobot-style",
    "tether",
    "echo, uvloop",
    "tether, asyncio loop",
)
POLLED = ("echo, busy-poll", "tether, busy-poll")


class LeRobotStyleService(pb_grpc.PolicyServiceServicer):
    """Synchronous handlers on grpc's thread pool; one policy, run at batch 1 under a lock."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self._lock = threading.Lock()

    def _act(self, observation: Any, deterministic: bool) -> pb.ActionResponse:
        obs = np.asarray(observation, dtype=np.float32)[None]
        with self._lock:
            out = self._engine.act(obs, deterministic)
        return pb.ActionResponse(action=out.actions[0].tolist(), status="ok")

    def GetAction(self, request: pb.ActionRequest, context: Any) -> pb.ActionResponse:
        return self._act(request.observation, request.deterministic)

    def Control(self, request_iterator: Any, context: Any) -> Any:
        for message in request_iterator:
            if message.WhichOneof("kind") == "open":
                yield pb.ControlReply(opened=pb.SessionOpened(session_id="lerobot-style"))
                continue
            step = message.step
            yield pb.ControlReply(
                step_index=step.step_index,
                episode_id=step.episode_id,
                action=self._act(step.observation, step.deterministic),
            )


def _lerobot_style_main(bundle: str, ports: Any) -> None:
    from tether.policy.bundle import load_bundle
    from tether.policy.config import EngineConfig
    from tether.policy.engine import PolicyEngine

    torch.set_num_threads(1)
    engine = PolicyEngine(load_bundle(Path(bundle)), EngineConfig(execution="eager"))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_PolicyServiceServicer_to_server(LeRobotStyleService(engine), server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    ports.put((port, 0))
    stopped.wait()
    server.stop(1.0)


def _control_client(address: str, feed: Feed, warmup: int = 5) -> Any:
    """One robot on a ``Control`` stream, replaying its own recorded episodes."""

    async def one(i: int, window: _Window) -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            call = pb_grpc.PolicyServiceStub(channel).Control()  # type: ignore[no-untyped-call]
            await call.write(open_message(i))
            await call.read()
            steps = feed.steps(i)

            async def step() -> None:
                message = next(steps)
                await call.write(message)
                reply = await call.read()
                if reply.WhichOneof("kind") != "action":
                    raise RuntimeError(f"robot {i}: {reply.error.message}")

            for _ in range(warmup):
                await step()
            await window.opened()
            await window.stagger(i)
            while time.perf_counter() < window.deadline:
                start = time.perf_counter()
                await step()
                window.latencies.append(time.perf_counter() - start)
                window.actions += 1
                await window.pace(start)
            await call.done_writing()

    return one


def _unary_client(address: str, feed: Feed, warmup: int = 5) -> Any:
    """One robot calling the unary ``GetAction`` once per step, replaying its episodes."""

    async def one(i: int, window: _Window) -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            call = pb_grpc.PolicyServiceStub(channel).GetAction  # type: ignore[no-untyped-call]
            requests = feed.requests(i)
            for _ in range(warmup):
                await call(next(requests))
            await window.opened()
            await window.stagger(i)
            while time.perf_counter() < window.deadline:
                request = next(requests)
                start = time.perf_counter()
                await call(request)
                window.latencies.append(time.perf_counter() - start)
                window.actions += 1
                await window.pace(start)

    return one


class Servers:
    """The servers ``names`` (rows of the table), started once and kept for every cell."""

    def __init__(
        self,
        bundle: str,
        names: Sequence[str],
        busy_poll_us: float = 0.0,
        spin_us: Sequence[float] = (),
        gc_stats: bool = False,
    ) -> None:
        # Every grpc.aio server (echo and tether) times its garbage collections with
        # gc_stats (bench_serving.GcTimer).
        served = functools.partial(ServerProcess, gc_stats=gc_stats)
        makers: dict[str, Callable[[], Any]] = {
            "echo": lambda: served("echo"),
            "tether": lambda: served("policy", bundle, recorder=True),
            "openpi-style": lambda: Child(_openpi_style_main, bundle),
            "LeRobot-style": lambda: Child(_lerobot_style_main, bundle),
            "echo, uvloop": lambda: served("echo", loop="uvloop"),
            "tether, asyncio loop": lambda: served("policy", bundle, recorder=True, loop="asyncio"),
            UNPOLLED: lambda: served("policy", bundle, recorder=True, busy_poll_us=0.0),
            "echo, busy-poll": lambda: served("echo", busy_poll_us=busy_poll_us),
            "tether, busy-poll": lambda: served(
                "policy", bundle, recorder=True, busy_poll_us=busy_poll_us
            ),
            UNRECORDED: lambda: served("policy", bundle, recorder=False),
            UNGATHERED: lambda: served("policy", bundle, recorder=True, gather_turns=0),
        }
        for us in spin_us:
            makers[spun(us)] = lambda us=us: served("echo", work=("spin", int(us * 1e3), 0))
        self.running: dict[str, Any] = {}
        try:
            for name in names:
                self.running[name] = makers[name]()
        except BaseException:
            self.stop()
            raise

    def client(self, server: str, feed: Feed) -> Any:
        child = self.running[server]
        if server == "LeRobot-style":
            return _unary_client(f"127.0.0.1:{child.grpc_port}", feed)
        if server == "openpi-style":
            return _websocket_client(child.ws_port)
        return _control_client(child.address, feed)

    def stop(self) -> None:
        for child in self.running.values():
            child.stop()

    def gc_stats(self) -> dict[str, dict[str, dict[str, float]]]:
        """Each stopped grpc.aio server's collections (``ServerProcess.collections``)."""
        return {
            name: child.collections
            for name, child in self.running.items()
            if isinstance(child, ServerProcess) and child.collections
        }


UNRECORDED = "tether, recorder off"
UNPOLLED = "tether, busy-poll off"
UNGATHERED = "tether, no gathering"


def spun(us: float) -> str:
    return f"echo + {us:g} µs spin"


def _print_gc_stats(
    stats: dict[str, dict[str, dict[str, float]]],
    cells: dict[tuple[str, int], list[dict[str, float]]],
    seconds: float,
) -> None:
    """Each server's garbage collections over its whole life (warm-ups and the pauses
    between cells included), beside the actions its measured windows answered."""
    print(
        "\nGarbage collections per server, start-up to stop (young / middle / full):\n\n"
        "| server | collections | ms collecting | longest ms | actions measured |\n"
        "|---|---|---|---|---|"
    )
    for name, gens in stats.items():
        actions = sum(
            cell["actions_per_s"] * seconds
            for (server, _), rounds in cells.items()
            if server == name
            for cell in rounds
        )
        counts = " / ".join(f"{gens[g]['count']:.0f}" for g in "012")
        totals = " / ".join(f"{gens[g]['total_ms']:.1f}" for g in "012")
        longest = " / ".join(f"{gens[g]['longest_ms']:.2f}" for g in "012")
        print(f"| {name} | {counts} | {totals} | {longest} | {actions:,.0f} |")


def _median(rounds: list[dict[str, float]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}


def _paired(rounds: list[dict[str, float]], echo: list[dict[str, float]], key: str) -> str:
    """The median over rounds of each round's ratio to the echo, and with several rounds
    their range: within a round the servers of one robot count run one after another, so a
    shift of the host between rounds cancels out of each ratio (a ratio of medians taken
    over all rounds mixes them), and the range shows how far the host moved the ratio."""
    ratios = [r[key] / e[key] for r, e in zip(rounds, echo, strict=True)]
    median = f"{statistics.median(ratios):.2f}"
    low, high = f"{min(ratios):.2f}", f"{max(ratios):.2f}"
    return median if low == high else f"{median} ({low}-{high})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy-poll-us", type=float, default=0.0)
    parser.add_argument(
        "--busy-poll-off", action="store_true", help="also tether without busy polling"
    )
    parser.add_argument("--spin-us", default="", help="echoes spinning this long per step")
    parser.add_argument(
        "--recorder-off", action="store_true", help="also tether without its recorder"
    )
    parser.add_argument(
        "--gc-stats",
        action="store_true",
        help="the grpc.aio servers time their garbage collections; a table per server",
    )
    parser.add_argument(
        "--no-gathering",
        action="store_true",
        help="also tether taking each batch at once (batcher.gather_turns 0)",
    )
    parser.add_argument(
        "--period-ms",
        type=float,
        default=0.0,
        help="robots at a control rate: one step per period each (0: closed loop)",
    )
    parser.add_argument(
        "--servers",
        default="",
        help="only these rows, ';'-separated (the echo among them), e.g. "
        "'echo;tether;tether, recorder off'",
    )
    args = parser.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    bundle = str(pretrained_bundle_path())
    recording = record_closed_loop(episodes=4)
    bench_protocols._FEED = np.concatenate(recording.episodes)
    feed = Feed(recording)
    print(
        f"# bench_peers: shipped position policy, {args.seconds} s per cell, "
        f"{args.rounds} rounds, median per cell, ratios paired per round; {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
        + (f"; each robot one step per {args.period_ms:g} ms" if args.period_ms else "")
    )
    spin_us = [float(x) for x in args.spin_us.split(",") if x]
    names = (
        SERVERS
        + (POLLED if args.busy_poll_us > 0 else ())
        + ((UNPOLLED,) if args.busy_poll_off else ())
        + ((UNRECORDED,) if args.recorder_off else ())
        + ((UNGATHERED,) if args.no_gathering else ())
        + tuple(map(spun, spin_us))
    )
    if args.servers:
        chosen = [name.strip() for name in args.servers.split(";")]
        unknown = [name for name in chosen if name not in names]
        if unknown or "echo" not in chosen:
            parser.error(f"--servers takes 'echo' and rows of {list(names)}; got {unknown}")
        names = tuple(name for name in names if name in chosen)
    servers = Servers(bundle, names, args.busy_poll_us, spin_us, args.gc_stats)
    cells: dict[tuple[str, int], list[dict[str, float]]] = {}
    try:
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for clients in counts:
                for server in order:
                    cell = asyncio.run(
                        _closed_loop(
                            clients,
                            args.seconds,
                            servers.client(server, feed),
                            servers.running[server].proc.pid,
                            args.period_ms / 1e3,
                        )
                    )
                    cells.setdefault((server, clients), []).append(cell)
    finally:
        servers.stop()
    print(
        "\n| server | robots | p50 ms | p99 ms | actions/s | p50 / echo | actions/s / echo "
        "| server CPU µs/action | of it main thread / grpc core / other threads "
        "| clients' CPU µs/action |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for clients in counts:
        echo = cells[("echo", clients)]
        for server in names:
            rounds = cells[(server, clients)]
            m = _median(rounds)
            print(
                f"| {server} | {clients} | {m['p50_ms']:.3f} | {m['p99_ms']:.3f} | "
                f"{m['actions_per_s']:,.0f} | {_paired(rounds, echo, 'p50_ms')} | "
                f"{_paired(rounds, echo, 'actions_per_s')} | "
                f"{m['server_cpu_us']:.1f} | {m['main_cpu_us']:.1f} / {m['grpc_cpu_us']:.1f} / "
                f"{m['other_cpu_us']:.1f} | {m['client_cpu_us']:.1f} |"
            )
    if args.gc_stats:
        _print_gc_stats(servers.gc_stats(), cells, args.seconds)
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
