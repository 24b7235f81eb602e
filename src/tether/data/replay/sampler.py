"""The replay sampler: a fixed share of each batch from the recent window, the rest from older data.

"Recent" is measured on the ingress clock, relative to the newest transition in the
buffer (not the wall clock, so a buffer rebuilt from the log samples as the live one
did): rows whose stamp is within ``recent_window_s`` of the newest. "Older" is every
other ring row plus the whole reservoir. Each batch takes ``recent_fraction`` of its
rows from the recent part in expectation (the fractional row is drawn at random, so
small batches keep the ratio on average), all with replacement. When one part is empty
the other supplies the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.data.errors import DataError
from tether.data.replay.rng import make_rng, rng_state, set_rng_state
from tether.data.replay.state import StateDict, expect
from tether.data.replay.storage import TransitionStorage


class SamplerConfig(BaseModel):
    """How each batch is split between recent and older experience."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    recent_fraction: float = Field(
        default=0.7,
        ge=0,
        le=1,
        description="share of each batch drawn from the recent window (fraction)",
    )
    recent_window_s: float = Field(
        default=60.0,
        gt=0,
        description="age before the newest transition that still counts as recent; inf: all (s)",
    )
    seed: int | None = Field(
        default=None, description="seed of the sampling draws; None: OS entropy (int)"
    )


class SampleIndex(NamedTuple):
    """Storage rows of one batch: the first ``recent`` of them come from the recent window."""

    rows: np.ndarray  # (B,) int64 into TransitionStorage.rows
    recent: int


class RecentMixSampler:
    """Draws row numbers from a :class:`TransitionStorage`."""

    def __init__(self, config: SamplerConfig | None = None) -> None:
        self.config = config or SamplerConfig()
        self._rng = make_rng(self.config.seed)
        # math.inf is allowed and means "everything is recent": uniform sampling.
        self._window_ns = int(min(self.config.recent_window_s * 1e9, 2.0**62))

    def sample(self, storage: TransitionStorage, batch_size: int) -> SampleIndex:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not len(storage):
            raise DataError("cannot sample from an empty replay buffer; extend it first")
        older_in_ring = self._older_in_ring(storage)
        recent_available = storage.ring_size - older_in_ring
        older_available = older_in_ring + storage.reservoir_size
        # One uniform draw per row (plus one for the fractional row): Generator.integers
        # costs several times more per call, and this runs once per learner update.
        u = self._rng.random(batch_size + 1)
        target = self.config.recent_fraction * batch_size
        n_recent = int(target) + int(u[batch_size] < target - int(target))
        if not older_available:
            n_recent = batch_size
        elif not recent_available:
            n_recent = 0
        recent = storage.ring_rows(
            older_in_ring + (u[:n_recent] * recent_available).astype(np.int64)
        )
        pick = (u[n_recent:batch_size] * older_available).astype(np.int64)
        older = np.where(
            pick < older_in_ring,
            storage.ring_rows(pick),
            storage.ring_capacity + pick - older_in_ring,
        )
        return SampleIndex(np.concatenate([recent, older]), n_recent)

    def _older_in_ring(self, storage: TransitionStorage) -> int:
        """How many ring rows, from the oldest, lie before the recent window."""
        if not storage.ring_size:
            return 0
        head, tail = storage.ring_order_stamps()
        newest = tail[-1] if len(tail) else head[-1]
        threshold = newest - self._window_ns
        if head[-1] >= threshold:
            return int(np.searchsorted(head, threshold, side="left"))
        return len(head) + int(np.searchsorted(tail, threshold, side="left"))

    def state_dict(self) -> StateDict:
        return {"rng": rng_state(self._rng)}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        self.prepare_load(state)()

    def prepare_load(self, state: Mapping[str, np.ndarray]) -> Callable[[], None]:
        """Check ``state`` completely; return the step that applies it (cannot fail)."""
        rng = expect(state, "rng", (6,), "RecentMixSampler")
        return lambda: set_rng_state(self._rng, rng)
