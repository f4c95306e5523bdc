"""The live aggregator's CUDA graphs: a two-rank job of hand-made Kineto traces (rank 0 with
graph launches and the kernels they replay, rank 1 with graph launches whose kernels the
profiler did not record: `graphs_builder.write_job`) streamed by a collector to an aggregator;
the final report is the one `commscope report` writes for the same files, key for key, with
the same graphs section and the same TRACE HEALTH line."""

from __future__ import annotations

from pathlib import Path

from graphs_builder import write_job

from service.harness import (
    Aggregate,
    Processes,
    collector_args,
    free_port,
    normalised,
    offline,
    wait_for,
)


def test_a_job_with_graph_launches_streamed_live_is_reported_as_offline(
    procs: Processes, tmp_path: Path
) -> None:
    watch = write_job(tmp_path / "watch" / "w1").parent
    agg = Aggregate(procs, tmp_path, free_port(), free_port())
    server = agg.start()
    collector = procs.start(
        "collector", *collector_args(watch, agg.endpoint, "n1", tmp_path / "st", "--once")
    )
    assert collector.wait(60) == 0, collector.tail()
    wait_for("the report", lambda: list((tmp_path / "out").glob("*.json")))
    assert server.wait(30) == 0, server.tail()
    live, reference = normalised(agg.report()), normalised(offline(watch))
    graphs = live["graphs"]
    assert graphs["all_ranks"]["launches"] == 6 and graphs["all_ranks"]["empty"] == 3
    assert graphs["per_rank"]["1"]["kernels"] == 0  # rank 1's replays were not recorded
    (gap,) = [i for i in live["health"]["issues"] if i["key"] == "graph_kernels"]
    assert (gap["count"], gap["total"]) == (3, 6)
    assert graphs == reference["graphs"]
    assert live["health"] == reference["health"]
    assert live == reference
