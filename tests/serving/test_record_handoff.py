"""The recorder hook gets each Control step after its reply was sent, and never loses one.

Handing the step over after the send keeps the recorder's work (and its worker thread's
wake-up) out of the robot's round trip; these tests pin both halves of that contract:
a slow hook does not delay the reply it records, and a step whose reply was sent is
recorded even when the robot vanishes right after it, before the session's end.
"""

from __future__ import annotations

import time

import grpc
import numpy as np

from tests.serving.serving_harness import MakeServer
from tether.data.step import StepRecord
from tether.safety.degradation_config import DegradationConfig
from tether.serving.client import PolicyClient
from tether.serving.client.protocol import RobotIdentity
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc

HOOK_S = 0.5  # how long the slow hook holds the server's event loop


def test_a_slow_recorder_hook_does_not_delay_the_reply_it_records(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    records: list[StepRecord] = []

    def slow_record(step: StepRecord) -> None:
        time.sleep(HOOK_S)  # a recorder that blocks the loop (it must only enqueue)
        records.append(step)

    running = make_server(record_step=slow_record)
    with PolicyClient(running.address) as client:
        session = client.session(arm, robot_id="arm-1", control_deadline_s=10.0)
        start = time.monotonic()
        first = session.step(np.zeros(arm.obs_dim, np.float32), deterministic=True)
        first_s = time.monotonic() - start
        # The next step waits behind the hook (one event loop), so it sees both records.
        second = session.step(np.zeros(arm.obs_dim, np.float32), deterministic=True)
        session.close()
    assert not first.from_watchdog
    assert not second.from_watchdog
    # Before the hand-off moved after the send, the reply waited for the hook: ≥ HOOK_S.
    assert first_s < HOOK_S
    assert [r.step_index for r in records[:1]] == [0]
    np.testing.assert_array_equal(records[0].safe_action, first.action)


def test_a_step_answered_before_the_robot_vanished_is_recorded_before_its_session_ends(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    events: list[str] = []
    running = make_server(
        record_step=lambda step: events.append(f"step {step.step_index}"),
        end_session=lambda session_id: events.append("end"),
    )
    identity = RobotIdentity("gone", arm.fingerprint(), arm.obs_dim, arm.act_dim, arm.joint_names)

    def requests():  # type: ignore[no-untyped-def]
        yield identity.open_message()
        for index in range(2):
            yield pb.ControlStep(
                step=pb.StepData(observation=[0.0] * arm.obs_dim, episode_id="e", step_index=index)
            )
        time.sleep(0.5)  # the robot vanishes after its second reply, stream still open

    with grpc.insecure_channel(running.address) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
        call = stub.Control(requests())
        assert next(call).WhichOneof("kind") == "opened"
        assert next(call).WhichOneof("kind") == "action"
        assert next(call).WhichOneof("kind") == "action"
        call.cancel()
    deadline = time.monotonic() + 5
    while "end" not in events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert events == ["step 0", "step 1", "end"]


def test_a_huge_watchdog_total_is_bounded_by_the_steps_received(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    """One step claiming 2**63 - 1 misses froze the server (counted one by one on its loop)."""
    running = make_server()
    warmup = DegradationConfig().session_warmup_steps + 1
    identity = RobotIdentity("liar", arm.fingerprint(), arm.obs_dim, arm.act_dim, arm.joint_names)

    def requests():  # type: ignore[no-untyped-def]
        yield identity.open_message()
        # Past the session's warm-up, whose misses do not count at all.
        for index in range(warmup + 3):
            yield pb.ControlStep(
                step=pb.StepData(
                    observation=[0.0] * arm.obs_dim,
                    episode_id="e",
                    step_index=index,
                    watchdog_misses=0 if index < warmup else 2**64 - 1,
                )
            )

    start = time.monotonic()
    with grpc.insecure_channel(running.address) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
        replies = list(stub.Control(requests(), timeout=10))
    assert time.monotonic() - start < 5.0
    assert [r.WhichOneof("kind") for r in replies] == ["opened"] + ["action"] * (warmup + 3)
    assert running.metric("tether_client_watchdog_misses_total") <= warmup + 3


def test_a_stamp_beyond_int64_is_refused_naming_the_field_and_the_session_goes_on(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    records: list[StepRecord] = []
    running = make_server(record_step=records.append)
    identity = RobotIdentity("odd", arm.fingerprint(), arm.obs_dim, arm.act_dim, arm.joint_names)

    def requests():  # type: ignore[no-untyped-def]
        yield identity.open_message()
        for index, stamp in enumerate((5, 2**63, 7)):
            yield pb.ControlStep(
                step=pb.StepData(
                    observation=[0.0] * arm.obs_dim,
                    episode_id="e",
                    step_index=index,
                    client_timestamp_ns=stamp,
                )
            )

    with grpc.insecure_channel(running.address) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
        replies = list(stub.Control(requests(), timeout=10))
    kinds = [r.WhichOneof("kind") for r in replies]
    assert kinds == ["opened", "action", "error", "action"]
    assert "step.client_timestamp_ns" in replies[2].error.message
    assert replies[2].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    deadline = time.monotonic() + 5
    while len(records) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r.client_timestamp_ns for r in records] == [5, 7]
