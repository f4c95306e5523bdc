"""Flight Recorder dumps picked up live (tests/service/data/flight_gloo_3rank: the dumps of the
hung gloo job of tests/gloo_job/fr.py, 3 ranks, rank 2 gone before AllReduce #4): written in
place as PyTorch writes them (slowly here: read once whole), one rewritten later (a second
dump replaces the first for its rank), shipped on the acknowledged wire; /metrics flags the
stuck rank, and the final report is the one `commscope report` writes for the same files."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from flight_builder import dump, entry, status
from service.harness import (
    Aggregate,
    Processes,
    collector_args,
    free_port,
    normalised,
    offline,
    sample_value,
    wait_for,
    write_slowly,
)

pytestmark = pytest.mark.timeout(240)
DUMPS = Path(__file__).resolve().parent / "data" / "flight_gloo_3rank"
STUCK, COMPLETED = "commscope_flight_stuck", "commscope_flight_last_completed_sequence"
# rank 2's first dump (hand-made): all_reduces 1 and 2 of group 0 completed, nothing since
EARLIER = pickle.dumps(dump([entry(1), entry(2)], status(2, 2, 2), ranks="[0, 1, 2]"))


def value(aggregate: Aggregate, name: str, rank: str) -> float | None:
    return sample_value(aggregate.metrics_text() or "", name, rank=rank, process_group="0")


def test_dumps_written_in_place_and_rewritten_are_reported_live_as_offline(
    procs: Processes, tmp_path: Path
) -> None:
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port())
    server = aggregate.start()
    watch = tmp_path / "watch"
    (watch / "dumps").mkdir(parents=True)
    collector = procs.start(
        "collector", *collector_args(watch, aggregate.endpoint, "n1", tmp_path / "st")
    )
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
    collector.terminate()
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    live, reference = normalised(aggregate.report()), normalised(offline(watch))
    (stuck,) = live["flight_recorder"]["stuck"]
    assert (stuck["rank"], stuck["after_seq"], stuck["missed_op"]) == (2, 3, "AllReduce")
    assert live["flight_recorder"]["dumps"] == 3
    assert live == reference
