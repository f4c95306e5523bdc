"""What each rank's profile saw last (pure): per process group its last collective, and its last
profiled step with that step's compute and exposed communication.

`of` finds it in one window's calls and steps (the offline reader's and the live aggregator's
`Accumulator` alike: `RankResult.tail`), `merge` keeps the latest over a rank's windows, and
`report_tails` gives the report's rows (`Report.profile_tails`): each call's end aligned (the
rank's clock, time base + trace time, less its offset in the run's clock section) and the
step against the other ranks' median of the same step. Flight Recorder dumps join these rows
(`pipeline.flightjoin`).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence

from commscope.model.schema import (
    Clocks,
    CommOp,
    LastCall,
    ProfiledCall,
    ProfileTail,
    RankResult,
    RankTail,
)
from commscope.model.wire import MAX_TAIL_CALLS
from commscope.pipeline.intervals import IntervalSet, intersection_measure
from msgspec.structs import replace

StepSpans = Mapping[int, tuple[int, int]]  # step number -> (start ns, duration ns)


def of(
    calls: Sequence[CommOp], steps: StepSpans, compute: IntervalSet, exposed: IntervalSet
) -> ProfileTail | None:
    """The window's tail: per group the last of `calls` (in start order, ties broken by the
    other fields: `accumulate`'s order); `compute` P and `exposed` C \\ P (None: the window
    has neither a collective nor a step)."""
    if not calls and not steps:
        return None
    last: dict[str | None, CommOp] = {}
    for call in calls:
        last[call.process_group] = call
    found = [_last_call(call, steps) for call in last.values()]
    if not steps:
        return ProfileTail(calls=_bounded(found))
    top = max(steps)
    start, dur = steps[top]
    span = IntervalSet([(start, start + dur)])
    return ProfileTail(
        calls=_bounded(found),
        step=top,
        step_ns=dur,
        compute_ns=intersection_measure(compute, span),
        exposed_ns=intersection_measure(exposed, span),
    )


def _last_call(call: CommOp, steps: StepSpans) -> LastCall:
    return LastCall(
        group=call.process_group,
        seq=call.seq,
        collective=call.collective,
        end_ns=call.start_ns + call.dur_ns,
        step=_step_of(call.start_ns, steps),
        message_bytes=call.message_bytes,
        dtype=call.dtype,
    )


def _step_of(time_ns: int, steps: StepSpans) -> int | None:
    """The step whose span holds `time_ns` (the latest of those that do)."""
    holding = [n for n, (start, dur) in steps.items() if start <= time_ns < start + dur]
    return max(holding, default=None)


def _bounded(calls: Iterable[LastCall]) -> list[LastCall]:
    """The latest-ending `MAX_TAIL_CALLS`, in group order (calls naming no group last)."""
    kept = sorted(calls, key=_end_order)[-MAX_TAIL_CALLS:]
    return sorted(kept, key=lambda c: (c.group is None, c.group or ""))


def _end_order(call: LastCall) -> tuple[int, int, str, int, int, str]:
    """End order, ties broken by the other fields: the same calls sort the same way."""
    seq, step, size = (-1 if n is None else n for n in (call.seq, call.step, call.message_bytes))
    return (call.end_ns, seq, call.collective, step, size, call.dtype or "")


def merge(tails: Iterable[ProfileTail | None]) -> ProfileTail | None:
    """A rank's windows' tails in one: per group the latest-ending call, the highest step's
    figures (None: no window had a tail)."""
    found = [t for t in tails if t is not None]
    if not found:
        return None
    last: dict[str | None, LastCall] = {}
    for call in sorted((c for t in found for c in t.calls), key=_end_order):
        last[call.group] = call
    stepped = [t for t in found if t.step is not None]
    top = max(stepped, key=lambda t: t.step or 0, default=ProfileTail())
    return ProfileTail(
        calls=_bounded(last.values()),
        step=top.step,
        step_ns=top.step_ns,
        compute_ns=top.compute_ns,
        exposed_ns=top.exposed_ns,
    )


Placed = tuple[int, RankResult, int]  # (rank, a window's result, its trace's time base ns)


def report_tails(placed: Iterable[Placed], clocks: Clocks) -> list[RankTail]:
    """The report's rows, one per rank whose profile has a tail, in rank order."""
    windows: dict[int, list[Placed]] = {}
    for item in placed:
        windows.setdefault(item[0], []).append(item)
    durations = {rank: _steps(items) for rank, items in windows.items()}
    rows = [_row(rank, items, clocks, durations) for rank, items in sorted(windows.items())]
    return [row for row in rows if row is not None]


def _steps(items: Sequence[Placed]) -> dict[int, int]:
    found: dict[int, int] = {}
    for _, result, _ in items:
        found.update(result.steps)
    return found


def _row(
    rank: int, items: Sequence[Placed], clocks: Clocks, durations: Mapping[int, Mapping[int, int]]
) -> RankTail | None:
    tail = merge(_based(result.tail, base) for _, result, base in items)
    if tail is None:
        return None
    shift = _offset_ns(clocks, rank)
    row = RankTail(rank=rank, calls=[_call(c, shift) for c in tail.calls])
    if tail.step is None:
        return row
    step = tail.step
    others = [d[step] for r, d in durations.items() if r != rank and step in d]
    return replace(
        row,
        step=step,
        step_s=tail.step_ns / 1e9,
        compute_s=tail.compute_ns / 1e9,
        exposed_comm_s=tail.exposed_ns / 1e9,
        others_median_s=statistics.median(others) / 1e9 if others else None,
        others=len(others),
    )


def _based(tail: ProfileTail | None, base_ns: int) -> ProfileTail | None:
    """The tail with its calls' ends on the rank's clock (its window's time base added)."""
    if tail is None or not base_ns:
        return tail
    return replace(tail, calls=[replace(c, end_ns=c.end_ns + base_ns) for c in tail.calls])


def _offset_ns(clocks: Clocks, rank: int) -> int | None:
    """The rank's clock offset (ns); 0 for the reference rank; None: unknown."""
    if clocks.reference_rank == rank:
        return 0
    found = clocks.per_rank.get(str(rank))
    return None if found is None else round(found.offset_s * 1e9)


def _call(call: LastCall, offset_ns: int | None) -> ProfiledCall:
    return ProfiledCall(
        group=call.group,
        seq=call.seq,
        collective=call.collective,
        end_ns=None if offset_ns is None else call.end_ns - offset_ns,
        step=call.step,
        message_bytes=call.message_bytes,
        dtype=call.dtype,
    )
