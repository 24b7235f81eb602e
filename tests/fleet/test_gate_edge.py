"""The gate edge: a candidate reaches the robots only through the gate's server-side stages,
run at ``edge-0`` on its robots' live traffic.

A candidate (the live policy's mean head negated and scaled) is submitted to the version
service; the gate edge receives it and its shadow stage judges it on a robot's live
observations (the candidate computes beside live, never acting). Whatever the verdict --
rejected, or on to a canary that this robot, declaring no tasks, never opens -- the robot
is served the live version throughout and the fleet's live version does not move. Were
the edge to serve a candidate it was handed (skipping its gate), the robot's replies would
name version 2 and the test fails. (The service's side of a rejection, a promotion and a
rollback is tested in test_version_service.py.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.assets import pretrained_bundle_path
from tether.fleet.edge import EdgePlan, EdgeServer
from tether.fleet.placement import free_port
from tether.fleet.replay import ReplayService
from tether.fleet.system import NAMESPACE
from tether.fleet.version_service import SERVICE_NAME, VersionService
from tether.fleet.weights import encode_weights
from tether.policy import load_bundle
from tether.policy.manifest import VersionInfo
from tether.policy.tensors import state_sha256
from tether.runtime.config import RunConfig
from tether.serving.client.sync import PolicyClient
from tether.sim import ArmEnv
from tether.versions.records import VersionState

pytestmark = pytest.mark.ray


@pytest.fixture
def gate_edge(ray_session: Any, tmp_path: Path) -> Iterator[tuple[Any, Any, str]]:
    ray = ray_session
    bundle = load_bundle(pretrained_bundle_path())
    spec = bundle.robot_spec
    assert spec is not None
    config = RunConfig.build(
        {
            "backend": "ray",
            "fast": True,
            "versions": {"promotion": {"shadow": {"steps": 60}}},
            "ray": {"sync_interval_s": 0.05},
        }
    )
    service = (
        ray.remote(VersionService)
        .options(name=SERVICE_NAME, namespace=NAMESPACE, num_cpus=0)
        .remote(bundle.version, gate_edge="edge-0")
    )
    replay = (
        ray.remote(ReplayService).options(num_cpus=0).remote(spec.obs_dim, spec.act_dim, 10_000)
    )
    plan = EdgePlan(
        edge_id="edge-0",
        bundle_path=str(pretrained_bundle_path()),
        run_config_json=config.model_dump_json(),
        run_dir=str(tmp_path),
        host="127.0.0.1",
        port=free_port("127.0.0.1"),
        robots=1,
        gate=True,
        service_name=SERVICE_NAME,
        namespace=NAMESPACE,
    )
    edge = ray.remote(EdgeServer).options(num_cpus=0, max_concurrency=4).remote(plan, replay)
    address = ray.get(edge.address.remote(), timeout=120)
    try:
        yield service, edge, address
    finally:
        ray.get(edge.stop.remote(), timeout=60)
        for actor in (edge, service, replay):
            ray.kill(actor)


def test_a_candidate_is_judged_at_the_gate_edge_and_not_served_before_it_passes(
    gate_edge: tuple[Any, Any, str], ray_session: Any
) -> None:
    ray = ray_session
    service, edge, address = gate_edge
    bundle = load_bundle(pretrained_bundle_path())
    harmful = {k: v.clone() for k, v in bundle.actor_state.items()}
    harmful["head.mu.weight"] *= -5.0
    harmful["head.mu.bias"] *= -5.0
    info = VersionInfo(2, "harmful", state_sha256(harmful), bundle.version.id)
    served: set[int] = set()
    stop = threading.Event()

    def robot() -> None:
        env = ArmEnv(seed=0)
        with PolicyClient(address) as client:
            session = client.session(env.robot_spec, robot_id="robot-0", control_deadline_s=1.0)
            try:
                obs, _ = env.reset(seed=0)
                while not stop.is_set():
                    result = session.step(obs, deterministic=True)
                    if result.version is not None:
                        served.add(result.version.id)
                    obs, _, terminated, truncated, _ = env.step(result.action)
                    if terminated or truncated:
                        obs, _ = env.reset()
                        session.start_episode()
            finally:
                session.close()

    thread = threading.Thread(target=robot, daemon=True)
    thread.start()
    try:
        ray.get(service.submit.remote(info, encode_weights(harmful)), timeout=30)

        def judged() -> VersionState | None:
            records = {r.id: r for r in ray.get(edge.versions.remote())}
            state = records[2].state if 2 in records else None
            return state if state in (VersionState.CANARY, VersionState.REJECTED) else None

        deadline = time.monotonic() + 40
        while (state := judged()) is None:
            assert time.monotonic() < deadline, "the gate edge's shadow stage gave no verdict"
            time.sleep(0.1)
        # The shadow stage judged it on the robot's live traffic without it ever acting.
        fleet = ray.get(service.fleet.remote())
        assert fleet.live_version == bundle.version.id
        assert fleet.candidates_passed == 0
        if state is VersionState.REJECTED:  # and a rejection there is the fleet's
            wait = time.monotonic() + 5
            while ray.get(service.fleet.remote()).candidates_rejected == 0:
                assert time.monotonic() < wait
                time.sleep(0.05)
        time.sleep(0.3)  # a few more syncs: nothing is served but live
        assert ray.get(edge.serving_version.remote()) == bundle.version.id
    finally:
        stop.set()
        thread.join(10)
    assert served == {bundle.version.id}
