"""The Grafana dashboard: variables, datasource on every panel, queries only on exported names."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from deploycheck import (
    DEPLOY,
    LABELS,
    NAMES,
    commscope_names,
    misused_counters,
    require_tool,
    unknown_labels,
)

DASHBOARD = DEPLOY / "grafana" / "commscope.json"
DS_VAR = "${datasource}"


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return data


def all_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Top-level panels and the panels of collapsed rows."""
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return out


def query_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in all_panels(dashboard) if p["type"] != "row"]


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in query_panels(dashboard) for t in p["targets"]]


def variable(dashboard: dict[str, Any], name: str) -> dict[str, Any]:
    (var,) = [v for v in dashboard["templating"]["list"] if v["name"] == name]
    return var


def variable_query(var: dict[str, Any]) -> str:
    query = var["query"]
    return str(query["query"] if isinstance(query, dict) else query)


def test_is_a_current_grafana_dashboard(dashboard: dict[str, Any]) -> None:
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert dashboard["uid"] == "commscope"
    assert dashboard["id"] is None  # importable into any Grafana


def test_datasource_variable_picks_a_prometheus(dashboard: dict[str, Any]) -> None:
    var = variable(dashboard, "datasource")
    assert (var["type"], var["query"]) == ("datasource", "prometheus")


@pytest.mark.parametrize(
    ("name", "query"),
    [
        ("job", "label_values(commscope_comm_compute_overlap_ratio, job)"),
        ("rank", 'label_values(commscope_comm_compute_overlap_ratio{job=~"$job"}, rank)'),
    ],
)
def test_job_and_rank_variables_come_from_the_overlap_gauge(
    dashboard: dict[str, Any], name: str, query: str
) -> None:
    var = variable(dashboard, name)
    assert var["type"] == "query"
    assert variable_query(var) == query
    assert var["datasource"]["uid"] == DS_VAR


def test_rank_variable_allows_all_ranks(dashboard: dict[str, Any]) -> None:
    var = variable(dashboard, "rank")
    assert var["multi"] and var["includeAll"]
    assert var["allValue"] == ".*"


def test_every_panel_and_target_uses_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in query_panels(dashboard):
        assert panel["datasource"]["uid"] == DS_VAR, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == DS_VAR, panel["title"]


def test_panel_ids_are_unique(dashboard: dict[str, Any]) -> None:
    ids = [p["id"] for p in all_panels(dashboard)]
    assert len(ids) == len(set(ids))


def test_panels_do_not_overlap_and_fit_the_grid(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in all_panels(dashboard):
        g = panel["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, panel["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_every_query_names_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    queries = exprs(dashboard) + [
        variable_query(variable(dashboard, name)) for name in ("job", "rank")
    ]
    for expr in queries:
        names = commscope_names(expr)
        assert names, f"no commscope metric in {expr!r}"
        assert names <= NAMES, f"not exported: {sorted(names - NAMES)} in {expr!r}"


def test_counters_are_rated_and_gauges_are_not(dashboard: dict[str, Any]) -> None:
    for expr in exprs(dashboard):
        assert not misused_counters(expr), expr


def test_selectors_and_groupings_use_labels_the_metrics_carry(dashboard: dict[str, Any]) -> None:
    for expr in exprs(dashboard):
        assert not unknown_labels(expr), expr


def test_every_series_is_scoped_to_the_job_variable(dashboard: dict[str, Any]) -> None:
    for expr in exprs(dashboard):
        for selector in re.findall(r"\bcommscope_[a-z_]+\b(\s*\{[^}]*\})?", expr):
            assert 'job=~"$job"' in selector, expr


def test_legends_name_labels_the_series_have(dashboard: dict[str, Any]) -> None:
    for panel in query_panels(dashboard):
        for target in panel["targets"]:
            known = set().union(*(LABELS[n] for n in commscope_names(target["expr"])))
            used = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", "")))
            assert used <= known, (panel["title"], used - known)


@pytest.mark.parametrize(
    "metric",
    [
        "commscope_comm_compute_overlap_ratio",
        "commscope_exposed_comm_seconds_total",
        "commscope_collective_busbw_bytes_per_second",
        "commscope_collective_bus_bytes_total",
        "commscope_iteration_seconds",
        "commscope_tokens_per_second",
        "commscope_windows_completed_total",
        "commscope_collector_lag_seconds",
        "commscope_collector_unacked_batches",
        "commscope_collector_batches_resent_total",
        "commscope_aggregator_duplicates_total",
        "commscope_aggregator_rejected_total",
    ],
)
def test_the_dashboard_shows(dashboard: dict[str, Any], metric: str) -> None:
    assert any(metric in commscope_names(expr) for expr in exprs(dashboard))


def test_every_query_is_valid_promql(dashboard: dict[str, Any], tmp_path: Path) -> None:
    """promtool parses each query, with Grafana's variables replaced by values."""
    promtool = require_tool("promtool")
    values = {"$__rate_interval": "1m", "$__range": "1h", "$job": ".*", "$rank": ".*"}
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for i, expr in enumerate(exprs(dashboard)):
        query = expr
        for var, value in values.items():
            query = query.replace(var, value)
        assert "$" not in query, expr
        lines += [f"      - record: dashboard:query{i}", f"        expr: {json.dumps(query)}"]
    rules = tmp_path / "dashboard_rules.yml"
    rules.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = subprocess.run(
        [promtool, "check", "rules", str(rules)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
