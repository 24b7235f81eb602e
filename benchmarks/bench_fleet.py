"""The fleet on Ray beside the embedded server (issue 19), on one machine.

Three figures, in one run:

1. **Control round trip** through an edge actor vs the embedded server: the same
   bundle, the same client code (``PolicyClient`` Control session, one robot, the built-in
   arm stepping on the actions it gets back), the same seed and the same number of steps,
   alternating rounds so drifts in the machine's load hit both. The edge is an
   ``EdgeServer`` Ray actor; the embedded server is ``build_server`` in a process of its
   own. A third row hosts that same bare server in a Ray actor, which separates what Ray
   hosting costs (nothing should cross Ray) from what an edge does beside the bare server
   (recorder, experience log, shipper, policy versions, sync thread).
2. **Weight broadcast latency**: from a version's publication to the version service
   (``submit``, timestamped) to the last edge serving it (the service stamps the sync in
   which an edge first reports it), for 2 and 4 edges. The figure includes up to one
   sync interval of waiting on each side (``ray.sync_interval_s``).
3. **Transitions/s into the replay actor**: one edge's ``ReplayShipper`` pushing rows as
   fast as the recorder could hand them over, by batch size.

    python benchmarks/bench_fleet.py [--steps 2000] [--rounds 3] [--versions 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tether.assets import pretrained_bundle_path
from tether.data.records import Transition
from tether.fleet.edge import EdgePlan, EdgeServer
from tether.fleet.placement import free_port
from tether.fleet.replay import ReplayService
from tether.fleet.shipper import ReplayShipper
from tether.fleet.system import NAMESPACE
from tether.fleet.version_service import SERVICE_NAME, VersionService
from tether.fleet.weights import encode_weights
from tether.policy import load_bundle
from tether.policy.manifest import VersionInfo
from tether.policy.tensors import state_sha256
from tether.runtime.config import RunConfig
from tether.serving.client.sync import PolicyClient
from tether.serving.config import ServerConfig
from tether.serving.launch import build_server
from tether.sim import ArmEnv


def _config(sync_interval_s: float) -> RunConfig:
    # fast: no per-robot rate limit, since the bench's robot steps as fast as it can.
    return RunConfig.build(
        {"backend": "ray", "fast": True, "ray": {"sync_interval_s": sync_interval_s}}
    )


def _bare_config(port: int) -> ServerConfig:
    config = ServerConfig(port=port, metrics_port=None)
    admission = config.admission.model_copy(update={"rate_limit_hz": 0.0})
    return config.model_copy(update={"admission": admission})


class BareServerActor:
    """The embedded comparator's exact server, hosted in a Ray actor instead of a process."""

    def __init__(self, bundle: str, port: int) -> None:
        import threading

        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        self._server = build_server(Path(bundle), _bare_config(port))
        asyncio.run_coroutine_threadsafe(self._server.start(), self._loop).result(60)

    def address(self) -> str:
        return str(self._server.address)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._server.stop(), self._loop).result(30)


def _embedded_main(bundle: str, port: int, ready: Any, stop: Any) -> None:
    """A child process: the embedded server (what ``tether serve``/``tether run`` build)."""

    async def main() -> None:
        server = build_server(Path(bundle), _bare_config(port))
        await server.start()
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.1)
        await server.stop()

    asyncio.run(main())


def control_round_trip(address: str, steps: int, seed: int) -> np.ndarray:
    """Round trips (ms) of one robot's Control session: ``steps`` steps on the arm."""
    env = ArmEnv(seed=seed)
    spec = env.robot_spec
    out = np.empty(steps)
    with PolicyClient(address) as client:
        session = client.session(spec, robot_id="bench", control_deadline_s=1.0)
        try:
            obs, _ = env.reset(seed=seed)
            for _ in range(50):  # warm: connection, first inference
                client.get_action(obs, deterministic=True, client_id="bench-warm", timeout_s=5.0)
            for i in range(steps):
                t = time.perf_counter()
                result = session.step(obs, deterministic=True)
                out[i] = (time.perf_counter() - t) * 1e3
                obs, _, terminated, truncated, _ = env.step(result.action)
                if terminated or truncated:
                    obs, _ = env.reset()
                    session.start_episode()
        finally:
            session.close()
    return out


def _dims() -> tuple[int, int]:
    spec = load_bundle(pretrained_bundle_path()).robot_spec
    assert spec is not None
    return spec.obs_dim, spec.act_dim


def _summary(ms: np.ndarray) -> dict[str, float]:
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "mean_ms": float(ms.mean()),
    }


def bench_round_trip(ray: Any, run_dir: Path, steps: int, rounds: int) -> dict[str, Any]:
    bundle = str(pretrained_bundle_path())
    cfg = _config(0.1)
    obs_dim, act_dim = _dims()
    replay = ray.remote(ReplayService).options(num_cpus=0).remote(obs_dim, act_dim, 100_000)
    edge = _edge(ray, cfg, run_dir, "edge-rt", replay, gate=False)
    edge_address = ray.get(edge.address.remote())
    bare = ray.remote(BareServerActor).options(num_cpus=0).remote(bundle, free_port("127.0.0.1"))
    bare_address = ray.get(bare.address.remote())
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    port = free_port("127.0.0.1")
    proc = ctx.Process(target=_embedded_main, args=(bundle, port, ready, stop), daemon=True)
    proc.start()
    ready.wait(120)
    targets = {
        "embedded server (own process)": f"127.0.0.1:{port}",
        "same server in a Ray actor": bare_address,
        "edge actor (recorder, versions, shipper)": edge_address,
    }
    rows: dict[str, list[np.ndarray]] = {name: [] for name in targets}
    try:
        for r in range(rounds):
            for name, address in targets.items():
                rows[name].append(control_round_trip(address, steps, seed=r))
    finally:
        stop.set()
        proc.join(10)
        ray.get(edge.stop.remote())
        ray.get(bare.stop.remote())
        for actor in (edge, bare, replay):
            ray.kill(actor)
    return {name: _summary(np.concatenate(parts)) for name, parts in rows.items()}


def _edge(ray: Any, cfg: RunConfig, run_dir: Path, edge_id: str, replay: Any, gate: bool) -> Any:
    plan = EdgePlan(
        edge_id=edge_id,
        bundle_path=str(pretrained_bundle_path()),
        run_config_json=cfg.model_dump_json(),
        run_dir=str(run_dir),
        host="127.0.0.1",
        port=free_port("127.0.0.1"),
        robots=1,
        gate=gate,
        service_name=SERVICE_NAME,
        namespace=NAMESPACE,
    )
    return ray.remote(EdgeServer).options(num_cpus=0, max_concurrency=4).remote(plan, replay)


def bench_broadcast(
    ray: Any, run_dir: Path, edges: int, versions: int, sync_interval_s: float
) -> dict[str, Any]:
    bundle = load_bundle(pretrained_bundle_path())
    cfg = _config(sync_interval_s)
    service = (
        ray.remote(VersionService)
        .options(name=SERVICE_NAME, namespace=NAMESPACE, num_cpus=0, max_concurrency=8)
        .remote(bundle.version, gate_edge="edge-0")
    )
    obs_dim, act_dim = _dims()
    replay = ray.remote(ReplayService).options(num_cpus=0).remote(obs_dim, act_dim, 100_000)
    handles = [_edge(ray, cfg, run_dir, f"edge-{i}", replay, gate=i == 0) for i in range(edges)]
    ray.get([h.address.remote() for h in handles])
    names = [f"edge-{i}" for i in range(edges)]
    latencies = []
    payload_bytes = 0
    try:
        for k in range(versions):
            vid = bundle.version.id + 1 + k
            state = {n: t + 1e-3 * (k + 1) for n, t in bundle.actor_state.items()}
            info = VersionInfo(vid, f"bench-v{vid}", state_sha256(state), vid - 1)
            payload = encode_weights(state)
            payload_bytes = len(payload)
            published = time.time_ns()
            ray.get(
                service.submit.remote(info, payload, promote_directly=True, published_ns=published)
            )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                serving = ray.get(service.fleet.remote()).serving
                if all(n in serving and serving[n].version == vid for n in names):
                    last = max(serving[n].since_ns for n in names)
                    latencies.append((last - published) / 1e6)
                    break
                time.sleep(0.005)
            else:
                raise RuntimeError(f"version {vid} did not reach every edge in 30 s")
    finally:
        for h in handles:
            ray.get(h.stop.remote())
            ray.kill(h)
        ray.kill(service)
        ray.kill(replay)
    ms = np.array(latencies)
    return {
        "edges": edges,
        "sync_interval_s": sync_interval_s,
        "versions": versions,
        "weights_bytes": payload_bytes,
        "p50_ms": float(np.percentile(ms, 50)),
        "max_ms": float(ms.max()),
        "mean_ms": float(ms.mean()),
    }


def _transitions(n: int) -> list[Transition]:
    rng = np.random.default_rng(0)
    return [
        Transition(
            session_id="s",
            robot_id="bench",
            episode_id="e",
            step_index=i,
            observation=rng.standard_normal(9).astype(np.float32),
            proposed_action=np.zeros(3, np.float32),
            action=np.zeros(3, np.float32),
            reward=0.0,
            next_observation=rng.standard_normal(9).astype(np.float32),
            terminated=False,
            truncated=False,
            action_source="policy",
            safety_checks=0,
            policy_version=1,
            weights_sha256="0" * 64,
            ingress_ns=i,
            next_ingress_ns=i + 1,
        )
        for i in range(n)
    ]


def bench_replay(ray: Any, seconds: float, batches: list[int]) -> list[dict[str, Any]]:
    out = []
    chunk = _transitions(64)  # what one recorder flush hands over
    for batch in batches:
        replay = ray.remote(ReplayService).options(num_cpus=0).remote(9, 3, 1_000_000)
        ray.get(replay.ping.remote())
        shipper = ReplayShipper(
            replay,
            edge_id="bench",
            obs_dim=9,
            act_dim=3,
            batch=batch,
            in_flight=4,
            buffer=50_000,
            interval_s=0.005,
        )
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            if shipper.stats().buffered < 40_000:
                shipper.put(chunk)
            else:
                time.sleep(0.001)
        shipper.close(timeout_s=30.0)
        elapsed = time.perf_counter() - t0
        stats = shipper.stats()
        received = ray.get(replay.stats.remote()).offered
        out.append(
            {
                "batch": batch,
                "transitions_per_s": received / elapsed,
                "shipped": stats.shipped,
                "dropped_full": stats.dropped_full,
                "deferred_rounds": stats.deferred,
            }
        )
        ray.kill(replay)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--versions", type=int, default=10)
    parser.add_argument("--replay-seconds", type=float, default=3.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import ray

    torch.set_num_threads(1)
    ray.init(
        address="local",
        num_cpus=os.cpu_count() or 2,
        include_dashboard=False,
        namespace=NAMESPACE,
        log_to_driver=False,
        configure_logging=False,
    )
    result: dict[str, Any] = {
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs",
        "python": sys.version.split()[0],
        "ray": ray.__version__,
    }
    try:
        with tempfile.TemporaryDirectory() as tmp:
            run_dir = Path(tmp)
            result["round_trip"] = bench_round_trip(ray, run_dir, args.steps, args.rounds)
            print(json.dumps({"round_trip": result["round_trip"]}), flush=True)
            result["broadcast"] = [
                bench_broadcast(ray, run_dir, edges, args.versions, interval)
                for edges, interval in ((2, 0.1), (4, 0.1), (2, 0.02))
            ]
            print(json.dumps({"broadcast": result["broadcast"]}), flush=True)
            result["replay"] = bench_replay(ray, args.replay_seconds, [64, 256, 1024])
            print(json.dumps({"replay": result["replay"]}), flush=True)
    finally:
        ray.shutdown()
    _print(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2), encoding="utf-8")


def _print(r: dict[str, Any]) -> None:
    print(f"\nmachine: {r['machine']}; ray {r['ray']}")
    print("\ncontrol round trip (one robot, Control stream)       p50 ms   p99 ms   mean ms")
    for name, s in r["round_trip"].items():
        print(f"  {name:<50} {s['p50_ms']:7.3f}  {s['p99_ms']:7.3f}  {s['mean_ms']:7.3f}")
    print("\nweight broadcast, publication -> last edge serving it")
    for b in r["broadcast"]:
        print(
            f"  {b['edges']} edges, sync every {b['sync_interval_s'] * 1e3:.0f} ms: "
            f"p50 {b['p50_ms']:.1f} ms, max {b['max_ms']:.1f} ms "
            f"({b['versions']} versions of {b['weights_bytes'] / 1e3:.0f} kB)"
        )
    print("\ntransitions into the replay actor")
    for x in r["replay"]:
        print(
            f"  batch {x['batch']:>5}: {x['transitions_per_s']:>10,.0f} transitions/s "
            f"(dropped {x['dropped_full']}, deferred rounds {x['deferred_rounds']})"
        )


if __name__ == "__main__":
    main()
