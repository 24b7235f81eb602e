"""A batch's Control replies written as wire bytes are the bytes protobuf makes of the
reply ``fill_action_response`` fills, row for row, compiled or as plain Python; and the
pipeline hands them out only for a batch of Control steps large enough to pay."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.serving.serving_harness import MakeServer, server_config
from tests.serving.test_inference import queries, step_facts
from tether.data.clock import ingress_ns
from tether.data.step import AnsweredSteps, StepRecord
from tether.policy.engine import PolicyEngine
from tether.policy.manifest import VersionInfo
from tether.safety.levels import DegradationLevel
from tether.safety.verdict import ActionSource, SafetyCheck, SafetyVerdict
from tether.serving import inference, reply_kernel
from tether.serving.batcher import Batched
from tether.serving.client.protocol import RobotIdentity
from tether.serving.convert import encode_control_replies, fill_action_response
from tether.serving.decoding import _control_reply
from tether.serving.inference import ENCODE_ROWS, ActionOutcome, ActionQuery, InferencePipeline
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc
from tether.versions.holder import LiveModel

ACT_DIM = 7
floats32 = st.floats(width=32, allow_nan=False)  # ±0.0, subnormals, ±inf, extremes
rows = st.fixed_dictionaries(
    {
        "safe": st.lists(floats32, min_size=ACT_DIM, max_size=ACT_DIM),
        "proposed": st.lists(floats32, min_size=ACT_DIM, max_size=ACT_DIM),
        "log_prob": st.one_of(st.just(0.0), st.just(-0.0), floats32),
        "verdict": st.builds(
            SafetyVerdict,
            source=st.sampled_from(list(ActionSource)),
            # Bits beyond the named checks too: they travel in ``checks``, without a name.
            checks=st.one_of(st.integers(0, (1 << 13) - 1).map(SafetyCheck), st.integers(0, 2**62)),
            correction_norm=st.one_of(st.just(0.0), st.floats(0.0, 1e30)),
            joints=st.lists(st.integers(0, 2**31), max_size=9).map(tuple),
        ),
        "level": st.sampled_from(list(DegradationLevel)),
        "step": st.one_of(st.just(0), st.integers(0, 2**63 - 1)),
        "episode": st.one_of(st.just(""), st.text(max_size=80)),
        "timings": st.tuples(*(st.integers(0, 2**63 - 1) for _ in range(4))),
    }
)


@pytest.fixture(params=["compiled", "python"])
def kernel_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The compiled kernel, and the same function run as Python (numba's ``py_func``)."""
    if request.param == "python":
        encode: Any = reply_kernel.encode
        monkeypatch.setattr(reply_kernel, "encode", getattr(encode, "py_func", encode))
    elif not reply_kernel.AVAILABLE:
        pytest.skip("numba is not importable here")
    return str(request.param)


def _message(row: dict[str, Any], version: VersionInfo, size: int) -> bytes:
    outcome = ActionOutcome(
        action=np.asarray(row["safe"], np.float32),
        proposed_action=np.asarray(row["proposed"], np.float32),
        log_prob=row["log_prob"],
        version=version,
        verdict=row["verdict"],
        safety_ns=row["timings"][2],
        degradation=row["level"],
    )
    queue_ns, inference_ns, _, total_ns = row["timings"]
    reply = pb.ControlReply(step_index=row["step"], episode_id=row["episode"])
    fill_action_response(reply.action, Batched(outcome, queue_ns, inference_ns, size), total_ns)
    return reply.SerializeToString()


def assert_encoded_as_serialized(
    batch: list[dict[str, Any]], version: VersionInfo, size: int
) -> None:
    """``batch`` (rows as ``rows`` draws them) encoded in one call, as a batch of ``size``:
    row for row the bytes protobuf serializes from the message path's reply."""
    got = encode_control_replies(
        [(row["step"], row["episode"]) for row in batch],
        np.array([row["safe"] for row in batch], np.float32),
        np.array([row["proposed"] for row in batch], np.float32),
        np.array([row["log_prob"] for row in batch], np.float32),
        [row["verdict"] for row in batch],
        [row["level"] for row in batch],
        version,
        np.array([[*row["timings"], size] for row in batch], np.int64),
    )
    assert got == [_message(row, version, size) for row in batch]


# The fixture only picks the kernel, the same one for every generated batch.
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batch=st.lists(rows, min_size=1, max_size=12), version_id=st.integers(0, 2**63 - 1))
def test_encoded_replies_are_the_serialized_messages(
    kernel_mode: str, batch: list[dict[str, Any]], version_id: int
) -> None:
    version = VersionInfo(id=version_id, name="ü-version", weights_sha256="ab" * 32)
    assert_encoded_as_serialized(batch, version, len(batch))


def encode_one(verdict: SafetyVerdict, version: VersionInfo) -> list[bytes]:
    """One row of zeros (step 1 of episode "e") with ``verdict``, named ``version``."""
    return encode_control_replies(
        [(1, "e")],
        np.zeros((1, ACT_DIM), np.float32),
        np.zeros((1, ACT_DIM), np.float32),
        np.zeros(1, np.float32),
        [verdict],
        [DegradationLevel.NORMAL],
        version,
        np.ones((1, 5), np.int64),
    )


def test_the_encoder_follows_a_new_version() -> None:
    """The encoded PolicyVersion is cached per version object: a swap changes it."""
    verdict = SafetyVerdict(ActionSource.POLICY, SafetyCheck.NONE, 0.0, ())
    for version_id in (1, 2, 1):
        version = VersionInfo(id=version_id, name=f"v{version_id}", weights_sha256="cd" * 32)
        (reply,) = encode_one(verdict, version)
        assert pb.ControlReply.FromString(reply).action.version.policy_version == version_id


def _steps(spec: RobotSpec, count: int, *, answering: bool = True) -> list[ActionQuery]:
    """``count`` Control steps of as many robots (GetAction queries: not ``answering``)."""
    return [
        q._replace(step=step_facts(100 + i, f"episode-{i}") if answering else None)
        for i, q in enumerate(queries(spec, [True] * count, seed=count))
    ]


def test_a_batch_of_control_steps_carries_its_encoded_replies(
    engine: PolicyEngine, arm: RobotSpec
) -> None:
    pipeline = InferencePipeline(LiveModel(engine))
    steps = _steps(arm, ENCODE_ROWS + 3)
    results = pipeline.run(steps)
    for i, (step, outcome) in enumerate(zip(steps, results, strict=True)):
        assert isinstance(outcome, ActionOutcome)
        assert outcome.reply is not None
        reply = pb.ControlReply.FromString(outcome.reply)
        assert (reply.step_index, reply.episode_id) == (100 + i, f"episode-{i}")
        action = reply.action
        np.testing.assert_array_equal(np.asarray(action.action, np.float32), outcome.action)
        np.testing.assert_array_equal(
            np.asarray(action.proposed_action, np.float32), outcome.proposed_action
        )
        assert action.version.policy_version == engine.version.id
        assert action.safety.source == pb.ACTION_SOURCE_POLICY + list(ActionSource).index(
            outcome.verdict.source
        )
        assert action.safety.checks == int(outcome.verdict.checks)
        assert action.degradation == pb.DEGRADATION_LEVEL_NORMAL
        timings = action.timings
        assert timings.batch_size == len(steps)
        assert timings.safety_ns == outcome.safety_ns
        # Arrival, then the batch's start, then the replies: each span holds the last.
        assert timings.total_ns >= timings.queue_ns
        assert timings.total_ns >= timings.inference_ns > 0
        assert step.ingress_ns + timings.total_ns <= ingress_ns()
        # The handler's serializer passes the batch's bytes through untouched.
        assert _control_reply(outcome.reply) is outcome.reply


@pytest.mark.parametrize(
    "batch",
    [
        pytest.param(lambda arm: _steps(arm, ENCODE_ROWS - 1), id="a small batch"),
        pytest.param(lambda arm: _steps(arm, ENCODE_ROWS, answering=False), id="GetAction"),
        pytest.param(
            lambda arm: [*_steps(arm, ENCODE_ROWS), *_steps(arm, 1, answering=False)],
            id="mixed",
        ),
    ],
)
def test_other_batches_leave_the_reply_to_the_handler(
    engine: PolicyEngine, arm: RobotSpec, batch: Any
) -> None:
    pipeline = InferencePipeline(LiveModel(engine))
    for outcome in pipeline.run(batch(arm)):
        assert isinstance(outcome, ActionOutcome)
        assert outcome.reply is None


def test_the_largest_row_fits_the_buffer_the_encoder_allots(kernel_mode: str) -> None:
    """Every number at its widest (ten-byte varints), every check named, long ids and
    many joints: still within ``capacity`` (as Python, writing past it raises), and still
    the serialized message."""
    version = VersionInfo(id=2**63 - 1, name="v" * 300, weights_sha256="ab" * 32)
    row = {
        "safe": [-1.0] * ACT_DIM,
        "proposed": [float("inf")] * ACT_DIM,
        "log_prob": -0.0,
        "verdict": SafetyVerdict(
            ActionSource.HUMAN,
            2**63 - 1,
            1e30,
            tuple(range(2**32 - 40, 2**32)),  # type: ignore[arg-type]
        ),
        "level": DegradationLevel.TAKEOVER,
        "step": 2**63 - 1,
        "episode": "é" * 1000,
        "timings": (2**63 - 1,) * 4,
    }
    # Without joints a row's slack in the joints' allowance is gone: the tightest case.
    bare = {**row, "verdict": dataclasses.replace(row["verdict"], joints=())}
    assert_encoded_as_serialized([bare, row, bare], version, 2**31)


def test_a_joint_the_wire_cannot_carry_is_refused_not_encoded() -> None:
    verdict = SafetyVerdict(ActionSource.CLIPPED, SafetyCheck.RATE, 0.1, (2**32,))
    with pytest.raises(ValueError, match="outside the wire's uint32"):
        encode_one(verdict, VersionInfo(id=1, name="v", weights_sha256="cd" * 32))


def test_robots_batched_together_get_their_own_encoded_replies_over_grpc(
    make_server: MakeServer, arm: RobotSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve robots' steps, sent together once every session is open, coalesce into one
    batch (it waits until it is full), so the replies go out as the bytes the batch
    encoded; each robot's client parses its own step's answer, the action the recorder
    logged for it (in the one block of the batch that answered them)."""
    robots = ENCODE_ROWS + 4
    records: dict[str, StepRecord] = {}
    blocks: list[int] = []  # rows per block the recorder hook got

    def record(block: AnsweredSteps) -> None:
        blocks.append(len(block))
        for step in block.records():
            records.setdefault(step.episode_id, step)

    encoded: list[int] = []  # rows per call of the encoder (its bytes equal the messages')

    def counted(steps: Any, *args: Any) -> list[bytes]:
        encoded.append(len(steps))
        return encode_control_replies(steps, *args)

    monkeypatch.setattr(inference, "encode_control_replies", counted)
    running = make_server(
        server_config(batcher={"max_batch_size": robots, "batch_timeout_s": 1.0}),
        record_steps=record,
    )
    rng = np.random.default_rng(7)
    observations = rng.uniform(-0.2, 0.2, (robots, arm.obs_dim)).astype(np.float32)

    async def all_robots() -> list[pb.ControlReply]:
        async with grpc.aio.insecure_channel(running.address) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
            calls = [stub.Control() for _ in range(robots)]
            for i, call in enumerate(calls):
                robot = RobotIdentity(
                    f"arm-{i}", arm.fingerprint(), arm.obs_dim, arm.act_dim, arm.joint_names
                )
                await call.write(robot.open_message())
            for call in calls:
                assert (await call.read()).WhichOneof("kind") == "opened"
            for i, call in enumerate(calls):
                step = pb.StepData(
                    observation=observations[i].tolist(), episode_id=f"ep-{i}", step_index=40 + i
                )
                await call.write(pb.ControlStep(step=step))
            replies = [await call.read() for call in calls]
            for call in calls:
                await call.done_writing()
            return replies

    replies = asyncio.run(all_robots())
    assert encoded == [robots]
    assert blocks == [robots]  # recorded by the batch, before its replies went out
    for i, reply in enumerate(replies):
        assert reply.WhichOneof("kind") == "action", reply
        assert (reply.step_index, reply.episode_id) == (40 + i, f"ep-{i}")
        assert reply.action.timings.batch_size == robots
        assert reply.action.status == "ok"
        np.testing.assert_array_equal(
            np.asarray(reply.action.action, np.float32), records[f"ep-{i}"].safe_action
        )
