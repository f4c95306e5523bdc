"""Every `reason` label value the exporters can emit is a short snake_case key with a human
text in the one table (`schema.REASONS`), and each reason family's HELP names its keys with
their texts, in ASCII."""

from __future__ import annotations

import re
from pathlib import Path

from commscope.exporters.collectormetrics import CollectorMetrics
from commscope.exporters.metricnames import COLLECTOR_FAMILIES, FAMILIES
from commscope.exporters.prometheus import Snapshot, SnapshotCollector
from commscope.model.schema import (
    DROP_REASONS,
    EVENT_DROP_REASONS,
    READ_FAILURES,
    REASONS,
    REFUSED_REASONS,
    REJECT_REASONS,
    AggregatorStats,
    CollectorStats,
    DropReason,
    Inputs,
    ReadFailure,
    Report,
)
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

KEY = re.compile(r"^[a-z][a-z0-9_]*$")
VOCABULARIES = {
    "commscope_events_dropped_total": EVENT_DROP_REASONS,
    "commscope_aggregator_rejected_total": REJECT_REASONS,
    "commscope_aggregator_refused_connections_total": REFUSED_REASONS,
    "commscope_collector_dropped_total": DROP_REASONS,
    "commscope_collector_read_failures_total": READ_FAILURES,
    "commscope_collector_files_lost_total": READ_FAILURES,
}


def _everything() -> tuple[AggregatorStats, CollectorStats]:
    """Counters with one count under every reason key there is."""
    aggregator = AggregatorStats(
        rejected=dict.fromkeys(REJECT_REASONS, 1), refused=dict.fromkeys(REFUSED_REASONS, 1)
    )
    dropped: dict[DropReason, int] = dict.fromkeys(DROP_REASONS, 1)
    failed: dict[ReadFailure, int] = dict.fromkeys(READ_FAILURES, 1)
    return aggregator, CollectorStats(dropped=dropped, read_failures=failed, files_lost=failed)


def _reasons(text: str) -> dict[str, set[str]]:
    """Each family's `reason` label values in an exposition."""
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "reason" in sample.labels:
                found.setdefault(family.name, set()).add(sample.labels["reason"])
    return found


def _aggregator_exposition() -> str:
    aggregator, node = _everything()
    report = Report(inputs=Inputs(dropped_events=dict.fromkeys(EVENT_DROP_REASONS, 1)))
    collectors = {"n1": (node, True)}
    snapshot = Snapshot(job="j", report=report, aggregator=aggregator, collectors=collectors)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(snapshot))
    return generate_latest(registry).decode()


def _collector_exposition() -> str:
    metrics = CollectorMetrics("j", "n")
    metrics.show(_everything()[1], connected=True)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(metrics)
    return generate_latest(registry).decode()


def test_every_reason_key_is_snake_case_with_a_text() -> None:
    keys = {key for vocabulary in VOCABULARIES.values() for key in vocabulary}
    assert sorted(keys) == sorted(REASONS)  # no key without a text, no text without a key
    for key, text in REASONS.items():
        assert KEY.match(key), key
        assert text.isascii() and text.isprintable() and text, key


def test_every_reason_label_the_aggregator_serves_is_a_key_of_its_family() -> None:
    found = _reasons(_aggregator_exposition())
    for name, vocabulary in VOCABULARIES.items():
        family = name.removesuffix("_total")
        assert found[family] == set(vocabulary), name
    assert all(KEY.match(value) for values in found.values() for value in values)


def test_every_reason_label_a_collector_serves_is_a_key_of_its_family() -> None:
    found = _reasons(_collector_exposition())
    collector = {n: v for n, v in VOCABULARIES.items() if n.startswith("commscope_collector_")}
    assert {f"{name}" for name in found} == {n.removesuffix("_total") for n in collector}
    for name, vocabulary in collector.items():
        assert found[name.removesuffix("_total")] == set(vocabulary), name


def test_each_reason_family_help_names_its_keys_with_their_texts() -> None:
    specs = {spec.name: spec for spec in (*FAMILIES, *COLLECTOR_FAMILIES)}
    for name, vocabulary in VOCABULARIES.items():
        listed = specs[name].help.split("; reason: one of ", 1)[1]
        assert listed == ", ".join(f"{key} ({REASONS[key]})" for key in vocabulary)
        assert specs[name].help.isascii()


def test_the_alerts_and_the_dashboard_filter_only_on_reason_keys() -> None:
    """A `reason` matcher in deploy/'s alert rules or dashboard names a key there is."""
    deploy = Path(__file__).resolve().parents[2] / "deploy"
    texts = [deploy / "prometheus" / "rules.yml", deploy / "grafana" / "commscope.json"]
    named = {m for path in texts for m in re.findall(r'reason!?=~?\\?"([^"\\]*)', path.read_text())}
    assert named, "no reason matcher found: the pattern no longer fits"
    assert named <= REASONS.keys()
