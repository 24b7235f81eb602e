"""Control sessions: spec checks, recorded steps, disconnects, and the client watchdog."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.serving.serving_harness import MakeServer, RunningServer, relaxed_limits, server_config
from tether.data.step import StepRecord
from tether.policy.engine import PolicyEngine
from tether.serving.client import ClientOptions, PolicyClient
from tether.serving.client.protocol import RobotIdentity
from tether.serving.errors import RemoteError
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc


def test_session_steps_are_recorded_once_each_in_order(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    records: list[StepRecord] = []
    ended: list[str] = []
    running = make_server(
        engine=engine,
        record_steps=lambda block: records.extend(block.records()),
        end_session=ended.append,
    )
    rng = np.random.default_rng(0)
    with PolicyClient(running.address) as client:
        session = client.session(arm, robot_id="arm-1", control_deadline_s=5.0)
        replies = []
        override = np.full(arm.act_dim, 0.1, np.float32)
        for t in range(6):
            obs = rng.uniform(-0.2, 0.2, arm.obs_dim).astype(np.float32)
            replies.append(
                session.step(
                    obs,
                    reward=float(t),
                    executed_action=override if t == 3 else None,
                    terminated=t == 4,
                    deterministic=True,
                )
            )
        session.close()
        deadline = time.monotonic() + 5
        while not ended and time.monotonic() < deadline:
            time.sleep(0.01)
    assert not any(r.from_watchdog for r in replies)
    assert [r.step_index for r in records] == [0, 1, 2, 3, 4, 0]
    assert len({r.episode_id for r in records[:5]}) == 1
    assert records[5].episode_id != records[0].episode_id  # a new episode after terminated
    assert records[4].terminated
    assert [r.reward for r in records] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    np.testing.assert_array_equal(records[3].executed_previous_action, override)
    assert all(r.executed_previous_action is None for i, r in enumerate(records) if i != 3)
    assert all(a.ingress_ns < b.ingress_ns for a, b in itertools.pairwise(records))
    for rec, reply in zip(records, replies, strict=True):
        np.testing.assert_array_equal(rec.safe_action, reply.action)
        assert rec.policy_version == engine.version.id
        assert rec.session_id == session.session_id
        assert rec.robot_id == "arm-1"
    assert ended == [session.session_id]


def test_spec_mismatch_is_failed_precondition_showing_both_sides(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    running = make_server()
    wrong = RobotIdentity("arm-x", "0123456789abcdef", arm.obs_dim + 1, arm.act_dim, ("a", "b"))
    with PolicyClient(running.address) as client, pytest.raises(RemoteError) as info:
        client.session(wrong, control_deadline_s=1.0, backup=lambda o, p: np.zeros(4))
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    msg = info.value.details
    assert "robot sent '0123456789abcdef'" in msg
    assert f"policy has {arm.fingerprint()!r}" in msg
    assert f"obs_dim: robot sent {arm.obs_dim + 1}, policy has {arm.obs_dim}" in msg
    assert "joint_names: robot sent ['a', 'b']" in msg


def test_a_bad_step_is_answered_and_the_session_continues(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    running = make_server()
    with PolicyClient(running.address) as client:
        session = client.session(arm, control_deadline_s=5.0)
        bad = session.step(np.full(arm.obs_dim, np.inf, np.float32))
        assert bad.from_watchdog
        assert "status 3" in bad.reason  # INVALID_ARGUMENT
        assert "step.observation[0] is inf" in bad.reason
        good = session.step(np.zeros(arm.obs_dim, np.float32))
        assert not good.from_watchdog
        session.close()


def test_watchdog_answers_by_the_deadline_and_reports_misses(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    running = make_server()
    with PolicyClient(running.address) as client:
        session = client.session(arm, control_deadline_s=1e-5)
        obs = np.zeros(arm.obs_dim, np.float32)
        start = time.perf_counter()
        missed = session.step(obs)
        elapsed = time.perf_counter() - start
        assert missed.from_watchdog
        assert missed.status == "backup"
        assert missed.reason == "control deadline passed"
        assert np.all(np.isfinite(missed.action))
        assert missed.action.shape == (arm.act_dim,)
        assert elapsed < 0.05  # never blocks the loop past its deadline (plus slack)
        assert session.misses == 1
        # A generous deadline again: the late reply to the missed step is skipped, the
        # next reply answers the next step, and the server learns of the miss.
        session.watchdog.control_deadline_s = 5.0
        ok = session.step(obs)
        assert not ok.from_watchdog
        session.close()
    assert running.metric("tether_client_watchdog_misses_total") == 1


def test_disconnect_mid_stream_leaves_the_server_healthy(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    running = make_server()
    channel = grpc.insecure_channel(running.address)
    stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
    identity = RobotIdentity("gone", arm.fingerprint(), arm.obs_dim, arm.act_dim, arm.joint_names)
    step = pb.ControlStep(step=pb.StepData(observation=[0.0] * arm.obs_dim, episode_id="e"))

    def requests():  # type: ignore[no-untyped-def]
        yield identity.open_message()
        yield step
        time.sleep(0.2)  # the client vanishes mid-session, stream still open
        yield step

    call = stub.Control(requests())
    assert next(call).WhichOneof("kind") == "opened"
    assert next(call).WhichOneof("kind") == "action"
    call.cancel()
    channel.close()
    deadline = time.monotonic() + 5
    while running.metric("tether_sessions_open") != 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert running.metric("tether_sessions_open") == 0
    assert running.metric("tether_requests_in_flight") == 0
    with grpc.insecure_channel(running.address) as fresh:
        reply = health_pb2_grpc.HealthStub(fresh).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    with PolicyClient(running.address) as client:
        assert client.get_action(np.zeros(arm.obs_dim)).action.shape == (arm.act_dim,)
        with client.session(arm, control_deadline_s=5.0) as again:
            assert not again.step(np.zeros(arm.obs_dim)).from_watchdog


def test_first_message_must_open_the_session(make_server: MakeServer, arm: RobotSpec) -> None:
    running = make_server()
    with grpc.insecure_channel(running.address) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
        step = pb.ControlStep(step=pb.StepData(observation=[0.0] * arm.obs_dim))
        with pytest.raises(grpc.RpcError) as info:
            list(stub.Control(iter([step]), timeout=5))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "must be 'open', found 'step'" in info.value.details()


def test_stale_steps_get_the_backup_not_the_policy(make_server: MakeServer, arm: RobotSpec) -> None:
    """Safety: an observation older than the staleness limit is never acted on as-is."""
    from tether.safety.limits import LimitsConfig, SafetyLimits
    from tether.serving.supervision import SupervisorFactory

    strict = SafetyLimits.from_spec(arm, LimitsConfig(command_staleness_s=1e-9))
    running = make_server(server_config(), supervisors=SupervisorFactory(arm, limits=strict))
    with PolicyClient(running.address, options=ClientOptions(timeout_s=5)) as client:
        result = client.get_action(np.zeros(arm.obs_dim), deterministic=True)
    assert result.verdict is not None
    assert result.verdict.source == "backup"
    assert "STALE" in result.verdict.check_names


def test_the_default_backup_holds_the_limits_the_server_enforces(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    """A deployment's stricter limits (``tether serve --limits``) hold for the robot's
    own watchdog backup too: a session opened with a RobotSpec reads them from the
    server. Under the spec's own limits a previous command the server's range no longer
    holds is kept; under the server's, the backup leaves it."""
    from tether.safety.for_spec import limits_for, supervisor_for
    from tether.serving.client import AsyncPolicyClient
    from tether.serving.supervision import SupervisorFactory

    base = limits_for(arm)
    strict = dataclasses.replace(
        base, position_high_rad=tuple(h - 0.5 for h in base.position_high_rad)
    )
    running = make_server(server_config(), supervisors=SupervisorFactory(arm, limits=strict))
    obs = np.zeros(arm.obs_dim, np.float32)
    obs[: arm.act_dim] = arm.home_position_rad
    previous = np.full(arm.act_dim, 0.8, np.float32)
    want, _ = supervisor_for(arm, strict).backup_action(obs, previous)
    spec_own, _ = supervisor_for(arm).backup_action(obs, previous)
    assert not np.array_equal(want, spec_own)
    with PolicyClient(running.address) as client:
        session = client.session(arm, control_deadline_s=5.0)
        np.testing.assert_array_equal(session.watchdog.backup(obs, previous), want)
        session.close()

    async def aio() -> np.ndarray:
        async with AsyncPolicyClient(running.address) as client:
            session = await client.session(arm, control_deadline_s=5.0)
            try:
                return session.watchdog.backup(obs, previous)
            finally:
                await session.close()

    np.testing.assert_array_equal(asyncio.run(aio()), want)


def test_the_configured_backup_answers_takeover_and_the_robots_watchdog(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    """``supervision.backup`` (go_home here) is what a session gets at TAKEOVER and what
    the robot's own watchdog executes on a missed deadline (``Describe`` names it); the
    default backup would hold the arm where it is instead."""
    from tether.safety import BackupConfig, DegradationLevel, DegradationMachine
    from tether.safety.for_spec import SupervisionConfig, supervisor_for
    from tether.serving.supervision import SupervisorFactory

    limits = relaxed_limits(arm)
    go_home = SupervisionConfig(backup=BackupConfig(kind="go_home"))
    machine = DegradationMachine(limits=limits)
    running = make_server(
        server_config(),
        supervisors=SupervisorFactory(arm, limits=limits, degradation=machine, supervision=go_home),
    )
    obs = np.zeros(arm.obs_dim, np.float32)
    obs[: arm.act_dim] = np.asarray(arm.home_position_rad) + 0.4  # away from home
    want, _ = supervisor_for(arm, limits, supervision=go_home).backup_action(obs, None)
    held, _ = supervisor_for(arm, limits).backup_action(obs, None)
    assert not np.array_equal(want, held)
    with PolicyClient(running.address) as client:
        described = client.describe().supervision_json
        assert SupervisionConfig.model_validate_json(described) == go_home
        session = client.session(arm, robot_id="arm-1", control_deadline_s=5.0)
        np.testing.assert_array_equal(session.watchdog.backup(obs, None), want)
        machine.escalate(DegradationLevel.TAKEOVER, reason="operator takes over", robot="arm-1")
        result = session.step(obs)
        session.close()
    assert result.verdict is not None
    assert result.verdict.source == "backup"
    np.testing.assert_array_equal(result.action, want)


def test_a_server_config_names_its_supervision_and_one_unknown_is_held(
    bundle_path: Path,
) -> None:
    """``tether serve --config`` with ``supervision: {backup: {kind: brake}, way_out:
    false}`` serves those; a client reading settings it does not know (a newer server)
    holds."""
    from tether.safety import BackupConfig
    from tether.safety.for_spec import SupervisionConfig
    from tether.serving.client.watchdog import served_supervision
    from tether.serving.launch import build_server

    config = server_config(supervision={"backup": {"kind": "brake"}, "way_out": False})
    running = RunningServer(build_server(bundle_path, config))
    try:
        with PolicyClient(running.address) as client:
            described = client.describe().supervision_json
    finally:
        running.stop()
    assert served_supervision(described) == SupervisionConfig(
        backup=BackupConfig(kind="brake"), way_out=False
    )
    assert served_supervision("") is None
    assert served_supervision('{"backup": {"kind": "teleport"}}') is None


def test_session_pinned_to_a_version_the_server_does_not_serve_is_refused(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec
) -> None:
    running = make_server(engine=engine)
    live = engine.version.id
    with PolicyClient(running.address) as client:
        with pytest.raises(RemoteError) as info:
            client.session(arm, robot_id="pinned", control_deadline_s=5.0, pin_version=live + 7)
        assert info.value.code is grpc.StatusCode.FAILED_PRECONDITION
        assert str(live + 7) in str(info.value)
        session = client.session(arm, robot_id="pinned", control_deadline_s=5.0, pin_version=live)
        reply = session.step(np.zeros(arm.obs_dim, np.float32), deterministic=True, success=True)
        session.close()
    assert not reply.from_watchdog
    assert reply.version is not None
    assert reply.version.id == live
