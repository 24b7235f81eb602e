"""``AsyncPolicyClient``: the asyncio client, and its ``AsyncControlSession``.

Same contract as the blocking client: a deadline on every unary call, gRPC retries on
UNAVAILABLE, and a session whose ``step`` returns the watchdog's backup action when no
reply arrives within the control deadline. A reader task moves replies into a queue,
so waiting for one can be bounded without cancelling a read on the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
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
from tether.serving.client.reopen import SessionLink
from tether.serving.client.sync import remote_error, session_parts
from tether.serving.client.watchdog import BackupPolicy, Watchdog
from tether.serving.errors import RemoteError
from tether.spec import RobotSpec
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc


def make_aio_channel(target: str, options: ClientOptions) -> grpc.aio.Channel:
    opts = options.channel_options(target)
    if options.tls_root_cert_file is None:
        return grpc.aio.insecure_channel(target, options=opts)
    creds = grpc.ssl_channel_credentials(root_certificates=options.root_certificate())
    return grpc.aio.secure_channel(target, creds, options=opts)


class AsyncPolicyClient:
    """asyncio client of ``tether.v1.PolicyService``; use inside one event loop."""

    def __init__(self, target: str, *, options: ClientOptions | None = None) -> None:
        self.target = target
        self.options = options or ClientOptions()
        self._channel = make_aio_channel(target, self.options)
        self._stub = pb_grpc.PolicyServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = self.options.metadata()

    async def __aenter__(self) -> AsyncPolicyClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close(None)

    async def get_action(
        self,
        observation: np.ndarray,
        *,
        deterministic: bool = False,
        client_id: str = "",
        model_version: int | None = None,
        timeout_s: float | None = None,
        inputs: Mapping[str, np.ndarray] | None = None,
    ) -> ActionResult:
        request = action_request(
            observation,
            deterministic=deterministic,
            client_id=client_id,
            model_version=model_version,
            inputs=inputs,
        )
        try:
            reply = await self._stub.GetAction(
                request, timeout=timeout_s or self.options.timeout_s, metadata=self._metadata
            )
        except grpc.RpcError as exc:
            raise remote_error(exc) from None
        return ActionResult.from_proto(reply)

    async def describe(self, *, timeout_s: float | None = None) -> pb.DescribeResponse:
        try:
            reply: pb.DescribeResponse = await self._stub.Describe(
                pb.DescribeRequest(),
                timeout=timeout_s or self.options.timeout_s,
                metadata=self._metadata,
            )
        except grpc.RpcError as exc:
            raise remote_error(exc) from None
        return reply

    async def session(
        self,
        robot: RobotSpec | RobotIdentity,
        *,
        robot_id: str = "robot",
        control_deadline_s: float | None = None,
        backup: BackupPolicy | None = None,
        pin_version: int | None = None,
    ) -> AsyncControlSession:
        described = None
        if backup is None and isinstance(robot, RobotSpec):
            described = await self.describe()
        identity, deadline, policy = session_parts(
            robot, robot_id, control_deadline_s, backup, pin_version, described
        )
        session = AsyncControlSession(self, identity, Watchdog(policy, deadline))
        await session.open()
        return session

    def _control_call(self) -> Any:
        return self._stub.Control(metadata=self._metadata)


class AsyncControlStream:
    """One ``Control`` call on asyncio and the reader task that drains it into a queue of
    its own (see ``ControlStream``)."""

    def __init__(self, client: AsyncPolicyClient) -> None:
        self.call: Any = client._control_call()
        self.replies: asyncio.Queue[pb.ControlReply | RemoteError] = asyncio.Queue()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def close(self) -> None:
        with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
            await self.call.done_writing()
        self.call.cancel()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def ended(self) -> RemoteError:
        """The status of a call that has ended (a write to it raised InvalidStateError)."""
        code = await self.call.code()
        details = await self.call.details()
        return RemoteError(code, details or "the stream ended")

    async def _read(self) -> None:
        try:
            async for reply in self.call:
                await self.replies.put(reply)
            await self.replies.put(
                RemoteError(grpc.StatusCode.CANCELLED, "the server ended the session")
            )
        except grpc.RpcError as exc:
            await self.replies.put(remote_error(exc))


class AsyncControlSession:
    """One robot's ``Control`` stream on asyncio; ``await step(...)`` once per cycle.

    Reopens a session whose server went away, as ``ControlSession`` does.
    """

    def __init__(
        self, client: AsyncPolicyClient, identity: RobotIdentity, watchdog: Watchdog
    ) -> None:
        self._client = client
        self.identity = identity
        self.watchdog = watchdog
        self.episode = EpisodeCounter()
        self.link = SessionLink(client.options)
        self._previous: np.ndarray | None = None
        self._stream: AsyncControlStream | None = None

    async def __aenter__(self) -> AsyncControlSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def misses(self) -> int:
        return self.watchdog.misses

    @property
    def session_id(self) -> str:
        return self.link.session_id

    @property
    def failure(self) -> RemoteError | None:
        """What broke the stream, until a reopen replaces it."""
        return self.link.failure

    @property
    def reopens(self) -> int:
        """Sessions opened again after a failure."""
        return self.link.reopens

    async def open(self) -> None:
        self._stream = AsyncControlStream(self._client)
        await self._stream.call.write(self.identity.open_message())
        try:
            first = await asyncio.wait_for(
                self._stream.replies.get(), self._client.options.open_timeout_s
            )
        except TimeoutError:
            await self.close()
            raise RemoteError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the server did not accept the session within "
                f"{self._client.options.open_timeout_s} s",
            ) from None
        if isinstance(first, RemoteError):
            await self.close()
            raise first
        self.link.opened = first.opened

    def start_episode(self, episode_id: str | None = None) -> None:
        self.episode.start(episode_id)
        self._previous = None

    async def step(
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
        deadline = time.monotonic() + self.watchdog.control_deadline_s
        obs = np.asarray(observation, dtype=np.float32)
        previous = self._previous if executed_action is None else executed_action
        message = step_message(
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
        result = await self._exchange(message, obs, previous, deadline)
        self._previous = None if terminated or truncated else result.action
        self.episode.advance(terminated or truncated)
        return result

    async def _exchange(
        self,
        message: pb.ControlStep,
        obs: np.ndarray,
        previous: np.ndarray | None,
        deadline: float,
    ) -> ActionResult:
        if self._stream is not None:
            self.link.take_pending(self._stream.replies.get_nowait)
        if self.link.reopen_due():
            await self._start_reopen(deadline)
        stream = self._stream
        if self.failure is not None or stream is None:
            return self.watchdog.fallback(obs, previous, f"session is broken: {self.failure}")
        try:
            await asyncio.wait_for(stream.call.write(message), deadline - time.monotonic())
        except (TimeoutError, ValueError):
            return self.watchdog.fallback(obs, previous, "control deadline passed")
        except grpc.RpcError as exc:
            self.link.send_failed(remote_error(exc))
            return self.watchdog.fallback(obs, previous, f"session failed: {self.failure}")
        except asyncio.InvalidStateError:  # the call had already ended: say how
            self.link.note(await stream.ended())
            return self.watchdog.fallback(obs, previous, f"session failed: {self.failure}")
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self.watchdog.fallback(obs, previous, "control deadline passed")
            try:
                reply = await asyncio.wait_for(stream.replies.get(), remaining)
            except TimeoutError:
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

    async def _start_reopen(self, deadline: float) -> None:
        old, self._stream = self._stream, None
        if old is not None:
            old.call.cancel()  # it already failed; its reader ends by itself
        self._stream = AsyncControlStream(self._client)
        self.link.reopening()
        # Written just before the step, so a reopen costs no extra control period.
        try:
            await asyncio.wait_for(
                self._stream.call.write(self.identity.open_message()),
                deadline - time.monotonic(),
            )
        except grpc.RpcError as exc:
            self.link.send_failed(remote_error(exc))
        except asyncio.InvalidStateError:
            self.link.note(await self._stream.ended())
        except (TimeoutError, ValueError) as exc:  # not written in time, or the call ended
            why = "no time left in this step" if isinstance(exc, TimeoutError) else str(exc)
            self.link.note(RemoteError(grpc.StatusCode.UNAVAILABLE, f"reopen failed: {why}"))

    async def close(self) -> None:
        if self._stream is not None:
            await self._stream.close()
