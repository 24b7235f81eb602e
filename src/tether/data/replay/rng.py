"""A numpy PCG64 generator whose state fits in a state_dict of arrays.

The writer and the sampler draw from their own generators; saving and restoring them
with the storage makes a restored buffer continue exactly as the original would have.
"""

from __future__ import annotations

import numpy as np

from tether.data.errors import ReplayStateError

_MASK64 = (1 << 64) - 1


def make_rng(seed: int | None) -> np.random.Generator:
    """A PCG64 generator (``seed=None``: fresh entropy from the OS)."""
    return np.random.Generator(np.random.PCG64(seed))


def rng_state(rng: np.random.Generator) -> np.ndarray:
    """The generator's full state as six uint64 words."""
    state = rng.bit_generator.state
    if state["bit_generator"] != "PCG64":
        raise ReplayStateError(
            f"replay generators must be PCG64, got {state['bit_generator']}; build them "
            "with tether.data.replay.rng.make_rng"
        )
    s, inc = state["state"]["state"], state["state"]["inc"]
    words = [s >> 64, s & _MASK64, inc >> 64, inc & _MASK64, state["has_uint32"], state["uinteger"]]
    return np.array(words, dtype=np.uint64)


def set_rng_state(rng: np.random.Generator, words: np.ndarray) -> None:
    """Restore a state saved by :func:`rng_state`."""
    if words.shape != (6,):
        raise ReplayStateError(f"generator state must have shape (6,), got {words.shape}")
    w = [int(x) for x in words]
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": (w[0] << 64) | w[1], "inc": (w[2] << 64) | w[3]},
        "has_uint32": w[4],
        "uinteger": w[5],
    }
