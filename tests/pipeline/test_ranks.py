"""Which rank each file is: the trace's, else its name's, else rank 0 for a lone file, else
the one number that tells the names apart, else refused; every rank not from a trace is said."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pytest
from commscope.model.schema import TraceMeta
from commscope.pipeline import ranks
from commscope.pipeline.ranks import ranks_from_numbers


@dataclass(frozen=True)
class File:
    window: str
    path: str
    name_rank: int | None = None
    meta: TraceMeta = field(default_factory=TraceMeta)


def placed(*files: File) -> dict[str, int]:
    found = ranks.assign(files)
    return {item.path: rank for (_, rank), item in found.placed.items()}


def test_the_trace_rank_wins_over_the_name() -> None:
    found = ranks.assign([File("w", "w/rank5.json", 5, TraceMeta(rank=2, world_size=8))])
    assert {k: v.path for k, v in found.placed.items()} == {("w", 2): "w/rank5.json"}
    assert found.notes == [] and found.skipped == []


def test_a_lone_file_without_a_rank_is_rank_0_and_the_report_says_so() -> None:
    found = ranks.assign([File("w", "w/bench.json")])
    assert list(found.placed) == [("w", 0)]
    assert found.notes == [
        "w/bench.json: no distributedInfo.rank, the only file of its window: taken as rank 0"
    ]


def test_lone_files_of_several_windows_are_each_rank_0_in_one_note() -> None:
    found = ranks.assign([File("a", "a/t.json"), File("b", "b/t.json")])
    assert list(found.placed) == [("a", 0), ("b", 0)]
    assert found.notes == [
        "2 files (a/t.json …): no distributedInfo.rank, each alone in its window: taken as rank 0"
    ]


def test_a_rank_in_the_name_is_taken_and_said() -> None:
    found = ranks.assign([File("w", "w/rank0.json", 0), File("w", "w/rank1.json", 1)])
    assert sorted(found.placed) == [("w", 0), ("w", 1)]
    assert found.notes == [
        "2 files (w/rank0.json …): no distributedInfo.rank: rank taken from the rankN/workerN "
        "in the file name"
    ]


def test_several_files_take_the_number_that_tells_their_names_apart() -> None:
    found = ranks.assign([File("w", "w/trace_1.json"), File("w", "w/trace_0.json")])
    assert {item.path: rank for (_, rank), item in found.placed.items()} == {
        "w/trace_1.json": 1,
        "w/trace_0.json": 0,
    }
    assert found.notes == [
        "2 files (w/trace_1.json …): no distributedInfo.rank: rank taken from the one number "
        "that tells the file names apart"
    ]


def test_process_ids_are_not_taken_for_ranks() -> None:
    # tensorboard_trace_handler names: host_pid.pt.trace.json; 1234 and 1240 are not 0 or 1
    files = [File("w", "w/host_1234.pt.trace.json"), File("w", "w/host_1240.pt.trace.json")]
    found = ranks.assign(files)
    assert found.placed == {}
    assert [s.reason for s in found.skipped] == [
        "no rank: no distributedInfo.rank, no rankN/workerN in the name, and the numbers that "
        "tell their names apart (1234, 1240) are not ranks 0 to 1"
    ] * 2


def test_numbers_below_the_world_size_of_the_traces_are_ranks() -> None:
    meta = TraceMeta(world_size=8)
    assert placed(File("w", "w/gpu5.json", meta=meta), File("w", "w/gpu7.json", meta=meta)) == {
        "w/gpu5.json": 5,
        "w/gpu7.json": 7,
    }


def test_names_without_a_number_are_refused_with_the_reason() -> None:
    found = ranks.assign([File("w", "w/a.json"), File("w", "w/b.json")])
    assert found.placed == {}
    assert {s.path for s in found.skipped} == {"w/a.json", "w/b.json"}
    assert found.skipped[0].reason.endswith(
        "the names of the files without a rank differ in more than one number"
    )


@pytest.mark.parametrize(
    ("names", "world", "expected"),
    [
        (["t_0.json", "t_1.json", "t_2.json"], None, [0, 1, 2]),
        (["t_2.json", "t_0.json"], 4, [2, 0]),
        (["t_2.json", "t_0.json"], None, "are not ranks 0 to 1"),
        (["t_9.json", "t_0.json"], 8, "are not ranks below the world size 8"),
        (["n1_5.json", "n2_6.json"], 8, "2 numbers differ"),
        (["t_1.json", "t_01.json"], 8, "are not ranks"),  # distinct names, one value
        (["a.json", "b.json"], 8, "differ in more than one number"),
        (["only_3.json"], 8, "not the only file"),
    ],
)
def test_ranks_from_numbers(names: list[str], world: int | None, expected: object) -> None:
    found = ranks_from_numbers(names, world)
    if isinstance(expected, list):
        assert found == expected
    else:
        assert isinstance(found, str) and str(expected) in found


def test_a_file_without_a_rank_beside_ranked_ones_is_refused() -> None:
    meta = TraceMeta(rank=0, world_size=2)
    found = ranks.assign([File("w", "w/a.json", meta=meta), File("w", "w/b.json")])
    assert list(found.placed) == [("w", 0)]
    (skipped,) = found.skipped
    assert skipped.path == "w/b.json"
    assert skipped.reason.endswith("and it is not the only file of its window")


def test_two_files_claiming_one_rank_are_both_skipped_naming_each_other() -> None:
    meta = TraceMeta(rank=1)
    found = ranks.assign([File("w", "w/x.json", meta=meta), File("w", "w/y.json", meta=meta)])
    assert found.placed == {}
    assert sorted((s.path, s.reason) for s in found.skipped) == [
        ("w/x.json", "rank 1 in window w is also claimed by w/y.json"),
        ("w/y.json", "rank 1 in window w is also claimed by w/x.json"),
    ]


# ---------------------------------------------------------------- a shard's rank set


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("3", {3}), ("0-3", {0, 1, 2, 3}), ("0-1, 6-7", {0, 1, 6, 7}), ("2-2,2", {2})],
)
def test_a_rank_set_spec_names_ranks_and_inclusive_ranges(spec: str, expected: set[int]) -> None:
    assert ranks.rank_set(spec) == expected


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("", "'' is not a rank or a range such as 0-255"),
        ("0-", "'0-' is not a rank or a range such as 0-255"),
        ("a-b", "'a-b' is not a rank or a range such as 0-255"),
        ("7-3", "'7-3': a range low-high with high below 1048576"),
        ("0-9999999", "'0-9999999': a range low-high with high below 1048576"),
    ],
)
def test_a_rank_set_spec_that_is_not_one_says_which_part(spec: str, says: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(says) + "$"):
        ranks.rank_set(spec)
