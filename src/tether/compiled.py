"""Optional numba for tether's compiled kernels: importing it, and compiling a function.

Each kernel module (``tether.policy.kernel``, ``tether.safety.position.kernel``) has its
own switch: the environment variable ``switch`` set to ``0`` turns its compiled code off
(tests and a user with a broken numba install), and without numba the same functions run
as plain Python. Compiled functions are cached on disk, run with the GIL released and
never use fast-math (their results must not depend on the CPU). Serving's calls hand
them writable arrays only (:func:`writable`), so the layouts ``warm()`` compiles are all
they meet (``tests/serving/test_warm_start.py``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np

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


def writable(array: np.ndarray) -> np.ndarray:
    """``array``, or a copy of it when it is read-only. numba compiles a read-only array as
    a signature of its own, and arrays straight off the wire (``np.frombuffer``) are
    read-only: a kernel that took one would compile at a robot's step, not at warm-up."""
    return array if array.flags.writeable else array.copy()


def warm_once(available: bool, compile_all: Callable[[], None]) -> Callable[[], float]:
    """A kernel module's ``warm()``: the first call runs ``compile_all`` (calls that compile
    every signature serving uses, or load them from numba's cache) and returns the
    seconds it took; later calls, and every call without numba, return 0.0 at once."""
    lock = threading.Lock()
    done: list[float] = []

    def warm() -> float:
        if not available:
            return 0.0
        with lock:
            if done:
                return 0.0
            start = time.perf_counter()
            compile_all()
            done.append(time.perf_counter() - start)
            return done[0]

    return warm
