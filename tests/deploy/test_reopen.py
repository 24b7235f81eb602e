"""When a broken Control session may be reopened (``tether.serving.client.reopen``)."""

from __future__ import annotations

import queue

import grpc
import pytest

from tether.serving.client import ClientOptions
from tether.serving.client.reopen import ReopenSchedule, SessionLink
from tether.serving.errors import RemoteError
from tether.v1 import policy_pb2 as pb

GONE = RemoteError(grpc.StatusCode.UNAVAILABLE, "connection reset")


def test_first_reopen_is_immediate_then_attempts_back_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("tether.serving.client.reopen.time.monotonic", lambda: now[0])
    schedule = ReopenSchedule(ClientOptions(retry_initial_backoff_s=0.1, retry_max_backoff_s=0.3))
    schedule.failed()
    assert schedule.due(GONE)  # the channel has usually moved on already
    waits = []
    for _ in range(4):
        schedule.failed()
        start = now[0]
        while not schedule.due(GONE):
            now[0] += 0.01
        waits.append(round(now[0] - start, 2))
    assert waits == [0.1, 0.2, 0.3, 0.3]  # doubling, capped at the maximum
    schedule.succeeded()
    schedule.failed()
    assert schedule.due(GONE)


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.FAILED_PRECONDITION,  # another robot spec: refused again
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.INVALID_ARGUMENT,
    ],
)
def test_a_refusal_for_a_reason_is_final(code: grpc.StatusCode) -> None:
    schedule = ReopenSchedule(ClientOptions())
    schedule.failed()
    assert not schedule.due(RemoteError(code, "refused"))


def test_a_session_the_server_still_holds_is_reopened_with_backoff() -> None:
    """One live session per robot id: a reopen that reaches the server before it saw the
    old stream close is refused ALREADY_EXISTS, which ends by itself."""
    schedule = ReopenSchedule(ClientOptions(retry_initial_backoff_s=0.1))
    held = RemoteError(grpc.StatusCode.ALREADY_EXISTS, "robot 'arm' already has a live session")
    schedule.failed()
    assert schedule.due(held)
    schedule.failed()
    assert not schedule.due(held)  # the second attempt waits the backoff


def test_reopening_can_be_turned_off() -> None:
    schedule = ReopenSchedule(ClientOptions(reopen_sessions=False))
    schedule.failed()
    assert not schedule.due(GONE)


def test_link_takes_failures_and_acceptances_and_drops_late_replies() -> None:
    link = SessionLink(ClientOptions())
    pending = [
        pb.ControlReply(step_index=3, episode_id="late"),
        pb.ControlReply(opened=pb.SessionOpened(session_id="s2")),
        GONE,
        pb.ControlReply(step_index=4, episode_id="never read"),
    ]

    def get_nowait() -> pb.ControlReply | RemoteError:
        if not pending:
            raise queue.Empty
        return pending.pop(0)

    link.take_pending(get_nowait)
    assert (link.session_id, link.reopens, link.failure) == ("s2", 1, GONE)
    assert len(pending) == 1  # reading stops at the failure
    assert link.reopen_due()
    link.reopening()
    assert link.failure is None


def test_a_send_lost_with_the_connection_reopens() -> None:
    """grpc.aio says INTERNAL for a write the transport dropped (the server's own status is
    hidden); read as a refusal, the session would hold backups forever."""
    lost = RemoteError(grpc.StatusCode.INTERNAL, "Internal error from Core")
    link = SessionLink(ClientOptions())
    link.note(lost)
    assert not link.reopen_due()  # what the session did before: never fails over
    link = SessionLink(ClientOptions())
    link.send_failed(lost)
    assert link.failure is not None
    assert link.failure.code is grpc.StatusCode.UNAVAILABLE
    assert link.reopen_due()
    link.send_failed(RemoteError(grpc.StatusCode.UNAUTHENTICATED, "bad token"))
    assert link.failure.code is grpc.StatusCode.UNAUTHENTICATED  # a reason stays a reason
