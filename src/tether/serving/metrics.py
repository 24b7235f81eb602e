"""Prometheus metrics of the serving edge, on their own registry and HTTP port.

Names follow Prometheus conventions (``tether_`` prefix, ``_seconds``, ``_total``).
Each server owns a ``CollectorRegistry`` so several servers (tests, benchmarks) can live
in one process.

The metrics every request touches (request counts, the latency and batch-size histograms,
requests in flight) are plain Python numbers updated by the event loop's thread, which
runs every handler and every batch report, and read into Prometheus families only when
scraped (``_PerRequest``). prometheus_client's own metrics take a lock and validate on
every update: about a dozen such updates per request cost more than the rest of the
reply's bookkeeping. The degradation gauges are read from their source when scraped
(``_Degradation``), so the serving loop never computes them. The rarely updated gauges
stay prometheus_client's.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from wsgiref.simple_server import WSGIServer

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    start_http_server,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from tether.safety.levels import DegradationLevel
from tether.serving.errors import ServerSetupError

# Round trips of a policy server range from ~100 µs (small MLP, one robot) to tens of ms.
_LATENCY_BUCKETS = (
    5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.25, 1.0,
)  # fmt: skip
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)

# Weight of the newest sampled batch in the per-dimension action statistics (an EMA over
# the batches the server samples, at most one per 50 ms).
_ACTION_EMA = 0.1


class LoopHistogram:
    """A histogram's buckets, count and sum as plain numbers, for one writing thread."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: above every bound (+Inf)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        # Prometheus buckets are inclusive: a value equal to a bound counts in its bucket.
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        """Cumulative (le, count) pairs, ``+Inf`` last, as Prometheus exports them."""
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            total += n
            out.append((repr(float(bound)), total))
        out.append(("+Inf", total + self.counts[-1]))
        return out


class InFlight:
    """Requests received and not yet answered (a gauge the loop's thread moves)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1

    def dec(self) -> None:
        self.value -= 1


class _PerRequest:
    """The per-request metrics as Prometheus families, built at scrape time."""

    def __init__(self, metrics: ServingMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        requests = CounterMetricFamily(
            "tether_requests",
            "Requests answered, by RPC method, gRPC status and policy version",
            labels=("method", "status", "version"),
        )
        for key, count in list(m.request_counts.items()):
            requests.add_metric(key, count)
        yield requests
        for name, doc, hist in (
            ("tether_queue_seconds", "Time a request waited before its batch started", m.queue_seconds),
            ("tether_inference_seconds", "Compute time of one batch (policy forward and supervisor)", m.inference_seconds),
            ("tether_batch_size", "Requests per batch", m.batch_size),
        ):  # fmt: skip
            family = HistogramMetricFamily(name, doc)
            family.add_metric((), hist.buckets(), hist.sum)
            yield family
        latency = HistogramMetricFamily(
            "tether_request_seconds",
            "Server-side time from a request's arrival to its reply",
            labels=("method",),
        )
        for method, hist in m.request_seconds.items():
            latency.add_metric((method,), hist.buckets(), hist.sum)
        yield latency
        yield GaugeMetricFamily(
            "tether_requests_in_flight",
            "Requests received and not yet answered",
            value=m.in_flight.value,
        )


# The learning-wide degradation level and every robot's own level, read when scraped.
DegradationSource = Callable[[], tuple[DegradationLevel, Iterable[DegradationLevel]]]


class _Degradation:
    """The degradation gauges, read from the machine when Prometheus scrapes (on the
    metrics server's thread, under the machine's lock), never on the serving loop: the
    learning-wide level walks every robot's recent events (~140 µs for 64 degraded
    robots), which a refresh on the loop every 50 ms paid as a stall."""

    def __init__(self, source: DegradationSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        level, robots = self._source()
        levels = list(robots)
        yield GaugeMetricFamily(
            "tether_degradation_level",
            "Learning-wide degradation level, aggregated over the robots "
            "(0 normal, 1 restricted, 2 paused, 3 takeover)",
            value=int(level),
        )
        family = GaugeMetricFamily(
            "tether_robots_at_level",
            "Robots whose own degradation level is this one",
            labels=("level",),
        )
        for each in DegradationLevel:
            family.add_metric((each.name,), levels.count(each))
        yield family


class ServingMetrics:
    """Every metric the edge exports; one instance per server. The per-request ones
    (``request``, the histograms, ``in_flight``) are updated from the event loop's thread
    only (see the module docstring)."""

    def __init__(
        self, action_names: tuple[str, ...], degradation: DegradationSource | None = None
    ) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_counts: dict[tuple[str, str, str], int] = {}
        self.queue_seconds = LoopHistogram(_LATENCY_BUCKETS)
        self.inference_seconds = LoopHistogram(_LATENCY_BUCKETS)
        self.request_seconds = {m: LoopHistogram(_LATENCY_BUCKETS) for m in _METHODS}
        self.batch_size = LoopHistogram(_BATCH_BUCKETS)
        self.in_flight = InFlight()
        r.register(_PerRequest(self))
        self.live_version = Gauge(
            "tether_live_policy_version", "Id of the policy version now serving", registry=r
        )
        self.action_mean = Gauge(
            "tether_action_mean",
            "Moving average of each executed action dimension (batches sampled every 50 ms)",
            ("dimension",),
            registry=r,
        )
        self.action_at_bound = Gauge(
            "tether_action_at_bound_ratio",
            "Moving fraction of executed actions at their lower or upper bound, per dimension",
            ("dimension",),
            registry=r,
        )
        self.memory = Gauge(
            "tether_process_resident_memory_bytes",
            "Resident memory of the server process at the last memory-guard check",
            registry=r,
        )
        self.watchdog_misses = Counter(
            "tether_client_watchdog_misses",
            "Control deadlines missed as reported by clients' watchdogs",
            registry=r,
        )
        # Read from the batcher's count when scraped (PolicyServer.start).
        self.sessions = Gauge(
            "tether_sessions_open", "Control sessions and openpi connections open", registry=r
        )
        if degradation is not None:
            r.register(_Degradation(degradation))
        self._mean_children = [self.action_mean.labels(n) for n in action_names]
        self._bound_children = [self.action_at_bound.labels(n) for n in action_names]
        self._mean = np.zeros(len(action_names))
        self._at_bound = np.zeros(len(action_names))
        self._stats_lock = threading.Lock()
        self._stats_primed = False

    def request(self, method: str, status: str, version: str, seconds: float) -> None:
        key = (method, status, version)
        self.request_counts[key] = self.request_counts.get(key, 0) + 1
        latency = self.request_seconds.get(method)
        if latency is not None:
            latency.observe(seconds)

    def actions(self, actions: np.ndarray, low: np.ndarray, high: np.ndarray) -> None:
        """Fold one batch of executed actions ``(B, act_dim)`` into the moving statistics."""
        if actions.shape[1] != len(self._mean_children):
            return
        span = (high - low) * 1e-3  # "at the bound": within 0.1 % of the range
        at_bound = ((actions <= low + span) | (actions >= high - span)).mean(axis=0)
        mean = actions.mean(axis=0)
        with self._stats_lock:
            if not self._stats_primed:
                self._mean[:] = mean
                self._at_bound[:] = at_bound
                self._stats_primed = True
            else:
                self._mean += _ACTION_EMA * (mean - self._mean)
                self._at_bound += _ACTION_EMA * (at_bound - self._at_bound)
            for i, child in enumerate(self._mean_children):
                child.set(float(self._mean[i]))
                self._bound_children[i].set(float(self._at_bound[i]))


_METHODS = ("GetAction", "Control", "Describe")


class MetricsHttpServer:
    """Serves one registry at ``/metrics`` on its own port, in a daemon thread."""

    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        try:
            server, thread = start_http_server(port, addr=host, registry=registry)
        except OSError as exc:
            raise ServerSetupError(
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}; choose "
                "another --metrics-port (0 picks a free one)"
            ) from exc
        self._server: WSGIServer = server
        self._thread = thread
        self.port: int = int(server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
