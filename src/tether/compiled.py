"""Optional numba for tether's compiled kernels: importing it, and compiling a function.

Each kernel module (``tether.policy.kernel``, ``tether.safety.position.kernel``) has its
own switch: the environment variable ``switch`` set to ``0`` turns its compiled code off
(tests and a user with a broken numba install), and without numba the same functions run
as plain Python. Compiled functions are cached on disk, run with the GIL released and
never use fast-math (their results must not depend on the CPU). Serving's calls hand
them writable arrays only (:func:`writable`), so the layouts ``warm()`` compiles are all
they meet (``tests/serving/test_warm_start.py``). numba types a constant argument as a
literal and compiles the callee once more for it, so where a kernel calls one of its
functions with a constant and elsewhere with a variable, it passes ``int(0)`` or
``bool(True)`` (plain ``int64`` and ``bool`` to numba); ``benchmarks/bench_compile.py``
lists what a cold start compiles more than once.

On CPUs whose 512-bit vectors run at full speed (:data:`WIDE_VECTOR_CPUS`) numba is told
to use them: LLVM's tuning for every AVX-512 Intel core keeps its loops to 256 bits, a
choice made for the clock penalty of the first AVX-512 cores. The width changes how many
output units one instruction computes, never the operations a unit takes, so the bits
stay the same.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger(__name__)

# A warm-up still running after this many seconds is compiling (loading from numba's
# cache takes well under one): the user is told why the start waits.
COMPILING_NOTICE_S = 2.0


# LLVM's names of the x86_64 cores that run 512-bit vector code without lowering their
# clock much (Ice Lake and later Intel cores); older AVX-512 cores (Skylake-SP, Cascade
# Lake) and AMD's keep LLVM's own choice.
WIDE_VECTOR_CPUS = frozenset(
    {
        "icelake-client",
        "icelake-server",
        "tigerlake",
        "rocketlake",
        "sapphirerapids",
        "emeraldrapids",
        "graniterapids",
        "graniterapids-d",
    }
)


def import_numba(switch: str) -> Any | None:
    """The numba module, or None when it is not importable or ``switch`` is ``0``."""
    if os.environ.get(switch, "1") == "0":
        return None
    try:
        import numba
    except ImportError:  # pragma: no cover - depends on the install
        return None
    _prefer_wide_vectors(numba)
    return numba


def wide_vector_features(cpu: str, features: str) -> str | None:
    """The target features that let LLVM vectorise with 512-bit registers on ``cpu``
    (LLVM's name of it) with host ``features`` (``+avx512f,...``), or None where they
    would not pay (a CPU outside :data:`WIDE_VECTOR_CPUS`, or no AVX-512)."""
    if cpu not in WIDE_VECTOR_CPUS or "+avx512f" not in features.split(","):
        return None
    return f"{features},-prefer-256-bit"


def _prefer_wide_vectors(numba: Any) -> None:
    """Set numba's target features to :func:`wide_vector_features` of this host, unless
    the user chose a CPU or features (``NUMBA_CPU_NAME``, ``NUMBA_CPU_FEATURES``). Takes
    effect where numba has compiled nothing yet in this process (its code generator reads
    the features once); compiled code is cached per feature set."""
    config = numba.config
    if config.CPU_NAME is not None or config.CPU_FEATURES is not None:
        return
    binding: Any = importlib.import_module("llvmlite.binding")
    codegen: Any = importlib.import_module("numba.core.codegen")
    chosen = wide_vector_features(binding.get_host_cpu_name(), codegen.get_host_cpu_features())
    if chosen is not None:
        config.CPU_FEATURES = chosen


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


_TOLD = threading.Event()  # the notice is given once per process, by the first kernel


def _compiling(module: str) -> None:
    if _TOLD.is_set():
        return
    _TOLD.set()
    log.warning(
        "compiling tether's kernels for this machine (%s first): a first start takes up to "
        "a minute; numba caches the code and later starts load it in well under a second",
        module,
    )


def writable(array: np.ndarray) -> np.ndarray:
    """``array``, or a copy of it when it is read-only. numba compiles a read-only array as
    a signature of its own, and arrays straight off the wire (``np.frombuffer``) are
    read-only: a kernel that took one would compile at a robot's step, not at warm-up."""
    return array if array.flags.writeable else array.copy()


def warm_once(available: bool, compile_all: Callable[[], None]) -> Callable[[], float]:
    """A kernel module's ``warm()``: the first call runs ``compile_all`` (calls that compile
    every signature serving uses, or load them from numba's cache) and returns the
    seconds it took; later calls, and every call without numba, return 0.0 at once. A
    first call still compiling after :data:`COMPILING_NOTICE_S` logs a warning saying so
    (the first such call in the process): on a new machine, or after an upgrade, the
    kernels compile for tens of seconds before anything is served, once."""
    lock = threading.Lock()
    done: list[float] = []
    module = compile_all.__module__

    def warm() -> float:
        if not available:
            return 0.0
        with lock:
            if done:
                return 0.0
            start = time.perf_counter()
            notice = threading.Timer(COMPILING_NOTICE_S, _compiling, (module,))
            notice.daemon = True
            notice.start()
            try:
                compile_all()
            finally:
                notice.cancel()
            done.append(time.perf_counter() - start)
            return done[0]

    return warm
