"""`pipeline.merge`: shard reports combined into one, against the report on every file."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import pytest
from commscope.model.errors import MergeError
from commscope.model.schema import (
    CommOp,
    Event,
    FileStats,
    GpuOp,
    RankOverlap,
    RankSteps,
    Report,
    Step,
    TraceMeta,
)
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.merge import NOT_ACROSS, combine
from commscope.pipeline.report import Options, ParsedFile, build_report
from commscope.service.offline import analyse
from crossrank_builder import Scenario, calls
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from tools import needs_shared, shared_traces

TRACES = shared_traces("kineto")
GPU = "NVIDIA H100 80GB HBM3"
QUANTILES = ("median", "p95", "relative_error")
# the exposed split into transfer, waiting and unmatched rests on each shard's matching
SPLIT = ("exposed_transfer_s", "exposed_waiting_s", "exposed_unmatched_s", "split")
CROSS_RANK = ("matching", "clocks", "skew", "alpha_beta", "health", "diagnosis", "links", *SPLIT)
CROSS_RANK += ("profile_tails",)  # its ends are aligned by the clocks


def parsed(window: str, rank: int, events: Iterable[Event], **meta: Any) -> ParsedFile:
    accumulator = Accumulator()
    accumulator.add_all(events)
    path = f"{window}/rank{rank}.json"
    info = TraceMeta(rank=rank, backend="nccl", gpu_name=GPU, **meta)
    stats = FileStats(bytes_read=1000 + rank, events=10 + rank)
    return ParsedFile(window, path, rank, info, accumulator.result([path]), stats)


def report(files: Sequence[ParsedFile], ranks: Iterable[int] | None = None) -> Report:
    wanted = set(ranks) if ranks is not None else {f.meta.rank for f in files}
    chosen = [f for f in files if f.meta.rank in wanted]
    return build_report(sorted({f.window for f in chosen}), chosen, Options())


def doc(value: Report) -> Any:
    return msgspec.to_builtins(value)


def without(document: Any, keys: Sequence[str]) -> Any:
    """The document without `keys` at any depth."""
    if isinstance(document, dict):
        return {k: without(v, keys) for k, v in document.items() if k not in keys}
    if isinstance(document, list):
        return [without(v, keys) for v in document]
    return document


def assert_same_but_quantiles_and_cross_rank(merged: Report, whole: Report) -> None:
    """Equal to the report on all files except the bandwidth quantiles over ranks (within the
    sketch's 1%) and the cross-rank sections (made within shards)."""
    a, b = doc(replace(merged, merge=None)), doc(whole)
    for document in (a, b):
        for sections in (document, *document["windows"]):
            for kind in sections["collectives"]["all_ranks"].values():
                for which in ("algbw_Bps", "busbw_Bps"):
                    for key in QUANTILES:
                        kind[which].pop(key)
    assert without(a, CROSS_RANK) == without(b, CROSS_RANK)
    pairs = zip([merged, *merged.windows], [whole, *whole.windows], strict=True)
    for sections_a, sections_b in pairs:
        for kind, stats in sections_a.collectives.all_ranks.items():
            exact = sections_b.collectives.all_ranks[kind].busbw_Bps
            for key in ("median", "p95"):
                got, want = getattr(stats.busbw_Bps, key), getattr(exact, key)
                assert got == want if want is None else math.isclose(got, want, rel_tol=0.0101)


# ---------------------------------------------------------------- hand-worked


def two_rank_step(rank: int) -> list[Event]:
    """Compute [0,100) and [150,300) µs, an AllReduce [50,200) µs of 1e6 B in a group of 2,
    ProfilerStep#10 of 1000 + 500 x rank µs (as tests/builders.py)."""
    return [
        Step(10, 0, (1000 + 500 * rank) * 1000, 1),
        GpuOp("compute", 0, 100_000, "gemm"),
        GpuOp("compute", 150_000, 150_000, "gemm"),
        CommOp("AllReduce", 50_000, 150_000, 1_000_000, 2, True, "0", 0, "Group size arg"),
    ]


def test_two_one_rank_shards_combine_by_the_contract() -> None:
    files = [parsed("w", r, two_rank_step(r), world_size=2, pg_ranks={"0": [0, 1]}) for r in (0, 1)]
    merged = combine([("a.json", report(files, [0])), ("b.json", report(files, [1]))])
    stats = merged.collectives.all_ranks["AllReduce"]
    # two ops of 1e6 B, 150 µs each; F = 2(n-1)/n = 1 for n = 2: bus bytes = message bytes
    assert (stats.count, stats.message_bytes, stats.bus_bytes) == (2, 2_000_000, 2_000_000)
    assert stats.time_s == 300_000 * 1e-9
    # algbw = 1e6 B / 150 µs for both ops: mean, min and max exact
    algbw = 1_000_000 / (150_000 * 1e-9)
    assert (stats.algbw_Bps.mean, stats.algbw_Bps.min, stats.algbw_Bps.max) == (algbw,) * 3
    assert stats.algbw_Bps.relative_error == 0.01  # the median from sketches, labelled
    # overlap: comm [50,200) against compute [0,100) ∪ [150,300) = 100 of 150 µs on each rank
    assert merged.overlap.mean == 100_000 / 150_000
    # iteration time: the mean over ranks of 1.0 and 1.5 ms
    assert merged.throughput.iteration_time_s == pytest.approx(1.25e-3, rel=1e-15)
    assert merged.ranks == [0, 1]
    assert merged.network.total_bus_bytes == 2_000_000
    assert merged.inputs.files == 2
    assert merged.inputs.bytes_read == 1000 + 1001


def test_a_window_open_in_one_mid_run_shard_is_open_in_the_merge() -> None:
    files = [parsed("w", r, two_rank_step(r), world_size=2, pg_ranks={"0": [0, 1]}) for r in (0, 1)]
    a, b = report(files, [0]), report(files, [1])
    a = replace(a, inputs=replace(a.inputs, open_windows=["w"]))  # shard a's report mid-run
    merged = combine([("a.json", a), ("b.json", b)])
    assert merged.inputs.open_windows == ["w"]
    assert combine([("a.json", b), ("b.json", b)]).inputs.open_windows == []


def test_the_merge_equals_the_report_on_every_file() -> None:
    files = [parsed("w", r, two_rank_step(r), world_size=2, pg_ranks={"0": [0, 1]}) for r in (0, 1)]
    merged = combine([("a.json", report(files, [0])), ("b.json", report(files, [1]))])
    assert_same_but_quantiles_and_cross_rank(merged, report(files))


def grouped_job(instances: int = 6) -> list[ParsedFile]:
    """4 ranks: groups "1" = {0,1} and "2" = {2,3} (their own AllReduces), "0" = all four."""
    per_rank: dict[int, list[Event]] = {r: [] for r in range(4)}
    for group, ranks in (("1", (0, 1)), ("2", (2, 3))):
        found, _ = calls(Scenario(ranks=2, instances=instances, group=group, seed=int(group)))
        for index, rank in enumerate(ranks):
            per_rank[rank] += found[index]
    across, _ = calls(Scenario(ranks=4, instances=instances, group="0", seed=7))
    for rank in range(4):
        per_rank[rank] += [replace(op, start_ns=op.start_ns + 5_000_000) for op in across[rank]]
    members = {"0": [0, 1, 2, 3], "1": [0, 1], "2": [2, 3]}
    return [parsed("w", r, ops, world_size=4, pg_ranks=members) for r, ops in per_rank.items()]


def test_groups_inside_one_shard_are_kept_and_groups_across_are_named() -> None:
    files = grouped_job(instances=6)
    a, b = report(files, [0, 1]), report(files, [2, 3])
    merged = combine([("a.json", a), ("b.json", b)])
    # each shard matched its own group's 6 instances; group "0" spans both: not analysed
    assert list(merged.matching.groups) == ["1", "2"]
    assert merged.matching.groups["1"] == a.matching.groups["1"]
    assert merged.matching.groups["2"] == b.matching.groups["2"]
    assert (merged.matching.instances, merged.matching.by_seq) == (12, 12)
    assert merged.alpha_beta == {"1": a.alpha_beta["1"], "2": b.alpha_beta["2"]}
    assert merged.merge is not None
    assert merged.merge.groups_inside == {"1": 0, "2": 1}
    assert merged.merge.groups_across == {"0": [0, 1]}
    assert merged.clocks.method == NOT_ACROSS
    assert merged.skew.per_rank == {}
    assert merged.skew.waited_for_rank is None
    assert_same_but_quantiles_and_cross_rank(merged, report(files))


def test_one_shard_holding_every_group_keeps_its_clocks_and_skew() -> None:
    per_rank: dict[int, list[Event]] = {r: [] for r in range(4)}
    found, _ = calls(Scenario(ranks=2, instances=6, group="1"))
    per_rank[0], per_rank[1] = found[0], found[1]
    for rank in (2, 3):  # no collective at all
        per_rank[rank] = [Step(10, 0, 1_000_000, 1)]
    files = [
        parsed("w", r, ops, world_size=4, pg_ranks={"1": [0, 1]}) for r, ops in per_rank.items()
    ]
    a, b = report(files, [0, 1]), report(files, [2, 3])
    merged = combine([("b.json", b), ("a.json", a)])
    assert (merged.clocks, merged.skew) == (a.clocks, a.skew)
    assert merged.merge is not None and merged.merge.groups_across == {}


def test_shards_by_window_give_the_run_of_the_report_on_every_file() -> None:
    files = [
        parsed(w, r, two_rank_step(r), world_size=2, pg_ranks={"0": [0, 1]})
        for w in ("iteration_10", "iteration_20")
        for r in (0, 1)
    ]
    first = build_report(["iteration_10"], files[:2], Options())
    second = build_report(["iteration_20"], files[2:], Options())
    merged = combine([("b.json", second), ("a.json", first)])
    whole = build_report(["iteration_10", "iteration_20"], files, Options())
    # each window is one shard's, whole; the run's tallies are sketched in both reports
    assert merged.windows == whole.windows
    assert merged.collectives == whole.collectives
    assert_same_but_quantiles_and_cross_rank(merged, whole)


# ---------------------------------------------------------------- refusals


def test_reports_of_different_jobs_are_refused() -> None:
    small = [parsed("w", r, two_rank_step(r), world_size=2) for r in (0, 1)]
    large = [parsed("w", r, two_rank_step(r), world_size=4) for r in (2, 3)]
    with pytest.raises(MergeError, match="different jobs \\(world size 2 against 4\\)"):
        combine([("a.json", report(small)), ("b.json", report(large))])
    other_gpu = [
        dataclasses.replace(f, meta=replace(f.meta, gpu_name="NVIDIA A100-SXM4-80GB"))
        for f in small
    ]
    with pytest.raises(MergeError, match="different jobs \\(GPU"):
        combine([("a.json", report(small, [0])), ("b.json", report(other_gpu, [1]))])


def test_a_rank_reported_twice_must_agree() -> None:
    files = [parsed("w", r, two_rank_step(r), world_size=2) for r in (0, 1)]
    same = combine([("a.json", report(files)), ("b.json", report(files, [1]))])
    assert same.ranks == [0, 1]
    changed = parsed("w", 1, two_rank_step(0), world_size=2)  # rank 1 with rank 0's step
    with pytest.raises(MergeError, match=r"rank 1 of window w is in a\.json and b\.json"):
        combine([("a.json", report(files)), ("b.json", report([changed]))])


def test_a_shard_given_twice_counts_once() -> None:
    files = [parsed("w", r, two_rank_step(r), world_size=2) for r in (0, 1)]
    a, b = report(files, [0]), report(files, [1])
    once = combine([("a.json", a), ("b.json", b)])
    twice = combine([("a.json", a), ("b.json", b), ("b2.json", b)])
    assert doc(replace(twice, merge=None)) == doc(replace(once, merge=None))
    assert twice.inputs.files == 2  # each rank's file once


def test_an_older_schema_version_is_refused() -> None:
    files = [parsed("w", r, two_rank_step(r), world_size=2) for r in (0, 1)]
    old = replace(report(files, [1]), schema_version=3)
    with pytest.raises(MergeError, match=r"b\.json: schema version 3"):
        combine([("a.json", report(files, [0])), ("b.json", old)])


def test_different_options_are_refused() -> None:
    files = [parsed("w", r, two_rank_step(r), world_size=2) for r in (0, 1)]
    peaked = build_report(["w"], files[1:], Options(peak_override_Bps=100e9))
    with pytest.raises(MergeError, match="different options"):
        combine([("a.json", report(files, [0])), ("b.json", peaked)])


# ---------------------------------------------------------------- properties


@st.composite
def jobs(draw: st.DrawFn) -> tuple[list[ParsedFile], list[list[int]]]:
    """A job of 2-5 ranks over 1-2 windows with random steps and calls, split into shards."""
    world = draw(st.integers(2, 5))
    windows = ["iteration_1", "iteration_2"][: draw(st.integers(1, 2))]
    durations = st.integers(1, 400)
    files = []
    for window, rank in itertools.product(windows, range(world)):
        events: list[Event] = [Step(1, 0, draw(st.integers(500, 900)) * 1000, 1)]
        for index in range(draw(st.integers(0, 3))):
            size = draw(st.sampled_from([None, 4096, 1 << 20]))
            kind = draw(st.sampled_from(["AllReduce", "AllGather"]))
            start = draw(durations) * 1000
            op = CommOp(kind, start, draw(durations) * 1000, size, world, True, "0", index)
            events += [op, GpuOp("compute", draw(durations) * 1000, draw(durations) * 1000)]
        files.append(parsed(window, rank, events, world_size=world))
    labels = draw(st.lists(st.integers(0, 2), min_size=world, max_size=world))
    shards = [[r for r in range(world) if labels[r] == s] for s in sorted(set(labels))]
    return files, shards


@settings(max_examples=25, deadline=None)
@given(jobs())
def test_merging_is_order_free_and_one_report_is_itself(
    job: tuple[list[ParsedFile], list[list[int]]],
) -> None:
    files, shards = job
    parts = [(f"shard{i}.json", report(files, ranks)) for i, ranks in enumerate(shards)]
    first = doc(combine(parts))
    for order in itertools.islice(itertools.permutations(parts), 6):
        assert doc(combine(list(order))) == first
    whole = report(files)
    assert doc(replace(combine([("all.json", whole)]), merge=None)) == doc(whole)
    assert_same_but_quantiles_and_cross_rank(combine(parts), whole)


# ---------------------------------------------------------------- a real job in two shards


T = TypeVar("T", RankOverlap, RankSteps)


def unsplit(row: T) -> T:
    """A rank's row without its exposed split (each shard matched its own ranks' calls); the
    split itself must still add up to the exposed time."""
    exposed = row.exposed_comm_time_s if isinstance(row, RankOverlap) else row.exposed_comm_s
    parts = (row.exposed_transfer_s, row.exposed_waiting_s, row.exposed_unmatched_s)
    assert exposed is not None and None not in parts
    assert math.fsum(p for p in parts if p is not None) == pytest.approx(exposed, abs=1e-12)
    return replace(row, exposed_transfer_s=None, exposed_waiting_s=None, exposed_unmatched_s=None)


@needs_shared("kineto")
def test_dlrm_in_two_shards_merges_to_the_report_on_all_eight_ranks(tmp_path: Path) -> None:
    source = TRACES / "dlrm_8rank_v100"
    for shard, ranks in (("a", range(4)), ("b", range(4, 8)), ("all", range(8))):
        folder = tmp_path / shard / "dlrm"
        folder.mkdir(parents=True)
        for rank in ranks:
            (trace,) = source.glob(f"worker{rank}_*.json")
            (folder / trace.name).symlink_to(trace)
    a, b, whole = (analyse(tmp_path / s / "dlrm", Options()) for s in ("a", "b", "all"))
    merged = combine([("a.json", a), ("b.json", b)])
    for rank in map(str, range(8)):  # every per-rank figure, exactly, but the shard's split
        assert unsplit(merged.overlap.per_rank[rank]) == unsplit(whole.overlap.per_rank[rank])
        assert merged.collectives.per_rank[rank] == whole.collectives.per_rank[rank]
        assert merged.network.per_rank[rank] == whole.network.per_rank[rank]
        assert unsplit(merged.steps[rank]) == unsplit(whole.steps[rank])
        assert merged.kernels.per_rank[rank] == whole.kernels.per_rank[rank]
    assert_same_but_quantiles_and_cross_rank(merged, whole)
    assert merged.merge is not None
    assert merged.merge.groups_across == {"(unnamed)": [0, 1]}  # DLRM names no group
