"""Errors of the serving edge, each tied to the gRPC status code a client receives.

Every failure a request can meet on its way through the server is one of these; the
service turns it into exactly one status code, so a client can tell a bad request from
an overloaded server from a stale deadline. Messages name the thing, what was expected,
what was found, and what to do.

    TetherError
    └── ServingError                    (INTERNAL unless a subclass says otherwise)
        ├── RequestInvalid              INVALID_ARGUMENT: shape, NaN/Inf, magnitude, size
        ├── AdmissionRefused            RESOURCE_EXHAUSTED: rate, queue, sessions, memory
        ├── DuplicateSession            ALREADY_EXISTS: the robot id has a live session
        ├── DeadlineExpired             DEADLINE_EXCEEDED: the deadline passed while queued
        ├── SpecMismatch                FAILED_PRECONDITION: session spec differs from the policy's
        ├── BatchFailed                 INTERNAL: the batch this request was in failed
        ├── ServerSetupError            a server that cannot start (bad TLS path, bad config)
        └── RemoteError                 client side: a call answered with a non-OK status

The versions layer raises its own errors (``tether.versions.errors``, no grpc there);
:data:`VERSION_STATUS` is the one table that gives each its status code, and
:func:`status_code` answers for either kind.
"""

from __future__ import annotations

import grpc

from tether.errors import TetherError
from tether.versions.errors import (
    GateInputError,
    IllegalTransition,
    NoPolicyLoaded,
    UnknownVersion,
    VerdictFileError,
    VersionError,
    VersionUnavailable,
)


class ServingError(TetherError):
    """Root of every error raised by ``tether.serving``."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL


class RequestInvalid(ServingError, ValueError):
    """A request that can never succeed as sent."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class AdmissionRefused(ServingError):
    """The server is over one of its limits; the request was not computed."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class DuplicateSession(ServingError):
    """A session for a robot id that already has a live one on this server."""

    code = grpc.StatusCode.ALREADY_EXISTS


class DeadlineExpired(ServingError):
    """The caller's deadline passed while the request waited in the queue."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class SpecMismatch(ServingError):
    """A session whose robot does not match the policy being served."""

    code = grpc.StatusCode.FAILED_PRECONDITION


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


# Most specific first: the first class an error is an instance of gives its code.
VERSION_STATUS: tuple[tuple[type[VersionError], grpc.StatusCode], ...] = (
    (NoPolicyLoaded, grpc.StatusCode.UNAVAILABLE),  # nothing live yet: retry later
    (UnknownVersion, grpc.StatusCode.FAILED_PRECONDITION),
    (VersionUnavailable, grpc.StatusCode.FAILED_PRECONDITION),  # pin to an unservable version
    (IllegalTransition, grpc.StatusCode.FAILED_PRECONDITION),
    (VerdictFileError, grpc.StatusCode.FAILED_PRECONDITION),
    (GateInputError, grpc.StatusCode.FAILED_PRECONDITION),
    (VersionError, grpc.StatusCode.FAILED_PRECONDITION),
)


def status_code(exc: ServingError | VersionError) -> grpc.StatusCode:
    """The status code a client receives for ``exc``."""
    if isinstance(exc, ServingError):
        return exc.code
    for cls, code in VERSION_STATUS:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


# What a request can fail with at the edge: its own errors and the versions layer's.
RequestError = ServingError | VersionError
REQUEST_ERRORS = (ServingError, VersionError)
