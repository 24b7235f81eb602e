"""Transport of transitions from the server process to the learner process over shared memory.

A single-producer, single-consumer ring of fixed-size rows (the columns of
:class:`TransitionArrays`) in a ``multiprocessing.shared_memory`` segment, with a header
of counters. The producer (the recorder's worker thread in the server) copies rows in
and then publishes the new write count; the consumer (the learner) copies rows out in
batches and then publishes the new read count. Both counter updates happen under one
inter-process lock held for a few instructions, which also orders the row copies
before the counter on every CPU. Nothing is pickled: rows are raw numbers.

Invariants: ``put`` never waits for the consumer: when the ring is full it drops the
rows that do not fit, counts them in ``dropped`` (visible to both sides) and logs a
warning at most every few seconds; ``offered == accepted + dropped`` and every accepted
row is delivered exactly once, in order.
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import shared_memory
from multiprocessing.context import BaseContext
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.data.columns import COLUMN_DTYPES, TransitionArrays, TransitionTable, row_shape
from tether.data.errors import ChannelError

logger = logging.getLogger(__name__)

_MAGIC = 0x7465746865720001  # "tether" + layout version 1
_HEADER_WORDS = 16
_H_MAGIC, _H_CAPACITY, _H_OBS, _H_ACT = 0, 1, 2, 3
_H_WRITE, _H_READ, _H_DROPPED, _H_OFFERED, _H_CLOSED = 4, 5, 6, 7, 8
_ALIGN = 64
_DROP_WARNING_INTERVAL_S = 5.0
# Far longer than any critical section (a few counter reads): only a dead holder explains it.
_LOCK_TIMEOUT_S = 1.0


class ChannelConfig(BaseModel):
    """Size of the shared ring and how often an idle consumer looks again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    capacity: int = Field(
        default=16384,
        ge=1,
        description="transitions the ring holds before put() drops (transitions)",
    )
    poll_interval_s: float = Field(
        default=0.0005,
        gt=0,
        le=1,
        description="sleep of an idle consumer between looks at the ring (s)",
    )


@dataclass(frozen=True)
class ChannelStats:
    """Counters shared by both ends; ``offered == accepted + dropped`` always."""

    capacity: int
    offered: int
    accepted: int
    dropped: int
    consumed: int
    dropped_locally: int = 0  # dropped by this handle while the lock was stuck (not in the header)

    @property
    def backlog(self) -> int:
        return self.accepted - self.consumed


def _layout(capacity: int, obs_dim: int, act_dim: int) -> tuple[dict[str, int], int]:
    """Byte offset of every column in the segment, and the segment's size."""
    offset = _HEADER_WORDS * 8
    offsets: dict[str, int] = {}
    for name in TransitionArrays._fields:
        offsets[name] = offset
        width = int(np.prod(row_shape(name, obs_dim, act_dim), dtype=np.int64))
        nbytes = capacity * width * np.dtype(COLUMN_DTYPES[name]).itemsize
        offset += -(-nbytes // _ALIGN) * _ALIGN
    return offsets, offset


class TransitionChannel:
    """Create in the server process; pass to the learner process as a ``Process`` argument."""

    _closed: bool
    _last_drop_warning: float
    _dropped_locally: int

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        config: ChannelConfig | None = None,
        *,
        context: BaseContext | None = None,
    ) -> None:
        self.config = config or ChannelConfig()
        self.obs_dim, self.act_dim = obs_dim, act_dim
        # A spawn-context lock can be handed to children of any start method.
        self._lock = (context or multiprocessing.get_context("spawn")).Lock()
        _, size = _layout(self.config.capacity, obs_dim, act_dim)
        self._shm = shared_memory.SharedMemory(create=True, size=size)
        self._owner = True
        self._map()
        self._header[:] = 0
        self._header[[_H_MAGIC, _H_CAPACITY, _H_OBS, _H_ACT]] = (
            _MAGIC,
            self.config.capacity,
            obs_dim,
            act_dim,
        )

    @property
    def name(self) -> str:
        """The shared-memory segment's name."""
        return self._shm.name

    def put(self, transitions: TransitionTable) -> int:
        """Producer: queue ``transitions``; return how many fit (the rest are counted as dropped)."""
        return self.put_arrays(transitions.arrays)

    def put_arrays(self, rows: TransitionArrays) -> int:
        """Producer: queue ``rows`` without waiting; return how many fit."""
        self._check_open()
        n = len(rows)
        cap = self.config.capacity
        try:
            with self._locked():
                written, read, closed = (
                    int(self._header[i]) for i in (_H_WRITE, _H_READ, _H_CLOSED)
                )
            # Once the creator closed, rows are dropped (and counted) rather than raised
            # about, so a producer in another process cannot turn into an error loop.
            fit = 0 if closed else min(n, cap - (written - read))
            if fit:
                self._rows.assign((written + np.arange(fit)) % cap, rows.take(slice(0, fit)))
            with self._locked():
                self._header[_H_WRITE] = written + fit
                self._header[_H_DROPPED] += n - fit
                self._header[_H_OFFERED] += n
        except ChannelError:
            # The lock is stuck (its holder died): the shared counters cannot be updated,
            # so the loss is counted on this side instead; still never silent, never blocking.
            self._dropped_locally += n
            self._warn_dropped()
            return 0
        if fit < n:
            self._warn_dropped()
        return fit

    def get(self, max_rows: int = 4096, timeout_s: float = 0.0) -> TransitionArrays:
        """Consumer: up to ``max_rows`` rows, oldest first, waiting up to ``timeout_s`` for one."""
        self._check_open()
        deadline = time.monotonic() + timeout_s
        while True:
            with self._locked():
                written, read = int(self._header[_H_WRITE]), int(self._header[_H_READ])
            if written > read or time.monotonic() >= deadline:
                break
            time.sleep(self.config.poll_interval_s)
        count = min(written - read, max_rows)
        out = self._rows.take((read + np.arange(count)) % self.config.capacity)
        if count:
            with self._locked():
                self._header[_H_READ] = read + count
        return out

    def stats(self) -> ChannelStats:
        self._check_open()
        try:
            with self._locked():
                h = [int(x) for x in self._header]
        except ChannelError:
            h = [int(x) for x in self._header]  # a stuck lock: a best-effort, unlocked read
        return ChannelStats(
            capacity=h[_H_CAPACITY],
            offered=h[_H_OFFERED],
            accepted=h[_H_WRITE],
            dropped=h[_H_DROPPED],
            consumed=h[_H_READ],
            dropped_locally=self._dropped_locally,
        )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        if not self._lock.acquire(timeout=_LOCK_TIMEOUT_S):
            raise ChannelError(
                f"transition channel {self.name}: its lock was held for over {_LOCK_TIMEOUT_S} s, "
                "so a process died holding it (a killed learner); create a new channel and "
                "restart the learner with it"
            )
        try:
            yield
        finally:
            self._lock.release()

    def close(self) -> None:
        """Detach; the creating side also marks the channel closed and frees the segment."""
        if self._closed:
            return
        self._closed = True
        if self._owner:
            # Only the creator ends the channel: a learner that exits (and is restarted)
            # detaches without it, so a restarted learner finds the channel still open.
            try:
                with self._locked():
                    self._header[_H_CLOSED] = 1
            except ChannelError:
                self._header[_H_CLOSED] = 1  # the lock is stuck; a lone store is still seen
        del self._header, self._rows  # views must go before the mapping can close
        self._shm.close()
        if self._owner:
            self._shm.unlink()

    def __enter__(self) -> TransitionChannel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # Travels to a child process as the segment's name and the lock; never the rows.
        return {
            "name": self.name,
            "lock": self._lock,
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "config": self.config.model_dump(),
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.config = ChannelConfig(**state["config"])
        self.obs_dim, self.act_dim = state["obs_dim"], state["act_dim"]
        self._lock = state["lock"]
        self._shm = shared_memory.SharedMemory(name=state["name"])
        self._owner = False
        self._map()
        if int(self._header[_H_MAGIC]) != _MAGIC:
            raise ChannelError(
                f"shared memory {state['name']} is not a tether transition channel "
                f"(magic {int(self._header[_H_MAGIC]):#x})"
            )

    def _map(self) -> None:
        buf = self._shm.buf
        assert buf is not None
        self._header = np.ndarray((_HEADER_WORDS,), dtype=np.int64, buffer=buf)
        offsets, _ = _layout(self.config.capacity, self.obs_dim, self.act_dim)
        self._rows = TransitionArrays(
            *(
                np.ndarray(
                    (self.config.capacity, *row_shape(name, self.obs_dim, self.act_dim)),
                    dtype=COLUMN_DTYPES[name],
                    buffer=buf,
                    offset=offsets[name],
                )
                for name in TransitionArrays._fields
            )
        )
        self._last_drop_warning = 0.0
        self._closed = False
        self._dropped_locally = 0

    def _check_open(self) -> None:
        if self._closed:
            raise ChannelError(
                f"transition channel {self.name} was closed in this process; create or "
                "receive a new one"
            )

    def _warn_dropped(self) -> None:
        now = time.monotonic()
        if now - self._last_drop_warning >= _DROP_WARNING_INTERVAL_S:
            self._last_drop_warning = now
            logger.warning(
                "transition channel %s is full (capacity %d), closed, or its lock is stuck: "
                "%d transitions dropped so far (%d counted only here); the learner is not "
                "draining",
                self.name,
                self.config.capacity,
                int(self._header[_H_DROPPED]) + self._dropped_locally,
                self._dropped_locally,
            )
