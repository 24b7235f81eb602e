"""When a broken Control session is opened again: after which failures, and how often.

``SessionLink`` holds that state for a session (blocking or asyncio alike).

Only a failure that says the server went away is worth a new stream: UNAVAILABLE (the
connection dropped, no ready server) or CANCELLED (the server ended the session, e.g.
while draining for shutdown); and ALREADY_EXISTS, the server still holding this robot's
previous session because it has not yet seen that stream close (one live session per
robot id), which ends by itself within its keepalive time. When the connection goes
while a step or open is being written, grpc.aio reports the lost send as INTERNAL
("Internal error from Core") in place of the status the server sent; a send that fails
INTERNAL therefore counts as UNAVAILABLE. A refusal for a reason — FAILED_PRECONDITION
for another robot spec, UNAUTHENTICATED — would only be refused again. The first
attempt after a served step is immediate (the channel has usually moved to another
ready server by then); consecutive failures wait the retry backoff, doubling up to its
maximum, so a fleet whose servers are all down does not hammer them from every control
cycle.

Invariant: ``due`` only reads the clock; it never waits, so the control loop keeps its rate.
"""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import Callable

import grpc

from tether.serving.client.options import ClientOptions
from tether.serving.errors import RemoteError
from tether.v1 import policy_pb2 as pb

REOPENABLE = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.ALREADY_EXISTS}
)


class ReopenSchedule:
    """Decides whether the next step may open the session again."""

    def __init__(self, options: ClientOptions) -> None:
        self._enabled = options.reopen_sessions
        self._initial_s = options.retry_initial_backoff_s
        self._max_s = options.retry_max_backoff_s
        self._consecutive = 0
        self._not_before = 0.0

    def due(self, failure: RemoteError) -> bool:
        return self._enabled and failure.code in REOPENABLE and time.monotonic() >= self._not_before

    def failed(self) -> None:
        """The stream failed (or a reopen did); space the next attempt."""
        self._consecutive += 1
        delay = 0.0
        if self._consecutive > 1:
            delay = min(self._initial_s * 2 ** (self._consecutive - 2), self._max_s)
        self._not_before = time.monotonic() + delay

    def succeeded(self) -> None:
        """A step was answered: the next failure may reopen at once."""
        self._consecutive = 0
        self._not_before = 0.0


class SessionLink:
    """What a session knows of its stream, the same for the blocking and asyncio
    sessions: the failure that broke it, the session the server opened, how often it was
    reopened, and whether the next step may reopen it."""

    def __init__(self, options: ClientOptions) -> None:
        self.failure: RemoteError | None = None
        self.opened: pb.SessionOpened | None = None
        self.reopens = 0
        self._schedule = ReopenSchedule(options)

    @property
    def session_id(self) -> str:
        return "" if self.opened is None else self.opened.session_id

    def note(self, reply: pb.ControlReply | RemoteError) -> bool:
        """Take in a failure or an acceptance; True when ``reply`` is neither."""
        if isinstance(reply, RemoteError):
            self.failure = reply
            self._schedule.failed()
            return False
        if reply.WhichOneof("kind") == "opened":  # a reopened session was accepted
            self.opened = reply.opened
            self.reopens += 1
            return False
        return True

    def send_failed(self, failure: RemoteError) -> None:
        """A step or open could not be written to the stream: the stream is gone."""
        if failure.code is grpc.StatusCode.INTERNAL:  # grpc.aio's word for a lost send
            failure = RemoteError(
                grpc.StatusCode.UNAVAILABLE, f"the stream broke while sending ({failure.details})"
            )
        self.note(failure)

    def take_pending(self, get_nowait: Callable[[], pb.ControlReply | RemoteError]) -> None:
        """Read what arrived since the last step (``get_nowait`` raises when nothing did):
        a failure there is handled before the next step is sent, not after it waited in
        vain; late replies are dropped."""
        while self.failure is None:
            try:
                reply = get_nowait()
            except (queue.Empty, asyncio.QueueEmpty):
                return
            self.note(reply)

    def reopen_due(self) -> bool:
        return self.failure is not None and self._schedule.due(self.failure)

    def reopening(self) -> None:
        self.failure = None

    def answered(self) -> None:
        self._schedule.succeeded()
