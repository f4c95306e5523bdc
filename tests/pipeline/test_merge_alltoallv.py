"""`commscope merge` of shards whose ranks ran all-to-all-v calls (`pipeline.merge`,
`pipeline.alltoallv`): the merged section equals the one of the report on every file, by hand
on a 3-rank job in two shards, for random split matrices split into random shards, and on the
real MoE sample in two shards."""

from __future__ import annotations

import itertools
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from commscope.model.schema import CommOp, FileStats, Report, Step, TraceMeta
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.merge import combine
from commscope.pipeline.report import Options, ParsedFile, build_report
from commscope.service.offline import analyse
from hypothesis import given, settings
from hypothesis import strategies as st

ROW = 8  # bytes a row (one Long)
SKEWED = [[1, 2, 3], [0, 4, 0], [2, 1, 1]]  # rows rank i sends to rank j
EVEN = [[1, 1, 1], [1, 1, 1], [1, 1, 1]]
STEP_NS = 1_000_000


def alltoall(rows: Sequence[Sequence[int]], rank: int, start: int, seq: int | None) -> CommOp:
    """Rank `rank`'s call of one all-to-all-v of split matrix `rows` (S = row x max rows)."""
    n = len(rows)
    sent, received = tuple(rows[rank]), tuple(rows[j][rank] for j in range(n))
    size = ROW * max(sum(sent), sum(received))
    return CommOp("AllToAll", start, 1000 * (rank + 1), size, n, False, "0", seq, "pg_config",
                  "Long", sent, received)  # fmt: skip


def parsed(
    window: str, rank: int, calls: Sequence[Sequence[Sequence[int]]], seq: bool = True, **meta: Any
) -> ParsedFile:
    """One rank's window: 2 profiled steps, call k of `calls` 10 µs into step k + 1 (Seq k,
    or none)."""
    accumulator = Accumulator()
    accumulator.add_all([Step(s, (s - 1) * STEP_NS, STEP_NS, 1) for s in (1, 2)])
    for k, rows in enumerate(calls):
        accumulator.add_all([alltoall(rows, rank, k * STEP_NS + 10_000, k if seq else None)])
    path = f"{window}/rank{rank}.json"
    info = TraceMeta(rank=rank, backend="gloo", world_size=len(calls[0]), **meta)
    return ParsedFile(window, path, rank, info, accumulator.result([path]), FileStats())


def report(files: Sequence[ParsedFile], ranks: Iterable[int]) -> Report:
    chosen = [f for f in files if f.meta.rank in set(ranks)]
    return build_report(sorted({f.window for f in chosen}), chosen, Options())


def sections(value: Report) -> list[Any]:
    """The run's all-to-all-v section and each window's, as JSON."""
    return [msgspec.to_builtins(s.alltoallv) for s in (value, *value.windows)]


def test_two_shards_merge_to_the_report_on_every_file_worked_by_hand() -> None:
    members = {"0": [0, 1, 2]}
    files = [parsed("w", r, [SKEWED, EVEN], pg_ranks=members) for r in range(3)]
    merged = combine([("a.json", report(files, [0, 1])), ("b.json", report(files, [2]))])
    got = merged.alltoallv
    assert got is not None
    # sent 6+3, 4+3, 4+3 rows; received 3+3, 7+3, 4+3 rows; 8 B a row
    assert [(r.sent_bytes, r.received_bytes) for r in got.per_rank.values()] == [
        (72, 48),
        (56, 80),
        (56, 56),
    ]
    assert got.matrix_bytes == [[16, 24, 32], [8, 40, 8], [24, 16, 16]]
    assert (got.calls, got.unknown_bytes, got.total_bytes, got.busiest_rank) == (2, 0, 184, 1)
    first, second = got.steps
    assert (first.step, first.calls, first.busiest_rank) == (1, 1, 1)
    assert first.received_imbalance == pytest.approx(56 * 3 / 112)  # 1.5
    assert (second.sent_imbalance, second.received_imbalance) == (1.0, 1.0)
    # step 1's busiest rank 1 moved 56 B in its 2 µs call; step 2's rank 0, 24 B in 1 µs
    assert got.busbw_Bps.max == pytest.approx(56 / 2e-6 * 2 / 3)
    assert got.busbw_Bps.min == pytest.approx(24 / 1e-6 * 2 / 3)
    assert sections(merged) == sections(report(files, range(3)))
    # rank 2's shard alone matched nothing: one member of the group
    assert report(files, [2]).alltoallv is None


def test_without_pg_config_the_merge_places_the_group_on_every_rank_it_holds() -> None:
    files = [parsed("w", r, [SKEWED]) for r in range(3)]
    merged = combine([("a.json", report(files, [0])), ("b.json", report(files, [1, 2]))])
    assert merged.alltoallv is not None and merged.alltoallv.matrix_na_reason is None
    assert merged.alltoallv.matrix_bytes == [[8, 16, 24], [0, 32, 0], [16, 8, 8]]
    assert sections(merged) == sections(report(files, range(3)))


def test_calls_without_a_seq_match_by_their_index_across_shards() -> None:
    files = [parsed("w", r, [SKEWED, EVEN], seq=False) for r in range(3)]
    merged = combine([("a.json", report(files, [1])), ("b.json", report(files, [0, 2]))])
    assert merged.alltoallv is not None and merged.alltoallv.calls == 2
    assert sections(merged) == sections(report(files, range(3)))


@st.composite
def jobs(draw: st.DrawFn) -> tuple[list[ParsedFile], list[list[int]]]:
    """2-5 ranks, 1-2 windows of 1-2 random all-to-all-v calls, split into random shards."""
    world = draw(st.integers(2, 5))
    square = st.lists(st.lists(st.integers(0, 5), min_size=world, max_size=world),
                      min_size=world, max_size=world)  # fmt: skip
    known = draw(st.booleans())
    files = []
    for window in ["iteration_1", "iteration_2"][: draw(st.integers(1, 2))]:
        calls = draw(st.lists(square, min_size=1, max_size=2))
        traced = draw(st.lists(st.booleans(), min_size=world, max_size=world))
        for rank in (r for r in range(world) if traced[r] or r < 2):
            extra = {"pg_ranks": {"0": list(range(world))}} if known else {}
            files.append(parsed(window, rank, calls, **extra))
    labels = draw(st.lists(st.integers(0, 2), min_size=world, max_size=world))
    shards = [[r for r in range(world) if labels[r] == s] for s in sorted(set(labels))]
    return files, shards


@settings(max_examples=30, deadline=None)
@given(jobs())
def test_any_split_into_shards_merges_to_the_report_on_every_file(
    job: tuple[list[ParsedFile], list[list[int]]],
) -> None:
    files, shards = job
    ranks = sorted({f.meta.rank for f in files})
    parts = [(f"s{i}.json", report(files, r)) for i, r in enumerate(shards) if set(r) & set(ranks)]
    whole = report(files, ranks)
    assert whole.alltoallv is not None
    for order in itertools.islice(itertools.permutations(parts), 3):
        assert sections(combine(list(order))) == sections(whole)


SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_moe_4rank"


def test_the_real_moe_job_in_two_shards_merges_to_its_report(tmp_path: Path) -> None:
    """samples/gloo_moe_4rank (tests/gloo_job/moe.py, 2 windows) reported as ranks 0-1 and
    2-3: no pg_config, so neither shard can place the 4-rank group; the merge places it."""
    for shard, ranks in (("a", (0, 1)), ("b", (2, 3))):
        for window in ("iteration_4", "iteration_8"):
            (tmp_path / shard / window).mkdir(parents=True)
            for rank in ranks:
                name = f"rank{rank}_trace.json.gz"
                shutil.copyfile(SAMPLE / window / name, tmp_path / shard / window / name)
    a, b = (analyse(tmp_path / shard, Options()) for shard in ("a", "b"))
    assert a.alltoallv is not None and a.alltoallv.matrix_na_reason is not None
    merged = combine([("a.json", a), ("b.json", b)])
    assert sections(merged) == sections(analyse(SAMPLE, Options()))
    assert merged.alltoallv is not None and merged.alltoallv.matrix_na_reason is None
    # rank 2, the hot expert: (160 + 64) rows of 64 B a step, 2 steps a window, 2 windows
    assert merged.alltoallv.per_rank["2"].received_bytes == 4 * 224 * 64
