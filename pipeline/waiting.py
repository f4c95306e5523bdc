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

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from commscope.model.schema import ExposedSplit
from commscope.pipeline.intervals import IntervalSet, of_intervals, unpacked
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
    starts, get = instance.starts, shifts.get
    ref = min(starts.values())  # floats near 0: a 1.7e18 ns start is 256 ns coarse
    last = max([(s - ref) - get(m, 0.0) for m, s in starts.items()])
    return cuts_at(instance, shifts, ref, last)


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
    return unions_of((cuts(i, shifts) for i in timed), ranks)


def unions_of(
    cuts: Iterable[Sequence[tuple[int, int, int, int]]], ranks: Mapping[int, Exposed]
) -> dict[int, tuple[IntervalSet, IntervalSet]]:
    """`unions` from each instance's cuts (`cuts`, `cuts_at`)."""
    waits: dict[int, list[tuple[int, int]]] = {rank: [] for rank in ranks}
    moves: dict[int, list[tuple[int, int]]] = {rank: [] for rank in ranks}
    bases = {rank: exposed.base_ns for rank, exposed in ranks.items()}
    for members in cuts:
        for member, start, cut, end in members:
            base = bases.get(member)
            if base is not None:
                waits[member].append((start - base, cut - base))
                moves[member].append((cut - base, end - base))
    return {rank: (of_intervals(waits[rank]), of_intervals(moves[rank])) for rank in ranks}


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
    run of a set begins or ends; the boundaries are sorted as plain ints (time x 8 + code)."""
    events: list[int] = []
    for bit, (starts, ends) in enumerate(sets):
        events += [t << 3 | 2 * bit for t in starts]
        events += [t << 3 | 2 * bit + 1 for t in ends]
    events.sort()
    time_in, state, at = [0] * 16, 0, 0
    for event in events:
        t = event >> 3
        if state:
            time_in[state] += t - at
        state += _DELTAS[event & 7]
        at = t
    return time_in


def pooled(parts: Sequence[Mapping[int, Split]]) -> dict[int, Split]:
    """Each rank's splits summed over windows."""
    total: dict[int, Split] = {}
    for part in parts:
        for rank, found in part.items():
            total[rank] = add(total.get(rank, Split()), found)
    return dict(sorted(total.items()))
