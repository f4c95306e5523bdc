"""Trace health: each gap the traces have, counted, with the sections it weakens; none when
the traces have everything the checks look for."""

from __future__ import annotations

from commscope.exporters import text
from commscope.model.schema import (
    CommOp,
    Event,
    FileStats,
    GpuOp,
    Matching,
    MemoryPeak,
    Report,
    Sections,
    Step,
    TraceMeta,
)
from commscope.pipeline import health
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.report import Options, ParsedFile, build_report
from msgspec.structs import replace

US = 1000
ARG, WORLD = "Group size arg", "world size"


def parsed(rank: int, events: list[Event], meta: TraceMeta, stats: FileStats) -> ParsedFile:
    accumulator = Accumulator()
    accumulator.add_all(events)
    path = f"w/rank{rank}.json"
    return ParsedFile("w", path, rank, meta, accumulator.result([path]), stats)


def comm(kind: str, at: int, size: int | None, n: int | None, *, pg: str | None = None,
         seq: int | None = None, source: str | None = None) -> CommOp:  # fmt: skip
    return CommOp(kind, at * US, 10 * US, size, n, True, pg, seq, source)


# Rank 0 has everything but a size for its AllGather (whose n fell back to the world size);
# rank 1 has no step, no process group, no GPU name, no memory events, no time base, one
# kernel without its launch, an AllReduce with n from the world and an AllGather without n.
RANK0: list[Event] = [
    Step(1, 0, 1000 * US, 1),
    GpuOp("compute", 0, 100 * US, "gemm"),
    MemoryPeak(0, 2**30),
    comm("AllReduce", 200, 4096, 4, pg="0", seq=0, source=ARG),
    comm("AllGather", 300, None, 4, pg="0", seq=1, source=WORLD),
]
RANK1: list[Event] = [
    GpuOp("compute", 0, 100 * US, "gemm"),
    comm("AllReduce", 200, 4096, 4, source=WORLD),
    comm("SendRecv", 300, 100, None),  # F = 1 whatever n: not counted
    comm("AllGather", 400, 8192, None),
]
META0 = TraceMeta(rank=0, world_size=4, gpu_name="NVIDIA H100 80GB HBM3", base_time_ns=10**18,
                  pg_ranks={"0": [0, 1, 2, 3]})  # fmt: skip
META1 = TraceMeta(rank=1, world_size=4)


def gappy() -> Report:
    files = [
        parsed(0, RANK0, META0, FileStats(events=100, dropped={"bad_span": 3}, comm_kernels=2)),
        parsed(1, RANK1, META1, FileStats(events=50, comm_kernels=3, no_launch=1)),
    ]
    return build_report(["w"], files, [], Options())


def test_each_gap_is_counted_against_its_whole() -> None:
    found = [(i.key, i.count, i.total, i.unit) for i in gappy().health.issues]
    assert found == [
        ("steps", 1, 2, "ranks"),  # rank 1
        ("ranks", 2, 4, "ranks"),  # ranks 2 and 3 of the world of 4
        ("process_group", 3, 5, "collective calls"),  # rank 1's three
        ("pg_config", 1, 2, "files"),  # rank 1's
        ("launch", 1, 5, "communication kernels"),  # of 2 + 3
        ("sizes", 1, 5, "collective calls"),  # rank 0's AllGather
        # of the 4 AllReduce and AllGather calls (SendRecv's F needs no n)
        ("group_size_world", 2, 4, "collective calls"),
        ("group_size_unknown", 1, 4, "collective calls"),
        ("base_time", 1, 2, "files"),
        ("gpu_name", 1, 2, "GPU files"),
        ("memory", 1, 2, "GPU files"),
        ("dropped", 3, 150, "events"),
    ]


def test_a_gap_says_what_is_missing_and_what_it_weakens() -> None:
    issues = {i.key: i for i in gappy().health.issues}
    steps = issues["steps"]
    assert (steps.missing, steps.share) == ("ProfilerStep spans", 0.5)
    assert steps.weakens[0].startswith("throughput: ")
    assert (
        issues["dropped"].missing
        == "a usable form (dropped: 3 span without numeric ts/dur (or out of range))"
    )
    assert issues["group_size_world"].weakens == [
        "busbw, bus bytes, traffic and α-β: overstated when the group is smaller than the world"
    ]


def test_each_window_has_its_own_health() -> None:
    report = gappy()
    assert [i.key for i in report.windows[0].health.issues] == [i.key for i in report.health.issues]


def test_calls_matched_by_index_are_a_gap() -> None:
    found = Sections(ranks=[0, 1], matching=Matching(instances=10, by_index=4, by_seq=6))
    (issue,) = health.check([], found).issues
    assert (issue.key, issue.count, issue.total) == ("seq", 4, 10)


def test_a_desync_is_a_gap_that_names_the_position_what_differs_and_the_ranks() -> None:
    # seq 0 pairs; at seq 1 rank 1 called with Half what ranks 0 and 2 called with Float
    meta = [TraceMeta(rank=r, world_size=3, pg_ranks={"0": [0, 1, 2]}) for r in range(3)]
    files = []
    for rank in range(3):
        calls: list[Event] = [
            replace(comm("AllReduce", 100, 4096, 3, pg="0", seq=0), dtype="Float"),
            replace(comm("AllReduce", 200, 4096, 3, pg="0", seq=1),
                    dtype="Half" if rank == 1 else "Float"),
        ]  # fmt: skip
        files.append(parsed(rank, calls, meta[rank], FileStats(events=2)))
    report = build_report(["w"], files, [], Options())
    (gap,) = [i for i in report.health.issues if i.key == "desync"]
    assert (gap.count, gap.total, gap.unit) == (1, 2, "collective positions")
    assert gap.named == ["group 0 seq 1: calls differ in dtype (rank 1 departs)"]
    assert "\n  group 0 seq 1: calls differ in dtype (rank 1 departs)\n" in text.render(report)


def test_traces_with_everything_have_no_gap() -> None:
    events: list[Event] = [
        Step(1, 0, 1000 * US, 1),
        GpuOp("compute", 0, 100 * US, "gemm"),
        MemoryPeak(0, 2**30),
        comm("AllReduce", 200, 4096, 1, pg="0", seq=0, source=ARG),
    ]
    meta = TraceMeta(rank=0, world_size=1, gpu_name="NVIDIA H100 80GB HBM3", base_time_ns=1)
    files = [parsed(0, events, meta, FileStats(events=4, comm_kernels=1))]
    report = build_report(["w"], files, [], Options())
    assert report.health.issues == []
    assert report.health.checked == [key for key, _ in health.CHECKS]
    assert "Nothing missing: every check passed (steps, ranks, process_group" in text.render(report)
