"""A collector's own /metrics: only collector families (no aggregator family at zero), every
one described up front, the counters as published, promtool-clean."""

from __future__ import annotations

import subprocess

from commscope.exporters.collectormetrics import CollectorMetrics
from commscope.exporters.metricnames import COLLECTOR_FAMILIES
from commscope.model.schema import PROTOCOL_VERSION, CollectorStats
from prometheus_client import CollectorRegistry, generate_latest
from tools import require_tool

STATS = CollectorStats(
    files_seen=3, files_done=2, batches_sent=10, batches_acked=8, unacked=2, lag_s=1.5,
    dropped={"malformed_reply": 1},
    read_failures={"worker_died": 2, "unreadable": 3}, files_lost={"unreadable": 1},
)  # fmt: skip


def served(metrics: CollectorMetrics) -> str:
    registry = CollectorRegistry()
    registry.register(metrics)
    return generate_latest(registry).decode()


def test_describe_names_exactly_the_collector_families() -> None:
    names = [m.name for m in CollectorMetrics("j", "n").describe()]
    assert names == [f.name.removesuffix("_total") for f in COLLECTOR_FAMILIES]
    assert names[0] == "commscope_build_info"
    assert all(n.startswith("commscope_collector_") for n in names[1:])
    assert "commscope_collector_up" not in names  # the aggregator's view of a collector


def test_what_is_published_is_served() -> None:
    metrics = CollectorMetrics("j", "n")
    text = served(metrics)
    assert 'commscope_collector_connected{job="j",node="n"} 0.0' in text
    assert "commscope_collector_dropped_total" not in text  # nothing dropped yet
    metrics.show(STATS, connected=True)
    reason = 'reason="malformed_reply"'
    first = served(metrics)  # a new counter series is shown at 0 first (`firstzero`)
    assert f'commscope_collector_dropped_total{{job="j",node="n",{reason}}} 0.0' in first
    text = served(metrics)
    assert 'commscope_collector_connected{job="j",node="n"} 1.0' in text
    assert f'commscope_build_info{{job="j",protocol="{PROTOCOL_VERSION}",' in text
    assert 'commscope_collector_batches_sent_total{job="j",node="n"} 10.0' in text
    assert 'commscope_collector_lag_seconds{job="j",node="n"} 1.5' in text
    assert f'commscope_collector_dropped_total{{job="j",node="n",{reason}}} 1.0' in text
    assert "commscope_aggregator" not in text and "commscope_windows" not in text


def test_failed_reads_and_lost_files_are_served_by_reason_key() -> None:
    metrics = CollectorMetrics("j", "n")
    assert "commscope_collector_files_lost_total{" not in served(metrics)  # none lost yet
    metrics.show(STATS, connected=True)
    served(metrics)  # a new counter series is shown at 0 first (`firstzero`)
    text = served(metrics)
    lost = 'commscope_collector_files_lost_total{job="j",node="n",reason="unreadable"} 1.0'
    failed = 'commscope_collector_read_failures_total{job="j",node="n",reason="worker_died"} 2.0'
    assert lost in text and failed in text


def test_promtool_accepts_it() -> None:
    metrics = CollectorMetrics("j", "n")
    metrics.show(STATS, connected=True)
    checked = subprocess.run(
        [require_tool("promtool"), "check", "metrics"],
        input=served(metrics).encode(),
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
