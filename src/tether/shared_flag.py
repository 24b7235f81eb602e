"""A flag one process sets and other processes poll: one byte of shared memory, no lock.

``multiprocessing``'s ``Event`` takes a lock inside ``is_set`` and ``set``. A process
SIGKILLed while inside one (the OOM killer, a crash, a test) holds that lock forever,
and every other process's next ``is_set`` or ``set`` blocks on it: a restarted learner
polling its stop flag never learns again, and the run's own ``stop`` hangs. A byte that
only its setter writes and the others read needs no lock, and a dead reader holds
nothing.

Invariant: ``set`` and ``is_set`` never block; ``wait`` returns within its timeout plus
one poll interval.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

# How often ``wait`` looks at the flag (s).
_POLL_S = 0.005


class SharedFlag:
    """A flag in shared memory, made from a multiprocessing context (``spawn``), passed to
    the child processes it starts; set by one process, read by any."""

    def __init__(self, ctx: Any) -> None:
        self._value = ctx.RawValue(ctypes.c_bool, False)

    def set(self) -> None:
        self._value.value = True

    def is_set(self) -> bool:
        return bool(self._value.value)

    def wait(self, timeout_s: float) -> bool:
        """Whether the flag was set within ``timeout_s`` (polled every 5 ms)."""
        deadline = time.monotonic() + timeout_s
        while not self._value.value:
            left = deadline - time.monotonic()
            if left <= 0.0:
                return False
            time.sleep(min(_POLL_S, left))
        return True
