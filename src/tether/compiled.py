"""Optional numba for tether's compiled kernels: importing it, and compiling a function.

Each kernel module (``tether.policy.kernel``, ``tether.safety.position.kernel``) has its
own switch: the environment variable ``switch`` set to ``0`` turns its compiled code off
(tests and a user with a broken numba install), and without numba the same functions run
as plain Python. Compiled functions are cached on disk, run with the GIL released and
never use fast-math (their results must not depend on the CPU).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar, cast

F = TypeVar("F", bound=Callable[..., Any])


def import_numba(switch: str) -> Any | None:
    """The numba module, or None when it is not importable or ``switch`` is ``0``."""
    if os.environ.get(switch, "1") == "0":
        return None
    try:
        import numba
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return numba


def compiler(numba: Any | None, **options: Any) -> Callable[[F], F]:
    """A decorator compiling a function with ``numba.njit(**options)`` (cached, nogil, no
    fast-math), or leaving it as it is without numba."""

    def compile_one(fn: F) -> F:
        if numba is None:
            return fn
        settings = {"nogil": True, "fastmath": False, **options}
        try:
            return cast(F, numba.njit(cache=True, **settings)(fn))
        except RuntimeError:  # no writable cache directory (a read-only install): per process
            return cast(F, numba.njit(**settings)(fn))

    return compile_one
