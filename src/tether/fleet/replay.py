"""The replay actor: the one place every edge's transitions flow into, for the learner.

Edges push batches (:meth:`ReplayService.push`); the learner pulls them
(:meth:`ReplayService.pull`) into its own replay buffer, where it samples. The
queue is bounded in transitions: when a push would overflow it, the oldest rows go
(the learner wants recent data) and are counted in ``dropped``, so
``offered == consumed + dropped + held`` at every moment and no loss is silent.
A push never waits for the learner.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from tether.data.columns import TransitionArrays


@dataclass(frozen=True)
class ReplayStats:
    capacity: int
    held: int  # transitions waiting for the learner now
    offered: int  # transitions pushed by all edges
    consumed: int  # transitions the learner pulled
    dropped: int  # oldest transitions dropped at capacity
    by_edge: dict[str, int] = field(default_factory=dict)  # transitions offered per edge


class ReplayService:
    """See the module docstring. Thread-safe (Ray may call it concurrently)."""

    def __init__(self, obs_dim: int, act_dim: int, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"replay capacity must be at least 1 transition, got {capacity}")
        self.obs_dim = obs_dim
        self.act_dim = act_dim
        self.capacity = capacity
        self._lock = threading.Lock()
        self._batches: deque[TransitionArrays] = deque()
        self._held = 0
        self._offered = 0
        self._consumed = 0
        self._dropped = 0
        self._by_edge: dict[str, int] = {}

    def push(self, edge_id: str, rows: TransitionArrays) -> int:
        """Queue ``rows`` from ``edge_id``; returns how many were queued (all of them)."""
        n = len(rows)
        if n == 0:
            return 0
        if rows.obs_dim != self.obs_dim or rows.act_dim != self.act_dim:
            raise ValueError(
                f"edge {edge_id} pushed transitions of obs_dim {rows.obs_dim}, act_dim "
                f"{rows.act_dim}; this replay holds obs_dim {self.obs_dim}, act_dim {self.act_dim}"
            )
        with self._lock:
            self._offered += n
            self._by_edge[edge_id] = self._by_edge.get(edge_id, 0) + n
            self._batches.append(rows)
            self._held += len(rows)
            while self._held > self.capacity:
                oldest = self._batches[0]
                excess = self._held - self.capacity
                if len(oldest) <= excess:
                    self._batches.popleft()
                    self._held -= len(oldest)
                    self._dropped += len(oldest)
                else:
                    self._batches[0] = oldest.take(slice(excess, len(oldest)))
                    self._held -= excess
                    self._dropped += excess
        return n

    def pull(self, max_rows: int) -> TransitionArrays:
        """Up to ``max_rows`` transitions, oldest first (empty when none wait)."""
        parts: list[TransitionArrays] = []
        with self._lock:
            want = max_rows
            while want > 0 and self._batches:
                head = self._batches[0]
                if len(head) <= want:
                    parts.append(self._batches.popleft())
                    want -= len(head)
                else:
                    parts.append(head.take(slice(0, want)))
                    self._batches[0] = head.take(slice(want, len(head)))
                    want = 0
            got = sum(len(p) for p in parts)
            self._held -= got
            self._consumed += got
        if not parts:
            return TransitionArrays.empty(0, self.obs_dim, self.act_dim)
        return parts[0] if len(parts) == 1 else TransitionArrays.concat(parts)

    def stats(self) -> ReplayStats:
        with self._lock:
            return ReplayStats(
                capacity=self.capacity,
                held=self._held,
                offered=self._offered,
                consumed=self._consumed,
                dropped=self._dropped,
                by_edge=dict(self._by_edge),
            )

    def ping(self) -> bool:
        return True

    def location(self) -> tuple[str, str, int]:
        """Where this actor runs: (node id, node address, pid)."""
        from tether.fleet.placement import here

        return here()
