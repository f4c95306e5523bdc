"""Unions of time intervals and their measures (pure).

`IntervalSet` keeps the union of half-open integer intervals [start, end) as sorted, disjoint
runs in two `array('q')` (16 bytes a run): adding an interval that touches or overlaps a run
merges into it, so the structure is as small as the union itself. Intervals may arrive in any
order: ones at or after the last run are merged in place (the common case for trace events),
others wait in a small buffer that is sorted and merged into the tail of the runs it affects.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from typing import Final

PENDING_LIMIT: Final = 4096


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
        if len(self._pending) >= PENDING_LIMIT:
            self._flush()

    def update(self, other: IntervalSet) -> None:
        """Add every run of `other`."""
        for start, end in other.runs():
            self.add(start, end)

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
        tail = merge_sorted(zip(self._starts[cut:], self._ends[cut:], strict=True), batch)
        del self._starts[cut:]
        del self._ends[cut:]
        for start, end in tail:
            self._starts.append(start)
            self._ends.append(end)


def merge_sorted(
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
    """|A ∩ B| by one sweep over both runs."""
    total = 0
    ra, rb = a.runs(), b.runs()
    x, y = next(ra, None), next(rb, None)
    while x is not None and y is not None:
        low, high = max(x[0], y[0]), min(x[1], y[1])
        if high > low:
            total += high - low
        if x[1] <= y[1]:
            x = next(ra, None)
        else:
            y = next(rb, None)
    return total


def intersection(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """A ∩ B, as a new IntervalSet (the sweep of `intersection_measure`, keeping the runs)."""
    result = IntervalSet()
    ra, rb = a.runs(), b.runs()
    x, y = next(ra, None), next(rb, None)
    while x is not None and y is not None:
        result.add(max(x[0], y[0]), min(x[1], y[1]))
        if x[1] <= y[1]:
            x = next(ra, None)
        else:
            y = next(rb, None)
    return result


def difference(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """A minus B, as a new IntervalSet."""
    result = IntervalSet()
    cuts = list(b.runs())
    i = 0
    for start, end in a.runs():
        while i < len(cuts) and cuts[i][1] <= start:
            i += 1
        cursor, j = start, i
        while j < len(cuts) and cuts[j][0] < end:
            if cuts[j][0] > cursor:
                result.add(cursor, cuts[j][0])
            cursor = max(cursor, cuts[j][1])
            j += 1
        if cursor < end:
            result.add(cursor, end)
    return result
