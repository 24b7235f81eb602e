"""Data-layer throughput: buffer ingest, batch sampling, and server→learner transport.

Targets (issue 5): ingest ≥ 50,000 transitions/s into the replay buffer; sampling a
batch of 256 ≤ 0.2 ms; process→process transport ≥ 20,000 transitions/s. Dimensions are
the built-in arm's. Every figure comes from one run of this script:

    python benchmarks/bench_data.py [--seconds 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import platform
import sys
import tempfile
import time

import numpy as np

from tether.data import (
    AnsweredSteps,
    ChannelConfig,
    ExperienceLog,
    ExperienceLogConfig,
    Recorder,
    ReplayBuffer,
    ReplayBufferConfig,
    StepRecord,
    Transition,
    TransitionArrays,
    TransitionChannel,
    TransitionTable,
    ingress_ns,
)
from tether.sim import arm_spec

SPEC = arm_spec()
OBS, ACT = SPEC.obs_dim, SPEC.act_dim
BATCH = 256
BLOCK = 32  # Control steps per hand-over: a batch of 32 robots, one step each


def arrays(n: int, start: int) -> TransitionArrays:
    rows = TransitionArrays.empty(n, OBS, ACT)
    rows.observations[:] = np.random.default_rng(start).standard_normal((n, OBS))
    rows.ingress_ns[:] = (start + np.arange(n)) * 2_000_000  # 500 Hz
    return rows


def transitions(n: int) -> list[Transition]:
    obs, act = np.zeros(OBS, np.float32), np.zeros(ACT, np.float32)
    return [
        Transition(
            "s", "r", "e", i, obs, act, act, 0.0, obs, False, False, "policy", 0, 1, "", i, i + 1
        )
        for i in range(n)
    ]


def bench_ingest(seconds: float) -> tuple[float, float]:
    """Transitions/s into a default-sized buffer, past ring wrap-around, from arrays and objects."""
    buffer = ReplayBuffer(OBS, ACT, ReplayBufferConfig())
    block = arrays(BATCH, 0)
    rows, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or rows < 1_300_000:  # wrap the 1M ring
        block.ingress_ns[:] += BATCH * 2_000_000
        buffer.extend(block)
        rows += BATCH
    from_arrays = rows / (time.perf_counter() - t0)
    objects = transitions(BATCH)
    rows, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        buffer.extend(objects)
        rows += BATCH
    return from_arrays, rows / (time.perf_counter() - t0)


def bench_sample(seconds: float) -> tuple[float, float, float]:
    """sample(256) from a full default buffer: CPU ms per call, and wall-clock p50/p99 ms.

    CPU time (this thread's) is the cost of the call itself; wall time also counts the
    time the shared machine gave to other processes while it ran.
    """
    buffer = ReplayBuffer(OBS, ACT, ReplayBufferConfig())
    for start in range(0, 1_300_000, 65536):
        buffer.extend(arrays(65536, start))
    times = []
    cpu0 = time.thread_time()
    t_end = time.perf_counter() + seconds
    while time.perf_counter() < t_end:
        t0 = time.perf_counter()
        buffer.sample(BATCH)
        times.append(time.perf_counter() - t0)
    cpu_ms = (time.thread_time() - cpu0) / len(times) * 1e3
    ms = np.array(times) * 1e3
    return cpu_ms, float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def bench_record(seconds: float) -> float:
    """Microseconds one Recorder.record() call (a single step) costs the caller (worker
    pairing behind it)."""
    buffer = ReplayBuffer(OBS, ACT, ReplayBufferConfig())
    steps = make_steps(200_000, sessions=8)
    with Recorder([buffer]) as recorder:
        n, t0 = 0, time.perf_counter()
        for step in steps:
            recorder.record(step)
            n += 1
            if time.perf_counter() - t0 > seconds:
                break
        cost = (time.perf_counter() - t0) / n * 1e6
        recorder.flush(60)
    return cost


def bench_record_steps(seconds: float) -> tuple[float, float, int, int]:
    """What the server's batch pays to hand over its steps: microseconds per step of
    Recorder.record_steps() with hand-overs of BLOCK steps (one step of each of BLOCK
    sessions, as one batch of as many robots records them), and the steps/s the worker
    paired into transitions behind it (the steps it took, until flushed), with the
    transitions it made and the steps dropped for a full queue (fed faster than it pairs)."""
    buffer = ReplayBuffer(OBS, ACT, ReplayBufferConfig())
    steps = make_steps(BLOCK * 6_000, sessions=BLOCK)
    blocks = [AnsweredSteps.from_records(steps[i : i + BLOCK]) for i in range(0, len(steps), BLOCK)]
    with Recorder([buffer]) as recorder:
        n, t0 = 0, time.perf_counter()
        for block in blocks:
            recorder.record_steps(block)
            n += len(block)
            if time.perf_counter() - t0 > seconds:
                break
        cost = (time.perf_counter() - t0) / n * 1e6
        recorder.flush(60)
        stats = recorder.stats()
        rate = (n - stats.dropped_queue_full) / (time.perf_counter() - t0)
    return cost, rate, stats.pairing.transitions, stats.dropped_queue_full


def bench_log(seconds: float) -> float:
    """Transitions/s the experience log writes (1,000 per flush, fsync on, as by default)."""
    batch = TransitionTable.from_transitions(transitions(1000), OBS, ACT)
    with tempfile.TemporaryDirectory() as directory:
        log = ExperienceLog(directory, OBS, ACT, ExperienceLogConfig())
        rows, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            log.put(batch)
            log.flush()
            rows += len(batch)
        rate = rows / (time.perf_counter() - t0)
        log.close()
    return rate


def make_steps(count: int, sessions: int) -> list[StepRecord]:
    obs, act = np.zeros(OBS, np.float32), np.zeros(ACT, np.float32)
    return [
        StepRecord(
            f"s{i % sessions}",
            "r",
            "e",
            i // sessions,
            obs,
            0.0,
            False,
            False,
            None,
            act,
            act,
            "policy",
            0,
            1,
            "",
            ingress_ns(),
        )
        for i in range(count)
    ]


def in_episode(block: AnsweredSteps, episode: str) -> AnsweredSteps:
    """``block`` with every step in ``episode`` (its ``len`` counts its steps, so the
    named tuple's ``_replace`` cannot rebuild it)."""
    fields = block._asdict()
    fields["facts"] = [fact._replace(episode_id=episode) for fact in block.facts]
    return AnsweredSteps(**fields)


def produce_steps(channel: TransitionChannel, seconds: float, sessions: int) -> None:
    """Server side: hand-overs of BLOCK steps (as the server's batches make them)
    through a Recorder into the channel, as fast as they come."""
    steps = make_steps(100_000, sessions)
    blocks = [AnsweredSteps.from_records(steps[i : i + BLOCK]) for i in range(0, len(steps), BLOCK)]
    with Recorder([channel]) as recorder:
        t_end = time.perf_counter() + seconds
        episode = 0
        while time.perf_counter() < t_end:
            for block in blocks:
                recorder.record_steps(in_episode(block, f"e{episode}"))
            episode += 1
    channel.close()


def bench_channel(seconds: float) -> tuple[float, int, int]:
    """Transitions/s that reach the learner's buffer from a Recorder in another process."""
    channel = TransitionChannel(OBS, ACT, ChannelConfig(capacity=65536))
    buffer = ReplayBuffer(OBS, ACT, ReplayBufferConfig())
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=produce_steps, args=(channel, seconds, 8))
    child.start()
    received, first, last = 0, 0.0, 0.0
    while True:
        rows = channel.get(max_rows=8192, timeout_s=2.0)
        if not len(rows):
            if not child.is_alive():
                break
            continue
        if not received:
            first = time.perf_counter()
        buffer.extend(rows)
        received += len(rows)
        last = time.perf_counter()
    child.join()
    stats = channel.stats()
    channel.close()
    return received / max(last - first, 1e-9), received, stats.dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--seconds", type=float, default=2.0, help="duration of each measurement (s)"
    )
    args = parser.parse_args()
    import torch

    print(
        f"machine: {platform.machine()}, nproc={multiprocessing.cpu_count()}, python {sys.version.split()[0]}, torch {torch.__version__}"
    )
    print(f"dims: obs={OBS} act={ACT} (built-in arm); buffer: ring 1,000,000 + reservoir 200,000")
    arrays_rate, objects_rate = bench_ingest(args.seconds)
    print(f"ingest, TransitionArrays x{BATCH}: {arrays_rate:,.0f} transitions/s (target >= 50,000)")
    print(f"ingest, Transition objects x{BATCH}: {objects_rate:,.0f} transitions/s")
    cpu_ms, p50_ms, p99_ms = bench_sample(args.seconds)
    print(
        f"sample({BATCH}): {cpu_ms:.3f} ms CPU per call; wall p50 {p50_ms:.3f} ms, "
        f"p99 {p99_ms:.3f} ms (target <= 0.2 ms)"
    )
    print(f"Recorder.record(), one step: {bench_record(args.seconds):.2f} us per call")
    cost, rate, made, dropped = bench_record_steps(args.seconds)
    print(
        f"Recorder.record_steps(), {BLOCK} steps: {cost:.3f} us per step on the control path; "
        f"worker paired {rate:,.0f} steps/s into {made:,} transitions, {dropped:,} steps "
        "dropped (queue full)"
    )
    print(f"experience log write: {bench_log(args.seconds):,.0f} transitions/s")
    rate, received, dropped = bench_channel(args.seconds)
    print(
        f"server->learner (Recorder -> TransitionChannel -> ReplayBuffer, 2 processes): "
        f"{rate:,.0f} transitions/s, {received:,} delivered, {dropped:,} dropped (target >= 20,000)"
    )


if __name__ == "__main__":
    main()
