"""Where a served step's CPU goes: py-spy of bench_peers' tether server (shipped position
policy, supervisor and recorder on, Control streams) and of the grpc.aio echo, at 1 and 64
robots; CPU µs per step by layer (issue 22).

Each server runs in its own process (``bench_serving.ServerProcess``), is warmed by 8
robots for 1.5 s, then for each robot count ``py-spy record --nonblocking --threads`` (200
Hz, raw stacks) samples it for ``seconds`` while the robots run a little longer. A sample
is charged to the first layer found from its leaf frame up (``LAYERS``); grpc's Cython
code shows as the asyncio frame that called it ("grpc + asyncio loop"). CPU µs per step =
samples / rate / (actions per second × seconds), all threads together. py-spy must be on
PATH (``pip install py-spy``; not a dependency).

    python benchmarks/profile_serving.py OUTDIR [--seconds 3] [--execution auto]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import bench_protocols
import numpy as np
from bench_peers import _control_client
from bench_protocols import _closed_loop
from bench_serving import Feed, ServerProcess, record_closed_loop

from tether.assets import pretrained_bundle_path

RATE_HZ = 200
LAYERS = (
    ("supervisor", ("safety/position", "safety/supervisor", "serving/supervision.py")),
    ("degradation machine", ("degradation.py",)),
    ("engine", ("policy/", "torch/")),
    ("recorder and log", ("tether/data/",)),
    ("versions / routing", ("tether/versions/",)),
    ("metrics", ("prometheus_client", "serving/metrics.py")),
    ("validation, reply", ("serving/convert.py", "serving/validation.py", "serving/decoding.py")),
    ("session, admission", ("serving/session.py", "serving/admission.py")),
    ("batcher, pipeline", ("serving/batcher.py", "serving/inference.py")),
    ("service handler", ("serving/service.py",)),
    ("grpc + asyncio loop", ("grpc", "asyncio/")),
)


def layer(stack: str) -> str:
    for frame in reversed(stack.split(";")):
        for name, keys in LAYERS:
            if any(k in frame for k in keys):
                return name
    return "other"


def profile(pid: int, address: str, feed: Feed, robots: int, seconds: float, raw: Path) -> dict:
    """One cell: the robots' rate and the CPU µs per step of each layer."""
    spy: list[subprocess.Popen[bytes]] = []

    def launch() -> None:
        time.sleep(0.7)  # after the robots' warm-up steps
        command = ["py-spy", "record", "-p", str(pid), "--threads", "--nonblocking"]
        command += ["-r", str(RATE_HZ), "-d", str(int(seconds)), "-f", "raw", "-o", str(raw)]
        spy.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    starter = threading.Thread(target=launch)
    starter.start()
    cell = asyncio.run(_closed_loop(robots, seconds + 1.5, _control_client(address, feed)))
    starter.join()
    spy[0].wait()
    steps = cell["actions_per_s"] * int(seconds)
    per: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        per[layer(stack)] += int(count)
    us = {name: n / RATE_HZ / steps * 1e6 for name, n in per.items()}
    return {"cell": cell, "us": us}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--execution", default="auto", help="tether's batcher.execution")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    recording = record_closed_loop(episodes=4)
    bench_protocols._FEED = np.concatenate(recording.episodes)
    feed = Feed(recording)
    bundle = str(pretrained_bundle_path())
    servers = {
        "tether": ServerProcess("policy", bundle, execution=args.execution, recorder=True),
        "echo": ServerProcess("echo"),
    }
    cells: dict[str, dict] = {}
    try:
        for name, server in servers.items():
            asyncio.run(_closed_loop(8, 1.5, _control_client(server.address, feed)))  # warm
            pid = server.proc.pid
            assert pid is not None
            for robots in (1, 64):
                raw = args.out / f"{name}-{robots}.txt"
                cells[f"{name} x{robots}"] = profile(
                    pid, server.address, feed, robots, args.seconds, raw
                )
    finally:
        for server in servers.values():
            server.stop()
    print("| where (CPU µs per step) | " + " | ".join(cells) + " |")
    print("|---|" + "---|" * len(cells))
    for name in [n for n, _ in LAYERS] + ["other"]:
        print(
            f"| {name} | "
            + " | ".join(f"{c['us'].get(name, 0.0):.0f}" for c in cells.values())
            + " |"
        )
    print(
        "| **all** | "
        + " | ".join(f"**{sum(c['us'].values()):.0f}**" for c in cells.values())
        + " |"
    )
    print(
        "| robots' actions/s; p50 ms | "
        + " | ".join(
            f"{c['cell']['actions_per_s']:,.0f}; {c['cell']['p50_ms']:.3f}" for c in cells.values()
        )
        + " |"
    )


if __name__ == "__main__":
    main()
