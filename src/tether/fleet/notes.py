"""What the fleet's actors tell the driver: typed notes it turns into the run's events.

Actors keep their notes in order and the driver asks for the ones it has not seen
(``notes_since``), so an actor never calls back into the driver and a slow driver never
slows an actor. ``kind`` is a ``tether.runtime.records.RunEvent`` kind.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ActorNote:
    kind: str
    message: str
    wall_ns: int  # time.time_ns() when it happened (fleet-wide clock)
    version: int | None = None
    robot_id: str | None = None
    details: dict[str, Any] = field(default_factory=dict)


class NoteBook:
    """An actor's notes, appended from any thread, read by index."""

    def __init__(self, limit: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._notes: list[ActorNote] = []
        self._limit = limit
        self._dropped = 0

    def add(self, kind: str, message: str, **kw: Any) -> None:
        note = ActorNote(kind=kind, message=message, wall_ns=time.time_ns(), **kw)
        with self._lock:
            if len(self._notes) - self._dropped >= self._limit:
                self._dropped += 1  # bounded: a driver that never reads cannot grow an actor
                return
            self._notes.append(note)

    def since(self, index: int) -> tuple[int, list[ActorNote]]:
        """The notes from ``index`` on, and the index to ask from next time."""
        with self._lock:
            return len(self._notes), self._notes[index:]
