"""An edge's transitions on their way to the replay actor: batched, bounded, never blocking.

:class:`ReplayShipper` is a recorder sink (``TransitionSink``): the recorder's worker
thread hands it finished transitions, which wait in a bounded buffer; a thread of its
own sends them to the replay actor in batches of ``ship_batch``, with at most
``ship_in_flight`` calls outstanding. Back-pressure is local and counted: while that
many calls are on their way, transitions wait (``deferred`` counts the rounds that
waited); when the buffer is full, new transitions are dropped (``dropped_full``); a call
that failed (the replay actor died) counts its rows in ``failed``. The control step
never waits for any of this: the recorder already took the step off the serving path,
and :meth:`ReplayShipper.put` only appends under a lock.

Invariant: ``offered == shipped + dropped_full + failed + buffered + in flight``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from tether.data.columns import TransitionArrays, TransitionTable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShipperStats:
    offered: int
    shipped: int  # rows the replay actor acknowledged
    dropped_full: int  # rows dropped because the edge's buffer was full
    failed: int  # rows of calls that failed (the replay actor was unreachable)
    deferred: int  # rounds that waited because ship_in_flight calls were outstanding
    buffered: int  # rows waiting now
    in_flight: int  # rows on their way now


class ReplayShipper:
    """See the module docstring. ``replay`` is the replay actor's handle."""

    def __init__(
        self,
        replay: Any,
        *,
        edge_id: str,
        obs_dim: int,
        act_dim: int,
        batch: int,
        in_flight: int,
        buffer: int,
        interval_s: float = 0.05,
    ) -> None:
        self._replay = replay
        self._edge_id = edge_id
        self._obs_dim = obs_dim
        self._act_dim = act_dim
        self._batch = batch
        self._max_in_flight = in_flight
        self._capacity = buffer
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._rows: deque[TransitionArrays] = deque()
        self._buffered = 0
        self._offered = 0
        self._shipped = 0
        self._dropped = 0
        self._failed = 0
        self._deferred = 0
        self._calls: dict[Any, int] = {}  # ObjectRef -> rows; the shipping thread's own
        self._in_flight = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replay-shipper", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- the sink

    def put(self, transitions: TransitionTable) -> int:
        """Take ``transitions`` (recorder's worker thread); returns how many were kept."""
        n = len(transitions)
        if n == 0:
            return 0
        with self._lock:
            self._offered += n
            room = max(0, self._capacity - self._buffered)
            keep = min(room, n)
            self._dropped += n - keep
        if keep:
            rows = transitions.arrays.take(slice(0, keep))
            with self._lock:
                self._rows.append(rows)
                self._buffered += keep
        return keep

    # ----------------------------------------------------------------- shipping

    def _take(self) -> TransitionArrays | None:
        with self._lock:
            if not self._rows:
                return None
            parts: list[TransitionArrays] = []
            want = self._batch
            while want > 0 and self._rows:
                head = self._rows[0]
                if len(head) <= want:
                    parts.append(self._rows.popleft())
                    want -= len(head)
                else:
                    parts.append(head.take(slice(0, want)))
                    self._rows[0] = head.take(slice(want, len(head)))
                    want = 0
            rows = parts[0] if len(parts) == 1 else TransitionArrays.concat(parts)
            self._buffered -= len(rows)
            return rows

    def _reap(self, timeout_s: float) -> None:
        import ray

        if not self._calls:
            return
        done, _ = ray.wait(list(self._calls), num_returns=len(self._calls), timeout=timeout_s)
        for ref in done:
            rows = self._calls.pop(ref)
            with self._lock:
                self._in_flight -= rows
            try:
                ray.get(ref)
            except Exception as exc:  # the replay actor died or refused: counted, never raised
                with self._lock:
                    self._failed += rows
                log.warning("edge %s: %d transitions not delivered: %s", self._edge_id, rows, exc)
            else:
                with self._lock:
                    self._shipped += rows

    def _ship_once(self) -> None:
        self._reap(0.0)
        while True:
            if len(self._calls) >= self._max_in_flight:
                with self._lock:
                    self._deferred += 1 if self._buffered else 0
                return
            rows = self._take()
            if rows is None:
                return
            try:
                ref = self._replay.push.remote(self._edge_id, rows)
            except Exception as exc:
                with self._lock:
                    self._failed += len(rows)
                log.warning("edge %s: replay push failed: %s", self._edge_id, exc)
                return
            self._calls[ref] = len(rows)
            with self._lock:
                self._in_flight += len(rows)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._ship_once()
            except Exception:  # keep shipping; a failure is counted where it is known
                log.exception("edge %s: replay shipping round failed", self._edge_id)

    def close(self, timeout_s: float = 5.0) -> None:
        """Ship what is buffered (up to ``timeout_s``), then stop."""
        import time

        self._stop.set()
        self._thread.join(timeout_s)
        deadline = time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline and (self._buffered or self._calls):
                self._ship_once()
                self._reap(min(0.5, max(0.0, deadline - time.monotonic())))
        except Exception:
            log.exception("edge %s: final replay shipping failed", self._edge_id)

    def stats(self) -> ShipperStats:
        with self._lock:
            return ShipperStats(
                offered=self._offered,
                shipped=self._shipped,
                dropped_full=self._dropped,
                failed=self._failed,
                deferred=self._deferred,
                buffered=self._buffered,
                in_flight=self._in_flight,
            )
