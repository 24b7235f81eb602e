"""Weights as bytes: safetensors serialization and the checks every tensor set must pass.

Weights cross process and disk boundaries only as safetensors bytes (a JSON header plus
raw little-endian arrays): nothing is ever unpickled. Invariant: a state returned by
:func:`parse_state` or accepted by :func:`check_state` has exactly the expected names
and shapes, dtype float32, and only finite values.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load, save as st_save

from tether.policy.errors import BundleFormatError, BundleTensorError

StateDict = Mapping[str, torch.Tensor]

# Per-tensor allowance for the safetensors JSON header (name, dtype, shape, offsets) and
# alignment padding; generous, because it only bounds what we agree to read.
_HEADER_BYTES_PER_TENSOR = 512
_HEADER_BYTES_FIXED = 8 * 1024


def expected_file_bytes(shapes: Mapping[str, tuple[int, ...]]) -> int:
    """An upper bound on the size of a float32 safetensors file holding ``shapes``."""
    data = 0
    for shape in shapes.values():
        n = 1
        for d in shape:
            n *= d
        data += 4 * n
    return data + _HEADER_BYTES_FIXED + _HEADER_BYTES_PER_TENSOR * len(shapes)


def serialize_state(state: StateDict) -> bytes:
    """Safetensors bytes of ``state`` (CPU, contiguous); equal states give equal bytes."""
    cpu = {k: v.detach().to("cpu").contiguous() for k, v in sorted(state.items())}
    return st_save(cpu)


def state_sha256(state: StateDict) -> str:
    """The sha256 a bundle's manifest records for ``state`` saved as a weights file."""
    return hashlib.sha256(serialize_state(state)).hexdigest()


def parse_state(data: bytes, source: str) -> dict[str, torch.Tensor]:
    """Tensors from safetensors bytes; anything else (a pickle, a zip) is refused."""
    try:
        return st_load(data)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        head = data[:2]
        hint = (
            " (it looks like a pickle: tether never unpickles; re-save with safetensors)"
            if head[:1] == b"\x80" or head == b"PK"
            else ""
        )
        raise BundleFormatError(f"{source}: not a safetensors file{hint}: {exc}") from exc


def check_state(state: StateDict, expected: Mapping[str, tuple[int, ...]], source: str) -> None:
    """Raise :class:`BundleTensorError` unless ``state`` matches ``expected`` exactly."""
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing or extra:
        raise BundleTensorError(
            f"{source}: tensor names differ from the architecture; missing {missing}, "
            f"unexpected {extra}; the weights were saved for another network"
        )
    for name, want in expected.items():
        t = state[name]
        if tuple(t.shape) != want:
            raise BundleTensorError(
                f"{source}: tensor {name!r} must have shape {want}, found {tuple(t.shape)}"
            )
        if t.dtype != torch.float32:
            raise BundleTensorError(
                f"{source}: tensor {name!r} must be float32, found {t.dtype}; convert with .float()"
            )
        if not bool(torch.isfinite(t).all()):
            n_bad = int((~torch.isfinite(t)).sum())
            raise BundleTensorError(
                f"{source}: tensor {name!r} must be finite, found {n_bad} NaN/Inf values"
            )
