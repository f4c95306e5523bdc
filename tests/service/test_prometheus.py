"""The aggregator's /metrics as Prometheus sees it: `promtool check metrics` passes, every
family of `metricnames.FAMILIES` is served, and a real Prometheus server (Debian's package)
scrapes it and answers PromQL with the overlap the report gives for a known rank."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from commscope.exporters.metricnames import FAMILIES
from commscope.pipeline.config import parse_config
from commscope.pipeline.report import Options
from commscope.service.cli import main
from tools import require_tool

from service.harness import (
    Aggregate,
    Processes,
    collector_args,
    free_port,
    offline,
    promql_value,
    sample_value,
    scrape_config,
    start_prometheus,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "gloo_ddp_2rank"
CONFIG = ROOT / "samples" / "mlp_ddp.toml"
# Served only when there is something to say: no dropped events in the sample; it is a CPU
# (gloo) run: no GPU time, memory, MFU or link peak; its collectives all have one size (no α-β
# fit). tests/exporters/test_metrics_families.py serves them all.
CONDITIONAL = {
    "commscope_live_arrival_skew_seconds",  # tailed verbose NCCL Inspector logs only
    "commscope_live_arrival_skew_max_seconds",
    "commscope_events_dropped_total",
    "commscope_collector_dropped_total",
    "commscope_collector_read_failures_total",  # only once a read failed
    "commscope_collector_files_lost_total",
    "commscope_gpu_time_seconds_total",
    "commscope_gpu_idle_ratio",
    "commscope_gpu_memory_peak_bytes",
    "commscope_mfu_ratio",
    "commscope_hfu_ratio",
    "commscope_pipeline_bubble_seconds",  # pipeline-parallel jobs only (P2P pairs)
    "commscope_pipeline_neighbour_bubble_seconds",
    "commscope_pipeline_stage_waited_for",
    "commscope_alpha_seconds",
    "commscope_beta_bytes_per_second",
    "commscope_alpha_beta_groups_omitted",
    "commscope_link_peak_bytes_per_second",
    "commscope_alltoallv_sent_bytes_total",  # all-to-all calls with split sizes only
    "commscope_alltoallv_received_bytes_total",
    "commscope_alltoallv_busiest_rank",
    "commscope_alltoallv_sent_imbalance_ratio",
    "commscope_alltoallv_received_imbalance_ratio",
    "commscope_node_link_busbw_bytes_per_second",  # ranks' hosts known (--hosts): not here
    "commscope_node_link_peak_bytes_per_second",  # a GPU's NVLink or --net-peak: neither here
    "commscope_graph_launches_total",  # CUDA graph launches: none in a CPU run
    "commscope_graph_launches_unrecorded_total",
    "commscope_graph_kernel_seconds_total",
    "commscope_flight_stuck",  # Flight Recorder dumps only
    "commscope_flight_last_completed_sequence",
}


@pytest.fixture
def streamed(procs: Processes, tmp_path: Path) -> Aggregate:
    """An aggregator that has received the whole sample and is still serving."""
    aggregate = Aggregate(
        procs,
        tmp_path,
        free_port(),
        free_port(),
        ("--config", str(CONFIG), "--job", "mlp", "--expect-nodes", "2"),
    )
    aggregate.start()
    watch = tmp_path / "traces"
    shutil.copytree(SAMPLE, watch)
    args = collector_args(watch, aggregate.endpoint, "n1", tmp_path / "st", "--once")
    assert procs.start("collector", *args).wait(60) == 0
    wait_for(
        "both windows",
        lambda: (
            'commscope_windows_completed_total{job="mlp"} 2.0' in (aggregate.metrics_text() or "")
        ),
    )
    return aggregate


def _sample_name(family: str, text: str) -> str:
    """A counter family `x` is served as samples `x_total`."""
    return f"{family}_total" if f"\n{family}_total" in text else family


def exposed_names(text: str) -> set[str]:
    return {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}


def test_metrics_pass_promtool_and_serve_every_family(streamed: Aggregate) -> None:
    text = wait_for("collector heartbeats", lambda: _with_collector(streamed))
    checked = subprocess.run(
        [require_tool("promtool"), "check", "metrics"],
        input=text.encode(),
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    served = {
        name + ("_total" if f"{name}_total " in text or f"{name}_total{{" in text else "")
        for name in exposed_names(text)
    }
    expected = {f.name for f in FAMILIES} - CONDITIONAL
    assert expected <= served, sorted(expected - served)


def test_a_real_prometheus_scrapes_overlap_skew_and_caused_wait(
    streamed: Aggregate, procs: Processes, tmp_path: Path
) -> None:
    config = scrape_config([streamed.metrics_port])
    port = start_prometheus(procs, require_tool("prometheus"), tmp_path, config)
    expected = _expected_overlap(tmp_path)
    query = 'commscope_run_comm_compute_overlap_ratio{job="mlp",rank="0"}'
    value = wait_for("Prometheus to answer", lambda: promql_value(port, query), 60)
    assert value == pytest.approx(expected["run"], rel=1e-12)
    latest = 'commscope_comm_compute_overlap_ratio{job="mlp",rank="0"}'
    assert promql_value(port, latest) == pytest.approx(expected["latest"], rel=1e-12)
    skew = 'commscope_arrival_skew_max_seconds{job="mlp",collective="AllReduce"}'
    assert promql_value(port, skew) == pytest.approx(expected["skew"], rel=1e-12)
    run_skew = skew.replace("commscope_", "commscope_run_")
    assert promql_value(port, run_skew) == pytest.approx(expected["run skew"], rel=1e-12)
    waits = 'commscope_caused_wait_seconds_total{job="mlp",rank="1"}'
    assert promql_value(port, waits) == pytest.approx(expected["caused wait"], rel=1e-12)
    # the histogram counts every sized op of every rank once: the report's sized_count
    ops = 'sum(commscope_collective_op_busbw_bytes_per_second_count{job="mlp"})'
    assert promql_value(port, ops) == expected["sized ops"]
    assert promql_value(port, 'sum(commscope_build_info{job="mlp"})') == 1.0


def _expected_overlap(tmp_path: Path) -> dict[str, float]:
    config = parse_config(CONFIG.read_text(), CONFIG.name)
    report = offline(tmp_path / "traces", Options(config=config))
    latest = report["windows"][-1]
    return {
        "run": report["overlap"]["per_rank"]["0"]["ratio"],
        "latest": latest["overlap"]["per_rank"]["0"]["ratio"],
        "skew": latest["skew"]["per_collective"]["AllReduce"]["skew_s"]["max"],
        "run skew": report["skew"]["per_collective"]["AllReduce"]["skew_s"]["max"],
        "caused wait": report["skew"]["per_rank"]["1"]["caused_wait_s"],
        "sized ops": sum(c["sized_count"] for c in report["collectives"]["all_ranks"].values()),
    }


def _with_collector(aggregate: Aggregate) -> str | None:
    text = aggregate.metrics_text() or ""
    return text if "commscope_collector_up{" in text else None


def _windows(aggregate: Aggregate) -> float | None:
    text = aggregate.metrics_text() or ""
    return sample_value(text, "commscope_windows_completed_total", job="mlp")


def test_a_rank_cap_of_one_keeps_one_rank_s_series_and_counts_the_other(
    procs: Processes, tmp_path: Path
) -> None:
    """The 2-rank sample under --max-rank-series 1 (a second node expected, so the aggregator
    keeps serving): one rank keeps its per-rank series (rank
    0, or the slowest when one is named), the other is counted as folded."""
    extra = ("--job", "mlp", "--expect-nodes", "2", "--max-rank-series", "1")
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port(), extra)
    aggregate.start()
    watch = tmp_path / "traces"
    shutil.copytree(SAMPLE, watch)
    args = collector_args(watch, aggregate.endpoint, "n1", tmp_path / "st", "--once")
    assert procs.start("collector", *args).wait(60) == 0
    text = wait_for("both windows", lambda: _windows_done(aggregate))
    assert sample_value(text, "commscope_ranks", job="mlp") == 2.0
    assert sample_value(text, "commscope_ranks_folded", job="mlp") == 1.0
    ranks = {
        line.split('rank="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith("commscope_") and 'rank="' in line
    }
    assert len(ranks) == 1 and ranks <= {"0", "1"}


def _windows_done(aggregate: Aggregate) -> str | None:
    text = aggregate.metrics_text() or ""
    return text if 'commscope_windows_completed_total{job="mlp"} 2.0' in text else None


def test_a_negative_rank_cap_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["aggregate", "--listen", f"tcp://127.0.0.1:{free_port()}", "--out", str(tmp_path),
            "--insecure", "--max-rank-series", "-1"]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err == "commscope: error: --max-rank-series must be 0 or more, got -1\n"
