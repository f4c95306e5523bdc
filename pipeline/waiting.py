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

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from commscope.model.schema import ExposedSplit
from commscope.pipeline.intervals import IntervalSet, difference, intersection, unpacked
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
    # times relative to the earliest start: a float holds them exactly (an epoch-based ns
    # time, ~1.8e18, would be rounded to 256 ns)
    origin = min(instance.starts.values())
    aligned = {m: (s - origin) - shifts.get(m, 0.0) for m, s in instance.starts.items()}
    last = max(aligned.values())
    found = {}
    for member, start in instance.starts.items():
        end = start + instance.durations[member]
        cut = min(max(origin + round(last + shifts.get(member, 0.0)), start), end)
        found[member] = ((start, cut), (cut, end))
    return found


def split(
    instances: Iterable[Instance],
    shifts: Mapping[int, float],
    ranks: Mapping[int, Exposed],
    untimed: set[int] | frozenset[int] = frozenset(),
) -> dict[int, Split]:
    """Every rank's `Split` over the window's matched instances (see the module docstring)."""
    waits: dict[int, IntervalSet] = {rank: IntervalSet() for rank in ranks}
    moves: dict[int, IntervalSet] = {rank: IntervalSet() for rank in ranks}
    for instance in instances:
        if not untimed.isdisjoint(instance.starts):
            continue
        for member, (wait, move) in pieces(instance, shifts).items():
            if member in ranks:
                base = ranks[member].base_ns
                waits[member].add(wait[0] - base, wait[1] - base)
                moves[member].add(move[0] - base, move[1] - base)
    return {rank: _rank_split(ranks[rank], waits[rank], moves[rank]) for rank in sorted(ranks)}


def _rank_split(exposed: Exposed, waits: IntervalSet, moves: IntervalSet) -> Split:
    """One rank's split from its waiting W and transfer T unions."""
    whole = unpacked(exposed.exposed_runs)
    in_steps = intersection(whole, unpacked(exposed.step_runs))
    transfer, waiting = _measures(whole, waits, moves)
    transfer_in, waiting_in = _measures(in_steps, waits, moves)
    return Split(
        exposed_ns=whole.measure(),
        transfer_ns=transfer,
        waiting_ns=waiting,
        exposed_in_steps_ns=in_steps.measure(),
        transfer_in_steps_ns=transfer_in,
        waiting_in_steps_ns=waiting_in,
    )


def _measures(exposed: IntervalSet, waits: IntervalSet, moves: IntervalSet) -> tuple[int, int]:
    """(|E ∩ T|, |(E ∩ W) \\ T|)."""
    transfer = intersection(exposed, moves).measure()
    waiting = difference(intersection(exposed, waits), moves).measure()
    return transfer, waiting


def pooled(parts: Sequence[Mapping[int, Split]]) -> dict[int, Split]:
    """Each rank's splits summed over windows."""
    total: dict[int, Split] = {}
    for part in parts:
        for rank, found in part.items():
            total[rank] = add(total.get(rank, Split()), found)
    return dict(sorted(total.items()))
