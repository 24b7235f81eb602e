"""The per-request metrics, kept as plain numbers, export what prometheus_client would."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from tether.serving.metrics import _BATCH_BUCKETS, _LATENCY_BUCKETS, ServingMetrics


def _samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name.startswith(name) and not s.name.endswith("_created"):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_histograms_and_counters_match_prometheus_clients_own() -> None:
    rng = np.random.default_rng(0)
    # Values on the bounds (inclusive buckets), between them, below and above all of them.
    latencies = [*_LATENCY_BUCKETS, 0.0, 3.0, *rng.exponential(2e-3, 500).tolist()]
    sizes = [*_BATCH_BUCKETS, 0, 5000, *rng.integers(1, 100, 200).tolist()]
    ours = ServingMetrics(("a", "b"))
    reference = CollectorRegistry()
    queue = Histogram("tether_queue_seconds", "q", buckets=_LATENCY_BUCKETS, registry=reference)
    batch = Histogram("tether_batch_size", "b", buckets=_BATCH_BUCKETS, registry=reference)
    per_method = Histogram(
        "tether_request_seconds", "r", ("method",), buckets=_LATENCY_BUCKETS, registry=reference
    )
    for m in ("GetAction", "Control", "Describe"):
        per_method.labels(m)
    for v in latencies:
        ours.queue_seconds.observe(v)
        queue.observe(v)
        ours.request("Control", "OK", "3", v)
        per_method.labels("Control").observe(v)
    for v in sizes:
        ours.batch_size.observe(v)
        batch.observe(v)
    for name in ("tether_queue_seconds", "tether_batch_size", "tether_request_seconds"):
        got, want = _samples(ours.registry, name), _samples(reference, name)
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert got[key] == (value if not key[0].endswith("_sum") else got[key]), (
                key
            )  # sums: same values, maybe another summation order
            if key[0].endswith("_sum"):
                assert abs(got[key] - value) <= 1e-9 * max(1.0, abs(value))
    assert ours.registry.get_sample_value(
        "tether_requests_total", {"method": "Control", "status": "OK", "version": "3"}
    ) == len(latencies)
    ours.in_flight.inc()
    ours.in_flight.inc()
    ours.in_flight.dec()
    assert ours.registry.get_sample_value("tether_requests_in_flight") == 1
    text = generate_latest(ours.registry).decode()
    assert 'tether_queue_seconds_bucket{le="+Inf"} ' in text
    assert "# TYPE tether_requests_total counter" in text
