"""Every error a request can meet has one status code; the versions layer's come from one table."""

from __future__ import annotations

import grpc
import pytest

from tether.serving.errors import (
    VERSION_STATUS,
    AdmissionRefused,
    RequestInvalid,
    status_code,
)
from tether.versions.errors import (
    GateInputError,
    IllegalTransition,
    NoPolicyLoaded,
    UnknownVersion,
    VerdictFileError,
    VersionError,
    VersionUnavailable,
)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (NoPolicyLoaded("none live"), grpc.StatusCode.UNAVAILABLE),
        (VersionUnavailable("pinned to a candidate"), grpc.StatusCode.FAILED_PRECONDITION),
        (UnknownVersion("no version 9"), grpc.StatusCode.FAILED_PRECONDITION),
        (IllegalTransition("live to shadow"), grpc.StatusCode.FAILED_PRECONDITION),
        (VerdictFileError("bad file"), grpc.StatusCode.FAILED_PRECONDITION),
        (GateInputError("other weights"), grpc.StatusCode.FAILED_PRECONDITION),
        (VersionError("cannot"), grpc.StatusCode.FAILED_PRECONDITION),
        (RequestInvalid("NaN"), grpc.StatusCode.INVALID_ARGUMENT),
        (AdmissionRefused("rate"), grpc.StatusCode.RESOURCE_EXHAUSTED),
    ],
)
def test_each_error_has_its_status_code(error: Exception, code: grpc.StatusCode) -> None:
    assert status_code(error) is code  # type: ignore[arg-type]


def test_the_table_covers_every_versions_error_and_lists_subclasses_first() -> None:
    classes = [cls for cls, _ in VERSION_STATUS]
    for cls in (VersionError, *_subclasses(VersionError)):
        assert cls in classes, f"{cls.__name__} has no status code in VERSION_STATUS"
    for i, cls in enumerate(classes):
        assert not any(issubclass(later, cls) for later in classes[i + 1 :] if later is not cls), (
            f"{cls.__name__} comes before one of its subclasses, which would never match"
        )


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out
