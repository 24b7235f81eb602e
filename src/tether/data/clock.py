"""The one clock every control step is stamped with when it arrives at the server.

Pairing and recency both rest on this clock, so it must be monotonic and must be the
only one: the client's own timestamp is kept for latency statistics, never for pairing
(two robots' clocks disagree, and a wall clock jumps under NTP).
"""

from __future__ import annotations

import time


def ingress_ns() -> int:
    """Nanoseconds on the server's monotonic clock; call it once, where a step arrives."""
    return time.monotonic_ns()
