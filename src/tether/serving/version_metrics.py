"""Per-version Prometheus metrics, read from the registry at scrape time.

The registry already counts steps, interventions by check, backups and episodes per
version; this collector exposes those counts with a ``version`` label when Prometheus
scrapes, so the control path pays nothing extra. Register it on the server's metrics
registry: ``metrics.registry.register(VersionCollector(versions.registry))``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from tether.versions.registry import ModelRegistry


class VersionCollector(Collector):
    """Exports every registered version's state and numbers."""

    def __init__(self, registry: ModelRegistry[Any]) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(
            "tether_version_info",
            "1 for every known policy version, labelled with its name and state",
            labels=("version", "name", "state"),
        )
        steps = CounterMetricFamily(
            "tether_version_steps", "Supervised control steps served", labels=("version",)
        )
        interventions = CounterMetricFamily(
            "tether_version_interventions",
            "Steps on which a safety check changed or replaced the action, by check",
            labels=("version", "check"),
        )
        backups = CounterMetricFamily(
            "tether_version_backups", "Steps served by a backup action", labels=("version",)
        )
        episodes = CounterMetricFamily(
            "tether_version_episodes", "Finished episodes", labels=("version",)
        )
        mean_return = GaugeMetricFamily(
            "tether_version_mean_return", "Mean episode return", labels=("version",)
        )
        success = GaugeMetricFamily(
            "tether_version_success_ratio", "Share of episodes that succeeded", labels=("version",)
        )
        for record in self._registry.records():
            v = str(record.id)
            m = self._registry.metrics(record.id)
            state.add_metric([v, record.name, record.state.value], 1.0)
            steps.add_metric([v], m.steps)
            backups.add_metric([v], m.backups)
            episodes.add_metric([v], m.episodes)
            mean_return.add_metric([v], m.mean_return)
            success.add_metric([v], m.success_rate)
            for check, count in m.interventions_by_check:
                interventions.add_metric([v, check], count)
        yield from (state, steps, interventions, backups, episodes, mean_return, success)
