"""The live aggregator's CUDA graphs: a two-rank job of hand-made Kineto traces (rank 0 with
graph launches and the kernels they replay, rank 1 with graph launches whose kernels the
profiler did not record: `graphs_builder.write_job`) streamed by a collector to an aggregator;
the final report is the one `commscope report` writes for the same files, key for key, with
the same graphs section and the same TRACE HEALTH line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from graphs_builder import write_job

from service.harness import Live


def test_a_job_with_graph_launches_streamed_live_is_reported_as_offline(
    live: Callable[..., Live], tmp_path: Path
) -> None:
    watch = write_job(tmp_path / "watch" / "w1").parent
    run = live()
    run.collect(watch, "--once")
    found, reference = run.end()
    graphs = found["graphs"]
    assert graphs["all_ranks"]["launches"] == 6 and graphs["all_ranks"]["empty"] == 3
    assert graphs["per_rank"]["1"]["kernels"] == 0  # rank 1's replays were not recorded
    (gap,) = [i for i in found["health"]["issues"] if i["key"] == "graph_kernels"]
    assert (gap["count"], gap["total"]) == (3, 6)
    assert graphs == reference["graphs"]
    assert found["health"] == reference["health"]
    assert found == reference
