"""Prometheus metrics of the serving edge, on their own registry and HTTP port.

Names follow Prometheus conventions (``tether_`` prefix, ``_seconds``, ``_total``).
Each server owns a ``CollectorRegistry`` so several servers (tests, benchmarks) can live
in one process. Label children are cached because ``labels()`` costs microseconds on a
path that runs per request.
"""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIServer

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    start_http_server,
)

from tether.serving.errors import ServerSetupError

# Round trips of a policy server range from ~100 µs (small MLP, one robot) to tens of ms.
_LATENCY_BUCKETS = (
    5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.25, 1.0,
)  # fmt: skip
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)

# Weight of the newest sampled batch in the per-dimension action statistics (an EMA over
# the batches the server samples, at most one per 50 ms).
_ACTION_EMA = 0.1


class ServingMetrics:
    """Every metric the edge exports; one instance per server."""

    def __init__(self, action_names: tuple[str, ...]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tether_requests",
            "Requests answered, by RPC method, gRPC status and policy version",
            ("method", "status", "version"),
            registry=r,
        )
        self.queue_seconds = Histogram(
            "tether_queue_seconds",
            "Time a request waited before its batch started",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.inference_seconds = Histogram(
            "tether_inference_seconds",
            "Compute time of one batch (policy forward and supervisor)",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.request_seconds = Histogram(
            "tether_request_seconds",
            "Server-side time from a request's arrival to its reply",
            ("method",),
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "tether_batch_size",
            "Requests per batch",
            buckets=_BATCH_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            "tether_requests_in_flight", "Requests received and not yet answered", registry=r
        )
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
        self.sessions = Gauge("tether_sessions_open", "Control sessions open", registry=r)
        self.degradation = Gauge(
            "tether_degradation_level",
            "Learning-wide degradation level, aggregated over the robots "
            "(0 normal, 1 restricted, 2 paused, 3 takeover)",
            registry=r,
        )
        self.robots_at_level = Gauge(
            "tether_robots_at_level",
            "Robots whose own degradation level is this one",
            ["level"],
            registry=r,
        )
        self._request_children: dict[tuple[str, str, str], Counter] = {}
        self._latency_children = {m: self.request_seconds.labels(m) for m in _METHODS}
        self._mean_children = [self.action_mean.labels(n) for n in action_names]
        self._bound_children = [self.action_at_bound.labels(n) for n in action_names]
        self._mean = np.zeros(len(action_names))
        self._at_bound = np.zeros(len(action_names))
        self._stats_lock = threading.Lock()
        self._stats_primed = False

    def request(self, method: str, status: str, version: str, seconds: float) -> None:
        key = (method, status, version)
        child = self._request_children.get(key)
        if child is None:
            child = self.requests.labels(method, status, version)
            self._request_children[key] = child
        child.inc()
        latency = self._latency_children.get(method)
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
