"""Admission control: refuse work the server cannot take, before it is queued.

A request passes three gates in order: its client's token bucket (sustained rate and
burst, by default twice the robot's control rate, so one runaway client cannot starve
the others), the memory guard (process RSS and, when the engine runs on a GPU, CUDA
memory), and the batcher's bound on queued requests (checked by the batcher itself,
which owns the queue). Any refusal is ``AdmissionRefused`` → RESOURCE_EXHAUSTED with a
message naming the limit; nothing is computed and no state other than the refused
client's bucket changes.

Invariant: a bucket never holds more than ``burst`` tokens nor fewer than zero, so a
client's admitted count over any window of ``T`` seconds is at most ``burst + rate * T``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

import psutil

from tether.serving.config import AdmissionConfig
from tether.serving.errors import AdmissionRefused


class TokenBucket:
    """Classic token bucket; ``rate_hz`` tokens per second up to ``burst`` tokens."""

    __slots__ = ("_last", "_tokens", "burst", "rate_hz")

    def __init__(self, rate_hz: float, burst: float, now: float) -> None:
        if not (rate_hz > 0 and burst >= 1):
            raise ValueError(
                f"TokenBucket needs rate_hz > 0 and burst >= 1, got rate_hz={rate_hz} burst={burst}"
            )
        self.rate_hz = rate_hz
        self.burst = burst
        self._tokens = burst
        self._last = now

    @property
    def tokens(self) -> float:
        return self._tokens

    def take(self, now: float) -> bool:
        """Spend one token if there is one; ``now`` is a monotonic time in seconds."""
        # A clock that steps backwards (it cannot with monotonic, but tests pass times in)
        # must not mint tokens; max(0, ...) keeps the invariant either way.
        elapsed = max(0.0, now - self._last)
        self._last = max(self._last, now)
        self._tokens = min(self.burst, self._tokens + elapsed * self.rate_hz)
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


@dataclass(frozen=True)
class MemoryReading:
    """Memory in use when the guard last looked."""

    rss_bytes: int
    cuda_allocated_bytes: int
    cuda_total_bytes: int


def read_memory(cuda: bool) -> MemoryReading:
    """Process RSS, and the CUDA allocator's usage when ``cuda`` is true."""
    rss = int(psutil.Process().memory_info().rss)
    if not cuda:
        return MemoryReading(rss, 0, 0)
    import torch  # only when serving on a GPU; the CPU path never touches CUDA

    allocated = int(torch.cuda.memory_allocated())
    total = int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)
    return MemoryReading(rss, allocated, total)


class MemoryGuard:
    """Refuses requests while memory is over its limits; re-reads at most every interval."""

    def __init__(self, config: AdmissionConfig, *, cuda: bool = False) -> None:
        self._config = config
        self._cuda = cuda
        self._next_check = 0.0
        self._refusal: str | None = None
        self.last: MemoryReading | None = None

    def check(self, now: float) -> None:
        if now >= self._next_check:
            self._next_check = now + self._config.memory_check_interval_s
            self._refusal = self._judge(read_memory(self._cuda))
        if self._refusal is not None:
            raise AdmissionRefused(self._refusal)

    def _judge(self, reading: MemoryReading) -> str | None:
        self.last = reading
        cfg = self._config
        if cfg.max_rss_bytes and reading.rss_bytes > cfg.max_rss_bytes:
            return (
                f"server memory is over its limit: RSS {reading.rss_bytes} bytes, the limit "
                f"(admission.max_rss_bytes) is {cfg.max_rss_bytes}; retry later"
            )
        if reading.cuda_total_bytes:
            fraction = reading.cuda_allocated_bytes / reading.cuda_total_bytes
            if fraction > cfg.max_cuda_memory_fraction:
                return (
                    f"GPU memory is over its limit: {fraction:.1%} allocated, the limit "
                    f"(admission.max_cuda_memory_fraction) is {cfg.max_cuda_memory_fraction:.1%}; "
                    "retry later"
                )
        return None


class Admission:
    """Per-client rate limits plus the memory guard (see module docstring)."""

    # Bounds the bucket table: ids come from the network, so a client inventing a new id
    # per request must not grow server memory without limit. Evicting the stalest bucket
    # gives that client a fresh (full) bucket, which only ever favours idle clients.
    max_clients = 10_000

    def __init__(
        self,
        config: AdmissionConfig,
        *,
        control_period_s: float,
        cuda: bool = False,
    ) -> None:
        self._config = config
        rate = config.rate_limit_hz
        if rate is None:
            rate = config.rate_headroom / control_period_s
        self.rate_hz: float = rate
        self.burst: float = max(1.0, rate * config.burst_s)
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self.memory = MemoryGuard(config, cuda=cuda)

    def admit(self, client_id: str, now: float | None = None) -> None:
        """Raise ``AdmissionRefused`` if ``client_id`` may not send a request now."""
        t = time.monotonic() if now is None else now
        if self.rate_hz > 0:
            bucket = self._buckets.get(client_id)
            if bucket is None:
                bucket = TokenBucket(self.rate_hz, self.burst, t)
                self._buckets[client_id] = bucket
                if len(self._buckets) > self.max_clients:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(client_id)
            if not bucket.take(t):
                raise AdmissionRefused(
                    f"client {client_id!r} is over its rate limit of {self.rate_hz:g} requests/s "
                    f"(burst {self.burst:g}); slow down to the robot's control rate or raise "
                    "admission.rate_limit_hz"
                )
        self.memory.check(t)
