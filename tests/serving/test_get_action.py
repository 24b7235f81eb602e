"""GetAction and Describe against a real server: correctness, concurrency, health."""

from __future__ import annotations

import threading
import urllib.request

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.serving.serving_harness import MakeServer, make_engine, relaxed_limits, server_config
from tether.policy.engine import PolicyEngine
from tether.safety.for_spec import supervisor_for
from tether.serving.client import ClientOptions, PolicyClient
from tether.serving.errors import RemoteError
from tether.spec import RobotSpec


def observations(spec: RobotSpec, n: int, seed: int) -> np.ndarray:
    """Plausible arm observations: joints inside their limits, small velocities."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-0.3, 0.3, size=(n, spec.obs_dim)).astype(np.float32)
    return obs


def expected(engine: PolicyEngine, spec: RobotSpec, obs: np.ndarray) -> tuple[np.ndarray, ...]:
    """What the engine proposes for ``obs`` alone, and what a fresh supervisor makes of it."""
    proposed = engine.act(obs[None, :], True).actions[0]
    supervisor = supervisor_for(spec, relaxed_limits(spec))
    safe, _ = supervisor.filter(obs, proposed, None, observation_age_s=0.0)
    return proposed, safe


def test_reply_is_the_supervised_engine_output(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = make_server(engine=engine)
    obs = observations(arm, 1, seed=0)[0]
    with PolicyClient(running.address) as client:
        result = client.get_action(obs, deterministic=True, client_id="t")
    proposed, safe = expected(engine, arm, obs)
    np.testing.assert_allclose(result.proposed_action, proposed, atol=1e-6)

    np.testing.assert_allclose(result.action, safe, atol=1e-6)
    assert result.version is not None
    assert result.version.id == engine.version.id
    assert result.version.weights_sha256 == engine.version.weights_sha256
    assert result.verdict is not None
    assert result.verdict.source in ("policy", "clipped", "backup")
    assert result.timings is not None
    assert result.timings.total_ns >= result.timings.inference_ns > 0
    assert result.degradation == 0


@pytest.mark.parametrize("execution", ["inline", "thread"])
def test_many_concurrent_clients_each_get_their_own_action(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec, execution: str
) -> None:
    running = make_server(server_config(batcher={"execution": execution}), engine=engine)
    n_clients, per_client = 36, 3
    obs = observations(arm, n_clients * per_client, seed=1)
    want = [expected(engine, arm, o) for o in obs]
    errors: list[str] = []
    start = threading.Barrier(n_clients)

    def robot(k: int) -> None:
        # The clients share the server's process and its two cores: generous deadlines.
        with PolicyClient(running.address, options=ClientOptions(timeout_s=30.0)) as client:
            start.wait()
            for j in range(per_client):
                i = k * per_client + j
                try:
                    got = client.get_action(obs[i], deterministic=True, client_id=f"robot-{k}")
                except RemoteError as exc:
                    errors.append(f"client {k} request {j}: {exc}")
                    continue
                if not np.allclose(got.proposed_action, want[i][0], atol=1e-6):
                    errors.append(f"client {k} request {j}: proposed {got.proposed_action}")
                if not np.allclose(got.action, want[i][1], atol=1e-6):
                    errors.append(f"client {k} request {j}: action {got.action}")

    threads = [threading.Thread(target=robot, args=(k,)) for k in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:5]
    assert (
        running.metric(
            "tether_requests_total", method="GetAction", status="OK", version=str(engine.version.id)
        )
        == n_clients * per_client
    )


def test_health_is_not_serving_without_a_policy(
    make_server: MakeServer, bundle_path: object
) -> None:
    running = make_server(engine=None)
    with grpc.insecure_channel(running.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.NOT_SERVING
        with PolicyClient(running.address) as client:
            assert client.describe().status == "no_policy"
        running.call(running.server.set_engine(make_engine(bundle_path)))  # type: ignore[arg-type]
        for service in ("", "tether.v1.PolicyService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_describe_reports_spec_version_limits(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = make_server(engine=engine)
    with PolicyClient(running.address) as client:
        d = client.describe()
    assert d.status == "serving"
    assert d.spec.fingerprint == arm.fingerprint()
    assert tuple(d.spec.joint_names) == arm.joint_names
    assert d.version.policy_version == engine.version.id
    assert list(d.action_low) == pytest.approx(list(engine.action_low))
    assert d.limits.max_batch_size == 64
    assert d.degradation == 1  # DEGRADATION_LEVEL_NORMAL
    assert '"joint_names"' in d.safety_limits_json


def test_metrics_endpoint_exports_the_named_series(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = make_server(engine=engine)
    with PolicyClient(running.address) as client:
        client.get_action(observations(arm, 1, 2)[0])
    url = f"http://127.0.0.1:{running.server.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    for name in (
        "tether_requests_total",
        "tether_queue_seconds_bucket",
        "tether_inference_seconds_bucket",
        "tether_request_seconds_bucket",
        "tether_batch_size_bucket",
        "tether_requests_in_flight",
        "tether_live_policy_version",
        "tether_action_mean",
        "tether_action_at_bound_ratio",
        "tether_process_resident_memory_bytes",
    ):
        assert name in text, name
    assert f'tether_action_mean{{dimension="{arm.action_names[0]}"}}' in text


def test_reflection_lists_the_services(make_server: MakeServer) -> None:
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
        ProtoReflectionDescriptorDatabase,
    )

    running = make_server()
    with grpc.insecure_channel(running.address) as channel:
        services = set(ProtoReflectionDescriptorDatabase(channel).get_services())
    assert {"tether.v1.PolicyService", "grpc.health.v1.Health"} <= services
