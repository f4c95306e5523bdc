"""Two aggregators (`--shard a`, `--shard b`), each fed by one node's collector with half of
the DLRM 8-rank job (ranks 0-3 on node-a, 4-7 on node-b); a real Prometheus (Debian's package)
scrapes both with deploy/prometheus/prometheus-shards.yml and remote-writes into a real
VictoriaMetrics (Debian's `victoria-metrics`); PromQL through VictoriaMetrics sees the whole
job: 8 ranks, 4 per shard, and the dashboard's job-wide figures, per-rank series and sums over
shards equal to `commscope report` over the 8 files."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from commscope.pipeline.config import flags_only, with_overrides
from commscope.pipeline.report import Options
from tools import needs_shared, require_tool

from service.harness import (
    DLRM,
    Aggregate,
    Processes,
    collector_args,
    free_port,
    offline,
    promql,
    promql_value,
    sample_value,
    start_prometheus,
    wait_for,
)

pytestmark = [pytest.mark.timeout(180), needs_shared("kineto", "dlrm_8rank_v100")]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "commscope.json"
SHARDED_CONFIG = ROOT / "deploy" / "prometheus" / "prometheus-shards.yml"
RANKS = sorted(DLRM.glob("worker*.json"))
SHARDS = {"a": RANKS[:4], "b": RANKS[4:]}  # a node's collector per shard
OWNED = {"a": "0-3", "b": "4-7"}  # each shard's ranks (--ranks)
WINDOW = "dlrm"
VICTORIA = "victoria-metrics"  # the Debian package's binary
# For tokens/s and MFU (made-up sizes: DLRM has no TorchTitan config), as given to both shards.
JOB = ("--batch-size", "32", "--seq-len", "128", "--flops-per-token", "1e6", "--peak-tflops", "125")
OPTIONS = Options(
    config=with_overrides(flags_only(), 32, 128), flops_per_token=1e6, peak_flops_override=125e12
)


def start_victoria_metrics(procs: Processes, folder: Path) -> int:
    """A real VictoriaMetrics on a free loopback port; its port once healthy. Samples are
    queryable as soon as they are stored (no 30 s latency offset, no response cache)."""
    port = free_port()
    procs.spawn(
        "victoria-metrics",
        require_tool(VICTORIA),
        f"-storageDataPath={folder / 'vm-data'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=1d",
        "-search.latencyOffset=0s",
        "-search.disableCache",
    )
    wait_for("VictoriaMetrics to be healthy", lambda: _healthy(port))
    return port


def _healthy(port: int) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
        return bool(response.read().strip() == b"OK")


def remote_writing(targets: list[int], victoria: int) -> str:
    """deploy/prometheus/prometheus-shards.yml pointed at these aggregators and this
    VictoriaMetrics, scraping every second and sending every sample on within a second."""
    config = yaml.safe_load(SHARDED_CONFIG.read_text(encoding="utf-8"))
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(SHARDED_CONFIG.with_name("rules.yml"))]
    (scrape,) = config["scrape_configs"]
    scrape["scrape_interval"] = "1s"
    scrape["static_configs"] = [{"targets": [f"127.0.0.1:{port}" for port in targets]}]
    (remote,) = config["remote_write"]
    remote["url"] = f"http://127.0.0.1:{victoria}/api/v1/write"
    remote["queue_config"] = {"batch_send_deadline": "1s", "min_backoff": "100ms"}
    return json.dumps(config)  # YAML


def start_shard(procs: Processes, tmp_path: Path, shard: str) -> Aggregate:
    """Shard `shard`'s aggregator, and its node's collector run once over the node's files.
    The collector's end-of-run ends the aggregator's run; /metrics stays up (--linger)."""
    folder = tmp_path / f"shard-{shard}"
    extra = ("--job", "dlrm", "--shard", shard, "--ranks", OWNED[shard], "--expect-nodes", "1")
    extra += ("--linger", "170", *JOB)
    aggregate = Aggregate(procs, folder, free_port(), free_port(), extra)
    aggregate.start()
    watch = folder / "traces"
    for source in SHARDS[shard]:
        (watch / WINDOW).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, watch / WINDOW / source.name)
    node = f"node-{shard}"
    args = collector_args(watch, aggregate.endpoint, node, folder / "st", "--once")
    assert procs.start(node, *args).wait(60) == 0
    return aggregate


def ranks_served(aggregate: Aggregate) -> float | None:
    return sample_value(aggregate.metrics_text() or "", "commscope_ranks", job="dlrm")


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`commscope report` over the 8 files in one window folder."""
    root = tmp_path_factory.mktemp("all")
    shutil.copytree(DLRM, root / WINDOW, ignore=shutil.ignore_patterns("LICENSE"))
    return json.loads(json.dumps(offline(root, OPTIONS)))  # type: ignore[no-any-return]


def dashboard_expr(title: str) -> str:
    """A dashboard panel's query, for job "dlrm" (its first target)."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = [p for top in board["panels"] for p in (top, *top.get("panels", []))]
    (panel,) = [p for p in panels if p["title"] == title]
    return str(panel["targets"][0]["expr"]).replace("$job", "dlrm")


def by_shard(port: int, query: str) -> dict[str, float]:
    return {r["metric"].get("shard", ""): float(r["value"][1]) for r in promql(port, query)}


@pytest.fixture(scope="module")
def victoria(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """VictoriaMetrics' port, once both shards' ranks have reached it through Prometheus."""
    folder = tmp_path_factory.mktemp("shards")
    procs = Processes(folder)
    try:
        binary = require_tool("prometheus")
        port = start_victoria_metrics(procs, folder)
        shards = [start_shard(procs, folder, shard) for shard in SHARDS]
        for aggregate in shards:  # each has analysed its node's 4 files
            wait_for("the shard's 4 ranks", lambda a=aggregate: ranks_served(a) == 4.0, 60)
        targets = [aggregate.metrics_port for aggregate in shards]
        start_prometheus(procs, binary, folder, remote_writing(targets, port))
        count = 'count by (shard) (commscope_comm_compute_overlap_ratio{job="dlrm"})'
        halves = {"a": 4.0, "b": 4.0}
        wait_for("both shards in VictoriaMetrics", lambda: by_shard(port, count) == halves, 60)
        yield port
    finally:
        procs.cleanup()


def test_the_job_has_8_distinct_ranks_4_in_each_shard(victoria: int) -> None:
    count = 'count by (shard) (commscope_comm_compute_overlap_ratio{job="dlrm"})'
    assert by_shard(victoria, count) == {"a": 4.0, "b": 4.0}
    ranks = 'count(count by (rank) (commscope_comm_compute_overlap_ratio{job="dlrm"}))'
    assert promql_value(victoria, ranks) == 8.0  # no rank in both shards
    assert promql_value(victoria, dashboard_expr("Ranks")) == 8.0  # Σ of 4 + 4


def test_the_dashboards_job_figures_are_the_reports(
    victoria: int, reference: dict[str, Any]
) -> None:
    """Each shard's tokens/s comes from its 4 ranks' step times (shard a's are longer); the
    dashboard combines them into the job's, as the report over the 8 files gives it."""
    tokens = reference["throughput"]["tokens_per_second"]
    per_shard = by_shard(victoria, 'commscope_tokens_per_second{job="dlrm"}')
    assert per_shard["a"] < tokens < per_shard["b"]
    combined = promql_value(victoria, dashboard_expr("Tokens per second"))
    assert combined == pytest.approx(tokens, rel=1e-12)
    mfu = reference["utilization"]["mfu"]
    assert promql_value(victoria, dashboard_expr("MFU")) == pytest.approx(mfu, rel=1e-12)


def test_rank_series_and_sums_over_shards_are_the_reports(
    victoria: int, reference: dict[str, Any]
) -> None:
    overlap = reference["overlap"]["per_rank"]
    for rank in ("1", "6"):  # one rank of each shard
        query = f'commscope_run_comm_compute_overlap_ratio{{job="dlrm",rank="{rank}"}}'
        assert promql_value(victoria, query) == pytest.approx(overlap[rank]["ratio"], rel=1e-12)
    exposed = 'sum(commscope_exposed_comm_seconds_total{job="dlrm"})'
    expected = sum(o["exposed_comm_time_s"] for o in overlap.values())  # over the 8 ranks
    assert promql_value(victoria, exposed) == pytest.approx(expected, rel=1e-12)
    calls = 'sum by (collective) (commscope_collective_ops_total{job="dlrm"})'
    found = {r["metric"]["collective"]: float(r["value"][1]) for r in promql(victoria, calls)}
    every = reference["collectives"]["all_ranks"]
    assert found == {kind: float(s["count"]) for kind, s in every.items()}  # 24 + 40


def test_the_rules_recorded_series_sum_over_shards(victoria: int) -> None:
    """rules.yml ran in Prometheus over both shards; its recorded series reached
    VictoriaMetrics through the remote_write filter: one per collective, without a shard."""
    recorded = 'job_collective:commscope_collective_bus_bytes:rate10m{job="dlrm"}'
    found = wait_for("the recorded series", lambda: promql(victoria, recorded) or None, 60)
    assert sorted(r["metric"]["collective"] for r in found) == ["AllReduce", "AllToAll"]
    assert all("shard" not in r["metric"] for r in found)


ONE_EACH = {"a": 1.0, "b": 1.0}


def test_each_shard_completes_the_window_of_its_own_ranks(victoria: int) -> None:
    """Neither shard holds all 8 ranks, yet each completes the window (--ranks): its sections
    and the latest-window gauges are served, and its call lists can be shed."""
    query = 'commscope_windows_completed_total{job="dlrm"}'
    wait_for("each shard's window complete", lambda: by_shard(victoria, query) == ONE_EACH, 60)
