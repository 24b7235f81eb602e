"""Checking a state_dict against what a replay component expects, with a useful message."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tether.data.errors import ReplayStateError

StateDict = dict[str, np.ndarray]


def expect(
    state: Mapping[str, np.ndarray], key: str, shape: tuple[int, ...], owner: str
) -> np.ndarray:
    """``state[key]`` if it exists with ``shape``; otherwise a ReplayStateError saying why."""
    if key not in state:
        raise ReplayStateError(
            f"{owner} state_dict has no {key!r} (keys: {sorted(state)}); it was saved by "
            "another kind of component"
        )
    value = np.asarray(state[key])
    if value.shape != shape:
        raise ReplayStateError(
            f"{owner} state_dict {key!r} must have shape {shape}, got {value.shape}; build the "
            "component with the same capacity and dimensions as the one that saved it"
        )
    return value
