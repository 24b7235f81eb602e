"""Admission control: refuse work the server cannot take, before it is queued.

A request passes three gates in order: its token bucket (sustained rate and burst, by
default twice the robot's control rate, so one runaway caller cannot starve the others),
the memory guard (process RSS and, when the engine runs on a GPU, CUDA memory), and the
batcher's bound on queued requests (checked by the batcher itself, which owns the queue).
Any refusal is ``AdmissionRefused`` → RESOURCE_EXHAUSTED with a message naming the limit;
nothing is computed and no state other than the refused caller's bucket changes.

Buckets are keyed on what the server knows, never on an id the request claims: a Control
step spends its own session's bucket, a GetAction call its connection's (grpc's peer).
A session is opened only within the bounds on sessions, in total and per client (the
peer's host: one machine opening connection after connection is one client), and only
one live session per robot id unless ``allow_duplicate_sessions``. Under memory pressure
new sessions are refused at ``max_rss_bytes``, before the steps of open sessions, which
are refused only ``memory_step_headroom`` times higher.

Invariant: a bucket never holds more than ``burst`` tokens nor fewer than zero, so a
caller's admitted count over any window of ``T`` seconds is at most ``burst + rate * T``.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from dataclasses import dataclass

import psutil

from tether.serving.config import AdmissionConfig
from tether.serving.errors import AdmissionRefused, DuplicateSession


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
    """Refuses requests while memory is over its limits; re-reads at most every interval.

    New sessions are refused at ``max_rss_bytes``, the work of open sessions only at
    ``memory_step_headroom`` times that: whoever grows the server's memory by opening
    sessions is shut out before the robots already running.
    """

    def __init__(self, config: AdmissionConfig, *, cuda: bool = False) -> None:
        self._config = config
        self._cuda = cuda
        self._next_check = 0.0
        self._refusal: str | None = None  # for the steps of open sessions
        self._new_refusal: str | None = None  # for new sessions
        self.last: MemoryReading | None = None

    def check(self, now: float, *, new_session: bool = False) -> None:
        if now >= self._next_check:
            self._next_check = now + self._config.memory_check_interval_s
            reading = read_memory(self._cuda)
            self._refusal = self._judge(reading, self._config.memory_step_headroom)
            self._new_refusal = self._judge(reading, 1.0)
        refusal = self._new_refusal if new_session else self._refusal
        if refusal is not None:
            raise AdmissionRefused(refusal)

    def _judge(self, reading: MemoryReading, headroom: float) -> str | None:
        self.last = reading
        cfg = self._config
        limit = int(cfg.max_rss_bytes * headroom)
        if cfg.max_rss_bytes and reading.rss_bytes > limit:
            what = "new sessions are" if headroom == 1.0 else "requests are"
            return (
                f"server memory is over its limit: RSS {reading.rss_bytes} bytes, {what} "
                f"refused above {limit} (admission.max_rss_bytes {cfg.max_rss_bytes}"
                + ("" if headroom == 1.0 else f" x memory_step_headroom {headroom:g}")
                + "); retry later"
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


@dataclass(frozen=True)
class SessionTicket:
    """An admitted session: what :meth:`Admission.close_session` gives back, holding the
    session's own token bucket (None without a rate limit) for ``admit_step``."""

    session_id: str
    robot_id: str
    client: str  # the peer's host
    bucket: TokenBucket | None = None


def client_of(peer: str) -> str:
    """The client a grpc peer string belongs to: its host, without the port.

    ``ipv4:10.0.0.5:51234`` → ``ipv4:10.0.0.5``; ``ipv6:[::1]:5000`` → ``ipv6:[::1]``;
    anything else (``unix:/path``) is its own client.
    """
    if peer.startswith(("ipv4:", "ipv6:")):
        host, sep, port = peer.rpartition(":")
        if sep and port.isdigit():
            return host
    return peer


class Admission:
    """Rate limits, session bounds and the memory guard (see module docstring)."""

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
        self._sessions: dict[str, SessionTicket] = {}
        self._per_client: Counter[str] = Counter()
        self._per_robot: Counter[str] = Counter()

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    def open_session(
        self, session_id: str, robot_id: str, peer: str, now: float | None = None
    ) -> SessionTicket:
        """Admit a new Control session or raise: ``DuplicateSession`` for a robot id that
        already has a live session, ``AdmissionRefused`` over a session bound or under
        memory pressure. The caller must ``close_session`` the ticket when it ends."""
        cfg = self._config
        client = client_of(peer)
        if self._per_robot[robot_id] and not cfg.allow_duplicate_sessions:
            raise DuplicateSession(
                f"robot {robot_id!r} already has a live session on this server; one robot "
                "id, one session (a reconnecting robot is admitted once the server has seen "
                "its old stream close), or set admission.allow_duplicate_sessions"
            )
        if len(self._sessions) >= cfg.max_sessions:
            raise AdmissionRefused(
                f"the server holds {len(self._sessions)} sessions, its limit "
                f"(admission.max_sessions); retry later"
            )
        if self._per_client[client] >= cfg.max_sessions_per_client:
            raise AdmissionRefused(
                f"client {client} holds {self._per_client[client]} sessions, its limit "
                "(admission.max_sessions_per_client); close one first"
            )
        t = time.monotonic() if now is None else now
        self.memory.check(t, new_session=True)
        bucket = TokenBucket(self.rate_hz, self.burst, t) if self.rate_hz > 0 else None
        ticket = SessionTicket(session_id, robot_id, client, bucket)
        self._sessions[session_id] = ticket
        self._per_client[client] += 1
        self._per_robot[robot_id] += 1
        return ticket

    def close_session(self, ticket: SessionTicket) -> None:
        """Release what ``open_session`` admitted (idempotent) and the session's bucket."""
        if self._sessions.pop(ticket.session_id, None) is None:
            return
        for counter, key in ((self._per_client, ticket.client), (self._per_robot, ticket.robot_id)):
            counter[key] -= 1
            if counter[key] <= 0:
                del counter[key]

    def admit_step(self, ticket: SessionTicket, now: float | None = None) -> None:
        """Admit one step of an open session: its own bucket, never another robot's."""
        self._spend(ticket.bucket, "session", ticket.session_id, now)

    def admit(self, client_id: str, now: float | None = None) -> None:
        """Raise ``AdmissionRefused`` if the caller keyed ``client_id`` may not send a
        request now; the key is one the server knows (a connection)."""
        t = time.monotonic() if now is None else now
        bucket = None
        if self.rate_hz > 0:
            bucket = self._buckets.get(client_id)
            if bucket is None:
                bucket = TokenBucket(self.rate_hz, self.burst, t)
                self._buckets[client_id] = bucket
                if len(self._buckets) > self.max_clients:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(client_id)
        self._spend(bucket, "client", client_id, t)

    def _spend(self, bucket: TokenBucket | None, kind: str, key: str, now: float | None) -> None:
        """One token of ``bucket`` (None: no rate limit), then the memory guard; a refusal
        names the ``kind`` ("session", "client") and its ``key`` (built only then: this
        runs on every step)."""
        t = time.monotonic() if now is None else now
        if bucket is not None and not bucket.take(t):
            raise AdmissionRefused(
                f"{kind} {key!r} is over its rate limit of {self.rate_hz:g} requests/s "
                f"(burst {self.burst:g}); slow down to the robot's control rate or raise "
                "admission.rate_limit_hz"
            )
        self.memory.check(t)
