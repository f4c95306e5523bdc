"""A real Prometheus (Debian's package) with deploy/prometheus/rules.yml scrapes an aggregator
from before the first trace arrives; the run has one window (the gloo sample's first). The
counters are seen at 0 first, so after that one window the recording rules for the
exposed-communication fraction are numbers equal to the report's, the alert's expression has a
value, and every dashboard query on a family the run has returns numbers."""

from __future__ import annotations

import json
import math
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from commscope.exporters.metricnames import FAMILIES
from commscope.pipeline.report import Options
from tools import require_shared, require_tool, shared_traces

from service.harness import (
    Aggregate,
    Processes,
    collector_args,
    copy_tree,
    free_port,
    offline,
    promql,
    promql_value,
    scrape_config,
    start_prometheus,
    wait_for,
)
from service.test_prometheus import CONDITIONAL

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[2]
WINDOW = ROOT / "samples" / "gloo_ddp_2rank" / "iteration_4"
CONFIG = ROOT / "samples" / "mlp_ddp.toml"
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "commscope.json"
# Grafana's variables as a one-window run on a 1 s scrape reads them.
VARIABLES = {"$__rate_interval": "1m", "$__range": "10m", "$window": "10m", "$job": "mlp",
             "$rank": ".*", "$collective": ".*"}  # fmt: skip
# Dashboard queries that may rightly have no series here: a filter with nothing to pass.
MAY_BE_EMPTY = {
    'commscope_rank_waited_for{job=~"mlp"} == 1': "no rank is named when the evidence is thin",
}
FRACTIONS = (
    "job:commscope_exposed_comm_fraction:ratio_rate10m",
    "job:commscope_exposed_comm_fraction:latest_window",
)


# A one-window run: the gloo sample's first window (2 ranks, CPU), and the real DLRM job of
# ../shared/traces (8 ranks, V100, NCCL) when it is there.
SHARED = shared_traces("kineto", "dlrm_8rank_v100")
SOURCES = {
    "gloo": (WINDOW, ("--config", str(CONFIG))),
    "dlrm": (SHARED, ()),
}


def run_one_window(procs: Processes, tmp_path: Path, source: str) -> tuple[Aggregate, int]:
    """An aggregator scraped by Prometheus (rules loaded) before any file, then sent one
    window; it keeps serving (a second node is expected)."""
    window, options = SOURCES[source]
    if source == "dlrm":
        require_shared("kineto", "dlrm_8rank_v100")
    extra = (*options, "--job", "mlp", "--expect-nodes", "2")
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port(), extra)
    aggregate.start()
    config = scrape_config([aggregate.metrics_port]) + f"rule_files: ['{RULES}']\n"
    port = start_prometheus(procs, require_tool("prometheus"), tmp_path, config)
    wait_for("a scrape before any file", lambda: promql_value(port, 'up{job="commscope"}'), 60)
    copy_tree(window, tmp_path / "traces" / window.name)
    args = collector_args(tmp_path / "traces", aggregate.endpoint, "n1", tmp_path / "st", "--once")
    assert procs.start("collector", *args).wait(120) == 0
    return aggregate, port


@pytest.fixture
def one_window(procs: Processes, tmp_path: Path) -> tuple[Aggregate, int]:
    return run_one_window(procs, tmp_path, "gloo")


def _expected(tmp_path: Path) -> float:
    """Σ exposed / (Σ compute + Σ exposed) over the ranks, as `commscope report` gives them."""
    report = offline(tmp_path / "traces", Options())
    per_rank = report["overlap"]["per_rank"].values()
    exposed = math.fsum(r["exposed_comm_time_s"] for r in per_rank)
    compute = math.fsum(r["compute_time_s"] for r in per_rank)
    return exposed / (compute + exposed)


def _equal(value: float | None, expected: float) -> bool:
    return value is not None and value == pytest.approx(expected, rel=1e-9)


def _number(port: int, query: str) -> float | None:
    value = promql_value(port, query)
    return value if value is not None and math.isfinite(value) else None


@pytest.mark.parametrize("source", SOURCES)
def test_after_one_window_the_exposed_fraction_rules_equal_the_report(
    procs: Processes, tmp_path: Path, source: str
) -> None:
    _, port = run_one_window(procs, tmp_path, source)
    expected = _expected(tmp_path)
    assert 0 < expected < 1
    # The latest-window rule (gauges) is the report's figure exactly, once the report that
    # closes the window is served (a mid-window report, some ranks in, may be scraped first).
    latest, rated = (f'{r}{{job="mlp"}}' for r in FRACTIONS)
    wait_for(latest, lambda: _equal(_number(port, latest), expected), 60)
    # The 10m rate rule is a number from the first window on (it was absent before counters
    # started at 0). Not asserted equal: rate() extrapolates each rank's series over its own
    # samples, so a sum of rates is the report's ratio only when every rank's series began at
    # the same scrape, which depends on when the collector's streams start.
    value = wait_for(rated, lambda: _number(port, rated), 60)
    assert 0 < value < 1, value
    # the alert reads the latest-window rule: pending while over 0.3 (its `for` is 15m)
    want = "pending" if expected > 0.3 else "inactive"
    alert = "CommscopeHighExposedCommunication"
    wait_for(f"{alert} {want}", lambda: _alert_state(port, alert) == want or None, 30)


def test_after_one_window_every_dashboard_query_returns_numbers(
    one_window: tuple[Aggregate, int],
) -> None:
    _, port = one_window
    wait_for("the first window", lambda: _number(port, _fraction_query()), 60)
    empty = []
    for query in dashboard_queries():
        if _names(query) & CONDITIONAL_SERIES or query in MAY_BE_EMPTY:
            continue
        try:
            wait_for(query, lambda q=query: _numbers(port, q), 20)
        except AssertionError:
            empty.append(query)
    assert empty == []


def _fraction_query() -> str:
    return f'{FRACTIONS[1]}{{job="mlp"}}'


def _numbers(port: int, query: str) -> list[float] | None:
    """Every series' value once there is at least one and none is NaN."""
    found = [float(r["value"][1]) for r in promql(port, query)]
    return found if found and not any(math.isnan(v) for v in found) else None


def dashboard_queries() -> list[str]:
    panels = json.loads(DASHBOARD.read_text(encoding="utf-8"))["panels"]
    out = []
    for target in (t for p in panels for t in p.get("targets", [])):
        query = target["expr"]
        for name, value in VARIABLES.items():
            query = query.replace(name, value)
        out.append(query)
    return out


# The series of families the gloo sample does not serve (a CPU run: no GPU, MFU, α-β...).
CONDITIONAL_SERIES = {
    f"{f.name}{end}"
    for f in FAMILIES
    if f.name in CONDITIONAL
    for end in (("_bucket", "_sum", "_count", "") if f.kind == "histogram" else ("",))
}


def _names(query: str) -> set[str]:
    return set(re.findall(r"\bcommscope_[a-z_]+\b", query))


def _alert_state(port: int, name: str) -> str:
    url = f"http://127.0.0.1:{port}/api/v1/rules?type=alert"
    with urllib.request.urlopen(url, timeout=5) as response:
        answer: dict[str, Any] = json.loads(response.read())
    rules = [r for g in answer["data"]["groups"] for r in g["rules"] if r["name"] == name]
    assert len(rules) == 1, rules
    return str(rules[0]["state"])
