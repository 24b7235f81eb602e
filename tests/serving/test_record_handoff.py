"""The batch that answers a Control step hands it to the recorder hook, once, before the
reply goes out; a hook that fails never fails the batch.

The hook (the recorder's ``record_steps``) gets one ``AnsweredSteps`` per batch: every
Control step the batch answered, with what the robot reported beside what it was sent.
These tests pin that contract over gRPC: each answered step is recorded exactly once, by
the batch that answered it (its block is as large as the batch its reply names, and it is
recorded by the time the robot reads that reply), with the safe action the robot got,
the observation it sent, its reward, flags, client stamp and executed action; robots
stepping together share blocks, each robot's steps recorded once each, in its order; a
hook that raises leaves every robot its action; a step answered right before its robot
vanished is recorded before its session ends; a step refused at the edge is never
recorded.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import time
from typing import Any

import grpc
import numpy as np
import pytest

from tests.serving.serving_harness import MakeServer, server_config
from tether.data.step import ACTION_SOURCES, AnsweredSteps, StepRecord
from tether.safety.degradation_config import DegradationConfig
from tether.serving.client.protocol import RobotIdentity
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc


class LockStep:
    """A raw Control stream driven like a robot's loop: one message out, then its reply."""

    def __init__(self, address: str, identity: RobotIdentity) -> None:
        self._channel = grpc.insecure_channel(address)
        self._outbox: queue.Queue[pb.ControlStep | None] = queue.Queue()
        stub = pb_grpc.PolicyServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._call = stub.Control(iter(self._outbox.get, None), timeout=30)
        opened = self.send(identity.open_message())
        assert opened.WhichOneof("kind") == "opened", opened
        self.session_id = opened.opened.session_id

    def send(self, message: pb.ControlStep) -> pb.ControlReply:
        self._outbox.put(message)
        return next(self._call)

    def close(self) -> None:
        self._outbox.put(None)  # done writing: the server ends the stream
        assert list(self._call) == []
        self._channel.close()


def _identity(arm: RobotSpec, robot_id: str) -> RobotIdentity:
    return RobotIdentity(robot_id, arm.fingerprint(), arm.obs_dim, arm.act_dim, arm.joint_names)


def _assert_recorded_as_answered(
    record: StepRecord, sent: pb.StepData, reply: pb.ControlReply
) -> None:
    """``record`` holds what the robot sent with ``sent`` and what ``reply`` gave it."""
    assert (record.episode_id, record.step_index) == (sent.episode_id, sent.step_index)
    assert (reply.episode_id, reply.step_index) == (sent.episode_id, sent.step_index)
    np.testing.assert_array_equal(record.observation, np.asarray(sent.observation, np.float32))
    assert record.reward == sent.reward
    assert (record.terminated, record.truncated) == (sent.terminated, sent.truncated)
    assert record.client_timestamp_ns == sent.client_timestamp_ns
    if len(sent.executed_action):
        assert record.executed_previous_action is not None
        np.testing.assert_array_equal(
            record.executed_previous_action, np.asarray(sent.executed_action, np.float32)
        )
    else:
        assert record.executed_previous_action is None
    action = reply.action
    np.testing.assert_array_equal(record.safe_action, np.asarray(action.action, np.float32))
    np.testing.assert_array_equal(
        record.proposed_action, np.asarray(action.proposed_action, np.float32)
    )
    assert record.policy_version == action.version.policy_version
    assert record.weights_sha256 == action.version.weights_sha256
    assert action.safety.source == pb.ACTION_SOURCE_POLICY + ACTION_SOURCES.index(
        record.action_source
    )
    assert record.safety_checks == action.safety.checks


def test_every_answered_step_is_recorded_once_by_the_batch_that_answered_it(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    blocks: list[AnsweredSteps] = []
    running = make_server(record_steps=blocks.append)
    rng = np.random.default_rng(4)
    executed = [0.25] * arm.act_dim  # a person's action, within the action bounds
    # (episode, index, reward, terminated, truncated, executed action, client stamp)
    plan: list[tuple[str, int, float, bool, bool, list[float], int]] = [
        ("e", 0, 0.0, False, False, [], 1_000),
        ("e", 1, 0.5, False, False, executed, 2_000),
        ("e", 2, 1.5, False, True, [], 3_000),
        ("f", 0, 0.0, False, False, [], 4_000),
        ("f", 1, -2.0, True, False, [], 2**63 - 1),  # the largest stamp that fits
    ]
    robot = LockStep(running.address, _identity(arm, "arm-1"))
    sent: list[pb.StepData] = []
    replies: list[pb.ControlReply] = []
    for episode, index, reward, terminated, truncated, override, stamp in plan:
        step = pb.StepData(
            observation=rng.uniform(-0.2, 0.2, arm.obs_dim).astype(np.float32).tolist(),
            episode_id=episode,
            step_index=index,
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            executed_action=override,
            client_timestamp_ns=stamp,
            deterministic=True,
        )
        reply = robot.send(pb.ControlStep(step=step))
        assert reply.WhichOneof("kind") == "action", reply
        # Recorded by the batch that answered it, before the reply left: already here.
        assert len(blocks) == len(replies) + 1
        assert len(blocks[-1]) == reply.action.timings.batch_size == 1
        sent.append(step)
        replies.append(reply)
    robot.close()
    records = [record for block in blocks for record in block.records()]
    assert len(records) == len(plan)  # once each: the session's end added nothing
    for record, step, reply in zip(records, sent, replies, strict=True):
        _assert_recorded_as_answered(record, step, reply)
        assert record.session_id == robot.session_id
        assert record.robot_id == "arm-1"
    assert records[1].executed_previous_action is not None  # the override was recorded
    assert all(a.ingress_ns < b.ingress_ns for a, b in itertools.pairwise(records))


ROBOTS = 6
STEPS = 5


def test_robots_stepping_together_are_recorded_once_each_in_their_own_order(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    """Each robot runs its own loop; a batch flushes only when it holds a step of every
    robot, so every batch, and the block it records, has a row per robot."""
    blocks: list[AnsweredSteps] = []
    running = make_server(
        server_config(batcher={"max_batch_size": ROBOTS, "batch_timeout_s": 1.0}),
        record_steps=blocks.append,
    )
    rng = np.random.default_rng(9)
    observations = rng.uniform(-0.2, 0.2, (ROBOTS, STEPS, arm.obs_dim)).astype(np.float32)

    async def robot(
        stub: Any, i: int
    ) -> tuple[str, list[tuple[pb.StepData, pb.ControlReply, int]]]:
        call = stub.Control()
        await call.write(_identity(arm, f"arm-{i}").open_message())
        opened = await call.read()
        assert opened.WhichOneof("kind") == "opened"
        answered = []
        for t in range(STEPS):
            step = pb.StepData(
                observation=observations[i, t].tolist(),
                episode_id=f"ep-{i}",
                step_index=t,
                reward=t / 2,
                client_timestamp_ns=1000 * i + t,
                deterministic=True,
            )
            await call.write(pb.ControlStep(step=step))
            reply = await call.read()
            answered.append((step, reply, len(blocks)))
        await call.done_writing()
        return opened.opened.session_id, answered

    async def all_robots() -> list[tuple[str, list[tuple[pb.StepData, pb.ControlReply, int]]]]:
        async with grpc.aio.insecure_channel(running.address) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
            return await asyncio.gather(*(robot(stub, i) for i in range(ROBOTS)))

    robots = asyncio.run(all_robots())
    assert [len(block) for block in blocks] == [ROBOTS] * STEPS
    for block in blocks:
        assert sorted(f.robot_id for f in block.facts) == sorted(f"arm-{i}" for i in range(ROBOTS))
    records = [record for block in blocks for record in block.records()]
    for i, (session_id, answered) in enumerate(robots):
        mine = [r for r in records if r.robot_id == f"arm-{i}"]
        assert [r.step_index for r in mine] == list(range(STEPS))  # once each, in order
        for t, (record, (step, reply, seen)) in enumerate(zip(mine, answered, strict=True)):
            assert reply.WhichOneof("kind") == "action", reply
            assert reply.action.timings.batch_size == ROBOTS
            assert seen >= t + 1  # its block was recorded before the robot read the reply
            _assert_recorded_as_answered(record, step, reply)
            assert record.session_id == session_id


def test_a_hook_that_raises_does_not_fail_the_batch(
    make_server: MakeServer, arm: RobotSpec, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    def broken(block: AnsweredSteps) -> None:
        calls.append(len(block))
        raise RuntimeError("the recorder is broken")

    caplog.set_level(logging.ERROR, logger="tether.serving.inference")
    # A lone robot (its reply built as a message) and a batch of robots (replies encoded
    # in the batch): every step is answered with an action.
    lone = make_server(record_steps=broken)
    running = make_server(
        server_config(batcher={"max_batch_size": ROBOTS, "batch_timeout_s": 1.0}),
        record_steps=broken,
    )
    robot = LockStep(lone.address, _identity(arm, "lone"))
    for t in range(3):
        step = pb.StepData(observation=[0.0] * arm.obs_dim, episode_id="e", step_index=t)
        reply = robot.send(pb.ControlStep(step=step))
        assert reply.WhichOneof("kind") == "action", reply
        assert np.isfinite(np.asarray(reply.action.action)).all()
    robot.close()

    async def together() -> list[pb.ControlReply]:
        async with grpc.aio.insecure_channel(running.address) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
            streams = [stub.Control() for _ in range(ROBOTS)]
            for i, call in enumerate(streams):
                await call.write(_identity(arm, f"arm-{i}").open_message())
                assert (await call.read()).WhichOneof("kind") == "opened"
            for call in streams:
                step = pb.StepData(observation=[0.0] * arm.obs_dim, episode_id="e", step_index=0)
                await call.write(pb.ControlStep(step=step))
            replies = [await call.read() for call in streams]
            for call in streams:
                await call.done_writing()
            return replies

    replies = asyncio.run(together())
    assert [r.WhichOneof("kind") for r in replies] == ["action"] * ROBOTS, replies
    assert all(r.action.timings.batch_size == ROBOTS for r in replies)
    assert calls == [1, 1, 1, ROBOTS]  # the hook ran, and raised, for every batch
    failures = [r for r in caplog.records if "answered steps failed" in r.getMessage()]
    assert len(failures) == 4
    assert all(r.exc_info and "the recorder is broken" in str(r.exc_info[1]) for r in failures)


def test_a_step_answered_before_the_robot_vanished_is_recorded_before_its_session_ends(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    events: list[str] = []
    running = make_server(
        record_steps=lambda block: events.extend(
            f"step {index}" for index in [f.step_index for f in block.facts]
        ),
        end_session=lambda session_id: events.append("end"),
    )
    identity = _identity(arm, "gone")

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
    identity = _identity(arm, "liar")

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
    running = make_server(record_steps=lambda block: records.extend(block.records()))
    identity = _identity(arm, "odd")

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
    # Recorded by the batches that answered them, before their replies: nothing to wait for.
    assert [r.client_timestamp_ns for r in records] == [5, 7]
    assert [r.step_index for r in records] == [0, 2]


def test_the_recorder_is_nudged_once_per_reply_after_its_steps_were_handed_over(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    """``after_reply`` (the recorder's nudge) runs once a reply was handed to grpc: after
    the batch handed the step over, never in the batch, once per reply (a refused step's
    included), so the recorder's worker wakes while the robot turns around."""
    events: list[str] = []
    running = make_server(
        record_steps=lambda block: events.extend(f"record {f.step_index}" for f in block.facts),
        after_reply=lambda: events.append("nudge"),
    )
    robot = LockStep(running.address, _identity(arm, "nudged"))
    for index in range(3):
        observation = [0.0] * arm.obs_dim
        if index == 1:
            observation[0] = float("nan")  # refused at the edge: a StepError reply
        reply = robot.send(
            pb.ControlStep(
                step=pb.StepData(observation=observation, episode_id="e", step_index=index)
            )
        )
        assert reply.WhichOneof("kind") == ("error" if index == 1 else "action"), reply
    robot.close()
    assert events == ["record 0", "nudge", "nudge", "record 2", "nudge"]
