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
from tools import require_tool

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "gloo_ddp_2rank"
CONFIG = ROOT / "samples" / "mlp_ddp.toml"
# Served only when there is something to say: no dropped events in the sample; it is a CPU
# (gloo) run: no GPU time, memory or MFU; its collectives all have one size (no α-β fit) and
# no rank is clearly the slowest. tests/exporters/test_metrics_families.py serves them all.
CONDITIONAL = {
    "commscope_live_arrival_skew_seconds",  # tailed verbose NCCL Inspector logs only
    "commscope_events_dropped_total",
    "commscope_collector_dropped_total",
    "commscope_gpu_time_seconds_total",
    "commscope_gpu_idle_ratio",
    "commscope_gpu_memory_peak_bytes",
    "commscope_mfu_ratio",
    "commscope_hfu_ratio",
    "commscope_alpha_seconds",
    "commscope_beta_bytes_per_second",
    "commscope_alpha_beta_groups_omitted",
    "commscope_slowest_rank",
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
    skew = 'commscope_arrival_skew_seconds{job="mlp",collective="AllReduce",stat="max"}'
    assert promql_value(port, skew) == pytest.approx(expected["skew"], rel=1e-12)
    run_skew = skew.replace("commscope_", "commscope_run_")
    assert promql_value(port, run_skew) == pytest.approx(expected["run skew"], rel=1e-12)
    waits = 'commscope_caused_wait_seconds_total{job="mlp",rank="1"}'
    assert promql_value(port, waits) == pytest.approx(expected["caused wait"], rel=1e-12)


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
    }


def _with_collector(aggregate: Aggregate) -> str | None:
    text = aggregate.metrics_text() or ""
    return text if "commscope_collector_up{" in text else None


def _windows(aggregate: Aggregate) -> float | None:
    text = aggregate.metrics_text() or ""
    return sample_value(text, "commscope_windows_completed_total", job="mlp")
