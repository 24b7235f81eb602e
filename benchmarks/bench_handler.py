"""What the server's own Python costs per Control step, with grpc taken out (issue 22).

Drives ``PolicyService.Control`` in-process: each robot is an async iterator that hands
the handler its next recorded step only after the reply to the last one came back, on
the server ``bench_peers`` serves (the shipped position policy, supervisor on, the
recorder writing an experience log, the served-time degradation machine of
``bench_serving``). No socket and no grpc: what is left is the handler (validation,
session, admission, the reply), the batcher, the pipeline (engine, supervision and the
record hand-off of each batch's steps) and this harness's own iterator, whose cost is
measured by driving a handler that answers a prebuilt reply the same way, and
subtracted.

For each robot count, the median over ``--rounds`` windows of:

- loop CPU: the event loop thread's CPU µs per step (``time.thread_time``), harness
  subtracted;
- other threads: the recorder's and the log flusher's CPU µs per step (process CPU less
  the loop thread's), which share the GIL with the loop;
- batch compute: the loop thread's CPU per step in ``InferencePipeline.run`` (the engine,
  supervision and the pipeline around them; batches run on the loop, as they do under 5
  ms), and of it in the engine (``PolicyEngine.act``) and in supervision
  (``decide_batch``); the timers add about 0.5 µs per batch each;
- everything else: loop CPU less the engine and supervision, i.e. what the handler, the
  batcher, the pipeline around the engine and the supervisor, the reply and the record
  hand-off cost per step. The issue's targets at batch 1: engine ≤ 2 × a plain numpy
  forward, supervision ≤ 20 µs, everything else ≤ 20 µs.

``--variants`` measures the same server with parts of it switched off, one window of each
variant in turn (so they see the same machine): ``cached`` answers the engine's and the
supervisor's calls with their first result for a batch of that size (the serving Python
around them runs as always; the sessions' supervisors do not advance), ``unrecorded``
hands the recorder nothing; ``cached+unrecorded`` both; ``served`` neither. A cached
window at many robots seldom releases the GIL (the kernels did), so the recorder's worker
falls behind in it and its "other threads" read low; what the recorder and the log hold
is written between windows, outside them.

With ``--profile N`` it instead runs one cProfile'd window per robot count and prints
the N functions with the most own time (profiling inflates every Python call: read it
for where, not for how much).

    python benchmarks/bench_handler.py [--robots 1,64] [--seconds 2] [--rounds 5] [--profile N]
        [--loop auto|uvloop|asyncio] [--variants served,cached,unrecorded]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import platform
import pstats
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from itertools import cycle, islice
from typing import Any

import bench_protocols
import numpy as np
from bench_serving import (
    SPEC,
    Feed,
    open_message,
    policy_config,
    record_closed_loop,
    served_time_machine,
)

import tether.serving.inference as inference
import tether.serving.server as server_module
from tether.assets import pretrained_bundle_path
from tether.data import ExperienceLog, Recorder
from tether.policy.engine import PolicyEngine
from tether.serving import event_loop
from tether.serving.config import ServerConfig
from tether.serving.launch import build_server, freeze_startup_heap
from tether.serving.service import PolicyService
from tether.v1 import policy_pb2 as pb

STEPS_PER_ROBOT = 4096  # recorded steps each robot cycles through
_CPU = [0, 0, 0]  # loop-thread CPU ns in batches, in their supervision, in the engine
SWITCHES = ("cached", "unrecorded")  # what a variant may switch off (--variants)
_OFF: set[str] = set()  # the switches of the variant being measured


def _timed(fn: Any, slot: int) -> Any:
    """``fn``, adding the calling thread's CPU time in it to ``_CPU[slot]``."""

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.thread_time_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            _CPU[slot] += time.thread_time_ns() - start

    return timed


def _cacheable(fn: Any) -> Any:
    """``fn``, answering with its first result for a batch of the same size (its second
    argument's length) while the ``cached`` switch is on."""
    first: dict[int, Any] = {}

    def cacheable(*args: Any) -> Any:
        rows = len(args[1])
        if "cached" in _OFF and rows in first:
            return first[rows]
        out = fn(*args)
        first.setdefault(rows, out)
        return out

    return cacheable


def _variant(name: str) -> set[str]:
    switches = set() if name == "served" else set(name.split("+"))
    unknown = switches - set(SWITCHES)
    if unknown:
        raise SystemExit(
            f"--variants: unknown switch(es) {sorted(unknown)} in {name!r}; a variant is "
            f"'served' or switches of {SWITCHES} joined by '+'"
        )
    return switches


class _Context:
    """What the handler asks of a grpc.aio context on the Control path."""

    def __init__(self, robot: int) -> None:
        self._peer = f"ipv4:127.0.0.1:{10_000 + robot}"

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        return None

    async def abort(self, code: Any, details: str) -> None:
        raise RuntimeError(f"the handler aborted the stream: {code} {details}")


class _Steps:
    """A robot's request stream: the robot puts one message (None: the end) before each
    reply it awaits, so the handler always finds it ready."""

    def __init__(self) -> None:
        self._ready: list[pb.ControlStep | None] = []

    def put(self, message: pb.ControlStep | None) -> None:
        self._ready.append(message)

    def __aiter__(self) -> _Steps:
        return self

    async def __anext__(self) -> pb.ControlStep:
        if not self._ready:
            raise RuntimeError("the handler read ahead of the robot; the harness cannot feed it")
        message = self._ready.pop()
        if message is None:
            raise StopAsyncIteration
        return message


class _Prebuilt:
    """The harness floor: a Control handler answering a prebuilt reply of the real size."""

    def __init__(self) -> None:
        action = [0.125] * SPEC.act_dim
        self._reply = pb.ControlReply(
            action=pb.ActionResponse(
                action=action,
                proposed_action=action,
                status="ok",
                version=pb.PolicyVersion(policy_version=1, weights_sha256="0" * 64),
                safety=pb.SafetyVerdict(source=pb.ACTION_SOURCE_POLICY),
                timings=pb.ServerTimings(queue_ns=1, inference_ns=1, safety_ns=1, total_ns=1),
                degradation=pb.DEGRADATION_LEVEL_NORMAL,
            )
        )

    async def Control(self, requests: Any, context: Any) -> AsyncIterator[pb.ControlReply]:
        async for _ in requests:
            yield self._reply


async def _robot(
    service: Any, robot: int, messages: list[pb.ControlStep], until: float, tally: dict[str, Any]
) -> None:
    steps = _Steps()
    steps.put(open_message(robot))
    replies = service.Control(steps, _Context(robot))
    await replies.__anext__()
    done = 0
    for message in cycle(messages):
        if time.perf_counter() >= until:
            break
        steps.put(message)
        reply = await replies.__anext__()
        # A batch's replies come as the bytes it encoded (field 4, ``action``, after the
        # step's index and episode), a lone step's as a message.
        if type(reply) is bytes:
            if b"\x22" not in reply:
                raise RuntimeError(f"robot {robot}: {pb.ControlReply.FromString(reply)}")
        elif reply.WhichOneof("kind") != "action":
            raise RuntimeError(f"robot {robot}: {reply}")
        done += 1
    tally["steps"] += done
    steps.put(None)
    async for _ in replies:
        pass


async def _window(
    service: Any, robots: int, feed: list[list[pb.ControlStep]], seconds: float
) -> dict[str, float]:
    tally: dict[str, Any] = {"steps": 0}
    until = time.perf_counter() + seconds
    _CPU[:] = [0, 0, 0]
    loop_cpu, all_cpu = time.thread_time(), time.process_time()
    await asyncio.gather(*(_robot(service, i, feed[i], until, tally) for i in range(robots)))
    loop_cpu, all_cpu = time.thread_time() - loop_cpu, time.process_time() - all_cpu
    steps = max(1, tally["steps"])
    return {
        "loop_us": loop_cpu / steps * 1e6,
        "other_us": (all_cpu - loop_cpu) / steps * 1e6,
        "batch_us": _CPU[0] / steps / 1e3,
        "safety_us": _CPU[1] / steps / 1e3,
        "engine_us": _CPU[2] / steps / 1e3,
    }


def _feed(robots: int) -> list[list[pb.ControlStep]]:
    recording = record_closed_loop(episodes=4)
    bench_protocols._FEED = np.concatenate(recording.episodes)
    feed = Feed(recording)
    out = []
    for robot in range(robots):
        steps: Iterator[pb.ControlStep] = feed.steps(robot)
        out.append(list(islice(steps, STEPS_PER_ROBOT)))
    return out


async def _measure(
    robot_counts: list[int],
    seconds: float,
    rounds: int,
    profile: int,
    variants: dict[str, set[str]],
) -> list[dict[str, Any]]:
    made: list[PolicyService] = []

    class Kept(PolicyService):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            made.append(self)

    server_module.PolicyService = Kept  # type: ignore[misc]  # to reach the handler
    inference.InferencePipeline.run = _timed(inference.InferencePipeline.run, 0)  # type: ignore[method-assign]
    inference.decide_batch = _timed(_cacheable(inference.decide_batch), 1)
    PolicyEngine.act = _timed(_cacheable(PolicyEngine.act), 2)  # type: ignore[method-assign]
    log = ExperienceLog(tempfile.mkdtemp(prefix="bench_handler_"), SPEC.obs_dim, SPEC.act_dim)
    recorder = Recorder([log])
    config = ServerConfig.model_validate(policy_config(64, "auto"))
    server = build_server(
        pretrained_bundle_path(),
        config,
        degradation=served_time_machine(SPEC.control_period_s),
        record_steps=lambda steps: "unrecorded" in _OFF or recorder.record_steps(steps),
        end_session=recorder.end_session,
        after_reply=recorder.nudge,
    )
    await server.start()
    freeze_startup_heap()
    service, floor = made[-1], _Prebuilt()
    feed = _feed(max(robot_counts))
    rows = []
    try:
        for robots in robot_counts:
            await _window(service, robots, feed, 1.0)  # warm-up
            if profile:
                profiler = cProfile.Profile()
                profiler.enable()
                await _window(service, robots, feed, seconds)
                profiler.disable()
                print(f"--- {robots} robot(s), cProfile of the event loop thread")
                pstats.Stats(profiler).sort_stats("tottime").print_stats(profile)
                continue
            cells: dict[tuple[str, str], list[float]] = {}
            for _ in range(rounds):  # they alternate, so all see the same machine
                for name in [*variants, "floor"]:
                    handler = floor if name == "floor" else service
                    _OFF.clear()
                    _OFF.update(variants.get(name, ()))
                    for key, value in (await _window(handler, robots, feed, seconds)).items():
                        cells.setdefault((name, key), []).append(value)
                    # Each window pays for its own steps: what the recorder and the log
                    # hold of the window before (a cached window, rarely releasing the
                    # GIL, leaves a backlog) is written between windows, outside them.
                    recorder.flush(30.0)
                    log.flush()
            _OFF.clear()
            medians = {cell: statistics.median(values) for cell, values in cells.items()}
            for name in variants:
                row: dict[str, Any] = {"robots": robots, "variant": name}
                row.update({key: v for (of, key), v in medians.items() if of == name})
                row["floor_loop_us"] = medians["floor", "loop_us"]
                rows.append(row)
    finally:
        await server.stop(0.5)
        recorder.close()
        log.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--robots", default="1,64")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", type=int, default=0, metavar="N")
    parser.add_argument("--loop", choices=event_loop.EVENT_LOOPS, default="auto")
    parser.add_argument("--variants", default="served", help="served, cached, unrecorded, ...")
    args = parser.parse_args()
    counts = [int(x) for x in args.robots.split(",")]
    variants = {name: _variant(name) for name in args.variants.split(",")}
    # The loop tether serve runs (ServerConfig.event_loop's default), or --loop's.
    measured = _measure(counts, args.seconds, args.rounds, args.profile, variants)
    rows = event_loop.run(measured, args.loop)
    if args.profile:
        return
    print(
        f"# bench_handler: shipped position policy, {args.seconds} s windows, median of "
        f"{args.rounds}; event loop {args.loop}; {platform.machine()}, Python "
        f"{platform.python_version()}\n"
    )
    print(
        "| robots | variant | loop CPU µs/step | harness floor | loop less floor | other threads "
        "| batch compute | of it engine | of it supervision | everything else |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        own = r["loop_us"] - r["floor_loop_us"]
        print(
            f"| {r['robots']} | {r['variant']} | {r['loop_us']:.1f} | {r['floor_loop_us']:.1f} "
            f"| {own:.1f} | {r['other_us']:.1f} | {r['batch_us']:.1f} | {r['engine_us']:.1f} "
            f"| {r['safety_us']:.1f} | {own - r['engine_us'] - r['safety_us']:.1f} |"
        )


if __name__ == "__main__":
    main()
