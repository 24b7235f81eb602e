"""What one client can do to another robot: nothing through the server's shared state.

Each test sends what a hostile or broken client would, from the outside, and checks the
bystander robot: its level, its rate limit, its sessions, its replies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

from tests.serving.serving_harness import MakeServer, relaxed_limits, server_config
from tether.safety.degradation import DegradationMachine
from tether.safety.degradation_config import DegradationConfig
from tether.serving import admission as admission_module
from tether.serving.admission import MemoryReading
from tether.serving.client import PolicyClient
from tether.serving.client.protocol import RobotIdentity
from tether.serving.decoding import REFUSALS
from tether.serving.errors import RemoteError
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc

NORMAL = pb.DEGRADATION_LEVEL_NORMAL
TAKEOVER = pb.DEGRADATION_LEVEL_TAKEOVER


def _steps(
    arm: RobotSpec, n: int, *, misses: bool = False, **fields: object
) -> Iterator[pb.ControlStep]:
    for index in range(n):
        yield pb.ControlStep(
            step=pb.StepData(
                observation=[0.0] * arm.obs_dim,
                episode_id="e",
                step_index=index,
                deterministic=True,
                watchdog_misses=index + 1 if misses else 0,  # every step a miss
                **fields,  # type: ignore[arg-type]
            )
        )


def _session(
    arm: RobotSpec, robot: str, steps: Iterator[pb.ControlStep]
) -> Iterator[pb.ControlStep]:
    identity = RobotIdentity(robot, arm.fingerprint(), arm.obs_dim, arm.act_dim, arm.joint_names)
    yield identity.open_message()
    yield from steps


def _run(address: str, requests: Iterator[pb.ControlStep]) -> list[pb.ControlReply]:
    with grpc.insecure_channel(address) as channel:
        stub = pb_grpc.PolicyServiceStub(channel)  # type: ignore[no-untyped-call]
        return list(stub.Control(requests, timeout=60))


class _Held:
    """A session kept open on its own thread until ``close``."""

    def __init__(self, address: str, arm: RobotSpec, robot: str) -> None:
        self._done = threading.Event()
        self.opened = threading.Event()
        self.error: grpc.RpcError | None = None
        self._channel = grpc.insecure_channel(address)
        stub = pb_grpc.PolicyServiceStub(self._channel)  # type: ignore[no-untyped-call]

        def requests() -> Iterator[pb.ControlStep]:
            yield from _session(arm, robot, iter(()))
            self._done.wait(30)

        self._call = stub.Control(requests(), timeout=60)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for reply in self._call:
                if reply.WhichOneof("kind") == "opened":
                    self.opened.set()
        except grpc.RpcError as exc:
            self.error = exc
            self.opened.set()

    def close(self) -> None:
        self._done.set()
        self._call.cancel()
        self._thread.join(10)
        self._channel.close()


def _refusal(address: str, arm: RobotSpec, robot: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        _run(address, _session(arm, robot, _steps(arm, 1)))
    return err.value


def test_one_clients_watchdog_claims_move_only_its_own_robot(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    """`watchdog_misses` on every step put every robot of the server in TAKEOVER (backup
    actions on all replies of an unrelated robot)."""
    machine = DegradationMachine(limits=relaxed_limits(arm))
    running = make_server(
        supervisors=SupervisorFactory(arm, limits=relaxed_limits(arm), degradation=machine)
    )
    n = DegradationConfig().min_window_steps + 50  # judged, then at TAKEOVER
    liar = _run(running.address, _session(arm, "liar", _steps(arm, n, misses=True)))
    assert liar[-1].action.degradation == TAKEOVER  # the claims were strong enough
    bystander = _run(running.address, _session(arm, "bystander", _steps(arm, 20)))
    actions = [r.action for r in bystander if r.WhichOneof("kind") == "action"]
    assert len(actions) == 20
    assert {a.degradation for a in actions} == {NORMAL}
    assert all(a.safety.source != pb.ACTION_SOURCE_BACKUP for a in actions)
    assert bystander[0].opened.degradation == NORMAL
    assert machine.level_of("liar").name == "TAKEOVER"


def test_get_action_claiming_another_clients_id_does_not_spend_its_budget(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    running = make_server(server_config(admission={"rate_limit_hz": 4.0, "burst_s": 1.0}))
    obs = np.zeros(arm.obs_dim, np.float32)
    refused = 0
    with PolicyClient(running.address) as attacker:
        for i in range(12):  # the victim's id, then a fresh id per call: one connection
            try:
                attacker.get_action(
                    obs, deterministic=True, client_id="victim" if i < 6 else f"x{i}"
                )
            except RemoteError:  # RESOURCE_EXHAUSTED
                refused += 1
    assert refused >= 6  # a fresh id per call no longer escapes the connection's bucket
    # Its own connection (grpc shares one between channels of a process by default).
    with grpc.insecure_channel(running.address, [("grpc.use_local_subchannel_pool", 1)]) as ch:
        stub = pb_grpc.PolicyServiceStub(ch)  # type: ignore[no-untyped-call]
        request = pb.ActionRequest(observation=obs.tolist(), deterministic=True, client_id="victim")
        for _ in range(4):
            assert len(stub.GetAction(request, timeout=10).action) == arm.act_dim


def test_a_second_live_session_for_a_robot_id_is_refused_unless_allowed(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    running = make_server()
    held = _Held(running.address, arm, "arm-1")
    try:
        assert held.opened.wait(10)
        err = _refusal(running.address, arm, "arm-1")
        assert err.code() is grpc.StatusCode.ALREADY_EXISTS
        assert "robot 'arm-1' already has a live session" in (err.details() or "")
        assert len(_run(running.address, _session(arm, "arm-2", _steps(arm, 1)))) == 2
    finally:
        held.close()
    deadline = time.monotonic() + 5
    while running.server.admission.open_sessions and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_run(running.address, _session(arm, "arm-1", _steps(arm, 1)))) == 2
    allowed = make_server(
        server_config(admission={"rate_limit_hz": 0, "allow_duplicate_sessions": True})
    )
    held = _Held(allowed.address, arm, "arm-1")
    try:
        assert held.opened.wait(10)
        assert len(_run(allowed.address, _session(arm, "arm-1", _steps(arm, 1)))) == 2
    finally:
        held.close()


def test_sessions_are_bounded_per_client_and_in_total(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    """3,000 idle sessions from one client were all accepted."""
    per_client = make_server(
        server_config(admission={"rate_limit_hz": 0, "max_sessions_per_client": 2})
    )
    total = make_server(server_config(admission={"rate_limit_hz": 0, "max_sessions": 2}))
    for running, limit in ((per_client, "max_sessions_per_client"), (total, "max_sessions")):
        held = [_Held(running.address, arm, f"idle-{i}") for i in range(2)]
        try:
            assert all(h.opened.wait(10) and h.error is None for h in held)
            err = _refusal(running.address, arm, "one-more")
            assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert limit in (err.details() or "")
        finally:
            for h in held:
                h.close()


def test_under_memory_pressure_new_sessions_are_refused_before_steps(
    make_server: MakeServer, arm: RobotSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With max_rss_bytes set, the running robot got RESOURCE_EXHAUSTED on every step
    while the client opening sessions was never refused."""
    config = server_config(
        admission={"rate_limit_hz": 0, "max_rss_bytes": 1000, "memory_check_interval_s": 0.0}
    )
    running = make_server(config)
    obs = np.zeros(arm.obs_dim, np.float32)
    monkeypatch.setattr(admission_module, "read_memory", lambda cuda: MemoryReading(900, 0, 0))
    with PolicyClient(running.address) as client:
        session = client.session(arm, robot_id="running", control_deadline_s=5.0)
        assert not session.step(obs).from_watchdog
        # Over max_rss_bytes, under max_rss_bytes x memory_step_headroom (1.25).
        monkeypatch.setattr(admission_module, "read_memory", lambda cuda: MemoryReading(1100, 0, 0))
        err = _refusal(running.address, arm, "newcomer")
        assert err.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "new sessions are refused above 1000" in (err.details() or "")
        for _ in range(5):
            assert not session.step(obs).from_watchdog
        monkeypatch.setattr(admission_module, "read_memory", lambda cuda: MemoryReading(1300, 0, 0))
        refused = session.step(obs)
        assert refused.from_watchdog
        assert "requests are refused above 1250" in refused.reason
        session.close()


def test_an_executed_action_outside_the_action_bounds_is_refused_naming_the_field(
    make_server: MakeServer, arm: RobotSpec
) -> None:
    records: list[object] = []
    running = make_server(record_steps=lambda block: records.extend(block.records()))
    impossible = [50.0, -50.0] + [0.0] * (arm.act_dim - 2)
    replies = _run(
        running.address,
        _session(arm, "arm-1", _steps(arm, 2, executed_action=impossible)),
    )
    errors = [r.error for r in replies if r.WhichOneof("kind") == "error"]
    assert len(errors) == 2
    assert errors[0].code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "step.executed_action[0] is 50, expected within the action bounds" in errors[0].message
    assert records == []  # nothing entered the experience log as a person's action
    inside = [0.5] * arm.act_dim
    replies = _run(running.address, _session(arm, "arm-2", _steps(arm, 2, executed_action=inside)))
    assert [r.WhichOneof("kind") for r in replies] == ["opened", "action", "action"]
    assert len(records) == 2  # the hook records answered steps: the empty list above is real


def test_undecodable_bytes_are_invalid_argument_and_logged_once_per_interval(
    make_server: MakeServer,
    arm: RobotSpec,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(REFUSALS, "_next", 0.0)  # a new interval: the first refusal logs
    running = make_server()
    bad_utf8 = b"\x22\x02\xff\xfe"  # ActionRequest.client_id (field 4) = invalid UTF-8
    truncated = b"\x0a\x10\x00"  # observation: 16 bytes announced, 1 sent
    caplog.set_level(logging.WARNING, logger="tether.serving.decoding")
    with grpc.insecure_channel(running.address) as channel:
        raw = channel.unary_unary(
            "/tether.v1.PolicyService/GetAction",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        for payload in [bad_utf8, truncated] * 10:
            with pytest.raises(grpc.RpcError) as err:
                raw(payload, timeout=10)
            assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "not a valid tether.v1.ActionRequest" in (err.value.details() or "")
        stream = channel.stream_stream(
            "/tether.v1.PolicyService/Control",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.RpcError) as err:  # as the session's open: no session
            list(stream(iter([truncated]), timeout=10))
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        # Inside a session: refused like any bad step, and the session goes on.
        messages = [m.SerializeToString() for m in _session(arm, "arm-1", _steps(arm, 2))]
        replies = [
            pb.ControlReply.FromString(r)
            for r in stream(iter([messages[0], messages[1], truncated, messages[2]]), timeout=10)
        ]
        assert [r.WhichOneof("kind") for r in replies] == ["opened", "action", "error", "action"]
        assert "not a valid tether.v1.ControlStep" in replies[2].error.message
    logged = [r for r in caplog.records if r.name == "tether.serving.decoding"]
    assert len(logged) == 1  # 22 refusals, one line, no traceback
    assert logged[0].exc_info is None
