"""Every metric of the contract on a two-rank run worked out by hand (times in µs below)."""

from __future__ import annotations

import pytest
from commscope.model.schema import CommOp, Event, FileStats, GpuOp, Report, Step, TraceMeta
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.config import JobConfig
from commscope.pipeline.report import Options, ParsedFile, build_report

US = 1000  # ns per µs
MS = 1_000_000


def comm(kind: str, start_us: int, dur_us: int, size: int | None, group: int = 4) -> CommOp:
    return CommOp(kind, start_us * US, dur_us * US, size, group, True)


RANK0: list[Event] = [
    GpuOp("compute", 0, 100 * US),  # P = [0,100) ∪ [150,300) = 250 µs
    GpuOp("compute", 150 * US, 150 * US),
    GpuOp("memcpy", 0, 500 * US),  # neither comm nor compute
    comm("AllReduce", 50, 150, 1_000_000),  # C ⊇ [50,200)
    comm("AllGather", 400, 50, 2_000_000),  # C ⊇ [400,450)
    comm("SendRecv", 500, 10, None),  # C ⊇ [500,510), size unknown
    Step(5, 0, 1 * MS, 1),
    Step(6, 1 * MS, 3 * MS, 1),
]
RANK1: list[Event] = [
    comm("AllReduce", 0, 100, 1_000_000),
    Step(5, 0, 2 * MS, 1),
    Step(6, 2 * MS, 2 * MS, 1),
]


def parsed(rank: int, events: list[Event]) -> ParsedFile:
    accumulator = Accumulator()
    accumulator.add_all(events)
    meta = TraceMeta(rank=rank, world_size=2, gpu_name="NVIDIA H100 80GB HBM3")
    return ParsedFile(
        "iteration_6", f"rank{rank}.json", rank, meta, accumulator.result(), FileStats()
    )


@pytest.fixture(scope="module")
def report() -> Report:
    config = JobConfig(
        local_batch_size=4, seq_len=1024, parallelism={"data_parallel_shard_degree": -1}
    )
    files = [parsed(0, RANK0), parsed(1, RANK1)]
    return build_report(["iteration_6"], files, [], Options(config=config))


def test_overlap_per_rank(report: Report) -> None:
    rank0 = report.overlap.per_rank["0"]
    # |C| = 150 + 50 + 10 = 210 µs; |C ∩ P| = [50,100) + [150,200) = 100 µs
    assert rank0.comm_time_s == pytest.approx(210e-6)
    assert rank0.overlapped_time_s == pytest.approx(100e-6)
    assert rank0.exposed_comm_time_s == pytest.approx(110e-6)
    assert rank0.compute_time_s == pytest.approx(250e-6)
    assert rank0.ratio == pytest.approx(100 / 210)
    assert report.overlap.per_rank["1"].ratio == 0.0  # no compute at all
    assert report.overlap.mean == pytest.approx((100 / 210 + 0) / 2)
    assert (report.overlap.min, report.overlap.max) == (0.0, pytest.approx(100 / 210))


def test_collective_stats_rank0(report: Report) -> None:
    stats = report.collectives.per_rank["0"]
    ar = stats["AllReduce"]
    # algbw = 1e6 B / 150e-6 s; F = 2(4-1)/4 = 1.5; bus bytes = 1.5e6
    assert (ar.count, ar.sized_count, ar.message_bytes, ar.bus_bytes) == (
        1,
        1,
        1_000_000,
        1_500_000,
    )
    assert ar.algbw_Bps.mean == pytest.approx(1e6 / 150e-6)
    assert ar.busbw_Bps.p95 == pytest.approx(1.5e6 / 150e-6)
    ag = stats["AllGather"]
    # algbw = 2e6 / 50e-6 = 4e10; F = 3/4 → busbw 3e10, bus bytes 1.5e6
    assert (ag.bus_bytes, ag.algbw_Bps.median, ag.busbw_Bps.max) == (
        1_500_000,
        pytest.approx(4e10),
        pytest.approx(3e10),
    )
    sr = stats["SendRecv"]
    assert (sr.count, sr.sized_count, sr.message_bytes, sr.bus_bytes) == (1, 0, None, None)
    assert sr.time_s == pytest.approx(10e-6)
    assert sr.algbw_Bps.mean is None  # no sized op: null, never 0


def test_network(report: Report) -> None:
    rank0 = report.network.per_rank["0"]
    # bus bw = (1.5e6 + 1.5e6) / (150 + 50) µs = 1.5e10; simple = 3e6 B / 210 µs
    assert rank0.bus_bandwidth_Bps == pytest.approx(1.5e10)
    assert rank0.simple_bandwidth_Bps == pytest.approx(3e6 / 210e-6)
    assert (rank0.message_bytes, rank0.bus_bytes, rank0.ops) == (3_000_000, 3_000_000, 3)
    # rank 1: 1.5e6 / 100 µs = 1.5e10
    assert report.network.per_rank["1"].bus_bandwidth_Bps == pytest.approx(1.5e10)
    assert report.network.mean_bus_bandwidth_Bps == pytest.approx(1.5e10)
    assert report.network.peak_bandwidth_Bps == 450e9  # H100
    assert report.network.utilization == pytest.approx(1.5e10 / 450e9)
    assert report.network.total_bus_bytes == 4_500_000


def test_traffic_distribution(report: Report) -> None:
    traffic = report.traffic
    assert list(traffic) == ["AllReduce", "AllGather", "SendRecv"]  # by bus bytes
    assert traffic["AllReduce"].count == 2
    assert traffic["AllReduce"].bus_bytes == 3_000_000
    assert traffic["AllReduce"].share == pytest.approx(2 / 3)
    assert traffic["AllReduce"].mean_time_s == pytest.approx(125e-6)  # (150 + 100) / 2
    assert traffic["AllGather"].share == pytest.approx(1 / 3)
    assert (traffic["SendRecv"].bus_bytes, traffic["SendRecv"].share) == (None, None)


def test_pooled_bandwidth_quantiles(report: Report) -> None:
    busbw = report.collectives.all_ranks["AllReduce"].busbw_Bps
    # samples 1e10 (rank 0) and 1.5e10 (rank 1): median 1.25e10, p95 = 1e10 + 0.95 x 0.5e10
    assert busbw.median == pytest.approx(1.25e10)
    assert busbw.p95 == pytest.approx(1.475e10)


def test_throughput(report: Report) -> None:
    t = report.throughput
    # iteration = mean(rank0 (1+3)/2 ms, rank1 (2+2)/2 ms) = 2 ms; dp_shard -1 → 2/1 = 2
    # global batch = 4 x 1 x 2 = 8; tokens/s = 8 x 1024 / 0.002
    assert t.iterations == 2
    assert t.iteration_time_s == pytest.approx(0.002)
    assert t.global_batch_size == 8
    assert t.tokens_per_second == pytest.approx(4_096_000)
    assert t.tokens_per_second_per_gpu == pytest.approx(2_048_000)
    assert t.samples_per_second == pytest.approx(4000)
    assert t.na_reason is None


def test_throughput_without_config_says_why() -> None:
    report = build_report(["iteration_6"], [parsed(0, RANK0)], [], Options())
    assert report.throughput.tokens_per_second is None
    assert report.throughput.na_reason == "no batch size (give --config or --batch-size)"
    assert report.throughput.iteration_time_s == pytest.approx(0.002)


def test_run_sums_numerators_and_denominators_over_windows() -> None:
    # window a: |C| = 100, overlap 100; window b: |C| = 300, overlap 0 → run 100/400, not 1/2
    a = [GpuOp("compute", 0, 100 * US), comm("AllReduce", 0, 100, 1000)]
    b = [comm("AllReduce", 0, 300, 1000)]
    files = [parsed(0, a), parsed(0, b)]
    files = [
        ParsedFile("a", "a/rank0.json", 0, files[0].meta, files[0].result, FileStats()),
        ParsedFile("b", "b/rank0.json", 0, files[1].meta, files[1].result, FileStats()),
    ]
    report = build_report(["a", "b"], files, [], Options())
    assert [w.overlap.per_rank["0"].ratio for w in report.windows] == [1.0, 0.0]
    assert report.overlap.per_rank["0"].ratio == pytest.approx(0.25)


def test_duplicate_rank_in_a_window_skips_both_and_names_each_other() -> None:
    one, two = parsed(0, RANK0), parsed(0, RANK1)
    two = ParsedFile(two.window, "other.json", 0, two.meta, two.result, two.stats)
    report = build_report(["iteration_6"], [one, two], [], Options())
    reasons = {s.path: s.reason for s in report.inputs.skipped}
    assert "other.json" in reasons["rank0.json"] and "rank0.json" in reasons["other.json"]
    assert report.ranks == []


def test_bus_bytes_of_a_group_of_three_are_summed_exactly_not_rounded_per_op() -> None:
    # AllReduce in a group of 3: F = 2 x 2/3 = 4/3; S = 1000 B: 1333.33 B each. Three ops
    # give exactly 4000 B; rounding each op first would give 3 x 1333 = 3999.
    events: list[Event] = [comm("AllReduce", 100 * i, 10, 1000, group=3) for i in range(3)]
    result = build_report(["iteration_6"], [parsed(0, events)], [], Options())
    assert result.collectives.all_ranks["AllReduce"].bus_bytes == 4000
    assert result.network.total_bus_bytes == 4000
    assert result.traffic["AllReduce"].bus_bytes == 4000


def test_each_collective_says_where_its_group_size_came_from() -> None:
    events: list[Event] = [
        CommOp("AllGather", 0, 10 * US, 800, 8, True, group_source="tensor shapes"),
        CommOp("AllGather", 20 * US, 10 * US, 800, 8, True, group_source="tensor shapes"),
        CommOp("AllGather", 40 * US, 10 * US, 800, 2, True, group_source="world size"),
        CommOp("Broadcast", 60 * US, 10 * US, 800, None, True),
    ]
    result = build_report(["iteration_6"], [parsed(0, events)], [], Options())
    sources = {k: s.group_size_sources for k, s in result.collectives.all_ranks.items()}
    assert sources == {
        "AllGather": {"tensor shapes": 2, "world size": 1},
        "Broadcast": {"unknown": 1},
    }
