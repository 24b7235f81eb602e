"""Pins the floating-point behaviour the engine's batch invariance relies on.

The engine computes every row with a GEMM of identical shape (``paths.py``), but that
alone does not make a row's result independent of its neighbours: on some x86_64 CPUs
MKL's default dispatch (seen on AMD EPYC with AVX-512) rounds a row differently by its
position inside the block, a 1-ulp difference between batch 1 and batch 64. MKL's
conditional numerical reproducibility (CNR) in ``COMPATIBLE`` mode runs one code path
on every x86_64 CPU, and with it a row's result depends only on the row.

CNR can only be chosen before MKL's first call in the process, so
:mod:`tether.policy.networks`, which every network, engine path and learner of tether
imports, pins it on import (importing torch calls no MKL routine), and :func:`blas_pin`
records whether it took. The engine refuses its torch CPU paths where it did not
(:func:`require_pinned_blas`), instead of silently losing the guarantee. Torch builds
without MKL (aarch64, macOS) have nothing to pin: their CPU GEMM is OpenBLAS/Accelerate,
whose kernels sum each output over ``k`` in one order for every row.
"""

from __future__ import annotations

import ctypes
import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch

# mkl_service.h
_MKL_CBWR_BRANCH = 1
_MKL_CBWR_COMPATIBLE = 3
_MKL_CBWR_SUCCESS = 0
_MKL_CBWR_ERR_MODE_CHANGE_FAILURE = -8


class BlasPinState(enum.StrEnum):
    PINNED = "pinned"  # MKL runs in CNR COMPATIBLE mode
    NOT_APPLICABLE = "not_applicable"  # this torch's CPU BLAS is not MKL
    TOO_LATE = "too_late"  # MKL was already used in this process before tether was imported
    FAILED = "failed"  # MKL refused the mode for another reason


@dataclass(frozen=True)
class BlasPin:
    state: BlasPinState
    detail: str

    @property
    def batch_invariant(self) -> bool:
        return self.state in (BlasPinState.PINNED, BlasPinState.NOT_APPLICABLE)


_lock = threading.Lock()
_pin: BlasPin | None = None


def _mkl_cbwr() -> tuple[Callable[[int], int], Callable[[int], int]] | None:
    if not torch.backends.mkl.is_available():  # type: ignore[no-untyped-call]
        return None
    lib_path = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"
    try:
        lib = ctypes.CDLL(str(lib_path))
        get, set_ = lib.mkl_serv_cbwr_get, lib.mkl_serv_cbwr_set
    except (OSError, AttributeError):
        return None
    get.argtypes, get.restype = [ctypes.c_int], ctypes.c_int
    set_.argtypes, set_.restype = [ctypes.c_int], ctypes.c_int
    return cast(Callable[[int], int], get), cast(Callable[[int], int], set_)


def blas_pin() -> BlasPin:
    """Put MKL in CNR COMPATIBLE mode once per process and say whether it took."""
    global _pin
    with _lock:
        if _pin is not None:
            return _pin
        funcs = _mkl_cbwr()
        if funcs is None:
            _pin = BlasPin(BlasPinState.NOT_APPLICABLE, "torch's CPU BLAS is not MKL")
            return _pin
        get, set_ = funcs
        if get(_MKL_CBWR_BRANCH) == _MKL_CBWR_COMPATIBLE:
            _pin = BlasPin(BlasPinState.PINNED, "MKL CNR mode COMPATIBLE (already set)")
            return _pin
        code = set_(_MKL_CBWR_COMPATIBLE)
        if code == _MKL_CBWR_SUCCESS:
            _pin = BlasPin(BlasPinState.PINNED, "MKL CNR mode COMPATIBLE")
        elif code == _MKL_CBWR_ERR_MODE_CHANGE_FAILURE:
            _pin = BlasPin(
                BlasPinState.TOO_LATE,
                "MKL had already run a routine in this process before tether's networks "
                "were imported, so its numerical mode can no longer be pinned",
            )
        else:
            _pin = BlasPin(BlasPinState.FAILED, f"mkl_cbwr_set(COMPATIBLE) returned {code}")
        return _pin


def require_pinned_blas(path: str) -> None:
    """Raise ``EngineConfigError`` if ``path`` (a torch CPU path) would not be batch-invariant."""
    pin = blas_pin()
    if pin.batch_invariant:
        return
    from tether.policy.errors import EngineConfigError

    raise EngineConfigError(
        f"execution {path!r} on cpu cannot guarantee bit-identical rows at every batch size: "
        f"{pin.detail}. Import tether.policy.networks (or anything that uses it) before "
        "running any torch matmul, or use execution='numpy'"
    )
