"""Top kernels and kernel launches (`pipeline.topkernels`): the cap and its summed row, merges
over windows and ranks against the figures of the concatenation (hypothesis), the report
sections with hand-worked values, and a run of two windows read from hand-made traces."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import pytest
from commscope.model.int64s import pack
from commscope.model.schema import KernelRow, KernelTime, LaunchDelays, RankResult
from commscope.pipeline.accumulate import Accumulator, merge_results
from commscope.pipeline.report import Options
from commscope.pipeline.sketch import sketch_of
from commscope.pipeline.topkernels import (
    NO_LAUNCHES,
    NO_NAMES,
    add_delays,
    capped,
    launches,
    merge_launches,
    ordered,
    rank_launches,
    top_kernels,
)
from commscope.service.offline import analyse
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import dist_head, kernel, span, trace

A, B, C = "a_kernel", "b_kernel", "nccl_c"


def test_the_cap_keeps_the_names_of_most_time_and_sums_the_rest() -> None:
    # A 3+1 = 4 kernels, 30+10 = 40 ns; B 1, 50; C 2, 30 (comm); 1 already summed, 5 ns
    rows = [KernelTime(A, 3, 30), KernelTime(B, 1, 50), KernelTime(C, 2, 30, True),
            KernelTime(A, 1, 10), KernelTime(None, 1, 5)]  # fmt: skip
    assert capped(rows, limit=2) == [
        KernelTime(B, 1, 50),
        KernelTime(A, 4, 40),
        KernelTime(None, 3, 35),  # C's 2 and 30 with the 1 and 5 summed before
    ]
    assert capped(rows, limit=3) == [
        KernelTime(B, 1, 50), KernelTime(A, 4, 40), KernelTime(C, 2, 30, True),
        KernelTime(None, 1, 5),
    ]  # fmt: skip


def test_ties_go_to_more_kernels_then_to_the_name() -> None:
    rows = [KernelTime("z", 1, 10), KernelTime("y", 2, 10), KernelTime("x", 1, 10)]
    assert [r.name for r in capped(rows)] == ["y", "x", "z"]


def test_without_names_beyond_the_cap_there_is_no_summed_row() -> None:
    assert capped([KernelTime(A, 1, 5)], limit=1) == [KernelTime(A, 1, 5)]
    assert capped([]) == []


kernel_rows = st.builds(
    KernelTime,
    st.sampled_from([None, "a", "b", "c", "d", "e", "f"]),
    st.integers(1, 9),
    st.integers(0, 99),
    st.booleans(),
)
rows_of = st.lists(kernel_rows, max_size=12)


def totals(rows: list[KernelTime]) -> tuple[int, int]:
    return sum(r.count for r in rows), sum(r.time_ns for r in rows)


@settings(max_examples=300, deadline=None)
@given(st.lists(rows_of, min_size=1, max_size=5), st.integers(1, 8))
def test_windows_merged_give_the_concatenation_s_tallies(
    windows: list[list[KernelTime]], limit: int
) -> None:
    """A whole run sums: each window capped, then merged and capped again, keeps the exact
    totals of all the windows' kernels; with no more names than the cap it is the
    concatenation's table itself, and a name's figures are never above the concatenation's."""
    merged = capped((row for w in windows for row in capped(w, limit)), limit)
    whole = capped([row for w in windows for row in w], limit)
    assert totals(merged) == totals(whole)
    names = {row.name for w in windows for row in w} - {None}
    if len(names) <= limit:
        assert merged == whole
    unmerged = {row.name: row for row in capped([r for w in windows for r in w], 99)}
    for row in merged:
        if row.name is not None:
            assert row.count <= unmerged[row.name].count
            assert row.time_ns <= unmerged[row.name].time_ns
    assert capped(merged, limit) == merged  # capping again changes nothing


delay_lists = st.lists(st.integers(-50, 10**7), max_size=20)


def delay_part(values: list[int], calls: int, shorter: int) -> LaunchDelays:
    return LaunchDelays(calls, 3 * calls, len(values), shorter, pack(array("q", values)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(delay_lists, st.integers(0, 9), st.integers(0, 9)), max_size=5))
def test_launches_merged_over_windows_are_those_of_the_concatenation(
    windows: list[tuple[list[int], int, int]],
) -> None:
    """Each window's parts in its own tally, the tallies merged, against one tally of every
    part: counts and sums equal, and the delay sketches (exact count, sum, min, max) too."""
    results = []
    for values, calls, shorter in windows:
        acc = Accumulator()
        acc.add(delay_part(values, calls, shorter))
        results.append(acc.result())
    whole = Accumulator()
    whole.add_all(delay_part(v, c, s) for v, c, s in windows)
    assert merge_results(results).launches == whole.result().launches
    everything = [v for values, _, _ in windows for v in values]
    merged = merge_results(results).launches
    if merged is not None:
        assert merged.delay_ns == ordered(sketch_of([float(v) for v in everything]))


def test_no_launch_parts_is_no_launch_figures() -> None:
    assert merge_launches([None, None]) is None
    assert Accumulator().result().launches is None


# ---------------------------------------------------------------- report sections


def ranks() -> dict[int, RankResult]:
    # rank 0: A 2 kernels 600 ns, C 1 kernel 400 ns (comm); rank 1: A 1 kernel 1000 ns
    zero = RankResult(
        evidence_text="gpu kernels",
        kernel_names=[KernelTime(A, 2, 600), KernelTime(C, 1, 400, True)],
    )
    one = RankResult(evidence_text="gpu kernels", kernel_names=[KernelTime(A, 1, 1000)])
    return {0: zero, 1: one}


def test_top_kernels_per_rank_and_pooled() -> None:
    top = top_kernels(ranks())
    assert (top.count, top.time_s, top.names_kept) == (4, pytest.approx(2000e-9), 200)
    assert top.all_ranks == [  # A: 3 kernels, 1600 ns of 2000; C: 1, 400 ns
        KernelRow(name=A, count=3, time_s=pytest.approx(1600e-9), mean_s=pytest.approx(1600e-9 / 3),
                  share=0.8, communication=False),
        KernelRow(name=C, count=1, time_s=pytest.approx(400e-9), mean_s=pytest.approx(400e-9),
                  share=0.2, communication=True),
    ]  # fmt: skip
    assert [(r.name, r.share) for r in top.per_rank["0"]] == [(A, 0.6), (C, 0.4)]
    assert [(r.name, r.share) for r in top.per_rank["1"]] == [(A, 1.0)]


def test_the_summed_row_has_no_kind() -> None:
    result = RankResult(evidence_text="gpu kernels", kernel_names=[KernelTime(None, 2, 10)])
    (row,) = top_kernels({0: result}).all_ranks
    assert (row.name, row.communication, row.share) == (None, None, 1.0)


def test_sections_without_names_or_launches_say_why() -> None:
    result = {0: RankResult(evidence_text="cpu (gloo)")}
    assert top_kernels(result).na_reason == NO_NAMES
    assert launches(result).na_reason == NO_LAUNCHES
    assert launches(result).all_ranks is None


def test_launch_figures_of_a_rank() -> None:
    # the worked trace of tests/collector/test_launches.py: 4 calls for 12 µs, delays
    # 5, 10, 9, 20 µs, 2 kernels shorter than their call
    delays = pack(array("q", [5_000, 10_000, 9_000, 20_000]))
    tally = add_delays(None, LaunchDelays(4, 12_000, 4, 2, delays))
    figures = rank_launches(tally)
    assert (figures.calls, figures.kernels, figures.shorter) == (4, 4, 2)
    assert figures.call_time_s == pytest.approx(12e-6)
    assert figures.shorter_share == 0.5
    delay = figures.queue_delay_s
    assert (delay.min, delay.max) == (pytest.approx(5e-6), pytest.approx(20e-6))
    assert delay.mean == pytest.approx(11e-6)  # 44 / 4, exact
    # sorted 5, 9, 10, 20: median 9.5, p95 at 2.85 = 10 + 0.85 x 10 = 18.5 (within 1%)
    assert delay.median == pytest.approx(9.5e-6, rel=0.01)
    assert delay.p95 == pytest.approx(18.5e-6, rel=0.01)
    assert delay.relative_error == 0.01


# ---------------------------------------------------------------- a run of two windows

HOST = 11


def window(path: Path, rank: int, kernels: list[tuple[str, float, float]]) -> None:
    """A rank's trace: each kernel launched 2 µs before it starts, by a 1 µs call."""
    events = []
    for i, (name, ts, dur) in enumerate(kernels):
        args = {"correlation": i}
        events += [span("cuda_runtime", "cudaLaunchKernel", ts - 2, 1, HOST, args=args),
                   kernel(name, ts, dur, args)]  # fmt: skip
    path.mkdir(parents=True, exist_ok=True)
    (path / f"rank{rank}_trace.json").write_bytes(trace(events, dist_head(rank, world_size=2)))


def test_a_run_sums_its_windows(tmp_path: Path) -> None:
    window(tmp_path / "iteration_1", 0, [(A, 10, 4), (B, 20, 0.5)])
    window(tmp_path / "iteration_1", 1, [(A, 10, 6)])
    window(tmp_path / "iteration_2", 0, [(B, 10, 3)])
    window(tmp_path / "iteration_2", 1, [(A, 10, 2), (A, 20, 2)])
    report = analyse(tmp_path, Options())
    first, _ = report.windows
    assert [(r.name, r.count, r.time_s) for r in first.top_kernels.all_ranks] == [
        (A, 2, pytest.approx(10e-6)), (B, 1, pytest.approx(0.5e-6)),
    ]  # fmt: skip
    # the run: A 4 kernels, 4 + 6 + 2 + 2 = 14 µs; B 2, 0.5 + 3 = 3.5 µs; of 17.5 µs
    run = [(r.name, r.count, r.time_s, r.share) for r in report.top_kernels.all_ranks]
    assert run == [(A, 4, pytest.approx(14e-6), 0.8), (B, 2, pytest.approx(3.5e-6), 0.2)]
    # rank 0: A 1 kernel, 4 µs; B 2 kernels, 0.5 + 3 = 3.5 µs
    assert [(r.name, r.count) for r in report.top_kernels.per_rank["0"]] == [(A, 1), (B, 2)]
    # every kernel 2 µs after its 1 µs call; only B's 0.5 µs kernel ran shorter than its call
    pooled = report.launches.all_ranks
    assert pooled is not None
    assert (pooled.calls, pooled.kernels, pooled.shorter) == (6, 6, 1)
    assert pooled.call_time_s == pytest.approx(6e-6)
    assert (pooled.queue_delay_s.min, pooled.queue_delay_s.max) == (
        pytest.approx(2e-6), pytest.approx(2e-6),
    )  # fmt: skip
    assert report.launches.per_rank["1"].calls == 3


def test_the_json_report_keeps_whole_names(tmp_path: Path) -> None:
    long_name = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float> >(float*)"
    window(tmp_path, 0, [(long_name, 10, 4)])
    report = analyse(tmp_path, Options())
    assert report.top_kernels.all_ranks[0].name == long_name
    assert json.loads(json.dumps(report.top_kernels.all_ranks[0].name)) == long_name
