"""Errors of the serving edge, each tied to the gRPC status code a client receives.

Every failure a request can meet on its way through the server is one of these; the
service turns it into exactly one status code, so a client can tell a bad request from
an overloaded server from a stale deadline. Messages name the thing, what was expected,
what was found, and what to do.

    TetherError
    └── ServingError                    (INTERNAL unless a subclass says otherwise)
        ├── RequestInvalid              INVALID_ARGUMENT: shape, NaN/Inf, magnitude, size
        ├── AdmissionRefused            RESOURCE_EXHAUSTED: rate, queue bound, memory
        ├── DeadlineExpired             DEADLINE_EXCEEDED: the deadline passed while queued
        ├── SpecMismatch                FAILED_PRECONDITION: session spec differs from the policy's
        ├── VersionUnavailable          FAILED_PRECONDITION: pinned version is not live
        ├── NoPolicyLoaded              UNAVAILABLE: nothing to serve yet (retry later)
        ├── BatchFailed                 INTERNAL: the batch this request was in failed
        ├── ServerSetupError            a server that cannot start (bad TLS path, bad config)
        └── RemoteError                 client side: a call answered with a non-OK status
"""

from __future__ import annotations

import grpc

from tether.errors import TetherError


class ServingError(TetherError):
    """Root of every error raised by ``tether.serving``."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class RequestInvalid(ServingError, ValueError):
    """A request that can never succeed as sent."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class AdmissionRefused(ServingError):
    """The server is over one of its limits; the request was not computed."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class DeadlineExpired(ServingError):
    """The caller's deadline passed while the request waited in the queue."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class SpecMismatch(ServingError):
    """A session whose robot does not match the policy being served."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class VersionUnavailable(ServingError):
    """A request pinned to a policy version the server does not serve."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class NoPolicyLoaded(ServingError):
    """The server has no verified policy to serve; clients should retry later."""

    code = grpc.StatusCode.UNAVAILABLE


class BatchFailed(ServingError):
    """The batch a request was part of failed as a whole (a bug or a broken engine)."""

    code = grpc.StatusCode.INTERNAL


class ServerSetupError(ServingError):
    """A server that cannot be started with the configuration given."""


class RemoteError(ServingError):
    """A call the server (or the transport) answered with a non-OK status (client side)."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code = code
        self.details = details
