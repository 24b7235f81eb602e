"""Request validation: the first thing the server does with anything from the network.

Turns wire values into float32 arrays and refuses what can never be served:
a wrong length, NaN/Inf, magnitudes beyond the configured bound, over-long ids.
Invariant: an array returned from here has the expected shape and only finite values
within bounds; every refusal is ``RequestInvalid`` naming the field, what was expected
and what was found (the first offending index included), so a robot integrator can fix
their driver from the message alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tether.serving.config import ValidationConfig
from tether.serving.errors import RequestInvalid


def vector(values: Sequence[float], field: str, expected_len: int, max_abs: float) -> np.ndarray:
    """``values`` as a finite float32 vector of ``expected_len`` entries within ``max_abs``."""
    if len(values) != expected_len:
        raise RequestInvalid(
            f"{field} has {len(values)} entries, expected {expected_len}; send one value per "
            f"entry of the robot spec (see Describe)"
        )
    arr = np.array(values, dtype=np.float32)
    finite = np.isfinite(arr)
    if not finite.all():
        i = int(np.argmin(finite))
        raise RequestInvalid(f"{field}[{i}] is {arr[i]}, expected a finite number")
    if expected_len:
        i = int(np.argmax(np.abs(arr)))
        if abs(float(arr[i])) > max_abs:
            raise RequestInvalid(
                f"{field}[{i}] is {arr[i]:g}, expected a magnitude of at most {max_abs:g} "
                "(validation.max_abs_observation)"
            )
    return arr


def identifier(value: str, field: str, config: ValidationConfig) -> str:
    if len(value) > config.max_id_length:
        raise RequestInvalid(
            f"{field} is {len(value)} characters long, expected at most {config.max_id_length}"
        )
    return value


def scalar(value: float, field: str, max_abs: float) -> float:
    if not np.isfinite(value) or abs(value) > max_abs:
        raise RequestInvalid(f"{field} is {value}, expected a finite number within ±{max_abs:g}")
    return float(value)
