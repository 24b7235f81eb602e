"""Preallocated replay storage: a ring of recent transitions and a reservoir of older ones.

One :class:`TransitionArrays` block holds both: rows ``[0, ring_capacity)`` are the ring
(oldest first from ``ring_start``), rows ``[ring_capacity, ring_capacity +
reservoir_capacity)`` the reservoir. Nothing is allocated after construction.
Invariants: ``ring_stamp_ns`` is non-decreasing in ring order (the sampler's binary
search for the recent window relies on it), and a row leaves the ring only through
:meth:`push_ring`, which hands it back so the writer can offer it to the reservoir.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.data.columns import TransitionArrays, row_shape
from tether.data.replay.state import StateDict, expect


class StorageConfig(BaseModel):
    """How many transitions the buffer holds in its ring and in its reservoir."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    ring_capacity: int = Field(
        default=1_000_000,
        ge=1,
        description="newest transitions kept in arrival order (transitions)",
    )
    reservoir_capacity: int = Field(
        default=200_000,
        ge=0,
        description="older transitions kept by the age-decaying reservoir (transitions)",
    )


class TransitionStorage:
    """Fixed-size numpy columns plus the ring's geometry; knows nothing of sampling policy."""

    def __init__(self, obs_dim: int, act_dim: int, config: StorageConfig | None = None) -> None:
        self.config = config or StorageConfig()
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.ring_capacity = self.config.ring_capacity
        self.reservoir_capacity = self.config.reservoir_capacity
        self.rows = TransitionArrays.empty(
            self.ring_capacity + self.reservoir_capacity, obs_dim, act_dim
        )
        self.ring_stamp_ns = np.zeros(self.ring_capacity, dtype=np.int64)
        self.ring_start = 0
        self.ring_size = 0
        self.reservoir_size = 0

    def __len__(self) -> int:
        return self.ring_size + self.reservoir_size

    def ring_rows(self, logical: np.ndarray) -> np.ndarray:
        """Row numbers of ring positions counted from the oldest (0) to the newest."""
        return (self.ring_start + logical) % self.ring_capacity

    def ring_order_stamps(self) -> tuple[np.ndarray, np.ndarray]:
        """The ring's stamps oldest first, as two views (before and after the wrap)."""
        end = self.ring_start + self.ring_size
        head = self.ring_stamp_ns[self.ring_start : min(end, self.ring_capacity)]
        tail = self.ring_stamp_ns[: max(0, end - self.ring_capacity)]
        return head, tail

    def push_ring(self, data: TransitionArrays, stamps_ns: np.ndarray) -> TransitionArrays:
        """Append ``data`` at the ring's head; return the rows pushed out, oldest first.

        When ``data`` is longer than the ring, its own first rows pass straight through
        and are returned after the evicted old ones, as if appended one at a time.
        """
        n, cap = len(data), self.ring_capacity
        overflow = max(0, self.ring_size + n - cap)
        old_out = min(overflow, self.ring_size)
        through = overflow - old_out
        parts = []
        if old_out:
            parts.append(self.rows.take(self.ring_rows(np.arange(old_out))))
        if through:
            parts.append(data.take(slice(0, through)))
        # Rows passing straight through still advance the start, so every row lands where
        # one-at-a-time appends would put it, whatever the batch boundaries were.
        self.ring_start = (self.ring_start + old_out + through) % cap
        self.ring_size -= old_out
        kept = n - through
        if kept:
            slots = self.ring_rows(self.ring_size + np.arange(kept))
            self.rows.assign(slots, data.take(slice(through, n)))
            self.ring_stamp_ns[slots] = stamps_ns[through:]
            self.ring_size += kept
        if not parts:
            return TransitionArrays.empty(0, self.obs_dim, self.act_dim)
        return parts[0] if len(parts) == 1 else TransitionArrays.concat(parts)

    def put_reservoir(self, slots: np.ndarray, data: TransitionArrays) -> None:
        """Write ``data`` into reservoir slots (0-based); with repeats the last row wins."""
        self.rows.assign(self.ring_capacity + slots, data)
        self.reservoir_size = max(self.reservoir_size, int(slots.max()) + 1 if len(slots) else 0)

    def state_dict(self) -> StateDict:
        state: StateDict = {
            f"rows.{name}": col
            for name, col in zip(TransitionArrays._fields, self.rows, strict=True)
        }
        state["ring_stamp_ns"] = self.ring_stamp_ns
        state["geometry"] = np.array(
            [self.ring_start, self.ring_size, self.reservoir_size], dtype=np.int64
        )
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        self.prepare_load(state)()

    def prepare_load(self, state: Mapping[str, np.ndarray]) -> Callable[[], None]:
        """Check ``state`` completely; return the step that applies it (cannot fail)."""
        total = self.ring_capacity + self.reservoir_capacity
        owner = "TransitionStorage"
        columns = [
            expect(
                state, f"rows.{name}", (total, *row_shape(name, self.obs_dim, self.act_dim)), owner
            )
            for name in TransitionArrays._fields
        ]
        stamps = expect(state, "ring_stamp_ns", (self.ring_capacity,), owner)
        start, size, reservoir = (int(x) for x in expect(state, "geometry", (3,), owner))

        def apply() -> None:
            for column, value in zip(self.rows, columns, strict=True):
                column[...] = value
            self.ring_stamp_ns[...] = stamps
            self.ring_start, self.ring_size, self.reservoir_size = start, size, reservoir

        return apply
