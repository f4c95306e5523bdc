"""Bus bytes exact in every total (issue 24 item 7): Σ S x F is never rounded to whole bytes,
per rank, per collective, in the traffic, over ranks, windows merged, in the Prometheus
counter and the merge of shard reports; the JSON keeps the float, the text prints three
significant figures. Hand-worked on a 3-rank group; a hypothesis oracle over random ops."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import msgspec
from commscope.exporters import jsonreport, text
from commscope.exporters.prometheus import Snapshot, families
from commscope.model.schema import CommOp, Event, FileStats, Report, TraceMeta
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.merge import combine
from commscope.pipeline.report import Options, ParsedFile, build_report
from hypothesis import given, settings
from hypothesis import strategies as st

US = 1000
WINDOWS = ("iteration_1", "iteration_2")
# An AllGather of S = 16 B in a group of n = 3: F = (n-1)/n = 2/3, S x F = 32/3 = 10.666… B
# (rounded to whole bytes: 11, and 3 of them 33 where the exact sum is 32).
ONE = 32 / 3


def all_gather(start_us: int) -> CommOp:
    return CommOp("AllGather", start_us * US, 10 * US, 16, 3, True, "0", None, "Group size arg")


def parsed(window: str, rank: int, events: Sequence[Event], world: int = 3) -> ParsedFile:
    accumulator = Accumulator()
    accumulator.add_all(events)
    path = f"{window}/rank{rank}.json"
    meta = TraceMeta(rank=rank, world_size=world, backend="nccl", gpu_name="NVIDIA H100")
    return ParsedFile(window, path, rank, meta, accumulator.result([path]), FileStats())


def three_rank_group(ranks: Sequence[int] = (0, 1)) -> Report:
    """Ranks 0 and 1 of a 3-rank job traced, one AllGather each in each of two windows."""
    files = [parsed(w, r, [all_gather(100 * r)]) for w in WINDOWS for r in ranks]
    return build_report(list(WINDOWS), files, [], Options())


def test_a_window_keeps_each_ranks_and_the_groups_fraction_of_a_byte() -> None:
    window = three_rank_group().windows[0]
    for rank in ("0", "1"):
        assert window.collectives.per_rank[rank]["AllGather"].bus_bytes == ONE
        assert window.network.per_rank[rank].bus_bytes == ONE
    assert window.collectives.all_ranks["AllGather"].bus_bytes == 64 / 3  # not 2 x 11 = 22
    assert window.network.total_bus_bytes == 64 / 3
    assert window.traffic["AllGather"].bus_bytes == 64 / 3


def test_the_run_merges_the_windows_exactly() -> None:
    run = three_rank_group()
    for rank in ("0", "1"):
        assert run.collectives.per_rank[rank]["AllGather"].bus_bytes == 64 / 3
        assert run.network.per_rank[rank].bus_bytes == 64 / 3
    assert run.collectives.all_ranks["AllGather"].bus_bytes == 128 / 3  # 42.666…, not 44
    assert run.network.total_bus_bytes == 128 / 3
    assert run.traffic["AllGather"].bus_bytes == 128 / 3


def test_three_ranks_of_a_third_each_sum_to_the_whole_byte_count() -> None:
    # 3 x 32/3 = 32 exactly; per op rounding would give 33
    window = three_rank_group((0, 1, 2)).windows[0]
    assert window.network.total_bus_bytes == 32.0


def test_the_json_keeps_the_float() -> None:
    document = msgspec.json.decode(jsonreport.render(three_rank_group()))
    assert document["network"]["total_bus_bytes"] == 128 / 3
    assert document["collectives"]["all_ranks"]["AllGather"]["bus_bytes"] == 128 / 3
    assert document["traffic"]["AllGather"]["bus_bytes"] == 128 / 3
    assert document["schema_version"] == 5


def test_the_text_prints_three_significant_figures() -> None:
    lines = text.render(three_rank_group()).splitlines()
    assert "Total Traffic: 42.7 B  (Σ bus bytes over ranks)" in lines
    assert "    Total Bytes: 32 B message, 21.3 B bus" in lines  # each rank over the run


def test_the_prometheus_counter_is_the_exact_sum() -> None:
    (counter,) = [
        m
        for m in families(Snapshot(job="j", report=three_rank_group()))
        if m.name == "commscope_collective_bus_bytes"
    ]
    (sample,) = [s for s in counter.samples if s.name.endswith("_total")]
    assert (sample.labels["collective"], sample.value) == ("AllGather", 128 / 3)


def test_the_merge_of_shard_reports_sums_exactly() -> None:
    merged = combine([("a.json", three_rank_group([0])), ("b.json", three_rank_group([1]))])
    assert merged.network.total_bus_bytes == 128 / 3
    assert merged.collectives.all_ranks["AllGather"].bus_bytes == 128 / 3
    assert merged.windows[0].network.total_bus_bytes == 64 / 3


# ------------------------------------------------------------------ an oracle


def exact_factor(kind: str, n: int) -> Fraction:
    """F by DESIGN.md's table: 2(n-1)/n for AllReduce; (n-1)/n for AllGather, ReduceScatter,
    AllToAll; 1 otherwise."""
    if kind == "AllReduce":
        return Fraction(2 * (n - 1), n)
    if kind in ("AllGather", "ReduceScatter", "AllToAll"):
        return Fraction(n - 1, n)
    return Fraction(1)


_KINDS = ["AllReduce", "AllGather", "ReduceScatter", "AllToAll", "Broadcast", "SendRecv"]
_op = st.tuples(
    st.sampled_from(_KINDS),
    st.none() | st.integers(1, 2**40),  # S (bytes), or unknown
    st.integers(1, 16),  # n
    st.integers(0, 2),  # rank
    st.sampled_from(WINDOWS),
)


@settings(deadline=None, max_examples=60, database=None)
@given(st.lists(_op, min_size=1, max_size=40))
def test_every_total_is_the_sum_of_s_times_f_to_float_precision(
    ops: list[tuple[str, int | None, int, int, str]],
) -> None:
    events: dict[tuple[str, int], list[Event]] = {(w, r): [] for w in WINDOWS for r in range(3)}
    for at, (kind, size, n, rank, window) in enumerate(ops):
        op = CommOp(kind, at * 100 * US, 10 * US, size, n, True, None, None, "Group size arg")
        events[(window, rank)].append(op)
    files = [parsed(w, r, e, world=16) for (w, r), e in events.items()]
    report = build_report(list(WINDOWS), files, [], Options())
    sized = [(kind, size, n, rank) for kind, size, n, rank, _ in ops if size is not None]
    exact = sum((size * exact_factor(kind, n) for kind, size, n, _ in sized), Fraction(0))
    assert report.network.total_bus_bytes == (float(exact) if sized else None)
    if sized:  # the oracle the issue states: fsum of S x F, to float precision
        floats = math.fsum(size * float(exact_factor(kind, n)) for kind, size, n, _ in sized)
        assert math.isclose(report.network.total_bus_bytes or 0.0, floats, rel_tol=2**-50)
    for kind in {kind for kind, *_ in sized}:
        want = sum((s * exact_factor(k, n) for k, s, n, _ in sized if k == kind), Fraction(0))
        assert report.collectives.all_ranks[kind].bus_bytes == float(want)
        assert report.traffic[kind].bus_bytes == float(want)
    for rank in {rank for *_, rank in sized}:
        want = sum((s * exact_factor(k, n) for k, s, n, r in sized if r == rank), Fraction(0))
        assert report.network.per_rank[str(rank)].bus_bytes == float(want)
