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
from collections.abc import Iterator
from dataclasses import replace
from types import TracebackType
from typing import Any

import grpc
import numpy as np

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
from tether.serving.client.watchdog import BackupPolicy, Watchdog, safety_backup
from tether.serving.errors import RemoteError
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb
from tether.v1 import policy_pb2_grpc as pb_grpc

_CLOSE = object()


def remote_error(exc: grpc.RpcError) -> RemoteError:
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return RemoteError(code, details or "")


def make_channel(target: str, options: ClientOptions) -> grpc.Channel:
    opts = options.channel_options()
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
    ) -> ActionResult:
        """One stateless action; raises ``RemoteError`` on a non-OK status."""
        request = action_request(
            observation,
            deterministic=deterministic,
            client_id=client_id,
            model_version=model_version,
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
        the safety layer's hold action; with a bare ``RobotIdentity`` both must be given.
        ``pin_version`` serves the whole session from that version (live or retired), e.g.
        for a frozen baseline.
        """
        identity, deadline, policy = session_parts(
            robot, robot_id, control_deadline_s, backup, pin_version
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
) -> tuple[RobotIdentity, float, BackupPolicy]:
    """Identity, control deadline and backup policy of a session (shared with asyncio)."""
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
        return identity, deadline, backup or safety_backup(robot)
    if control_deadline_s is None or backup is None:
        raise ValueError(
            "a session opened with a RobotIdentity needs control_deadline_s and backup; "
            "pass a RobotSpec to derive both from the robot"
        )
    if pin_version is not None:
        robot = replace(robot, pinned_version=pin_version)
    return robot, control_deadline_s, backup


class ControlSession:
    """One robot's ``Control`` stream; use ``step`` once per control cycle."""

    def __init__(self, client: PolicyClient, identity: RobotIdentity, watchdog: Watchdog) -> None:
        self._client = client
        self.identity = identity
        self.watchdog = watchdog
        self.episode = EpisodeCounter()
        self.session_id = ""
        self.opened: pb.SessionOpened | None = None
        self.failure: RemoteError | None = None
        self._requests: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._replies: queue.SimpleQueue[pb.ControlReply | RemoteError] = queue.SimpleQueue()
        self._previous: np.ndarray | None = None
        self._call: Any = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> ControlSession:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def misses(self) -> int:
        return self.watchdog.misses

    def open(self) -> None:
        """Start the stream and wait for the server to accept the session."""
        self._requests.put(self.identity.open_message())
        self._call = self._client._control_call(self._request_stream())
        self._reader = threading.Thread(target=self._read, name="tether-session", daemon=True)
        self._reader.start()
        try:
            first = self._replies.get(timeout=self._client.options.open_timeout_s)
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
        self.opened = first.opened
        self.session_id = first.opened.session_id

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
    ) -> ActionResult:
        """The action for ``observation``, or the watchdog's by the control deadline."""
        deadline = time.monotonic() + self.watchdog.control_deadline_s
        obs = np.asarray(observation, dtype=np.float32)
        previous = self._previous if executed_action is None else executed_action
        if self.failure is not None:
            result = self.watchdog.fallback(obs, previous, f"session is broken: {self.failure}")
        else:
            self._requests.put(
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
                )
            )
            result = self._await_reply(obs, previous, deadline)
        self._previous = result.action
        self.episode.advance(terminated or truncated)
        if terminated or truncated:
            self._previous = None
        return result

    def _await_reply(
        self, obs: np.ndarray, previous: np.ndarray | None, deadline: float
    ) -> ActionResult:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self.watchdog.fallback(obs, previous, "control deadline passed")
            try:
                reply = self._replies.get(timeout=remaining)
            except queue.Empty:
                return self.watchdog.fallback(obs, previous, "control deadline passed")
            if isinstance(reply, RemoteError):
                self.failure = reply
                return self.watchdog.fallback(obs, previous, f"session failed: {reply}")
            if not answers(reply, self.episode):
                continue  # a late reply to a step the watchdog already answered
            result = result_of(reply)
            if isinstance(result, str):
                return self.watchdog.fallback(obs, previous, result)
            return result

    def close(self) -> None:
        self._requests.put(_CLOSE)
        if self._call is not None:
            self._call.cancel()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def _request_stream(self) -> Iterator[pb.ControlStep]:
        while True:
            item = self._requests.get()
            if item is _CLOSE:
                return
            assert isinstance(item, pb.ControlStep)
            yield item

    def _read(self) -> None:
        try:
            for reply in self._call:
                self._replies.put(reply)
            self._replies.put(
                RemoteError(grpc.StatusCode.CANCELLED, "the server ended the session")
            )
        except grpc.RpcError as exc:
            self._replies.put(remote_error(exc))
