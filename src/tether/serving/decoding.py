"""Request bytes that are not a valid message: INVALID_ARGUMENT, and one log line per interval.

grpc's own deserializer raised on bytes that do not parse (a truncated message, invalid
UTF-8 in a string field), which grpc answered ``UNKNOWN`` with a ~700-byte traceback per
call in the server's log, unbounded. Here a method's deserializer never raises: it
returns an :class:`Undecodable` marker, which the handler refuses with INVALID_ARGUMENT
naming the message type, and the refusals are logged at most once per
``LOG_INTERVAL_S`` with how many there were.

Invariant: no request bytes from the network reach a handler as anything but a parsed
message of the method's type or an ``Undecodable``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from google.protobuf.message import DecodeError, Message

from tether.v1 import policy_pb2 as pb

log = logging.getLogger(__name__)

LOG_INTERVAL_S = 10.0
M = TypeVar("M", bound=Message)


class Undecodable:
    """Bytes that did not parse as ``type_name``; ``reason`` is the parser's."""

    __slots__ = ("reason", "type_name")

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason

    def message(self) -> str:
        return (
            f"the request is not a valid {self.type_name} ({self.reason}); send bytes "
            "serialized from tether's proto (strings must be valid UTF-8)"
        )


class _RefusalLog:
    """Logs the first refusal of each interval and how many the interval held."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._next = 0.0
        self._suppressed = 0

    def refused(self, bad: Undecodable) -> None:
        now = time.monotonic()
        with self._lock:
            if now < self._next:
                self._suppressed += 1
                return
            suppressed, self._suppressed = self._suppressed, 0
            self._next = now + self._interval_s
        more = f" (and {suppressed} more in the last interval)" if suppressed else ""
        log.warning("refused an undecodable request: %s%s", bad.message(), more)


REFUSALS = _RefusalLog(LOG_INTERVAL_S)


def tolerant(message_type: type[M]) -> Callable[[bytes], M | Undecodable]:
    """A request deserializer for ``message_type`` that returns ``Undecodable`` instead
    of raising."""
    name = message_type.DESCRIPTOR.full_name

    def parse(data: bytes) -> M | Undecodable:
        try:
            return message_type.FromString(data)
        except (DecodeError, UnicodeDecodeError, ValueError) as exc:
            return Undecodable(name, str(exc) or type(exc).__name__)

    return parse


async def refuse(context: grpc.aio.ServicerContext[Any, Any], bad: Undecodable) -> None:
    """Abort the call with INVALID_ARGUMENT (raises)."""
    REFUSALS.refused(bad)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, bad.message())


def _control_reply(reply: pb.ControlReply | bytes) -> bytes:
    """A Control reply's bytes: encoded already by its batch, or serialized here."""
    return reply if type(reply) is bytes else reply.SerializeToString()  # type: ignore[union-attr]


def add_policy_service(servicer: Any, server: grpc.aio.Server) -> None:
    """``add_PolicyServiceServicer_to_server`` with tolerant request deserializers."""
    handlers = {
        "GetAction": grpc.unary_unary_rpc_method_handler(
            servicer.GetAction,
            request_deserializer=tolerant(pb.ActionRequest),
            response_serializer=pb.ActionResponse.SerializeToString,
        ),
        "Control": grpc.stream_stream_rpc_method_handler(
            servicer.Control,
            request_deserializer=tolerant(pb.ControlStep),
            response_serializer=_control_reply,
        ),
        "Describe": grpc.unary_unary_rpc_method_handler(
            servicer.Describe,
            request_deserializer=tolerant(pb.DescribeRequest),
            response_serializer=pb.DescribeResponse.SerializeToString,
        ),
    }
    service = pb.DESCRIPTOR.services_by_name["PolicyService"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)  # type: ignore[attr-defined]
