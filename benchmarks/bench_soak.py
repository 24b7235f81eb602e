"""A fleet soak: many robots at their control rate against one server (issue 17, item 6).

One ``tether serve``-like server (the shipped bundle, the default server config, a
degradation machine on wall time) in its own process; the robots in a few client
processes, one asyncio task per robot, each with its own Control session stepping on an
absolute schedule at ``--hz`` and replaying the built-in arm's closed-loop recording
(``bench_serving.record_closed_loop``). Like tether's own client, a robot counts a
watchdog miss when a reply comes later than one control period and reports its running
total on every step, so the server's degradation machine sees what it would in the field.

Reports round-trip p50/p99/max and the share of replies over one control period, errors
(StepError replies and failed calls), the server's RSS at the start and the end, and for
every robot the fraction of its replies at a level other than NORMAL (from each reply's
own ``degradation`` field).

    python benchmarks/bench_soak.py [--robots 64] [--hz 50] [--seconds 30] [--procs 4]
                                    [--no-watchdog-misses] [--json FILE]

Targets: p99 ≤ 1000 / hz ms, 0 errors, every robot NORMAL on every step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psutil

sys.path.insert(0, str(Path(__file__).parent))
from bench_serving import Feed, record_closed_loop

from tether.assets import pretrained_bundle_path
from tether.sim import arm_spec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc

SPEC = arm_spec()


def _server_main(ports: Any) -> None:
    import torch

    from tether.serving.config import ServerConfig
    from tether.serving.launch import build_server, freeze_startup_heap

    torch.set_num_threads(1)

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        config = ServerConfig.model_validate({"port": 0, "metrics_port": None})
        server = build_server(pretrained_bundle_path(), config)
        await server.start()
        freeze_startup_heap()
        ports.put(server.port)
        await stop.wait()
        await server.stop(1.0)

    asyncio.run(run())


async def _robots(
    address: str,
    first: int,
    count: int,
    hz: float,
    seconds: float,
    feed: Feed,
    start_at: float,
    report_misses: bool,
) -> dict[str, Any]:
    period = 1.0 / hz
    channel = grpc.aio.insecure_channel(address)
    stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
    rtts: list[float] = []
    errors: list[str] = []
    not_normal: dict[str, tuple[int, int]] = {}
    checks: Counter[str] = Counter()

    async def robot(i: int) -> None:
        name = f"robot-{i}"
        call = stub.Control()
        await call.write(
            pb.ControlStep(
                open=pb.SessionOpen(
                    robot_id=name,
                    spec_fingerprint=SPEC.fingerprint(),
                    obs_dim=SPEC.obs_dim,
                    act_dim=SPEC.act_dim,
                    joint_names=list(SPEC.joint_names),
                )
            )
        )
        opened = await call.read()
        if opened.WhichOneof("kind") != "opened":
            errors.append(f"{name}: open answered {opened.WhichOneof('kind')}")
            return
        steps = feed.steps(i)
        misses = replies = degraded = 0
        # Spread the robots over one period, as independent controllers would be.
        due = start_at + period * (i % 64) / 64
        end = start_at + seconds
        while due < end:
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            message = next(steps)
            message.step.watchdog_misses = misses
            sent = time.perf_counter()
            try:
                await call.write(message)
                reply = await call.read()
            except grpc.RpcError as exc:
                errors.append(f"{name}: {exc.code().name} {exc.details()}")
                return
            rtt = time.perf_counter() - sent
            if reply.WhichOneof("kind") != "action":
                errors.append(f"{name}: {reply.error.message}")
            else:
                replies += 1
                degraded += reply.action.degradation != pb.DEGRADATION_LEVEL_NORMAL
                checks.update(reply.action.safety.check_names or ["none"])
            rtts.append(rtt)
            if rtt > period and report_misses:
                misses += 1  # the robot ran its watchdog's backup for this step
            due += period
            if due < time.perf_counter():  # fell behind: skip, as a real-time loop does
                due += period * np.ceil((time.perf_counter() - due) / period)
        not_normal[name] = (degraded, replies)
        await call.done_writing()

    await asyncio.gather(*(robot(i) for i in range(first, first + count)))
    await channel.close(grace=None)
    return {"rtts": rtts, "errors": errors, "not_normal": not_normal, "checks": checks}


def _client_main(
    address: str,
    first: int,
    count: int,
    hz: float,
    seconds: float,
    recording: Any,
    ready: Any,
    go: Any,
    start_wall: Any,
    report_misses: bool,
    out: Any,
) -> None:
    feed = Feed(recording)
    ready.put(first)
    go.wait()
    # perf_counter is per process: agree on wall time, then keep to perf_counter.
    local_start = time.perf_counter() + (start_wall.value - time.time())
    out.put(
        asyncio.run(_robots(address, first, count, hz, seconds, feed, local_start, report_misses))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robots", type=int, default=64, help="robots (sessions)")
    parser.add_argument("--hz", type=float, default=50.0, help="each robot's control rate (Hz)")
    parser.add_argument("--seconds", type=float, default=30.0, help="soak duration (s)")
    parser.add_argument("--procs", type=int, default=4, help="client processes")
    parser.add_argument(
        "--no-watchdog-misses",
        action="store_true",
        help="robots report no watchdog misses: the levels then show the supervisor's "
        "evidence alone, whatever the latency",
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not (args.robots >= 1 and args.hz > 0 and 0 < args.seconds <= 3600 and args.procs >= 1):
        parser.error("need robots >= 1, hz > 0, 0 < seconds <= 3600, procs >= 1")
    ctx = mp.get_context("spawn")
    ports = ctx.Queue()
    server = ctx.Process(target=_server_main, args=(ports,), daemon=True)
    server.start()
    address = f"127.0.0.1:{ports.get(timeout=180)}"
    server_ps = psutil.Process(server.pid)
    rss_start = server_ps.memory_info().rss
    results, ready = ctx.Queue(), ctx.Queue()
    go, start_wall = ctx.Event(), ctx.Value("d", 0.0)
    recording = record_closed_loop(4)
    per = -(-args.robots // args.procs)
    clients = []
    for p in range(args.procs):
        first = p * per
        count = min(per, args.robots - first)
        if count <= 0:
            break
        proc = ctx.Process(
            target=_client_main,
            args=(address, first, count, args.hz, args.seconds, recording, ready, go,
                  start_wall, not args.no_watchdog_misses, results),
            daemon=True,
        )  # fmt: skip
        proc.start()
        clients.append(proc)
    for _ in clients:
        ready.get(timeout=300)
    start_at = time.time() + 2.0  # sessions open within this
    start_wall.value = start_at
    go.set()
    rss_peak = rss_start
    while time.time() < start_at + args.seconds:
        rss_peak = max(rss_peak, server_ps.memory_info().rss)
        time.sleep(0.5)
    parts = [results.get(timeout=120) for _ in clients]
    rss_end = server_ps.memory_info().rss
    for proc in clients:
        proc.join(30)
    os.kill(server.pid, signal.SIGTERM)  # type: ignore[arg-type]
    server.join(30)
    rtts_ms = np.array([r for part in parts for r in part["rtts"]]) * 1e3
    errors = [e for part in parts for e in part["errors"]]
    fractions = {
        name: degraded / replies if replies else 1.0
        for part in parts
        for name, (degraded, replies) in part["not_normal"].items()
    }
    period_ms = 1e3 / args.hz
    figures = {
        "robots": args.robots,
        "hz": args.hz,
        "seconds": args.seconds,
        "watchdog_misses_reported": not args.no_watchdog_misses,
        "steps": int(rtts_ms.size),
        "p50_ms": float(np.percentile(rtts_ms, 50)),
        "p99_ms": float(np.percentile(rtts_ms, 99)),
        "max_ms": float(rtts_ms.max()),
        "over_one_period": float(np.mean(rtts_ms > period_ms)),
        "errors": len(errors),
        "first_errors": errors[:5],
        "rss_start_mb": rss_start / 2**20,
        "rss_peak_mb": rss_peak / 2**20,
        "rss_end_mb": rss_end / 2**20,
        "robots_reporting": len(fractions),
        "robots_ever_not_normal": sum(1 for f in fractions.values() if f > 0),
        "not_normal_mean": float(np.mean(list(fractions.values()))) if fractions else 1.0,
        "not_normal_max": max(fractions.values()) if fractions else 1.0,
        "checks": dict(sum((Counter(part["checks"]) for part in parts), Counter())),
        "cpu_count": os.cpu_count(),
        "load_avg_1m": os.getloadavg()[0],
    }
    print(json.dumps(figures, indent=2))
    print(
        f"| {args.robots} × {args.hz:g} Hz, {args.seconds:g} s | {figures['steps']} | "
        f"{figures['p50_ms']:.2f} | {figures['p99_ms']:.2f} | {figures['max_ms']:.1f} | "
        f"{figures['over_one_period']:.1%} | {figures['errors']} | "
        f"{figures['rss_start_mb']:.0f} → {figures['rss_end_mb']:.0f} | "
        f"{figures['robots_ever_not_normal']}/{figures['robots_reporting']} "
        f"(max {figures['not_normal_max']:.1%}) |"
    )
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
