"""`jobs.Memo`: a run's reports one after another, each window's files split once while they are
the same. Against the oracle, `split` and `ranks.assign` over every file anew: the same jobs,
files, placement, skipped files and notes, whatever the files (random kinds, missing values,
time bases, ranks and names), the order they come in, and the windows that changed since."""

from __future__ import annotations

from collections.abc import Sequence

from commscope.model.schema import FileStats, RankResult, TraceMeta
from commscope.pipeline import jobs
from commscope.pipeline.accumulate import CPU
from commscope.pipeline.report import ParsedFile
from hypothesis import given, settings
from hypothesis import strategies as st

JAN_NS = 1_704_067_200 * 10**9  # 2024-01-01
HOUR_NS = 3600 * 10**9


def item(
    window: str,
    name: str,
    *,
    rank: int | None = None,
    name_rank: int | None = None,
    world: int | None = 4,
    gpu: str | None = "NVIDIA H100",
    start_ns: int | None = JAN_NS,
    cpu: bool = False,
) -> ParsedFile:
    meta = TraceMeta(rank=rank, world_size=world, backend="nccl", gpu_name=gpu)
    result = RankResult(evidence_text=CPU if cpu else "gpu kernels", start_ns=start_ns)
    return ParsedFile(window, f"{window}/{name}", name_rank, meta, result, FileStats())


def oracle(files: Sequence[ParsedFile]) -> tuple[list[jobs.Job], list[object]]:
    return jobs.usable(files)  # no memo: split and assign anew


def same(found: tuple[list[jobs.Job], list[object]], files: Sequence[ParsedFile]) -> None:
    expected = oracle(files)
    assert [j.files for j in found[0]] == [j.files for j in expected[0]]
    assert found == expected


def test_a_growing_run_of_one_job_is_found_from_the_windows_that_changed() -> None:
    memo = jobs.Memo()
    run: list[ParsedFile] = []
    for w in range(4):
        window = f"iteration_{w}"
        run += [item(window, f"rank{r}.json", rank=r, start_ns=JAN_NS + w * HOUR_NS * 24)
                for r in range(4)]  # fmt: skip
        found = jobs.usable(run, memo)
        same(found, run)
        assert len(found[0]) == 1 and found[0][0].placement is not None
        assert len(found[0][0].placement.placed) == 4 * (w + 1)
    # the memo's windows are the very ones a later report reuses
    first = memo.one_job(run)
    assert first is not None
    assert memo.one_job(run) is not None


def test_two_kinds_or_two_runs_in_a_window_are_split_anew() -> None:
    memo = jobs.Memo()
    two_kinds = [item("w", "a_rank0.json", rank=0), item("w", "b_rank0.json", rank=0, world=8)]
    assert memo.one_job(two_kinds) is None
    same(jobs.usable(two_kinds, memo), two_kinds)
    apart = [item("w", "rank0.json", rank=0), item("w", "rank1.json", rank=1,
                                                   start_ns=JAN_NS + 2 * HOUR_NS)]  # fmt: skip
    assert memo.one_job(apart) is None
    same(jobs.usable(apart, memo), apart)


def test_files_not_in_window_and_path_order_are_split_anew() -> None:
    memo = jobs.Memo()
    files = [item("a", "rank1.json", rank=1), item("a", "rank0.json", rank=0)]
    assert memo.one_job(files) is None
    interleaved = [item("a", "rank0.json", rank=0), item("b", "rank0.json", rank=0),
                   item("a", "rank1.json", rank=1)]  # fmt: skip
    assert memo.one_job(interleaved) is None
    same(jobs.usable(interleaved, memo), interleaved)


def test_a_window_whose_file_changed_is_found_anew() -> None:
    memo = jobs.Memo()
    run = [item("w1", "rank0.json", rank=0), item("w2", "rank0.json", rank=0)]
    same(jobs.usable(run, memo), run)
    run[1] = item("w2", "rank0.json", rank=1)  # rewritten: now says rank 1
    found = jobs.usable(run, memo)
    same(found, run)
    assert found[0][0].placement is not None
    assert set(found[0][0].placement.placed) == {("w1", 0), ("w2", 1)}


files_strategy = st.lists(
    st.builds(
        item,
        window=st.sampled_from(["iteration_1", "iteration_2", "iteration_3"]),
        name=st.sampled_from(["rank0.json", "rank1.json", "worker2.json", "t_5.json", "x.json"]),
        rank=st.none() | st.integers(0, 3),
        name_rank=st.none() | st.integers(0, 3),
        world=st.none() | st.sampled_from([4, 8]),
        gpu=st.none() | st.sampled_from(["NVIDIA H100", "NVIDIA A100"]),
        start_ns=st.none() | st.sampled_from([5, JAN_NS, JAN_NS + 10, JAN_NS + 2 * HOUR_NS]),
        cpu=st.booleans(),
    ),
    max_size=10,
)


@settings(max_examples=300, deadline=None)
@given(files_strategy, st.lists(st.integers(0, 9), max_size=4), st.booleans())
def test_the_memo_finds_what_a_split_anew_finds(
    files: list[ParsedFile], changed: list[int], by_window: bool
) -> None:
    """Random files, given as they come or in the aggregator's order (window by window, by
    path), then again with some files replaced by new ones (the memo keeps the others)."""
    if by_window:
        files.sort(key=lambda f: (f.window, f.path))
    memo = jobs.Memo()
    same(jobs.usable(files, memo), files)
    again = list(files)
    for i in changed:
        if i < len(again):
            old = again[i]
            result = RankResult(evidence_text=old.result.evidence_text)
            again[i] = ParsedFile(old.window, old.path, old.name_rank, old.meta, result, old.stats)
    same(jobs.usable(again, memo), again)
    same(jobs.usable(again, memo), again)
