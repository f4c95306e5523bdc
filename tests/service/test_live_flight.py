"""Flight Recorder dumps picked up live (tests/service/data/flight_gloo_3rank: the dumps of the
hung gloo job of tests/gloo_job/fr.py, 3 ranks, rank 2 gone before AllReduce #4): written in
place as PyTorch writes them (slowly here: read once whole), one rewritten later (a second
dump replaces the first for its rank), shipped on the acknowledged wire; /metrics flags the
stuck rank (a real Prometheus fires the deploy rules' alert), and the final report is the one
`commscope report` writes for the same files, alone or beside a job's traces."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
from flight_builder import dump, entry, status
from tools import require_tool

from service.harness import (
    Aggregate,
    Live,
    Processes,
    copy_tree,
    promql,
    sample_value,
    scrape_config,
    start_prometheus,
    wait_for,
    write_slowly,
)

pytestmark = pytest.mark.timeout(240)
DUMPS = Path(__file__).resolve().parent / "data" / "flight_gloo_3rank"
RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "rules.yml"
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"
STUCK, COMPLETED = "commscope_flight_stuck", "commscope_flight_last_completed_sequence"
# rank 2's first dump (hand-made): all_reduces 1 and 2 of group 0 completed, nothing since
EARLIER = pickle.dumps(dump([entry(1), entry(2)], status(2, 2, 2), ranks="[0, 1, 2]"))


def value(aggregate: Aggregate, name: str, rank: str) -> float | None:
    return sample_value(aggregate.metrics_text() or "", name, rank=rank, process_group="0")


def test_dumps_written_in_place_and_rewritten_are_reported_live_as_offline(
    live: Callable[..., Live], tmp_path: Path
) -> None:
    run = live()
    aggregate, watch = run.aggregate, tmp_path / "watch"
    (watch / "dumps").mkdir(parents=True)
    run.collect(watch)
    for rank in (0, 1):  # pauses longer than --file-idle: each read once its pickle is whole
        name = f"nccl_trace_rank_{rank}"
        for _ in write_slowly(DUMPS / name, watch / "dumps" / name, pieces=3, pause_s=0.8):
            pass
    rewritten = watch / "dumps" / "nccl_trace_rank_2"
    rewritten.write_bytes(EARLIER)
    wait_for("rank 2's first dump", lambda: value(aggregate, COMPLETED, "2") == 2.0, 90)
    assert value(aggregate, STUCK, "2") == 1.0  # ranks 0-1 entered AllReduce #3 without it
    assert value(aggregate, STUCK, "0") == 0.0
    rewritten.write_bytes((DUMPS / "nccl_trace_rank_2").read_bytes())  # in place, as PyTorch
    wait_for("rank 2's second dump", lambda: value(aggregate, COMPLETED, "2") == 1.0, 90)
    assert value(aggregate, STUCK, "2") == 1.0  # now after #3: the others entered #4
    found, reference = run.end(stop=True)
    (stuck,) = found["flight_recorder"]["stuck"]
    assert (stuck["rank"], stuck["after_seq"], stuck["missed_op"]) == (2, 3, "AllReduce")
    assert found["flight_recorder"]["dumps"] == 3
    assert found == reference


def test_a_real_prometheus_fires_the_stuck_collective_alert_for_the_stuck_rank_only(
    procs: Processes, live: Callable[..., Live], tmp_path: Path
) -> None:
    run = live("--job", "hung", "--expect-nodes", "2")  # keeps serving: a second node is due
    config = scrape_config([run.aggregate.metrics_port]) + f"rule_files: ['{RULES}']\n"
    port = start_prometheus(procs, require_tool("prometheus"), tmp_path, config)
    copy_tree(DUMPS, tmp_path / "watch" / "dumps")
    assert run.collect(tmp_path / "watch", "--once").wait(120) == 0
    query = 'ALERTS{alertname="CommscopeCollectiveStuck", alertstate="firing"}'
    (alert,) = wait_for("the alert to fire", lambda: promql(port, query) or None, 90)
    labels = alert["metric"]
    assert (labels["job"], labels["rank"], labels["process_group"]) == ("hung", "2", "0")
    assert (labels["collective"], labels["severity"]) == ("AllReduce", "critical")
    completed = promql(port, 'commscope_flight_last_completed_sequence{process_group="0"}')
    assert {r["metric"]["rank"]: float(r["value"][1]) for r in completed} == {
        "0": 4.0, "1": 4.0, "2": 1.0,
    }  # fmt: skip


def test_dumps_beside_a_jobs_traces_leave_its_windows_as_they_are(
    live: Callable[..., Live], tmp_path: Path
) -> None:
    run = live()
    watch = tmp_path / "watch"
    copy_tree(SAMPLE, watch)
    copy_tree(DUMPS, watch / "dumps")
    run.collect(watch, "--once")
    found, reference = run.end(collector_s=120)
    assert [w["name"] for w in found["windows"]] == ["iteration_4", "iteration_8"]
    assert found["flight_recorder"]["stuck"][0]["rank"] == 2
    assert found == reference
