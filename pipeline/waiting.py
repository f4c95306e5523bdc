"""Exposed communication split into waiting and transfer (pure).

For a matched instance whose members m start at s_m and end at e_m on aligned clocks, let
a = max_m s_m (the last arrival). Member m's waiting is [s_m, min(a, e_m)], its transfer
[max(a, s_m), e_m]. Per rank, W = ∪ waiting and T = ∪ transfer over the instances it is a
member of, and E = C \\ P its exposed communication (what no compute covers). Then

    exposed transfer  = |E ∩ T|
    exposed waiting   = |(E ∩ W) \\ T|
    exposed unmatched = |E| - both   (= |E \\ (T ∪ W)|: calls matched to no instance)

which sum exactly to |E|, the rank's exposed communication (W ∪ T ∪ unmatched calls = C).
The same with E ∩ S, S the union of the profiled steps' spans, gives the in-step figures.
Instances with a member whose start is unknown are not split (their time stays unmatched).
A member's waiting ends at `a` carried back to its own clock and rounded to the nanosecond.
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, compress, repeat
from operator import itemgetter
from typing import Final

from commscope.model.schema import ExposedSplit
from commscope.pipeline.intervals import IntervalSet, of_sorted, unpacked
from commscope.pipeline.matching import Instance

Split = ExposedSplit


def add(a: Split, b: Split) -> Split:
    return Split(**{name: getattr(a, name) + getattr(b, name) for name in Split.__struct_fields__})


def unmatched_ns(split: Split) -> int:
    return split.exposed_ns - split.transfer_ns - split.waiting_ns


@dataclass(frozen=True)
class Exposed:
    """What a rank's split needs of its window: E = C \\ P and S, as packed runs (own clock)."""

    exposed_runs: bytes
    step_runs: bytes
    base_ns: int = 0  # the rank's trace base time, added to its calls' starts by matching


def pieces(
    instance: Instance, shifts: Mapping[int, float]
) -> dict[int, tuple[tuple[int, int], tuple[int, int]]]:
    """Each member's (waiting, transfer) interval on the clock its starts are given in:
    `shifts[m]` is subtracted from m's times to align them (missing: 0)."""
    return {
        member: ((start, cut), (cut, end)) for member, start, cut, end in cuts(instance, shifts)
    }


def cuts(instance: Instance, shifts: Mapping[int, float]) -> list[tuple[int, int, int, int]]:
    """Each member's (member, start, cut, end): its waiting is [start, cut), its transfer
    [cut, end) (`pieces`)."""
    return cuts_at(instance, shifts, *extent(instance, shifts))


def extent(instance: Instance, shifts: Mapping[int, float]) -> tuple[int, float]:
    """(The earliest start, the last arrival on aligned clocks from it): what `cuts_at`
    takes (`skew.Arrival`'s `origin_ns` and `latest_ns`)."""
    starts, get = instance.starts, shifts.get
    ref = min(starts.values())  # floats near 0: a 1.7e18 ns start is 256 ns coarse
    return ref, max([(s - ref) - get(m, 0.0) for m, s in starts.items()])


def cuts_at(
    instance: Instance, shifts: Mapping[int, float], ref: int, last: float
) -> list[tuple[int, int, int, int]]:
    """`cuts` given the earliest start `ref` and the last arrival on aligned clocks
    from it, `last` (`skew.Arrival`'s `origin_ns` and `latest_ns`: found once)."""
    found, durations, get = [], instance.durations, shifts.get
    for member, start in instance.starts.items():
        end = start + durations[member]
        cut = ref + round(last + get(member, 0.0))
        cut = start if cut < start else cut  # min(max(cut, start), end)
        found.append((member, start, end if cut > end else cut, end))
    return found


def split(
    instances: Iterable[Instance],
    shifts: Mapping[int, float],
    ranks: Mapping[int, Exposed],
    untimed: set[int] | frozenset[int] = frozenset(),
) -> dict[int, Split]:
    """Every rank's `Split` over the window's matched instances (see the module docstring)."""
    return split_of(unions(instances, shifts, ranks, untimed), ranks)


def split_of(
    found: Mapping[int, tuple[IntervalSet, IntervalSet]], ranks: Mapping[int, Exposed]
) -> dict[int, Split]:
    """Every rank's `Split` from its (W, T) unions (`unions`)."""
    return {rank: _rank_split(ranks[rank], *found[rank]) for rank in sorted(ranks)}


def unions(
    instances: Iterable[Instance],
    shifts: Mapping[int, float],
    ranks: Mapping[int, Exposed],
    untimed: set[int] | frozenset[int] = frozenset(),
) -> dict[int, tuple[IntervalSet, IntervalSet]]:
    """Each rank's waiting W and transfer T unions over the instances it is a member of (own
    clock; instances with an untimed member left out), for its split and its pipeline tally."""
    timed = (i for i in instances if not untimed or untimed.isdisjoint(i.starts))
    return unions_at(((i, *extent(i, shifts)) for i in timed), shifts, ranks)


def unions_at(
    found: Iterable[tuple[Instance, int, float]],
    shifts: Mapping[int, float],
    ranks: Mapping[int, Exposed],
) -> dict[int, tuple[IntervalSet, IntervalSet]]:
    """`unions` from each instance with its `extent`: the members' `cuts_at` as columns over
    every member of every instance (each step one pass in C), their pieces on their own
    clocks sorted by (rank, start) and merged rank by rank (members without a rank in
    `ranks` left out). A cut is min(max(cut, s), max(e, s)): `cuts_at`'s but where e < s,
    whose pieces are empty or reversed either way (they add nothing)."""
    members, starts, ends, cuts = _columns(found, shifts)
    base_of = {rank: exposed.base_ns for rank, exposed in ranks.items()}
    if not base_of.keys() >= set(members):
        kept = list(map(base_of.__contains__, members))
        members, starts, ends, cuts = (
            list(compress(column, kept)) for column in (members, starts, ends, cuts)
        )
    bases = list(map(base_of.__getitem__, members))
    starts, ends, cuts = (list(map(operator.sub, c, bases)) for c in (starts, ends, cuts))
    waits = _by_rank(sorted(zip(members, starts, cuts, strict=True)), ranks)
    moves = _by_rank(sorted(zip(members, cuts, ends, strict=True)), ranks)
    return {rank: (waits[rank], moves[rank]) for rank in ranks}


_Columns = tuple[list[int], list[int], list[int], list[int]]  # members, starts, ends, cuts


def _columns(found: Iterable[tuple[Instance, int, float]], shifts: Mapping[int, float]) -> _Columns:
    """Every member's (rank, start, end, cut) as four columns (times as the instances give
    them), instance after instance."""
    members: list[int] = []
    starts: list[int] = []
    lengths: list[int] = []
    refs: list[int] = []
    lasts: list[float] = []
    for instance, ref, last in found:
        own = instance.starts
        members += own
        starts += own.values()
        lengths += map(instance.durations.__getitem__, own)
        refs += repeat(ref, len(own))
        lasts += repeat(last, len(own))
    ends = list(map(operator.add, starts, lengths))
    moved = map(round, map(operator.add, lasts, map(shifts.get, members, repeat(0.0))))
    cuts = map(max, map(operator.add, refs, moved), starts)
    return members, starts, ends, list(map(min, cuts, map(max, ends, starts)))


def _by_rank(pieces: list[tuple[int, int, int]], ranks: Iterable[int]) -> dict[int, IntervalSet]:
    """Each rank's union of its pieces, sorted by (rank, start, end)."""
    owners = list(map(itemgetter(0), pieces))
    found = {}
    for rank in ranks:
        mine = pieces[bisect_left(owners, rank) : bisect_right(owners, rank)]
        found[rank] = of_sorted(list(map(itemgetter(1), mine)), list(map(itemgetter(2), mine)))
    return found


_E, _S, _W, _T = 1, 2, 4, 8  # the bits of a moment's combination: in E, S, W, T
_DELTAS: Final = (_E, -_E, _S, -_S, _W, -_W, _T, -_T)  # a boundary's code -> its change


def _rank_split(exposed: Exposed, waits: IntervalSet, moves: IntervalSet) -> Split:
    """One rank's split from its waiting W and transfer T unions, in one sweep: the time in
    each combination of E, S, W and T (`time_in`), summed into the six measures."""
    runs = (unpacked(exposed.exposed_runs), unpacked(exposed.step_runs), waits, moves)
    time_in = _time_in([found.arrays() for found in runs])

    def within(*, inside: int, outside: int = 0) -> int:
        return sum(t for at, t in enumerate(time_in) if at & inside == inside and not at & outside)

    return Split(
        exposed_ns=within(inside=_E),
        transfer_ns=within(inside=_E | _T),
        waiting_ns=within(inside=_E | _W, outside=_T),
        exposed_in_steps_ns=within(inside=_E | _S),
        transfer_in_steps_ns=within(inside=_E | _S | _T),
        waiting_in_steps_ns=within(inside=_E | _S | _W, outside=_T),
    )


def _time_in(sets: Sequence[tuple[array[int], array[int]]]) -> list[int]:
    """The time in each combination of (at most four) sets of runs, index bit i: inside set
    i. Each set's runs are disjoint and apart (an IntervalSet's), so at a boundary only one
    run of a set begins or ends; the boundaries are sorted as plain ints (time x 8 + code).
    Each step over them is one pass in C (times, combinations after each boundary, the
    gaps to the next); only the sums by combination are a loop here."""
    events: list[int] = []
    for bit, (starts, ends) in enumerate(sets):
        events += map(operator.or_, map(operator.lshift, starts, _THREES), repeat(2 * bit))
        events += map(operator.or_, map(operator.lshift, ends, _THREES), repeat(2 * bit + 1))
    events.sort()
    times = list(map(operator.rshift, events, _THREES))
    states = accumulate(map(_DELTAS.__getitem__, map(operator.and_, events, _SEVENS)))
    time_in = [0] * 16
    for state, gap in zip(states, map(operator.sub, times[1:], times), strict=False):
        time_in[state] += gap  # after the last boundary: no gap (every set is left by then)
    time_in[0] = 0  # outside every set: not a combination the split reads
    return time_in


_THREES: Final = repeat(3)
_SEVENS: Final = repeat(7)


def pooled(parts: Sequence[Mapping[int, Split]]) -> dict[int, Split]:
    """Each rank's splits summed over windows."""
    total: dict[int, Split] = {}
    for part in parts:
        for rank, found in part.items():
            total[rank] = add(total.get(rank, Split()), found)
    return dict(sorted(total.items()))
