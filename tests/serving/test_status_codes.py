"""Every status code the edge promises, reached against a real server on port 0."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest

from tests.serving.serving_harness import MakeServer, server_config
from tether.policy.engine import PolicyEngine
from tether.serving.client import ClientOptions, PolicyClient
from tether.serving.errors import RemoteError
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc


def code_of(call: object) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(RemoteError) as info:
        call()  # type: ignore[operator]
    return info.value.code, info.value.details


def test_invalid_argument_names_field_expected_found(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    running = make_server()
    good = np.zeros(arm.obs_dim, np.float32)
    with PolicyClient(running.address) as client:
        code, msg = code_of(lambda: client.get_action(good[:-2]))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert f"observation has {arm.obs_dim - 2} entries, expected {arm.obs_dim}" in msg
        bad = good.copy()
        bad[3] = np.nan
        code, msg = code_of(lambda: client.get_action(bad))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "observation[3] is nan" in msg
        bad[3] = 3e9
        code, msg = code_of(lambda: client.get_action(bad))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "observation[3]" in msg
        assert "max_abs_observation" in msg
        code, msg = code_of(lambda: client.get_action(good, client_id="x" * 1000))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert "client_id is 1000 characters long" in msg
        assert client.get_action(good).action.shape == (arm.act_dim,)  # still healthy


def test_oversized_message_is_refused_by_the_transport(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    running = make_server(server_config(max_message_bytes=4096))
    with grpc.insecure_channel(running.address) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
        huge = pb.ActionRequest(observation=[0.0] * 5000)  # ~20 kB
        with pytest.raises(grpc.RpcError) as info:
            stub.GetAction(huge, timeout=5)
        assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        small = pb.ActionRequest(observation=[0.0] * arm.obs_dim)
        assert len(stub.GetAction(small, timeout=5).action) == arm.act_dim


def test_rate_limit_is_resource_exhausted_per_client(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    running = make_server(server_config(admission={"rate_limit_hz": 1.0, "burst_s": 1.0}))
    obs = np.zeros(arm.obs_dim, np.float32)
    with PolicyClient(running.address) as client:
        client.get_action(obs, client_id="fast")
        # The bucket is the connection's: a new claimed id does not refill it.
        code, msg = code_of(lambda: client.get_action(obs, client_id="other"))
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "is over its rate limit of 1 requests/s" in msg
        assert "ipv4:127.0.0.1:" in msg
    # Another connection is not starved by the first.
    with grpc.insecure_channel(running.address, [("grpc.use_local_subchannel_pool", 1)]) as ch:
        stub = pb_grpc.PolicyServiceStub(ch)  # type: ignore[no-untyped-call]
        stub.GetAction(pb.ActionRequest(observation=obs.tolist(), client_id="fast"), timeout=10)


def test_memory_guard_is_resource_exhausted(make_server: MakeServer, arm: RobotSpec) -> None:
    running = make_server(server_config(admission={"rate_limit_hz": 0, "max_rss_bytes": 1024}))
    with PolicyClient(running.address) as client:
        code, msg = code_of(lambda: client.get_action(np.zeros(arm.obs_dim)))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "max_rss_bytes" in msg


def test_no_policy_is_unavailable_and_retried(make_server: MakeServer, arm: RobotSpec) -> None:
    running = make_server(engine=None)
    options = ClientOptions(retry_attempts=3, retry_initial_backoff_s=0.01)
    with PolicyClient(running.address, options=options) as client:
        code, msg = code_of(lambda: client.get_action(np.zeros(arm.obs_dim)))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert "no verified policy is loaded" in msg
    # gRPC retried the UNAVAILABLE call: the server saw every attempt.
    seen = running.metric(
        "tether_requests_total", method="GetAction", status="UNAVAILABLE", version="none"
    )
    assert seen == 3


def test_pinned_version_that_is_not_live_is_failed_precondition(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = make_server(engine=engine)
    obs = np.zeros(arm.obs_dim)
    with PolicyClient(running.address) as client:
        assert client.get_action(obs, model_version=engine.version.id).version is not None
        code, msg = code_of(lambda: client.get_action(obs, model_version=999))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert f"pinned to 999, but the live version is {engine.version.id}" in msg


def test_deadline_passed_in_queue_is_deadline_exceeded_and_not_computed(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    # A slow weight swap (before_batch, run in the batch thread) holds the first batch;
    # a request with a short deadline waits in the queue meanwhile and must not be computed.
    release = threading.Event()
    first = threading.Event()

    def slow_swap() -> None:
        if not first.is_set():
            first.set()
            release.wait(5)

    running = make_server(server_config(batcher={"execution": "thread"}), before_batch=slow_swap)
    obs = np.zeros(arm.obs_dim, np.float32)
    with PolicyClient(running.address, options=ClientOptions(timeout_s=10)) as client:
        holder = threading.Thread(target=lambda: client.get_action(obs))
        holder.start()
        assert first.wait(5)
        code, _ = code_of(lambda: client.get_action(obs, timeout_s=0.2))
        time.sleep(0.1)
        release.set()
        holder.join(10)
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED
    # Only the held request was ever computed, and nothing is left in flight.
    assert running.metric("tether_batch_size_sum") == 1
    deadline = time.monotonic() + 5
    while running.metric("tether_requests_in_flight") != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert running.metric("tether_requests_in_flight") == 0


def test_bearer_token_is_required_except_for_health(
    make_server: MakeServer, arm: RobotSpec, tmp_path: object
) -> None:
    from pathlib import Path

    from grpc_health.v1 import health_pb2, health_pb2_grpc

    token_file = Path(str(tmp_path)) / "token"
    token_file.write_text("s3cret\n")
    running = make_server(server_config(security={"bearer_token_file": str(token_file)}))
    obs = np.zeros(arm.obs_dim)
    with PolicyClient(running.address) as anonymous:
        code, msg = code_of(lambda: anonymous.get_action(obs))
        assert code == grpc.StatusCode.UNAUTHENTICATED
        assert "missing 'authorization: Bearer <token>'" in msg
    with PolicyClient(running.address, options=ClientOptions(bearer_token="wrong")) as bad:
        code, _ = code_of(lambda: bad.get_action(obs))
        assert code == grpc.StatusCode.UNAUTHENTICATED
    with PolicyClient(running.address, options=ClientOptions(bearer_token="s3cret")) as good:
        assert good.get_action(obs).action.shape == (arm.act_dim,)
    with grpc.insecure_channel(running.address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
