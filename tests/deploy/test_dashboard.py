"""The Grafana dashboard: variables, datasource on every panel, queries only on exported names,
job-wide panels that combine several aggregators' shards into the job's figure."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from commscope.exporters.metricnames import BUSBW_BUCKETS
from deploycheck import (
    DEPLOY,
    KIND,
    LABELS,
    NAMES,
    commscope_names,
    misused_counters,
    require_tool,
    unknown_labels,
)

DASHBOARD = DEPLOY / "grafana" / "commscope.json"
DATASOURCE = DEPLOY / "grafana" / "victoriametrics-datasource.yml"
DS_VAR = "${datasource}"
RANK_FILTER = 'rank=~"$rank"'
SELECTOR = re.compile(r"\b(commscope_[a-z_]+)\s*\{([^}]*)\}")

# The families no panel queries, on purpose: every other exported family is shown somewhere.
NOT_SHOWN = {
    "commscope_run_comm_compute_overlap_ratio": "the latest window's overlap is shown",
    "commscope_run_arrival_skew_seconds": "the latest window's skew is shown",
    "commscope_run_arrival_skew_max_seconds": "the latest window's skew is shown",
    "commscope_collective_op_busbw_bytes_per_second_sum": "the histogram's quantiles are shown",
    "commscope_collective_op_busbw_bytes_per_second_count": "collectives per second are shown",
    "commscope_collective_message_bytes_total": "bus bytes (S·F) are shown, not S",
    "commscope_collective_busbw_samples": "the sample count behind the busbw quantiles",
    "commscope_aggregator_messages_total": "pipeline bookkeeping",
    "commscope_aggregator_events_total": "pipeline bookkeeping",
    "commscope_aggregator_out_of_order_total": "pipeline bookkeeping (resends are shown)",
    "commscope_aggregator_acks_total": "pipeline bookkeeping (acknowledged records are shown)",
    "commscope_aggregator_streams": "pipeline bookkeeping",
    "commscope_aggregator_log_bytes": "pipeline bookkeeping",
    "commscope_aggregator_received_bytes_total": "pipeline bookkeeping (scale benchmark)",
    "commscope_aggregator_window_latency_seconds": "pipeline bookkeeping",
    "commscope_collector_files_total": "pipeline bookkeeping",
    "commscope_collector_files_done_total": "pipeline bookkeeping",
    "commscope_collector_files_skipped_total": "the job's skipped inputs are shown",
    "commscope_collector_events_total": "pipeline bookkeeping",
    "commscope_collector_unacked_bytes": "unacknowledged records are shown",
    "commscope_collector_dropped_total": "pipeline bookkeeping",
    "commscope_collector_read_failures_total": "collector health: the final report names losses",
    "commscope_collector_files_lost_total": "the final report names each lost file and why",
}
ROWS = {
    "Run": [
        "Tokens per second",
        "Windows completed (time range)",
        "Ranks",
        "Exposed communication share (job)",
        "Overlap per window and rank",
        "Exposed communication share per rank",
        "Iteration time per rank",
        "Bus bandwidth per rank",
        "Bus bandwidth per rank against the link peak",
        "Exposed communication share split: transfer, waiting, unmatched (job)",
    ],
    "Collectives": [
        "busbw per collective (rolling quantiles 0.5, 0.95 and mean)",
        "Collective traffic (bus bytes) rate",
        "Collective time by type (share of all collective time)",
        "Collectives per second",
        "busbw per collective (histogram p50, p95) and the link peak",
    ],
    "Cross-rank": [
        "The rank the others wait for",
        "Matched collectives (time range)",
        "Collective desyncs (time range)",
        "α-β fits not shown (process groups)",
        "Arrival skew per collective (quantiles 0.5, 0.95 and max)",
        "Clock offset per rank",
        "Share of the waiting each rank caused",
        "Share of communication time spent waiting, per rank",
        "Late arrivals per rank (time range)",
        "α (latency) per process group and collective",
        "β (bandwidth) per process group and collective",
        "Bus bandwidth per link class (intra- vs inter-node) and each link's peak",
        "Bus bandwidth per link class against its own peak",
    ],
    "Pipeline parallelism": [
        "The pipeline stage the others wait for",
        "Pipeline bubble per rank",
        "Pipeline bubble slower stages added, per rank",
    ],
    "MoE all-to-all-v": [
        "All-to-all-v bytes sent and received per rank",
        "All-to-all-v load imbalance (latest profiled step)",
        "The busiest all-to-all-v rank",
    ],
    "Utilization and GPU": [
        "MFU",
        "HFU",
        "GPU time share by category",
        "GPU idle ratio per rank",
        "GPU memory peak per rank",
    ],
    "Pipeline health": [
        "Collectors up",
        "Collector lag",
        "Collector unacknowledged records",
        "Collector sends and resends",
        "Aggregator duplicates and rejects",
        "Dropped and skipped",
        "commscope version",
        "Ranks without per-rank series",
        "CUDA graph launches without recorded kernels, per rank",
        "GPU time in CUDA graph replays per rank",
    ],
    "Hangs (Flight Recorder)": [
        "Ranks stuck before a collective (Flight Recorder)",
        "Last completed collective per process group and rank (Flight Recorder)",
    ],
}
# Panels naming a rank in their legend that must not follow the rank variable: the verdict is
# the job's, whatever ranks are picked.
WHOLE_JOB = {
    "The rank the others wait for",
    "The pipeline stage the others wait for",
    "The busiest all-to-all-v rank",
    "Ranks stuck before a collective (Flight Recorder)",
}
# Panels with a bad side, the value where red starts, and whether higher is worse.
RED = {
    "Exposed communication share (job)": (0.3, True),
    "Exposed communication share per rank": (0.3, True),
    "Overlap per window and rank": (0.3, False),
    "Share of communication time spent waiting, per rank": (0.5, True),
    "GPU idle ratio per rank": (0.5, True),
    "Collector lag": (120, True),
    "Collectors up": (1, False),
    "Collective desyncs (time range)": (1, True),
    "CUDA graph launches without recorded kernels, per rank": (0.01, True),
    "All-to-all-v load imbalance (latest profiled step)": (1.5, True),
}
# Grafana's own variables.
BUILTIN = {"__rate_interval", "__range", "__interval"}
# A panel showing one gauge as it is uses the unit its name ends in.
UNITS = (
    ("_ratio", "percentunit"),
    ("_bytes_per_second", "Bps"),
    ("_bytes", "bytes"),
    ("_seconds", "s"),
)


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


def panels_showing(dashboard: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    return [
        p
        for p in query_panels(dashboard)
        if any(metric in commscope_names(t["expr"]) for t in p["targets"])
    ]


def rows(dashboard: dict[str, Any]) -> dict[str, list[str]]:
    """Each row's title -> its panels' titles in reading order (by position, as Grafana does)."""
    top = sorted(dashboard["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    out: dict[str, list[str]] = {}
    current: list[str] = []
    for panel in top:
        if panel["type"] == "row":
            current = out[panel["title"]] = [p["title"] for p in panel.get("panels", [])]
        else:
            current.append(panel["title"])
    return out


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


def test_the_victoria_metrics_datasource_is_one_the_dashboard_offers(
    dashboard: dict[str, Any],
) -> None:
    provisioned = yaml.safe_load(DATASOURCE.read_text(encoding="utf-8"))
    (source,) = provisioned["datasources"]
    assert source["type"] == variable(dashboard, "datasource")["query"] == "prometheus"
    assert source["url"] == "http://victoriametrics:8428"  # the Prometheus query API


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
        variable_query(variable(dashboard, name)) for name in ("job", "rank", "collective")
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


def test_every_panel_says_what_it_shows(dashboard: dict[str, Any]) -> None:
    for panel in query_panels(dashboard):
        description = panel.get("description", "")
        assert description.endswith("."), panel["title"]


def test_per_rank_series_follow_the_rank_variable(dashboard: dict[str, Any]) -> None:
    """A series drawn per rank selects only the ranks picked in the `rank` variable."""
    for panel in query_panels(dashboard):
        for target in panel["targets"]:
            if "{{rank}}" not in target.get("legendFormat", "") or panel["title"] in WHOLE_JOB:
                continue
            # a job-wide denominator (`... group_left sum by (job) (...)`) covers every rank
            for name, matchers in SELECTOR.findall(target["expr"].split("group_left")[0]):
                if "rank" in LABELS[name]:
                    assert RANK_FILTER in matchers, (panel["title"], target["expr"])


def test_raw_gauges_are_shown_in_their_base_unit(dashboard: dict[str, Any]) -> None:
    for panel in query_panels(dashboard):
        for target in panel["targets"]:
            match = re.fullmatch(r"(commscope_[a-z_]+)\{[^}]*\}", target["expr"])
            if match is None:
                continue
            name = match.group(1)
            want = next((unit for end, unit in UNITS if name.endswith(end)), None)
            if want is not None:
                assert panel["fieldConfig"]["defaults"]["unit"] == want, panel["title"]


@pytest.mark.parametrize("metric", sorted(NAMES - NOT_SHOWN.keys()))
def test_the_dashboard_shows(dashboard: dict[str, Any], metric: str) -> None:
    assert panels_showing(dashboard, metric)


@pytest.mark.parametrize("metric", sorted(NOT_SHOWN))
def test_a_family_left_out_is_exported_and_really_left_out(
    dashboard: dict[str, Any], metric: str
) -> None:
    assert metric in NAMES
    assert not panels_showing(dashboard, metric)


def test_rows_come_in_order_with_their_panels(dashboard: dict[str, Any]) -> None:
    assert list(rows(dashboard).items()) == list(ROWS.items())


def test_desyncs_turn_red_when_there_is_any(dashboard: dict[str, Any]) -> None:
    (panel,) = panels_showing(dashboard, "commscope_collective_desyncs_total")
    defaults = panel["fieldConfig"]["defaults"]
    steps = [(s["color"], s["value"]) for s in defaults["thresholds"]["steps"]]
    assert steps == [("green", None), ("red", 1)]
    assert defaults["color"]["mode"] == "thresholds"
    assert panel["options"]["colorMode"] == "background"


def test_the_rank_the_others_wait_for_shows_only_the_current_verdict(
    dashboard: dict[str, Any],
) -> None:
    """An instant query: the last value over a range would name a rank no longer clear. The
    rank is a label of the 0/1 gauge, shown by name, for the whole job."""
    (panel,) = panels_showing(dashboard, "commscope_rank_waited_for")
    (target,) = panel["targets"]
    assert (target["instant"], target["range"]) == (True, False)
    assert target["expr"] == 'commscope_rank_waited_for{job=~"$job"} == 1'
    assert "{{rank}}" in target["legendFormat"] and panel["options"]["textMode"] == "name"
    assert panel["fieldConfig"]["defaults"]["noValue"]


def test_alpha_and_beta_are_drawn_per_process_group_and_collective(
    dashboard: dict[str, Any],
) -> None:
    for metric in ("commscope_alpha_seconds", "commscope_beta_bytes_per_second"):
        (panel,) = panels_showing(dashboard, metric)
        (target,) = panel["targets"]
        assert target["legendFormat"] == "{{process_group}} {{collective}} {{shard}}"


# The run's counters: they grow once per finished window (the pipeline's own move all the time).
RUN_COUNTERS = {
    n for n in NAMES if KIND[n] == "counter" and not n.startswith(("commscope_collector_",
                                                                   "commscope_aggregator_"))
}  # fmt: skip


def test_run_counters_are_rated_over_a_window_update(dashboard: dict[str, Any]) -> None:
    """They grow once per finished window: rates span the `window` variable (default 10m, as
    the rules), never $__rate_interval, which reads zero between two windows."""
    window = variable(dashboard, "window")
    assert window["current"]["value"] == "10m" and window["query"].split(",")[0] == "10m"
    for expr in exprs(dashboard):
        for name in commscope_names(expr) & RUN_COUNTERS:
            ranges = re.findall(rf"{name}\b[^\[]*\[([^\]]+)\]", expr)
            assert ranges and set(ranges) <= {"$window", "$__range"}, expr


def test_every_panel_has_a_unit_and_seconds_rates_are_fractions(dashboard: dict[str, Any]) -> None:
    """A rate of a `_seconds_total` counter is seconds per second: shown as a fraction (%)."""
    for panel in query_panels(dashboard):
        unit = panel["fieldConfig"]["defaults"].get("unit")
        assert unit, panel["title"]
        if any(
            re.search(r"rate\(commscope_\w+_seconds_total", t["expr"]) for t in panel["targets"]
        ):
            assert unit == "percentunit", panel["title"]
            assert "s/s" in panel["description"] or "share" in panel["title"].lower(), panel[
                "title"
            ]


@pytest.mark.parametrize(("title", "red"), RED.items(), ids=list(RED))
def test_thresholds_turn_red_where_a_value_is_bad(
    dashboard: dict[str, Any], title: str, red: tuple[float, bool]
) -> None:
    (panel,) = [p for p in query_panels(dashboard) if p["title"] == title]
    steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
    value, higher_is_worse = red
    if higher_is_worse:
        assert steps[-1] == {"color": "red", "value": value}
        assert steps[0]["color"] == "green"
    else:
        assert steps[0] == {"color": "red", "value": None}
        assert steps[1]["value"] == value and steps[-1]["color"] == "green"
    if panel["type"] == "timeseries":
        assert panel["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] != "off"


def _used_variables(dashboard: dict[str, Any]) -> set[str]:
    texts = [
        *exprs(dashboard),
        json.dumps(dashboard["links"]),
        json.dumps(dashboard["annotations"]),
    ]
    texts += [variable_query(v) for v in dashboard["templating"]["list"] if v["type"] == "query"]
    texts += [json.dumps(p["datasource"]) for p in query_panels(dashboard)]
    return {m for text in texts for m in re.findall(r"\$\{?(\w+)\}?", text)}


def test_every_variable_is_defined_and_used(dashboard: dict[str, Any]) -> None:
    defined = {v["name"] for v in dashboard["templating"]["list"]}
    used = _used_variables(dashboard)
    assert used - BUILTIN <= defined, used - BUILTIN - defined
    assert defined <= used, defined - used


def test_the_collective_variable_filters_every_per_collective_panel(
    dashboard: dict[str, Any],
) -> None:
    var = variable(dashboard, "collective")
    assert (
        variable_query(var)
        == 'label_values(commscope_collective_ops_total{job=~"$job"}, collective)'
    )
    assert var["multi"] and var["includeAll"] and var["allValue"] == ".*"
    for panel in query_panels(dashboard):
        for target in panel["targets"]:
            if "{{collective}}" in target.get("legendFormat", ""):
                assert 'collective=~"$collective"' in target["expr"], panel["title"]


def test_windows_are_annotated_when_they_complete(dashboard: dict[str, Any]) -> None:
    (note,) = [a for a in dashboard["annotations"]["list"] if a.get("name") == "Window completed"]
    assert note["enable"] and note["datasource"]["uid"] == DS_VAR
    assert commscope_names(note["expr"]) == {"commscope_windows_completed_total"}
    assert 'job=~"$job"' in note["expr"] and not misused_counters(note["expr"])


def test_the_dashboard_links_the_job_s_report(dashboard: dict[str, Any]) -> None:
    (link,) = dashboard["links"]
    assert link["url"] == "${report_url}/${job}/" and link["targetBlank"]
    assert variable(dashboard, "report_url")["type"] == "textbox"


def test_busbw_is_drawn_against_the_link_peak(dashboard: dict[str, Any]) -> None:
    """Per rank as a fraction of the peak; per collective, the histogram's quantiles (summed
    over shards by `le` first, so they are the job's) beside the peak."""
    peak = "commscope_link_peak_bytes_per_second"
    panels = panels_showing(dashboard, peak)
    assert {p["title"] for p in panels} == {
        "Bus bandwidth per rank against the link peak",
        "busbw per collective (histogram p50, p95) and the link peak",
    }
    for panel in panels:
        text = " ".join(t["expr"] for t in panel["targets"])
        if panel["fieldConfig"]["defaults"]["unit"] == "percentunit":
            assert f"group_left max by (job) ({peak}" in text
        else:
            assert text.count("histogram_quantile(") == 2
            assert text.count("sum by (le, collective) (rate(") == 2


def test_every_query_is_valid_promql(dashboard: dict[str, Any], tmp_path: Path) -> None:
    """promtool parses each query (the annotations' too), with Grafana's variables replaced
    by values."""
    promtool = require_tool("promtool")
    values = {"$__rate_interval": "1m", "$__range": "1h", "$window": "10m", "$job": ".*",
              "$rank": ".*", "$collective": ".*"}  # fmt: skip
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    notes = [a["expr"] for a in dashboard["annotations"]["list"] if "expr" in a]
    for i, expr in enumerate(exprs(dashboard) + notes):
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


def panel_expr(dashboard: dict[str, Any], title: str) -> str:
    (panel,) = [p for p in query_panels(dashboard) if p["title"] == title]
    return str(panel["targets"][0]["expr"]).replace("$job", ".*")


# Job j split over shards a and b (2 ranks each; a's ranks step in 1 s, b's in 2 s), job k on
# one aggregator (no shard). A shard's tokens/s is K / (its mean step time), the job's is
# K / 1.5 s = 800 for K = 1200: a says 1200, b 600; their mean (900) would be wrong, the
# rank-weighted harmonic mean 4 / (2/1200 + 2/600) = 800 is right. MFU and HFU scale with
# tokens/s: a 0.6 and b 0.3 give 0.4; a 0.9 and b 0.45 give 0.6.
SHARDED = {  # shard -> value ("": job k's one aggregator)
    "commscope_ranks": {"a": 2, "b": 2, "": 4},
    "commscope_tokens_per_second": {"a": 1200, "b": 600, "": 800},
    "commscope_mfu_ratio": {"a": 0.6, "b": 0.3, "": 0.4},
    "commscope_hfu_ratio": {"a": 0.9, "b": 0.45, "": 0.6},
}
JOB_WIDE = {"Ranks": (4, 4), "Tokens per second": (800, 800), "MFU": (0.4, 0.4), "HFU": (0.6, 0.6)}


def _series(name: str, shard: str, value: float) -> dict[str, str]:
    labels = f'job="j", shard="{shard}"' if shard else 'job="k"'
    return {"series": f"{name}{{{labels}}}", "values": f"{value}x5"}


def test_job_wide_panels_combine_shards_into_the_jobs_figure(
    dashboard: dict[str, Any], tmp_path: Path
) -> None:
    """promtool evaluates the panels' queries over two shards' series and one aggregator's."""
    series = [_series(name, s, v) for name, values in SHARDED.items() for s, v in values.items()]
    rules = [{"record": f"dashboard:panel{i}", "expr": panel_expr(dashboard, title)}
             for i, title in enumerate(JOB_WIDE)]  # fmt: skip
    cases = [
        {"expr": f"dashboard:panel{i}", "eval_time": "2m", "exp_samples": [
            {"labels": f'dashboard:panel{i}{{job="{job}"}}', "value": value}
            for job, value in zip("jk", want, strict=True)]}
        for i, want in enumerate(JOB_WIDE.values())
    ]  # fmt: skip
    promtool_test(tmp_path, rules, series, cases)


def promtool_test(folder: Path, rules: list[Any], series: list[Any], cases: list[Any]) -> None:
    """`promtool test rules` on these recording rules over these input series: every case
    holds (a minute apart, evaluated each minute)."""
    (folder / "rules.yml").write_text(json.dumps({"groups": [{"name": "d", "rules": rules}]}))
    unit = {"interval": "1m", "input_series": series, "promql_expr_test": cases}
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [unit]}
    (folder / "test.yml").write_text(json.dumps(test))
    done = subprocess.run([require_tool("promtool"), "test", "rules", "test.yml"], cwd=folder,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def _bucket_series(shard: str, low: float) -> list[dict[str, str]]:
    """10 ops a minute of one shard, all in the bucket whose lower bound is `low`."""
    name = "commscope_collective_op_busbw_bytes_per_second_bucket"
    bounds = [*(f"{b:g}" for b in BUSBW_BUCKETS), "+Inf"]
    return [
        {"series": f'{name}{{job="j", collective="AllReduce", shard="{shard}", le="{le}"}}',
         "values": "0+10x20" if le == "+Inf" or float(le) > low else "0x20"}
        for le in bounds
    ]  # fmt: skip


def test_the_histogram_quantiles_combine_shards_into_the_job_s(
    dashboard: dict[str, Any], tmp_path: Path
) -> None:
    """Shard a's ops all in (5e9, 1e10], shard b's in (1e10, 2.5e10], as many: the job's
    median is the top of a's bucket, 5e9 + 5e9 x 10/10 = 1e10, and its p95 (rank 19 of 20)
    1e10 + 1.5e10 x 9/10 = 2.35e10, interpolated in b's bucket (neither shard's own figure:
    a's p95 is 9.75e9, b's median 1.75e10)."""
    (panel,) = [
        p
        for p in query_panels(dashboard)
        if p["title"].startswith("busbw per collective (histogram")
    ]
    values = {"$job": ".*", "$collective": ".*", "$window": "10m"}
    p50, p95, _ = (functools.reduce(lambda e, kv: e.replace(*kv), values.items(), t["expr"])
                   for t in panel["targets"])  # fmt: skip
    rules = [{"record": "dashboard:p50", "expr": p50}, {"record": "dashboard:p95", "expr": p95}]
    series = _bucket_series("a", 5e9) + _bucket_series("b", 1e10)
    cases = [
        {"expr": f"dashboard:{name}", "eval_time": "15m",
         "exp_samples": [{"labels": f'dashboard:{name}{{collective="AllReduce"}}', "value": value}]}
        for name, value in (("p50", 1e10), ("p95", 2.35e10))
    ]  # fmt: skip
    promtool_test(tmp_path, rules, series, cases)
