"""Collective instances split by an Inspector window boundary, matched whole (`straddle`)."""

from __future__ import annotations

from commscope.model.schema import CommOp
from commscope.pipeline.straddle import affected, key, lent, successors, waiting


def op(seq: int, rank_start_ns: int = 0, kind: str = "AllReduce", n: int = 2) -> CommOp:
    return CommOp(kind, rank_start_ns, 100, 1000, n, True, "world 0x1", seq,  # type: ignore[arg-type]
                  "Inspector n_ranks")  # fmt: skip


def test_an_instance_split_by_the_boundary_is_taken_whole_by_its_earlier_window() -> None:
    # instance 3: rank 0's member in this window, rank 1's in the next; 4 wholly in the next
    own = {0: [op(1), op(2), op(3)], 1: [op(1), op(2)]}
    after = {0: [op(4)], 1: [op(3), op(4)]}
    calls, taken = lent(own, after, frozenset())
    assert [c.seq for c in calls[0]] == [1, 2, 3] and [c.seq for c in calls[1]] == [1, 2, 3]
    assert taken == {("world 0x1", 3, "AllReduce")}
    # the next window leaves it out: instance 3 is counted once
    nxt, _ = lent(after, {}, taken)
    assert [c.seq for c in nxt[0]] == [4] and [c.seq for c in nxt[1]] == [4]


def test_nothing_is_taken_for_a_rank_with_no_file_in_the_window() -> None:
    # rank 2's member of instance 3 is in the next window, but rank 2 has no file here: the
    # instance stays split (each side unmatched) rather than lose rank 2's member
    own = {0: [op(3, n=3)], 1: [op(3, n=3)]}
    after = {2: [op(3, n=3)]}
    calls, taken = lent(own, after, frozenset())
    assert taken == frozenset() and sorted(calls) == [0, 1]


def test_point_to_point_and_whole_instances_are_left_alone() -> None:
    own = {0: [op(1), op(5, kind="SendRecv")], 1: [op(1)]}
    after = {0: [op(5, kind="SendRecv")], 1: [op(1)]}  # a repeat Seq of a whole instance
    _, taken = lent(own, after, frozenset())
    assert taken == frozenset() and key(op(5, kind="SendRecv")) is None


def test_successors_stay_within_a_log_folder() -> None:
    names = ["a@1", "a@2", "b@1"]
    assert successors(names) == {"a@1": "a@2", "a@2": "", "b@1": ""}


def test_a_window_waits_for_its_next_and_after_a_waiting_one() -> None:
    names = ["a@1", "a@2", "a@3", "a@4"]
    # a@1 complete and a@2 complete: a@1 settles; a@2 waits for a@3 (open); a@4: not there
    assert waiting(names, {"a@1", "a@2", "a@4"}, {"a@3"}) == {"a@2", "a@3", "a@4"}
    assert waiting(names, set(names), set()) == {"a@4"}  # the last waits for a next


def test_a_changed_window_makes_its_neighbours_match_again() -> None:
    names = ["a@1", "a@2", "a@3", "a@4", "b@1"]
    assert affected(names, {"a@3"}) == {"a@2", "a@3", "a@4"}
    assert affected(names, {"a@1"}) == {"a@1", "a@2", "a@3", "a@4"}
