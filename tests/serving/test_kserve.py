"""KServe v2 / Triton: the real ``tritonclient.grpc`` against a tether server on port 0.

tritonclient runs in its own venv and process (tests/serving/client_venv.py); the
server runs here, with limits tight enough that the supervisor corrects the policy's
actions, so a ModelInfer that skipped the supervisor would fail the comparison.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import numpy as np
import pytest

from tests.serving.client_venv import clients_python, run_client
from tests.serving.serving_harness import RELAXED, MakeServer
from tether.kserve import grpc_predict_v2_pb2 as kpb, grpc_predict_v2_pb2_grpc as kpb_grpc
from tether.policy.engine import PolicyEngine
from tether.safety.for_spec import supervisor_for
from tether.safety.limits import SafetyLimits
from tether.serving.client import PolicyClient
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec

__all__ = ["clients_python"]

TIGHT = RELAXED.model_copy(update={"torque_fraction": 0.05})


def tight_limits(spec: RobotSpec) -> SafetyLimits:
    return SafetyLimits.from_spec(spec, TIGHT)


def rows(spec: RobotSpec, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-0.3, 0.3, size=(n, spec.obs_dim)).astype(np.float32)


def supervised(engine: PolicyEngine, spec: RobotSpec, obs: np.ndarray) -> tuple[np.ndarray, ...]:
    proposed = engine.act(obs[None, :], True).actions[0]
    supervisor = supervisor_for(spec, tight_limits(spec))
    safe, _ = supervisor.filter(obs, proposed, None, observation_age_s=0.0)
    return proposed, safe


def test_tritonclient_gets_supervised_actions_and_kserve_errors(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec, clients_python: Path
) -> None:
    running = make_server(
        engine=engine, supervisors=SupervisorFactory(arm, limits=tight_limits(arm))
    )
    obs = rows(arm, 4, seed=1)
    report = run_client(
        clients_python, "triton_calls.py", running.address, json.dumps(obs.tolist())
    )

    assert report["live"]
    assert report["ready"]
    assert report["model_ready"]
    assert report["unknown_model_ready"] is False
    meta = report["metadata"]
    assert meta["platform"] == "tether"
    assert meta["inputs"] == [
        {"name": "observation", "datatype": "FP32", "shape": ["-1", str(arm.obs_dim)]}
    ]
    assert [o["name"] for o in meta["outputs"]] == ["action", "proposed_action", "safety_checks"]

    one = report["one"]
    assert one["id"] == "req-7"
    assert one["model_version"] == str(engine.version.id)
    proposed, safe = supervised(engine, arm, obs[0])
    np.testing.assert_allclose(one["proposed"][0], proposed, atol=1e-6)
    np.testing.assert_allclose(one["action"][0], safe, atol=1e-6)
    assert not np.allclose(safe, proposed), "the limits must make the supervisor act"
    assert one["checks"][0] != 0
    # The same observation through tether.v1 gets the same supervised action.
    with PolicyClient(running.address) as client:
        v1 = client.get_action(obs[0], deterministic=True)
    np.testing.assert_allclose(one["action"][0], v1.action, atol=1e-6)

    many = np.asarray(report["many"]["action"])
    assert many.shape == (4, arm.act_dim)
    assert report["many"]["outputs"] == ["action"]
    for i in range(4):
        np.testing.assert_allclose(many[i], supervised(engine, arm, obs[i])[1], atol=1e-6)
    np.testing.assert_allclose(report["pinned"][0], safe, atol=1e-6)

    errors = report["errors"]
    for case in ("name", "dtype", "shape", "nan"):
        assert errors[case]["status"] == "StatusCode.INVALID_ARGUMENT", (case, errors[case])
    assert "'state'" in errors["name"]["message"]
    assert "'UINT8'" in errors["dtype"]["message"]
    assert f"[N, {arm.obs_dim}]" in errors["shape"]["message"]
    assert "finite" in errors["nan"]["message"]
    assert errors["oversized"]["status"] == "StatusCode.RESOURCE_EXHAUSTED"
    assert errors["model"]["status"] == "StatusCode.NOT_FOUND"
    assert errors["version"]["status"] == "StatusCode.FAILED_PRECONDITION"
    assert errors["unimplemented"]["status"] == "StatusCode.UNIMPLEMENTED"
    np.testing.assert_allclose(report["after_errors"][0], safe, atol=1e-6)
    assert (
        running.metric(
            "tether_requests_total",
            method="ModelInfer",
            status="OK",
            version=str(engine.version.id),
        )
        >= 4
    )


def test_a_bad_request_leaves_concurrent_good_ones_alone(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    """Good and bad ModelInfer calls in flight together: each gets its own answer."""
    running = make_server(engine=engine)
    obs = rows(arm, 16, seed=2)
    with grpc.insecure_channel(running.address) as channel:
        stub = kpb_grpc.GRPCInferenceServiceStub(channel)

        def request(i: int) -> kpb.ModelInferRequest:
            values = obs[i : i + 1].copy()
            if i % 4 == 3:
                values[0, 0] = np.inf
            message = kpb.ModelInferRequest(model_name="tether", id=f"r{i}")
            message.inputs.add(name="observation", datatype="FP32", shape=[1, arm.obs_dim])
            message.raw_input_contents.append(values.tobytes())
            return message

        futures = [stub.ModelInfer.future(request(i), timeout=30) for i in range(16)]
        for i, future in enumerate(futures):
            if i % 4 == 3:
                err = future.exception()
                assert err is not None
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "observation'][0, 0] is inf" in err.details()
                continue
            reply = future.result()
            assert reply.id == f"r{i}"
            action = np.frombuffer(reply.raw_output_contents[0], np.float32)
            expected = engine.act(obs[i][None], True).actions[0]
            assert action.shape == (arm.act_dim,)
            assert np.all(np.isfinite(action))
            np.testing.assert_allclose(
                np.frombuffer(reply.raw_output_contents[1], np.float32), expected, atol=1e-6
            )


def test_contents_instead_of_raw_bytes_and_the_model_name_alias(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = make_server(engine=engine)
    obs = rows(arm, 1, seed=3)[0]
    with grpc.insecure_channel(running.address) as channel:
        stub = kpb_grpc.GRPCInferenceServiceStub(channel)
        message = kpb.ModelInferRequest(model_name=engine.version.name)
        tensor = message.inputs.add(name="observation", datatype="FP32", shape=[1, arm.obs_dim])
        tensor.contents.fp32_contents.extend(obs.tolist())
        reply = stub.ModelInfer(message, timeout=30)
        assert reply.model_name == engine.version.name
        assert reply.model_version == str(engine.version.id)
        assert reply.parameters["degradation"].string_param == "NORMAL"
        proposed = np.frombuffer(reply.raw_output_contents[1], np.float32)
        np.testing.assert_allclose(proposed, engine.act(obs[None], True).actions[0], atol=1e-6)

        short = kpb.ModelInferRequest(model_name="tether")
        short.inputs.add(name="observation", datatype="FP32", shape=[1, arm.obs_dim])
        short.raw_input_contents.append(obs[:-1].tobytes())
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(short, timeout=30)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"expected {4 * arm.obs_dim}" in info.value.details()


def test_undecodable_bytes_are_refused_invalid_argument(make_server: MakeServer) -> None:
    running = make_server()
    with grpc.insecure_channel(running.address) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as info:
            call(b"\x0a\xff\xff\xff\xff\x0f", timeout=30)  # a length prefix past the end
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "inference.ModelInferRequest" in info.value.details()
        live = kpb_grpc.GRPCInferenceServiceStub(channel).ServerLive(
            kpb.ServerLiveRequest(), timeout=30
        )
        assert live.live
