"""A collector's own Prometheus metrics (pure, but for the lock of `publish.Published`).

The collector daemon publishes its counters (`CollectorStats`), whether its aggregator
answers, and `commscope_build_info`; `CollectorMetrics.collect()` yields the families of
`metricnames.COLLECTOR_FAMILIES` for the latest publication, and `describe()` names them all
up front, so a collector's /metrics never shows the aggregator's families.
"""

from __future__ import annotations

from commscope.exporters.metricnames import COLLECTOR_FAMILIES
from commscope.exporters.publish import BUILD, Published, scalar
from commscope.model.schema import CollectorStats
from prometheus_client.core import Metric


def counter_samples(stats: CollectorStats) -> dict[str, float]:
    """A collector's counters by family name (`dropped` apart: it has a reason label); the
    aggregator exports the same ones as relayed by heartbeats."""
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
    }


def reason_samples(stats: CollectorStats) -> list[tuple[str, str, int]]:
    """The counters with a `reason` label but `dropped`: (family, reason, count)."""
    return [
        *(
            ("commscope_collector_read_failures_total", k, n)
            for k, n in stats.read_failures.items()
        ),
        *(("commscope_collector_files_lost_total", k, n) for k, n in stats.files_lost.items()),
    ]


def _collector_families(
    job: str, node: str, stats: CollectorStats, connected: bool
) -> list[Metric]:
    """Every collector family for one collector (`dropped` only with a reason to show)."""
    made = {spec.name: scalar(spec) for spec in COLLECTOR_FAMILIES}
    values = {**counter_samples(stats), "commscope_collector_connected": float(connected)}
    for name, value in values.items():
        made[name].add_metric([job, node], value)
    made["commscope_build_info"].add_metric([job, *BUILD], 1.0)
    for reason, count in sorted(stats.dropped.items()):
        made["commscope_collector_dropped_total"].add_metric([job, node, reason], count)
    for name, key, count in sorted(reason_samples(stats)):
        made[name].add_metric([job, node, key], count)
    return [family for family in made.values() if family.samples]


class CollectorMetrics(Published):
    """A collector daemon's own metrics: its latest published counters."""

    def __init__(self, job: str, node: str) -> None:
        super().__init__(
            COLLECTOR_FAMILIES, _collector_families(job, node, CollectorStats(), False)
        )
        self._job, self._node = job, node

    def show(self, stats: CollectorStats, connected: bool) -> None:
        self.publish(_collector_families(self._job, self._node, stats, connected))
