"""IntervalSet and its measures, by hand and against a brute-force oracle over unit cells."""

from __future__ import annotations

import itertools
import random
from array import array

from commscope.pipeline.intervals import (
    IntervalSet,
    difference,
    intersection,
    intersection_measure,
    of_intervals,
    union,
)
from hypothesis import given, settings
from hypothesis import strategies as st

intervals = st.lists(
    st.tuples(st.integers(0, 200), st.integers(0, 40)).map(lambda p: (p[0], p[0] + p[1])),
    max_size=60,
)


def cells(spans: list[tuple[int, int]]) -> set[int]:
    """The oracle: every unit cell [t, t+1) covered by some half-open interval."""
    return {t for start, end in spans for t in range(start, end)}


def test_touching_intervals_merge_into_one_run() -> None:
    union = IntervalSet([(0, 5), (5, 8)])
    assert list(union.runs()) == [(0, 8)]
    assert union.measure() == 8


def test_nested_and_disjoint_intervals() -> None:
    # [0,10) ∪ [2,3) ∪ [20,25) = [0,10) + [20,25): 10 + 5 = 15
    union = IntervalSet([(20, 25), (0, 10), (2, 3)])
    assert list(union.runs()) == [(0, 10), (20, 25)]
    assert union.measure() == 15


def test_empty_and_reversed_intervals_add_nothing() -> None:
    union = IntervalSet([(5, 5), (9, 3)])
    assert union.measure() == 0
    assert len(union) == 0


def test_intersection_and_difference_by_hand() -> None:
    comm = IntervalSet([(0, 10), (20, 30)])
    compute = IntervalSet([(5, 25)])
    # comm ∩ compute = [5,10) + [20,25) = 10; comm − compute = [0,5) + [25,30)
    assert intersection_measure(comm, compute) == 10
    assert list(intersection(comm, compute).runs()) == [(5, 10), (20, 25)]
    assert list(difference(comm, compute).runs()) == [(0, 5), (25, 30)]


def test_out_of_order_inserts_beyond_the_pending_buffer_stay_exact() -> None:
    rng = random.Random(7)
    spans = [(s, s + rng.randint(1, 30)) for s in (rng.randint(0, 100_000) for _ in range(10_000))]
    union = IntervalSet(spans)
    assert union.measure() == len(cells(spans))


@given(intervals)
@settings(max_examples=300, deadline=None)
def test_union_matches_oracle(spans: list[tuple[int, int]]) -> None:
    union = IntervalSet(spans)
    runs = list(union.runs())
    assert union.measure() == len(cells(spans))
    assert all(a_end < b_start for (_, a_end), (b_start, _) in itertools.pairwise(runs))
    assert cells(runs) == cells(spans)


@given(intervals, intervals)
@settings(max_examples=300, deadline=None)
def test_intersection_and_difference_match_oracle(
    a: list[tuple[int, int]], b: list[tuple[int, int]]
) -> None:
    left, right = IntervalSet(a), IntervalSet(b)
    assert intersection_measure(left, right) == len(cells(a) & cells(b))
    assert cells(list(intersection(left, right).runs())) == cells(a) & cells(b)
    assert cells(list(difference(left, right).runs())) == cells(a) - cells(b)


@given(intervals, st.randoms())
@settings(max_examples=200, deadline=None)
def test_insertion_order_does_not_matter(spans: list[tuple[int, int]], rng: random.Random) -> None:
    shuffled = spans[:]
    rng.shuffle(shuffled)
    assert list(IntervalSet(shuffled).runs()) == list(IntervalSet(spans).runs())


@given(st.lists(intervals, max_size=4))
@settings(max_examples=300, deadline=None)
def test_union_of_sets_is_the_set_of_all_their_intervals(
    groups: list[list[tuple[int, int]]],
) -> None:
    """Runs equal to adding every interval to one set (touching runs merged, as `add` does)."""
    merged = union([IntervalSet(spans) for spans in groups])
    assert list(merged.runs()) == list(IntervalSet(itertools.chain(*groups)).runs())


def test_union_is_a_new_set() -> None:
    only = IntervalSet([(0, 5)])
    merged = union([only])
    merged.add(10, 20)
    assert list(only.runs()) == [(0, 5)]


@given(intervals, intervals)
@settings(max_examples=300, deadline=None)
def test_intersection_runs_are_those_of_the_cells_both_cover(
    a: list[tuple[int, int]], b: list[tuple[int, int]]
) -> None:
    """The runs themselves (not only their cells): as `add` would keep the common cells."""
    common = sorted(cells(a) & cells(b))
    assert list(intersection(IntervalSet(a), IntervalSet(b)).runs()) == list(
        IntervalSet((t, t + 1) for t in common).runs()
    )


@given(intervals, intervals)
@settings(max_examples=300, deadline=None)
def test_add_runs_gives_the_runs_of_adding_each(
    kept: list[tuple[int, int]], added: list[tuple[int, int]]
) -> None:
    """Canonical runs after the kept ones are appended; anything else is added one by one:
    the same runs either way."""
    for runs in (list(IntervalSet(added).runs()), added):
        into = IntervalSet(kept)
        into.add_runs(array("q", [s for s, _ in runs]), array("q", [e for _, e in runs]))
        assert list(into.runs()) == list(IntervalSet([*kept, *added]).runs())


@given(intervals, intervals)
@settings(max_examples=300, deadline=None)
def test_difference_runs_are_those_of_the_cells_only_a_covers(
    a: list[tuple[int, int]], b: list[tuple[int, int]]
) -> None:
    """The runs `difference` appends as they come are those `add` keeps of A's cells not in B."""
    only = sorted(cells(a) - cells(b))
    assert list(difference(IntervalSet(a), IntervalSet(b)).runs()) == list(
        IntervalSet((t, t + 1) for t in only).runs()
    )


@given(intervals, st.randoms())
@settings(max_examples=300, deadline=None)
def test_of_intervals_is_the_set_of_adding_each(
    spans: list[tuple[int, int]], rng: random.Random
) -> None:
    """Sorted once and merged in one pass: the runs of adding each, in any order (empty and
    reversed intervals add nothing)."""
    shuffled = [*spans, (7, 7), (9, 3)]
    rng.shuffle(shuffled)
    assert list(of_intervals(shuffled).runs()) == list(IntervalSet(spans).runs())
