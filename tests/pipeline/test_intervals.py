"""IntervalSet and its measures, by hand and against a brute-force oracle over unit cells."""

from __future__ import annotations

import itertools
import random

from commscope.pipeline.intervals import (
    IntervalSet,
    difference,
    intersection,
    intersection_measure,
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
