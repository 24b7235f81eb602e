"""Request validation: the first thing the server does with anything from the network.

Turns wire values into float32 arrays and refuses what can never be served:
a wrong length, NaN/Inf, magnitudes beyond the configured bound, over-long ids.
Invariant: an array returned from here has the expected shape and only finite values
within bounds; every refusal is ``RequestInvalid`` naming the field, what was expected
and what was found (the first offending index included), so a robot integrator can fix
their driver from the message alone.

Named inputs (a policy's images beside its state vector) are checked by name, dtype and
shape, and float ones for finiteness and magnitude, by :func:`named_inputs`.

This runs on every request, so a good vector costs one conversion and one vectorized
comparison; the index-finding work happens only for a vector that is refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tether.serving.config import ValidationConfig
from tether.serving.errors import RequestInvalid


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One named input of the served policy: what one request item must carry."""

    name: str
    dtype: np.dtype[np.generic]
    shape: tuple[int, ...]  # one item's shape, without a batch dimension


class WireTensor(Protocol):
    """``tether.v1.InputTensor`` as read here."""

    @property
    def name(self) -> str: ...
    @property
    def shape(self) -> Sequence[int]: ...
    @property
    def float32_values(self) -> Sequence[float]: ...
    @property
    def uint8_values(self) -> bytes: ...


def named_inputs(
    tensors: Sequence[WireTensor], expected: Sequence[TensorSpec], field: str, max_abs: float
) -> dict[str, np.ndarray]:
    """Each of ``expected`` from ``tensors`` by name, as an array of its dtype and shape.

    Refuses a missing, unknown or repeated name, values in the other dtype's field, a
    shape other than the input's, and (float inputs) NaN/Inf or magnitudes beyond
    ``max_abs``.
    """
    wanted = {t.name: t for t in expected}
    out: dict[str, np.ndarray] = {}
    for i, tensor in enumerate(tensors):
        where = f"{field}[{i}]"
        spec = wanted.get(tensor.name)
        if spec is None:
            known = ", ".join(repr(n) for n in wanted) or "none"
            raise RequestInvalid(
                f"{where}.name is {tensor.name!r}, expected one of the policy's named inputs "
                f"besides the observation: {known} (see Describe)"
            )
        if spec.name in out:
            raise RequestInvalid(f"{where}: input {spec.name!r} appears twice; send it once")
        shape = tuple(int(d) for d in tensor.shape)
        if shape != spec.shape:
            raise RequestInvalid(
                f"{where} ({spec.name!r}) has shape {list(shape)}, expected {list(spec.shape)}"
            )
        count = int(np.prod(spec.shape, dtype=np.int64))
        if spec.dtype.kind == "u":
            if len(tensor.float32_values):
                raise RequestInvalid(
                    f"{where} ({spec.name!r}) carries float32_values, expected uint8_values "
                    "(the input is uint8)"
                )
            data = tensor.uint8_values
            if len(data) != count:
                raise RequestInvalid(
                    f"{where} ({spec.name!r}) has {len(data)} bytes in uint8_values, "
                    f"expected {count} for shape {list(spec.shape)}"
                )
            out[spec.name] = np.frombuffer(data, dtype=np.uint8).reshape(spec.shape)
            continue
        if len(tensor.uint8_values):
            raise RequestInvalid(
                f"{where} ({spec.name!r}) carries uint8_values, expected float32_values "
                "(the input is float32)"
            )
        values = tensor.float32_values
        if len(values) != count:
            raise RequestInvalid(
                f"{where} ({spec.name!r}) has {len(values)} float32_values, expected {count} "
                f"for shape {list(spec.shape)}"
            )
        arr = np.fromiter(values, np.float32, count).reshape(spec.shape)
        if count and not np.abs(arr).max() <= max_abs:
            raise refusal(arr, f"{where}.float32_values", max_abs)
        out[spec.name] = arr
    missing = [name for name in wanted if name not in out]
    if missing:
        raise RequestInvalid(
            f"{field} lacks the input(s) {missing}; the policy needs every named input "
            "besides the observation in each request (see Describe)"
        )
    return out


def observation(values: Sequence[float], field: str, expected_len: int) -> np.ndarray:
    """``values`` as a float32 vector of ``expected_len`` entries, its values unchecked:
    the inference pipeline checks a whole batch's observations against
    ``validation.max_abs_observation`` in one pass (``InferencePipeline``)."""
    if len(values) != expected_len:
        raise RequestInvalid(
            f"{field} has {len(values)} entries, expected {expected_len}; send one value per "
            f"entry of the robot spec (see Describe)"
        )
    # fromiter reads a protobuf repeated field without building a list first.
    return np.fromiter(values, np.float32, expected_len)


def vector(values: Sequence[float], field: str, expected_len: int, max_abs: float) -> np.ndarray:
    """``values`` as a finite float32 vector of ``expected_len`` entries within ``max_abs``."""
    arr = observation(values, field, expected_len)
    # One pass decides: NaN compares false and Inf exceeds any finite bound.
    if expected_len and not np.abs(arr).max() <= max_abs:
        raise refusal(arr, field, max_abs)
    return arr


def refusal(arr: np.ndarray, field: str, max_abs: float) -> RequestInvalid:
    """The message for values that failed (any shape): the first non-finite entry, else
    the largest, named by its index (``field[3]``, ``field[0, 3]``)."""
    flat = arr.reshape(-1)
    finite = np.isfinite(flat)
    i = int(np.argmin(finite)) if not finite.all() else int(np.argmax(np.abs(flat)))
    where = ", ".join(str(int(k)) for k in np.unravel_index(i, arr.shape))
    if not finite[i]:
        return RequestInvalid(f"{field}[{where}] is {flat[i]}, expected a finite number")
    return RequestInvalid(
        f"{field}[{where}] is {flat[i]:g}, expected a magnitude of at most {max_abs:g} "
        "(validation.max_abs_observation)"
    )


def identifier(value: str, field: str, config: ValidationConfig) -> str:
    if len(value) > config.max_id_length:
        raise RequestInvalid(
            f"{field} is {len(value)} characters long, expected at most {config.max_id_length}"
        )
    return value


def scalar(value: float, field: str, max_abs: float) -> float:
    if not math.isfinite(value) or abs(value) > max_abs:
        raise RequestInvalid(f"{field} is {value}, expected a finite number within ±{max_abs:g}")
    return float(value)


# Counts, indices and stamps that the experience log stores as int64 (the wire's uint64
# goes beyond it: a stamp of 2**63 made a whole flush of other robots' rows fail).
MAX_STORED_INT = 2**63 - 1


def stored_int(value: int, field: str) -> int:
    if value > MAX_STORED_INT:
        raise RequestInvalid(f"{field} is {value}, expected at most {MAX_STORED_INT} (int64)")
    return int(value)


# Slack for an executed action read back from a robot's float32 pipeline.
_BOUND_SLACK = 1e-4


def within(arr: np.ndarray, field: str, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``arr`` unchanged if every entry lies in ``[low, high]`` (the action bounds)."""
    lo = np.asarray(low, dtype=np.float32)
    hi = np.asarray(high, dtype=np.float32)
    slack = _BOUND_SLACK * np.maximum(1.0, hi - lo)
    outside = (arr < lo - slack) | (arr > hi + slack)
    if outside.any():
        i = int(np.argmax(outside))
        raise RequestInvalid(
            f"{field}[{i}] is {arr[i]:g}, expected within the action bounds "
            f"[{lo[i]:g}, {hi[i]:g}] (Describe's action_low/action_high); report the action "
            "the robot executed, in the policy's action units"
        )
    return arr
