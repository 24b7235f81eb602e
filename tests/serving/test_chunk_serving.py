"""A policy with named inputs (state + image) and an action horizon H > 1, on every protocol.

The chunk bundle (tests/serving/conftest.py) is made by init_bundle with a small CNN. The
server supervises with limits tight enough that the supervisor corrects the policy, and
each reply's chunk is compared with ``supervise_chunk`` over the engine's own chunk: a
protocol that skipped a step's supervision, or supervised the steps out of order, fails.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError

from tests.serving.client_venv import clients_python, run_client
from tests.serving.conftest import HORIZON, IMAGE_SHAPE
from tests.serving.serving_harness import MakeServer, server_config
from tests.serving.test_kserve import tight_limits
from tether.kserve import grpc_predict_v2_pb2 as kpb, grpc_predict_v2_pb2_grpc as kpb_grpc
from tether.policy.engine import PolicyEngine
from tether.safety.chunk import supervise_chunk
from tether.safety.for_spec import supervisor_for
from tether.serving.client import ActionChunkBroker, PolicyClient
from tether.serving.openpi import pack, unpack_observation
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc

__all__ = ["clients_python"]

OPENPI_KEYS = {"observation/state": "state", "observation/image": "image"}


def sample(spec: RobotSpec, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    state = rng.uniform(-0.3, 0.3, spec.obs_dim).astype(np.float32)
    image = rng.integers(0, 256, size=IMAGE_SHAPE, dtype=np.uint8)
    return state, image


def expected_chunk(
    engine: PolicyEngine, spec: RobotSpec, state: np.ndarray, image: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(proposed (H, D), supervised (H, D)) as a fresh supervisor judges the chunk."""
    proposed = engine.act({"state": state[None], "image": image[None]}, True).actions[0]
    supervisor = supervisor_for(spec, tight_limits(spec))
    chunk = supervise_chunk(supervisor, state, proposed, None, step_period_s=spec.control_period_s)
    return proposed, chunk.actions


def chunk_server(make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec, **cfg: Any) -> Any:
    return make_server(
        server_config(**cfg),
        engine=engine,
        supervisors=SupervisorFactory(arm, limits=tight_limits(arm)),
    )


def image_tensor(image: np.ndarray) -> pb.InputTensor:
    return pb.InputTensor(name="image", shape=list(image.shape), uint8_values=image.tobytes())


def test_get_action_and_describe_carry_named_inputs_and_the_chunk(
    make_server: MakeServer, chunk_engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = chunk_server(make_server, chunk_engine, arm)
    state, image = sample(arm, 1)
    proposed, safe = expected_chunk(chunk_engine, arm, state, image)
    assert proposed.shape == (HORIZON, arm.act_dim)
    assert not np.allclose(safe, proposed), "the limits must make the supervisor act"
    with grpc.insecure_channel(running.address) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)
        described = stub.Describe(pb.DescribeRequest(), timeout=30)
        assert described.action_horizon == HORIZON
        assert [(t.name, t.dtype, list(t.shape)) for t in described.inputs] == [
            ("state", "float32", [arm.obs_dim]),
            ("image", "uint8", list(IMAGE_SHAPE)),
        ]
        request = pb.ActionRequest(
            observation=state.tolist(), deterministic=True, inputs=[image_tensor(image)]
        )
        reply = stub.GetAction(request, timeout=30)
        assert reply.horizon == HORIZON
        chunk = np.asarray(reply.chunk, np.float32).reshape(HORIZON, arm.act_dim)
        np.testing.assert_allclose(chunk, safe, atol=1e-6)
        np.testing.assert_allclose(
            np.asarray(reply.proposed_chunk).reshape(HORIZON, -1), proposed, atol=1e-6
        )
        np.testing.assert_allclose(reply.action, safe[0], atol=1e-6)
        assert len(reply.chunk_safety) == HORIZON
        assert any(v.checks for v in reply.chunk_safety)

        def refused(message: pb.ActionRequest) -> str:
            with pytest.raises(grpc.RpcError) as info:
                stub.GetAction(message, timeout=30)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            return str(info.value.details())

        obs = state.tolist()
        assert "lacks the input(s) ['image']" in refused(pb.ActionRequest(observation=obs))
        wrong_dtype = pb.InputTensor(
            name="image", shape=list(IMAGE_SHAPE), float32_values=[0.0] * image.size
        )
        assert "expected uint8_values" in refused(
            pb.ActionRequest(observation=obs, inputs=[wrong_dtype])
        )
        wrong_shape = pb.InputTensor(name="image", shape=[8, 8, 3], uint8_values=bytes(192))
        assert "expected [16, 16, 3]" in refused(
            pb.ActionRequest(observation=obs, inputs=[wrong_shape])
        )
        unknown = pb.InputTensor(name="depth", shape=[1], float32_values=[0.0])
        assert "'depth'" in refused(
            pb.ActionRequest(observation=obs, inputs=[image_tensor(image), unknown])
        )
        nan = list(obs)
        nan[2] = float("nan")
        assert "observation[2] is nan" in refused(
            pb.ActionRequest(observation=nan, inputs=[image_tensor(image)])
        )
        # Each refusal touched nothing: the next good request is served as before.
        again = stub.GetAction(request, timeout=30)
        assert len(again.chunk) == HORIZON * arm.act_dim


def test_control_steps_carry_images_and_answer_supervised_chunks(
    make_server: MakeServer, chunk_engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = chunk_server(make_server, chunk_engine, arm)
    state, image = sample(arm, 2)
    _proposed, safe = expected_chunk(chunk_engine, arm, state, image)

    def steps() -> Any:
        yield pb.ControlStep(
            open=pb.SessionOpen(
                robot_id="cam-arm",
                spec_fingerprint=arm.fingerprint(),
                obs_dim=arm.obs_dim,
                act_dim=arm.act_dim,
                joint_names=list(arm.joint_names),
            )
        )
        yield pb.ControlStep(
            step=pb.StepData(
                observation=state.tolist(),
                episode_id="e",
                deterministic=True,
                inputs=[image_tensor(image)],
            )
        )
        yield pb.ControlStep(step=pb.StepData(observation=state.tolist(), episode_id="e"))

    with grpc.insecure_channel(running.address) as channel:
        replies = list(pb_grpc.PolicyServiceStub(channel).Control(steps(), timeout=30))
    assert replies[0].WhichOneof("kind") == "opened"
    action = replies[1].action
    assert action.horizon == HORIZON
    np.testing.assert_allclose(np.reshape(action.chunk, (HORIZON, -1)), safe, atol=1e-6)
    assert len(action.chunk_safety) == HORIZON
    # A step without its image is refused, and the session stays open.
    assert replies[2].WhichOneof("kind") == "error"
    assert replies[2].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "['image']" in replies[2].error.message


def test_model_infer_takes_one_tensor_per_input_and_answers_h_by_d(
    make_server: MakeServer, chunk_engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = chunk_server(make_server, chunk_engine, arm)
    state, image = sample(arm, 3)
    proposed, safe = expected_chunk(chunk_engine, arm, state, image)
    with grpc.insecure_channel(running.address) as channel:
        stub = kpb_grpc.GRPCInferenceServiceStub(channel)
        meta = stub.ModelMetadata(kpb.ModelMetadataRequest(name="tether"), timeout=30)
        assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
            ("state", "FP32", [-1, arm.obs_dim]),
            ("image", "UINT8", [-1, *IMAGE_SHAPE]),
        ]
        assert [(t.name, list(t.shape)) for t in meta.outputs] == [
            ("action", [-1, HORIZON, arm.act_dim]),
            ("proposed_action", [-1, HORIZON, arm.act_dim]),
            ("safety_checks", [-1, HORIZON]),
        ]

        def request(state_dtype: str = "FP32", image_shape: Any = None) -> kpb.ModelInferRequest:
            message = kpb.ModelInferRequest(model_name="tether", id="chunk-1")
            # The image first: inputs are matched by name, not position.
            message.inputs.add(
                name="image", datatype="UINT8", shape=image_shape or [1, *IMAGE_SHAPE]
            )
            message.raw_input_contents.append(image.tobytes())
            message.inputs.add(name="state", datatype=state_dtype, shape=[1, arm.obs_dim])
            message.raw_input_contents.append(state.tobytes())
            return message

        reply = stub.ModelInfer(request(), timeout=30)
        assert reply.id == "chunk-1"
        outputs = {t.name: list(t.shape) for t in reply.outputs}
        assert outputs["action"] == [1, HORIZON, arm.act_dim]
        assert outputs["safety_checks"] == [1, HORIZON]
        action = np.frombuffer(reply.raw_output_contents[0], np.float32).reshape(HORIZON, -1)
        np.testing.assert_allclose(action, safe, atol=1e-6)
        np.testing.assert_allclose(
            np.frombuffer(reply.raw_output_contents[1], np.float32).reshape(HORIZON, -1),
            proposed,
            atol=1e-6,
        )
        assert np.frombuffer(reply.raw_output_contents[2], np.uint32).shape == (HORIZON,)

        def refused(message: kpb.ModelInferRequest) -> str:
            with pytest.raises(grpc.RpcError) as info:
                stub.ModelInfer(message, timeout=30)
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            return str(info.value.details())

        only_state = kpb.ModelInferRequest(model_name="tether")
        only_state.inputs.add(name="state", datatype="FP32", shape=[1, arm.obs_dim])
        only_state.raw_input_contents.append(state.tobytes())
        assert "expected 2 ('state', 'image')" in refused(only_state)
        assert "inputs['state'] has datatype 'UINT8', expected 'FP32'" in refused(
            request(state_dtype="UINT8")
        )
        assert "expected [N, 16, 16, 3]" in refused(request(image_shape=[1, 16, 48]))


async def _openpi_session(port: int, messages: list[dict[str, Any]]) -> list[Any]:
    """Metadata, then each message's reply (a dict) or refusal (text, close code)."""
    out: list[Any] = []
    async with connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None) as ws:
        out.append(unpack_observation(await ws.recv()))
        for message in messages:
            await ws.send(pack(message))
            reply = await ws.recv()
            if isinstance(reply, str):
                with pytest.raises(ConnectionClosedError) as info:
                    await ws.recv()
                out.append((reply, info.value.rcvd.code if info.value.rcvd else None))
                break
            out.append(unpack_observation(reply))
    return out


def test_openpi_maps_observation_keys_to_inputs_and_answers_h_by_d(
    make_server: MakeServer, chunk_engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = chunk_server(
        make_server, chunk_engine, arm, openpi={"port": 0, "observation_keys": OPENPI_KEYS}
    )
    port = running.server.openpi_port
    assert port
    state, image = sample(arm, 4)
    proposed, safe = expected_chunk(chunk_engine, arm, state, image)
    good = {"observation/state": state, "observation/image": image, "prompt": "pick"}
    meta, reply = asyncio.run(_openpi_session(port, [good]))
    assert meta["action_horizon"] == HORIZON
    # (unpack_observation flattens nested maps into "a/b" keys)
    assert meta["inputs/image/dtype"] == "uint8"
    assert meta["inputs/image/shape"] == list(IMAGE_SHAPE)
    assert reply["actions"].shape == (HORIZON, arm.act_dim)
    assert reply["actions"].dtype == np.float32
    np.testing.assert_allclose(reply["actions"], safe, atol=1e-6)
    np.testing.assert_allclose(reply["tether/proposed_actions"], proposed, atol=1e-6)
    assert len(reply["tether/safety"]) == HORIZON

    float_image = {**good, "observation/image": image.astype(np.float32)}
    nan_state = {**good, "observation/state": np.full(arm.obs_dim, np.nan, np.float32)}
    no_image = {"observation/state": state}
    for bad, words in (
        (no_image, "no key 'observation/image'"),
        (float_image, "dtype float32, expected uint8"),
        (nan_state, "expected a finite number"),
    ):
        _, (text, code) = asyncio.run(_openpi_session(port, [bad]))
        assert words in text, text
        assert code == 1011


def test_the_real_clients_get_supervised_chunks(
    make_server: MakeServer, chunk_engine: PolicyEngine, arm: RobotSpec, clients_python: Path
) -> None:
    """openpi_client and tritonclient, unchanged, against the chunk policy."""
    running = chunk_server(
        make_server, chunk_engine, arm, openpi={"port": 0, "observation_keys": OPENPI_KEYS}
    )
    state, image = sample(arm, 6)
    _, safe = expected_chunk(chunk_engine, arm, state, image)
    state_json, image_json = json.dumps([state.tolist()]), json.dumps(image.tolist())

    openpi = run_client(
        clients_python,
        "openpi_calls.py",
        str(running.server.openpi_port),
        state_json,
        "chunk",
        image_json,
    )
    assert openpi["metadata"]["action_horizon"] == HORIZON
    np.testing.assert_allclose(openpi["reply"]["actions"], safe, atol=1e-6)
    assert len(openpi["reply"]["safety"]) == HORIZON

    triton = run_client(
        clients_python, "triton_calls.py", running.address, state_json, "chunk", image_json
    )
    assert triton["id"] == "chunk-1"
    assert [t["name"] for t in triton["metadata"]["inputs"]] == ["state", "image"]
    action = np.asarray(triton["action"])
    assert action.shape == (1, HORIZON, arm.act_dim)
    np.testing.assert_allclose(action[0], safe, atol=1e-6)
    assert np.asarray(triton["checks"]).shape == (1, HORIZON)


def test_policy_client_fetches_chunks_for_the_broker(
    make_server: MakeServer, chunk_engine: PolicyEngine, arm: RobotSpec
) -> None:
    """PolicyClient.get_chunk sends the image and returns the whole supervised chunk,
    which ActionChunkBroker executes step by step."""
    running = chunk_server(make_server, chunk_engine, arm)
    state, image = sample(arm, 7)
    _, safe = expected_chunk(chunk_engine, arm, state, image)
    with PolicyClient(running.address) as client:
        chunk = client.get_chunk(state, inputs={"image": image})
        assert chunk.horizon == HORIZON
        np.testing.assert_allclose(chunk.actions, safe, atol=1e-6)
        assert len(chunk.verdicts) == HORIZON

        def fetch(observation: np.ndarray) -> Any:
            return client.get_chunk(observation, inputs={"image": image})

        with ActionChunkBroker(fetch, step_period_s=10.0, staleness_s=60.0) as broker:
            step = broker.act(state)
    assert step.action is not None
    assert step.chunk is not None
    assert step.chunk.horizon == HORIZON
    np.testing.assert_allclose(step.action, safe[step.step_index], atol=1e-6)
