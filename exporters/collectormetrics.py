"""A collector's own Prometheus metrics (shell: a lock shared with the scrape thread).

The collector daemon publishes its counters (`CollectorStats`) and whether its aggregator
answers; `CollectorMetrics.collect()` yields the families of `metricnames.COLLECTOR_FAMILIES`
for the latest publication, and `describe()` names them all up front, so a collector's
/metrics never shows the aggregator's families.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIServer

from commscope.collector.schema import CollectorStats
from commscope.exporters.metricnames import COLLECTOR_FAMILIES, Family
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_Made = GaugeMetricFamily | CounterMetricFamily


def _family(spec: Family) -> _Made:
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


def _values(stats: CollectorStats, connected: bool) -> dict[str, float]:
    return {
        "commscope_collector_files_total": stats.files_seen,
        "commscope_collector_files_done_total": stats.files_done,
        "commscope_collector_files_skipped_total": stats.files_skipped,
        "commscope_collector_events_total": stats.events_read,
        "commscope_collector_batches_sent_total": stats.batches_sent,
        "commscope_collector_batches_resent_total": stats.batches_resent,
        "commscope_collector_batches_acked_total": stats.batches_acked,
        "commscope_collector_unacked_batches": stats.unacked,
        "commscope_collector_unacked_bytes": stats.unacked_bytes,
        "commscope_collector_lag_seconds": stats.lag_s,
        "commscope_collector_connected": 1.0 if connected else 0.0,
    }


def collector_families(job: str, node: str, stats: CollectorStats, connected: bool) -> list[Metric]:
    """Every collector family for one collector (`dropped` only with a reason to show)."""
    made = {spec.name: _family(spec) for spec in COLLECTOR_FAMILIES}
    for name, value in _values(stats, connected).items():
        made[name].add_metric([job, node], value)
    for reason, count in sorted(stats.dropped.items()):
        made["commscope_collector_dropped_total"].add_metric([job, node, reason], count)
    return [family for family in made.values() if family.samples]


class CollectorMetrics(Collector):
    """A prometheus-client collector serving a collector's latest published counters."""

    def __init__(self, job: str, node: str) -> None:
        self._job, self._node = job, node
        self._lock = threading.Lock()
        self._metrics = collector_families(job, node, CollectorStats(), False)

    def publish(self, stats: CollectorStats, connected: bool) -> None:
        metrics = collector_families(self._job, self._node, stats, connected)
        with self._lock:
            self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            metrics = self._metrics
        yield from metrics

    def describe(self) -> Iterator[Metric]:
        for spec in COLLECTOR_FAMILIES:
            yield _family(spec)


def serve(metrics: CollectorMetrics, port: int | None, addr: str) -> WSGIServer | None:
    """Serve `/metrics` from `metrics` on a background thread (None: no port asked)."""
    if port is None:
        return None
    registry = CollectorRegistry()
    registry.register(metrics)
    server, _ = start_http_server(port, addr, registry=registry)
    return server
