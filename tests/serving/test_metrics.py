"""The per-request metrics, kept as plain numbers, export what prometheus_client would;
the degradation gauges are read when scraped."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from tests.serving.serving_harness import MakeServer, relaxed_limits
from tether.safety.degradation import DegradationMachine
from tether.safety.levels import DegradationLevel
from tether.serving.client import PolicyClient
from tether.serving.metrics import _BATCH_BUCKETS, _LATENCY_BUCKETS, ServingMetrics
from tether.serving.supervision import SupervisorFactory, _LevelCache
from tether.spec import RobotSpec


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


def test_the_degradation_gauges_are_read_when_scraped_never_on_the_serving_loop(
    make_server: MakeServer, arm: RobotSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The learning-wide level walks every robot's recent events (~140 µs for 64 degraded
    robots); refreshed with the gauges every 50 ms on the event loop it was a stall there."""
    machine = DegradationMachine(limits=relaxed_limits(arm))
    running = make_server(
        supervisors=SupervisorFactory(arm, limits=relaxed_limits(arm), degradation=machine)
    )
    machine.escalate(DegradationLevel.RESTRICTED, reason="test", robot="arm-1")
    machine.escalate(DegradationLevel.PAUSED, reason="test", robot="arm-2")
    loop_reads: list[str] = []
    read = _LevelCache.read

    def counted(self: _LevelCache) -> DegradationLevel:
        loop_reads.append(threading.current_thread().name)
        return read(self)

    monkeypatch.setattr(_LevelCache, "read", counted)
    with PolicyClient(running.address) as client, client.session(arm, robot_id="arm-3") as s:
        loop_reads.clear()  # Describe, which the session's open calls, reports the level
        obs = np.zeros(arm.obs_dim, np.float32)
        until = time.monotonic() + 0.3  # six of the action gauges' 50 ms refreshes
        while time.monotonic() < until:
            s.step(obs, deterministic=True)
    assert loop_reads == []  # served for 300 ms: the fleet level was never read
    scraped = {
        (sample.name, sample.labels.get("level")): sample.value
        for family in running.server.metrics.registry.collect()
        for sample in family.samples
    }
    assert loop_reads == [threading.current_thread().name]  # one read, by the scraper
    assert scraped[("tether_degradation_level", None)] == int(machine.level)
    robots = machine.robot_levels()
    assert {"arm-1", "arm-2", "arm-3"} <= robots.keys()
    for level in DegradationLevel:
        expected = list(robots.values()).count(level)
        assert scraped[("tether_robots_at_level", level.name)] == expected
    assert scraped[("tether_robots_at_level", "PAUSED")] == 1


def test_without_a_degradation_machine_the_gauges_say_normal() -> None:
    metrics = ServingMetrics(("a",), degradation=lambda: (DegradationLevel.NORMAL, ()))
    assert metrics.registry.get_sample_value("tether_degradation_level") == 0
    for level in DegradationLevel:
        value = metrics.registry.get_sample_value("tether_robots_at_level", {"level": level.name})
        assert value == 0
