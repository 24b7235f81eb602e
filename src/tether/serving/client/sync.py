"""``PolicyClient``: the blocking client, and its ``ControlSession`` for a control loop.

Unary calls carry a deadline and are retried by gRPC on UNAVAILABLE (see
``ClientOptions``). A session keeps one ``Control`` stream; a reader thread moves
replies into a queue, so ``step`` waits on that queue for at most the control deadline
and then returns the watchdog's backup action — it never blocks the loop past its
deadline, even if the server or the network hangs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import replace
from types import TracebackType
from typing import Any

import grpc
import numpy as np

from tether.serving.client.chunks import ActionChunk
from tether.serving.client.options import ClientOptions
from tether.serving.client.protocol import (
    EpisodeCounter,
    RobotIdentity,
    action_request,
    answers,
    result_of,
    step_message,
)
from tether.serving.client.records import ActionResult
from tether.serving.client.reopen import SessionLink
from tether.serving.client.watchdog import (
    BackupPolicy,
    Watchdog,
    safety_backup,
    served_limits,
    served_supervision,
)
from tether.serving.errors import RemoteError
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc

_CLOSE = object()


def remote_error(exc: grpc.RpcError) -> RemoteError:
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return RemoteError(code, details or "")


def make_channel(target: str, options: ClientOptions) -> grpc.Channel:
    opts = options.channel_options(target)
    if options.tls_root_cert_file is None:
        return grpc.insecure_channel(target, options=opts)
    creds = grpc.ssl_channel_credentials(root_certificates=options.root_certificate())
    return grpc.secure_channel(target, creds, options=opts)


class PolicyClient:
    """Blocking client of ``tether.v1.PolicyService``."""

    def __init__(self, target: str, *, options: ClientOptions | None = None) -> None:
        self.target = target
        self.options = options or ClientOptions()
        self._channel = make_channel(target, self.options)
        self._stub = pb_grpc.PolicyServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = self.options.metadata()

    def __enter__(self) -> PolicyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def get_action(
        self,
        observation: np.ndarray,
        *,
        deterministic: bool = False,
        client_id: str = "",
        model_version: int | None = None,
        timeout_s: float | None = None,
        inputs: Mapping[str, np.ndarray] | None = None,
    ) -> ActionResult:
        """One stateless action; raises ``RemoteError`` on a non-OK status."""
        request = action_request(
            observation,
            deterministic=deterministic,
            client_id=client_id,
            model_version=model_version,
            inputs=inputs,
        )
        try:
            reply = self._stub.GetAction(
                request,
                timeout=timeout_s or self.options.timeout_s,
                metadata=self._metadata,
            )
        except grpc.RpcError as exc:
            raise remote_error(exc) from None
        return ActionResult.from_proto(reply)

    def get_chunk(
        self,
        observation: np.ndarray,
        *,
        deterministic: bool = True,
        client_id: str = "",
        timeout_s: float | None = None,
        inputs: Mapping[str, np.ndarray] | None = None,
    ) -> ActionChunk:
        """The supervised action chunk for ``observation`` (and the policy's named
        ``inputs``), stamped with the time it was sent (for ``ActionChunkBroker``); a
        policy with horizon 1 answers a chunk of one step."""
        observed_at = time.monotonic()
        result = self.get_action(
            observation,
            deterministic=deterministic,
            client_id=client_id,
            timeout_s=timeout_s,
            inputs=inputs,
        )
        return ActionChunk.from_result(result, observed_at)

    def describe(self, *, timeout_s: float | None = None) -> pb.DescribeResponse:
        try:
            reply: pb.DescribeResponse = self._stub.Describe(
                pb.DescribeRequest(),
                timeout=timeout_s or self.options.timeout_s,
                metadata=self._metadata,
            )
        except grpc.RpcError as exc:
            raise remote_error(exc) from None
        return reply

    def session(
        self,
        robot: RobotSpec | RobotIdentity,
        *,
        robot_id: str = "robot",
        control_deadline_s: float | None = None,
        backup: BackupPolicy | None = None,
        pin_version: int | None = None,
    ) -> ControlSession:
        """Open a Control session; ``step`` answers within ``control_deadline_s``.

        With a ``RobotSpec`` the deadline defaults to its control period and the backup to
        the safety layer's hold action under the limits the server enforces (read with
        ``describe`` first); with a bare ``RobotIdentity`` both must be given.
        ``pin_version`` serves the whole session from that version (live or retired), e.g.
        for a frozen baseline.
        """
        described = self.describe() if backup is None and isinstance(robot, RobotSpec) else None
        identity, deadline, policy = session_parts(
            robot, robot_id, control_deadline_s, backup, pin_version, described
        )
        session = ControlSession(self, identity, Watchdog(policy, deadline))
        session.open()
        return session

    def _control_call(self, requests: Iterator[pb.ControlStep]) -> Any:
        return self._stub.Control(requests, metadata=self._metadata)


def session_parts(
    robot: RobotSpec | RobotIdentity,
    robot_id: str,
    control_deadline_s: float | None,
    backup: BackupPolicy | None,
    pin_version: int | None = None,
    described: pb.DescribeResponse | None = None,
) -> tuple[RobotIdentity, float, BackupPolicy]:
    """Identity, control deadline and backup policy of a session (shared with asyncio);
    ``described``: the server's ``Describe``, whose limits and supervision the default
    backup follows."""
    if isinstance(robot, RobotSpec):
        identity = RobotIdentity(
            robot_id,
            robot.fingerprint(),
            robot.obs_dim,
            robot.act_dim,
            robot.joint_names,
            pinned_version=pin_version,
        )
        deadline = control_deadline_s or robot.control_period_s
        if backup is None:
            served = described or pb.DescribeResponse()
            backup = safety_backup(
                robot,
                served_limits(robot, served.safety_limits_json),
                supervision=served_supervision(served.supervision_json),
            )
        return identity, deadline, backup
    if control_deadline_s is None or backup is None:
        raise ValueError(
            "a session opened with a RobotIdentity needs control_deadline_s and backup; "
            "pass a RobotSpec to derive both from the robot"
        )
    if pin_version is not None:
        robot = replace(robot, pinned_version=pin_version)
    return robot, control_deadline_s, backup


class ControlStream:
    """One ``Control`` call: a request queue that feeds it and a reader thread that drains
    its replies into a queue of their own, so a replaced stream's late replies and errors
    never reach its successor."""

    def __init__(self, client: PolicyClient, first: pb.ControlStep) -> None:
        self.requests: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.replies: queue.SimpleQueue[pb.ControlReply | RemoteError] = queue.SimpleQueue()
        self.requests.put(first)
        self._call = client._control_call(self._request_stream())
        self._reader = threading.Thread(target=self._read, name="tether-session", daemon=True)
        self._reader.start()

    def send(self, message: pb.ControlStep) -> None:
        self.requests.put(message)

    def close(self, join_timeout_s: float = 5.0) -> None:
        self.requests.put(_CLOSE)
        self._call.cancel()
        self._reader.join(timeout=join_timeout_s)

    def _request_stream(self) -> Iterator[pb.ControlStep]:
        while True:
            item = self.requests.get()
            if item is _CLOSE:
                return
            assert isinstance(item, pb.ControlStep)
            yield item

    def _read(self) -> None:
        try:
            for reply in self._call:
                self.replies.put(reply)
            self.replies.put(RemoteError(grpc.StatusCode.CANCELLED, "the server ended the session"))
        except grpc.RpcError as exc:
            self.replies.put(remote_error(exc))


class ControlSession:
    """One robot's ``Control`` stream; use ``step`` once per control cycle.

    When the server goes away (UNAVAILABLE, or the server ends the session while
    draining), the step that notices gets the watchdog's backup and a later step reopens
    the session on a fresh stream, which the channel sends to a ready server (with a
    ``dns:`` target and round-robin, another one). The open message and that step travel
    together, so a reopen costs no extra control period; the episode goes on with the
    same id and step index. Attempts are spaced by the retry backoff, doubling up to its
    maximum; a refusal for a reason (FAILED_PRECONDITION, UNAUTHENTICATED...) is final.
    """

    def __init__(self, client: PolicyClient, identity: RobotIdentity, watchdog: Watchdog) -> None:
        self._client = client
        self.identity = identity
        self.watchdog = watchdog
        self.episode = EpisodeCounter()
        self.link = SessionLink(client.options)
        self._previous: np.ndarray | None = None
        self._stream: ControlStream | None = None

    def __enter__(self) -> ControlSession:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def misses(self) -> int:
        return self.watchdog.misses

    @property
    def session_id(self) -> str:
        return self.link.session_id

    @property
    def opened(self) -> pb.SessionOpened | None:
        return self.link.opened

    @property
    def failure(self) -> RemoteError | None:
        """What broke the stream, until a reopen replaces it."""
        return self.link.failure

    @property
    def reopens(self) -> int:
        """Sessions opened again after a failure."""
        return self.link.reopens

    def open(self) -> None:
        """Start the stream and wait for the server to accept the session."""
        self._stream = ControlStream(self._client, self.identity.open_message())
        try:
            first = self._stream.replies.get(timeout=self._client.options.open_timeout_s)
        except queue.Empty:
            self.close()
            raise RemoteError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the server did not accept the session within "
                f"{self._client.options.open_timeout_s} s",
            ) from None
        if isinstance(first, RemoteError):
            self.close()
            raise first
        self.link.opened = first.opened

    def start_episode(self, episode_id: str | None = None) -> None:
        self.episode.start(episode_id)
        self._previous = None

    def step(
        self,
        observation: np.ndarray,
        *,
        reward: float = 0.0,
        terminated: bool = False,
        truncated: bool = False,
        executed_action: np.ndarray | None = None,
        deterministic: bool = False,
        success: bool = False,
        task_id: str = "",
        final_distance_m: float | None = None,
    ) -> ActionResult:
        """The action for ``observation``, or the watchdog's by the control deadline."""
        deadline = time.monotonic() + self.watchdog.control_deadline_s
        obs = np.asarray(observation, dtype=np.float32)
        previous = self._previous if executed_action is None else executed_action
        if self._stream is not None:
            self.link.take_pending(self._stream.replies.get_nowait)
        if self.link.reopen_due():
            self._start_reopen()
        if self.failure is not None or self._stream is None:
            result = self.watchdog.fallback(obs, previous, f"session is broken: {self.failure}")
        else:
            self._stream.send(
                step_message(
                    self.episode,
                    obs,
                    reward=reward,
                    terminated=terminated,
                    truncated=truncated,
                    executed_action=executed_action,
                    deterministic=deterministic,
                    watchdog_misses=self.watchdog.misses,
                    success=success,
                    task_id=task_id,
                    final_distance_m=final_distance_m,
                )
            )
            result = self._await_reply(self._stream, obs, previous, deadline)
        self._previous = result.action
        self.episode.advance(terminated or truncated)
        if terminated or truncated:
            self._previous = None
        return result

    def _start_reopen(self) -> None:
        old, self._stream = self._stream, None
        if old is not None:
            old.close(join_timeout_s=0)  # its call already failed; never wait in a step
        self._stream = ControlStream(self._client, self.identity.open_message())
        self.link.reopening()

    def _await_reply(
        self,
        stream: ControlStream,
        obs: np.ndarray,
        previous: np.ndarray | None,
        deadline: float,
    ) -> ActionResult:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self.watchdog.fallback(obs, previous, "control deadline passed")
            try:
                reply = stream.replies.get(timeout=remaining)
            except queue.Empty:
                return self.watchdog.fallback(obs, previous, "control deadline passed")
            if not self.link.note(reply):
                if isinstance(reply, RemoteError):
                    return self.watchdog.fallback(obs, previous, f"session failed: {reply}")
                continue
            assert isinstance(reply, pb.ControlReply)
            if not answers(reply, self.episode):
                continue  # a late reply to a step the watchdog already answered
            self.link.answered()
            result = result_of(reply)
            if isinstance(result, str):
                return self.watchdog.fallback(obs, previous, result)
            return result

    def close(self) -> None:
        if self._stream is not None:
            self._stream.close()
