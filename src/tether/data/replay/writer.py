"""The replay writer: what enters the ring, and which evicted rows the reservoir keeps.

Every new transition goes to the ring. A row pushed out of the full ring is offered to
the reservoir and admitted with ``admit_probability`` (``priority_admit_probability``
for human interventions and safety events). An admitted row fills a free slot or, once
the reservoir is full, replaces a uniformly chosen resident. A resident therefore
survives each later replacement with probability ``1 - 1/reservoir_capacity``: after
``k`` replacements it is still there with probability ``(1 - 1/R)^k ≈ exp(-k/R)``, a
keep probability that decays with age, so history thins out but never vanishes at once
when the ring wraps (exponential biased reservoir sampling, Aggarwal 2006).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.data.columns import TransitionArrays
from tether.data.replay.rng import make_rng, rng_state, set_rng_state
from tether.data.replay.state import StateDict, expect
from tether.data.replay.storage import TransitionStorage
from tether.data.step import HUMAN_SOURCE_CODE


class WriterConfig(BaseModel):
    """Which evicted transitions the reservoir keeps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    admit_probability: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="chance an ordinary evicted transition enters the reservoir (probability)",
    )
    priority_admit_probability: float = Field(
        default=1.0,
        ge=0,
        le=1,
        description="the same chance for a prioritized transition (probability)",
    )
    prioritize_interventions: bool = Field(
        default=True,
        description="treat transitions whose action a person executed as prioritized (bool)",
    )
    prioritize_safety_events: bool = Field(
        default=True,
        description="treat transitions where any safety check fired as prioritized (bool)",
    )
    seed: int | None = Field(
        default=None, description="seed of the admission draws; None: OS entropy (int)"
    )


@dataclass(frozen=True)
class WriterStats:
    offered: int  # rows pushed out of the ring and offered to the reservoir
    admitted: int  # of those, kept (into a free slot or replacing a resident)
    replaced: int  # admissions that replaced a resident


class ReservoirWriter:
    """Writes new rows into a :class:`TransitionStorage` and runs the reservoir's admission."""

    def __init__(self, config: WriterConfig | None = None) -> None:
        self.config = config or WriterConfig()
        self._rng = make_rng(self.config.seed)
        self._latest_stamp_ns = np.iinfo(np.int64).min
        self._counts = np.zeros(3, dtype=np.int64)  # offered, admitted, replaced

    def extend(self, storage: TransitionStorage, data: TransitionArrays) -> None:
        """Append ``data`` (oldest first) to ``storage``."""
        if not len(data):
            return
        # A row's stamp is the newest ingress time seen so far, which keeps the ring sorted
        # even when the recorder hands rows over slightly out of time order.
        stamps = np.maximum.accumulate(np.maximum(data.ingress_ns, self._latest_stamp_ns))
        self._latest_stamp_ns = int(stamps[-1])
        evicted = storage.push_ring(data, stamps)
        if len(evicted) and storage.reservoir_capacity:
            self._offer(storage, evicted)

    def stats(self) -> WriterStats:
        offered, admitted, replaced = (int(x) for x in self._counts)
        return WriterStats(offered, admitted, replaced)

    def _offer(self, storage: TransitionStorage, rows: TransitionArrays) -> None:
        prioritized = np.zeros(len(rows), dtype=bool)
        if self.config.prioritize_interventions:
            prioritized |= rows.action_sources == HUMAN_SOURCE_CODE
        if self.config.prioritize_safety_events:
            prioritized |= rows.safety_checks != 0
        chance = np.where(
            prioritized, self.config.priority_admit_probability, self.config.admit_probability
        )
        # Two draws per offered row, whatever happens to it, so the outcome depends only on
        # the sequence of rows and not on how they were batched (a log rebuild matches).
        draws = self._rng.random((len(rows), 2))
        admitted = np.flatnonzero(draws[:, 0] < chance)
        capacity, size = storage.reservoir_capacity, storage.reservoir_size
        fill = min(len(admitted), capacity - size)
        # Rows are admitted in order: free slots first, then uniform replacement; a slot
        # drawn twice ends with the later row, exactly as one-at-a-time admission would.
        victims = (draws[admitted[fill:], 1] * capacity).astype(np.int64)
        slots = np.concatenate([size + np.arange(fill), victims])
        if len(admitted):
            storage.put_reservoir(slots, rows.take(admitted))
        self._counts += (len(rows), len(admitted), len(admitted) - fill)

    def state_dict(self) -> StateDict:
        return {
            "rng": rng_state(self._rng),
            "latest_stamp_ns": np.array([self._latest_stamp_ns], dtype=np.int64),
            "counts": self._counts.copy(),
        }

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        self.prepare_load(state)()

    def prepare_load(self, state: Mapping[str, np.ndarray]) -> Callable[[], None]:
        """Check ``state`` completely; return the step that applies it (cannot fail)."""
        rng = expect(state, "rng", (6,), "ReservoirWriter")
        latest = int(expect(state, "latest_stamp_ns", (1,), "ReservoirWriter")[0])
        counts = expect(state, "counts", (3,), "ReservoirWriter")

        def apply() -> None:
            set_rng_state(self._rng, rng)
            self._latest_stamp_ns = latest
            self._counts[...] = counts

        return apply
