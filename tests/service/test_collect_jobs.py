"""`commscope collect --jobs N` as processes: files whose document has ended are reduced in
worker processes (the collector's log says how many), the report is `commscope report`'s;
`--jobs 1` reduces every file in the collector itself. Every wait is bounded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from service.harness import (
    Aggregate,
    Processes,
    collector_args,
    free_port,
    normalised,
    offline,
)

pytestmark = pytest.mark.timeout(180)
TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces" / "kineto"
DLRM = TRACES / "dlrm_8rank_v100"


def files_in_workers(lines: list[dict[str, object]]) -> object:
    (end,) = [line for line in lines if line.get("msg") == "end of run acknowledged"]
    return end.get("files_in_workers")


@pytest.mark.skipif(not DLRM.is_dir(), reason=f"{DLRM} not present")
@pytest.mark.parametrize(("jobs", "in_workers"), [("2", 8), ("1", 0)])
def test_whole_files_are_reduced_in_workers_with_the_offline_report(
    procs: Processes, tmp_path: Path, jobs: str, in_workers: int
) -> None:
    """The 8 DLRM ranks, complete before the collector starts: with --jobs 2 each is reduced
    in a worker, with --jobs 1 none; either way the report is the offline one."""
    watch = tmp_path / "traces"
    shutil.copytree(DLRM, watch)
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "1"))
    server = aggregate.start()
    args = collector_args(watch, aggregate.endpoint, "n1", tmp_path / "st", "--once")
    collector = procs.start("collector", *args, "--jobs", jobs)
    assert collector.wait(120) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    assert files_in_workers(collector.lines()) == in_workers
    assert normalised(aggregate.report()) == normalised(offline(watch))
