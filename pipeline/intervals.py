"""Unions of time intervals and their measures (pure).

`IntervalSet` keeps the union of half-open integer intervals [start, end) as sorted, disjoint
runs in two `array('q')` (16 bytes a run): adding an interval that touches or overlaps a run
merges into it, so the structure is as small as the union itself. Intervals may arrive in any
order: ones at or after the last run are merged in place (the common case for trace events),
others wait in a small buffer that is sorted and merged into the tail of the runs it affects.
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator
from typing import Final

from commscope.model import int64s
from commscope.model.schema import RUN_BYTES

_PENDING_LIMIT: Final = 4096


class IntervalSet:
    """The union of intervals added so far; see the module docstring."""

    __slots__ = ("_ends", "_pending", "_starts")

    def __init__(self, intervals: Iterable[tuple[int, int]] = ()) -> None:
        self._starts = array("q")
        self._ends = array("q")
        self._pending: list[tuple[int, int]] = []
        for start, end in intervals:
            self.add(start, end)

    def add(self, start: int, end: int) -> None:
        """Add [start, end); empty or reversed intervals add nothing."""
        if end <= start:
            return
        ends = self._ends
        if not self._pending and (not ends or start >= self._starts[-1]):
            if ends and start <= ends[-1]:
                ends[-1] = max(ends[-1], end)
            else:
                self._starts.append(start)
                ends.append(end)
            return
        self._pending.append((start, end))
        if len(self._pending) >= _PENDING_LIMIT:
            self._flush()

    def update(self, other: IntervalSet) -> None:
        """Add every run of `other`."""
        for start, end in other.runs():
            self.add(start, end)

    def add_runs(self, starts: array[int], ends: array[int]) -> None:
        """Add runs given as two arrays: appended as they are when they are sorted, disjoint,
        not touching and after every run kept (the runs of another set, in order), else one
        by one. Either way the union is the same."""
        touching = bool(starts) and bool(self._ends) and starts[0] <= self._ends[-1]
        if self._pending or touching or not _canonical(starts, ends):
            self._add_each(starts, ends)
        else:
            self._starts.extend(starts)
            self._ends.extend(ends)

    def _add_each(self, starts: array[int], ends: array[int]) -> None:
        for start, end in zip(starts, ends, strict=True):
            self.add(start, end)

    def arrays(self) -> tuple[array[int], array[int]]:
        """The runs' starts and ends (the set's own arrays: read them, do not change them)."""
        self._flush()
        return self._starts, self._ends

    def runs(self) -> Iterator[tuple[int, int]]:
        """The disjoint runs in time order."""
        self._flush()
        return zip(self._starts, self._ends, strict=True)

    def measure(self) -> int:
        """Total length of the union."""
        self._flush()
        return sum(self._ends) - sum(self._starts)

    def span(self) -> int:
        """From the first run's start to the last run's end (0 when empty)."""
        self._flush()
        return self._ends[-1] - self._starts[0] if self._starts else 0

    def bounds(self) -> tuple[int, int] | None:
        """(first run's start, last run's end), None when empty."""
        self._flush()
        return (self._starts[0], self._ends[-1]) if self._starts else None

    def __len__(self) -> int:
        self._flush()
        return len(self._starts)

    def _flush(self) -> None:
        if not self._pending:
            return
        batch = sorted(self._pending)
        self._pending.clear()
        cut = bisect_left(self._ends, batch[0][0])
        tail = _merge_sorted(zip(self._starts[cut:], self._ends[cut:], strict=True), batch)
        del self._starts[cut:]
        del self._ends[cut:]
        for start, end in tail:
            self._starts.append(start)
            self._ends.append(end)


def of_intervals(intervals: Iterable[tuple[int, int]]) -> IntervalSet:
    """The union of intervals given in any order (as `IntervalSet(intervals)`): sorted once
    and merged in one pass, for many intervals out of order."""
    result = IntervalSet()
    starts, ends = result._starts, result._ends
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return result


def _canonical(starts: array[int], ends: array[int]) -> bool:
    """Whether the runs are as an IntervalSet keeps them: each non-empty, each ending before
    the next starts (a gap between them), in time order."""
    return (
        len(starts) == len(ends)
        and all(map(operator.lt, starts, ends))
        and all(map(operator.lt, ends[:-1], starts[1:]))
    )


def _merge_sorted(
    runs: Iterable[tuple[int, int]], batch: list[tuple[int, int]]
) -> list[tuple[int, int]]:
    """Union of sorted disjoint `runs` and sorted `batch`, as sorted disjoint runs."""
    merged: list[list[int]] = []
    for start, end in _merge_by_start(iter(runs), iter(batch)):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def _merge_by_start(
    a: Iterator[tuple[int, int]], b: Iterator[tuple[int, int]]
) -> Iterator[tuple[int, int]]:
    x, y = next(a, None), next(b, None)
    while x is not None and y is not None:
        if x <= y:
            yield x
            x = next(a, None)
        else:
            yield y
            y = next(b, None)
    rest, first = (a, x) if x is not None else (b, y)
    if first is not None:
        yield first
        yield from rest


def intersection_measure(a: IntervalSet, b: IntervalSet) -> int:
    """|A ∩ B|: each run of the set with fewer runs cuts the other's by bisection, and the
    runs between the cuts are summed whole (`_within`)."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    starts, ends = large.arrays()
    total = 0
    for start, end in small.runs():
        first, last = _within(starts, ends, start, end)
        if first < last:
            total += sum(ends[first:last]) - sum(starts[first:last])
            total -= max(0, start - starts[first]) + max(0, ends[last - 1] - end)
    return total


def intersection(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """A ∩ B, as a new IntervalSet (the cuts of `intersection_measure`, keeping the runs). The
    cuts come in time order, each non-empty and apart from the next (a gap of A or of B lies
    between them), so they are appended as they are."""
    small, large = (a, b) if len(a) <= len(b) else (b, a)
    starts, ends = large.arrays()
    result = IntervalSet()
    out_starts, out_ends = result._starts, result._ends
    for start, end in small.runs():
        first, last = bisect_right(ends, start), bisect_left(starts, end)  # `_within`
        if first + 1 == last:  # the common case: one run of `large` meets it
            out_starts.append(max(starts[first], start))
            out_ends.append(min(ends[first], end))
        elif first < last:
            out_starts.append(max(starts[first], start))
            out_starts.extend(starts[first + 1 : last])
            out_ends.extend(ends[first : last - 1])
            out_ends.append(min(ends[last - 1], end))
    return result


def _within(starts: array[int], ends: array[int], start: int, end: int) -> tuple[int, int]:
    """The runs [first, last) of sorted disjoint runs that meet [start, end)."""
    return bisect_right(ends, start), bisect_left(starts, end)


def union(sets: Iterable[IntervalSet]) -> IntervalSet:
    """The union of several sets: the runs of the smaller ones merged into the largest's, which
    are copied between them a slice at a time (the work in Python goes by the smaller sets)."""
    ordered = sorted(sets, key=len)
    merged = _merge_into(ordered.pop(), IntervalSet()) if ordered else IntervalSet()  # a copy
    for other in ordered:
        merged = _merge_into(merged, other)
    return merged


def _merge_into(large: IntervalSet, small: IntervalSet) -> IntervalSet:
    """A new set: `large` ∪ `small`, one step per run of `small`."""
    starts, ends = large.arrays()
    result = IntervalSet()
    out_starts, out_ends = result._starts, result._ends
    at, tail = 0, None  # tail: the end of the last run out
    for low, high in small.runs():
        first = bisect_left(ends, low, at)  # runs before `first` end before `low`
        last = bisect_right(starts, high, first)  # runs from `last` on start after `high`
        if first > at:
            out_starts.extend(starts[at:first])
            out_ends.extend(ends[at:first])
            tail, at = ends[first - 1], first
        start, end = low, high
        if first < last:
            start = starts[first] if starts[first] < low else low
            end = ends[last - 1] if ends[last - 1] > high else high
            at = last
        if tail is not None and start <= tail:
            out_ends[-1] = tail = end if end > tail else tail
        else:
            out_starts.append(start)
            out_ends.append(end)
            tail = end
    out_starts.extend(starts[at:])
    out_ends.extend(ends[at:])
    return result


def difference(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """A minus B, as a new IntervalSet. The pieces come in time order, each non-empty and
    apart from the next (a run of B or a gap of A lies between them): appended as they are."""
    result = IntervalSet()
    out_starts, out_ends = result._starts, result._ends
    cut_starts, cut_ends = b.arrays()
    count, i = len(cut_starts), 0
    for start, end in a.runs():
        while i < count and cut_ends[i] <= start:
            i += 1
        cursor, j = start, i
        while j < count and cut_starts[j] < end:
            if cut_starts[j] > cursor:
                out_starts.append(cursor)
                out_ends.append(cut_starts[j])
            cursor = max(cursor, cut_ends[j])
            j += 1
        if cursor < end:
            out_starts.append(cursor)
            out_ends.append(end)
    return result


def pack(starts: array[int], ends: array[int]) -> bytes:
    """Runs as little-endian int64 pairs (start, end)."""
    both = array("q", bytes(RUN_BYTES * len(starts)))
    both[0::2] = starts
    both[1::2] = ends
    return int64s.pack(both)


def unpack(data: bytes) -> tuple[array[int], array[int]]:
    """The starts and ends of packed runs (`well_formed` says whether they can be read)."""
    both = int64s.unpack(data)
    return both[0::2], both[1::2]


def packed(runs: IntervalSet) -> bytes:
    """A set's runs packed (`pack`)."""
    return pack(*runs.arrays())


def unpacked(data: bytes) -> IntervalSet:
    """Packed runs as a set."""
    found = IntervalSet()
    if data:
        found.add_runs(*unpack(data))
    return found
