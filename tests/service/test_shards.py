"""Two aggregators (shards "a" and "b"), each fed by one node's collector with half of the DLRM
8-rank job (ranks 0-3 on node-a, 4-7 on node-b); a real Prometheus (Debian's package) scrapes
both and remote-writes into a real VictoriaMetrics; PromQL through VictoriaMetrics sees the
whole job: 8 ranks, 4 per shard, the dashboard's job-wide figures equal to `commscope report`
over the 8 files."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest
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
    scrape_config,
    start_prometheus,
    wait_for,
)
from tools import require_tool

pytestmark = [pytest.mark.timeout(180), pytest.mark.skipif(not DLRM.exists(), reason="no traces")]

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "commscope.json"
RANKS = sorted(DLRM.glob("worker*.json"))
SHARDS = {"a": RANKS[:4], "b": RANKS[4:]}  # a node's collector per shard
WINDOW = "dlrm"
VICTORIA = "victoria-metrics"  # the Debian package's binary


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
    """deploy/prometheus's scrape configuration, sending every sample on within a second."""
    return scrape_config(targets) + (
        "remote_write:\n"
        f"  - url: http://127.0.0.1:{victoria}/api/v1/write\n"
        "    queue_config: {batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 1s}\n"
    )


def start_shard(procs: Processes, tmp_path: Path, shard: str) -> Aggregate:
    """Shard `shard`'s aggregator, and its node's collector run once over the node's files.
    The collector's end-of-run ends the aggregator's run; /metrics stays up (--linger)."""
    folder = tmp_path / f"shard-{shard}"
    extra = ("--job", "dlrm", "--shard", shard, "--expect-nodes", "1", "--linger", "170")
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
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """`commscope report` over the 8 files in one window folder."""
    root = tmp_path_factory.mktemp("all")
    shutil.copytree(DLRM, root / WINDOW, ignore=shutil.ignore_patterns("LICENSE"))
    return json.loads(json.dumps(offline(root)))  # type: ignore[no-any-return]


def dashboard_expr(title: str) -> str:
    """A dashboard panel's query, for job "dlrm" (its first target)."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    panels = [p for top in board["panels"] for p in (top, *top.get("panels", []))]
    (panel,) = [p for p in panels if p["title"] == title]
    return str(panel["targets"][0]["expr"]).replace("$job", "dlrm")


def by_shard(port: int, query: str) -> dict[str, float]:
    return {r["metric"].get("shard", ""): float(r["value"][1]) for r in promql(port, query)}


def test_two_shards_meet_in_victoria_metrics(
    procs: Processes, tmp_path: Path, reference: dict[str, object]
) -> None:
    binary = require_tool("prometheus")
    victoria = start_victoria_metrics(procs, tmp_path)
    shards = [start_shard(procs, tmp_path, shard) for shard in SHARDS]
    for aggregate in shards:  # each has analysed its node's 4 files
        wait_for("the shard's 4 ranks", lambda a=aggregate: ranks_served(a) == 4.0, 60)
    targets = [aggregate.metrics_port for aggregate in shards]
    start_prometheus(procs, binary, tmp_path, remote_writing(targets, victoria))
    count = 'count by (shard) (commscope_comm_compute_overlap_ratio{job="dlrm"})'
    halves = {"a": 4.0, "b": 4.0}
    wait_for("both shards in VictoriaMetrics", lambda: by_shard(victoria, count) == halves, 60)
    ranks = 'count(count by (rank) (commscope_comm_compute_overlap_ratio{job="dlrm"}))'
    assert promql_value(victoria, ranks) == 8.0  # 8 distinct ranks: no rank in both shards
    assert promql_value(victoria, dashboard_expr("Ranks")) == 8.0  # Σ of 4 + 4
    overlap = reference["overlap"]["per_rank"]  # type: ignore[index]
    for rank in ("1", "6"):  # one rank of each shard: its series, as the report gives it
        query = f'commscope_run_comm_compute_overlap_ratio{{job="dlrm",rank="{rank}"}}'
        assert promql_value(victoria, query) == pytest.approx(overlap[rank]["ratio"], rel=1e-12)
    # the job's exposed communication: Σ over both shards' ranks = Σ over the report's 8 ranks
    exposed = 'sum(commscope_exposed_comm_seconds_total{job="dlrm"})'
    expected = sum(o["exposed_comm_time_s"] for o in overlap.values())
    assert promql_value(victoria, exposed) == pytest.approx(expected, rel=1e-12)
    calls = 'sum by (collective) (commscope_collective_ops_total{job="dlrm"})'
    per_kind = reference["collectives"]["all_ranks"]  # type: ignore[index]
    found = {r["metric"]["collective"]: float(r["value"][1]) for r in promql(victoria, calls)}
    assert found == {kind: float(s["count"]) for kind, s in per_kind.items()}
