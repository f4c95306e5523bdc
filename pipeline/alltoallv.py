"""All-to-all-v (MoE token dispatch and combine): who sends how much to whom (pure).

An all-to-all call that recorded its split sizes (`CommOp.in_splits` / `out_splits`: rows of
dimension 0 sent to / received from each group rank) moves `row` bytes a row, where the row
size is its message size over its rows: S / max(Σ sent, Σ received) (S = max(in, out) elements
x dtype size), or one byte when S is Σ sent < Σ received (splits of bytes, as an Nsight
export's per-peer payloads give them, S being the sends). A call whose splits were cut
(Kineto keeps 30) or whose S is not a whole number of rows has unknown bytes (counted, left
out). Per matched instance (`matching.Instance`):
each member's bytes sent and received (its own slice included, as nccl-tests sizes a call),
their load imbalance max/mean over the members, and busbw by the busiest member (most bytes
sent or received, B): B / its call's duration x (n-1)/n. The instances are matched here, from
each rank's all-to-all calls alone (`calls_of`: what a JSON report's facts carry), so that
`commscope merge` finds the same ones across shards (`tally`). Per window, then pooled over
the run: each rank's sums, the rank x rank matrix on global ranks (a process group's ranks
from pg_config, or every traced rank when the group is the whole window), and per profiled
step the max/mean of the ranks' bytes in that step (a call belongs to the step its start is
in).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from commscope.model.report import (
    AllToAllCall,
    AllToAllCalls,
    AllToAllRank,
    AllToAllStep,
    AllToAllV,
)
from commscope.model.schema import CommOp, RankResult
from commscope.pipeline.matching import POINT_TO_POINT, Instance, group_of, match
from commscope.pipeline.stats import summarize
from msgspec.structs import replace

_MATRIX_RANKS: Final = 1024  # the matrix is given up to this many ranks
_UNPLACED: Final = "some calls' process group has no pg_config: their traffic is not placed"
_TOO_MANY: Final = f"more than {_MATRIX_RANKS} ranks"
ALLTOALL: Final = "AllToAll"


@dataclass
class _StepTally:
    sent: Counter[int] = field(default_factory=Counter)
    received: Counter[int] = field(default_factory=Counter)
    calls: int = 0


@dataclass
class Tally:
    """A window's all-to-all-v facts (or a run's, pooled: every field a sum)."""

    calls: int = 0
    unknown: int = 0
    unplaced: int = 0
    sent: Counter[int] = field(default_factory=Counter)
    received: Counter[int] = field(default_factory=Counter)
    rank_calls: Counter[int] = field(default_factory=Counter)
    matrix: Counter[tuple[int, int]] = field(default_factory=Counter)
    call_sent: array[float] = field(default_factory=lambda: array("d"))
    call_received: array[float] = field(default_factory=lambda: array("d"))
    busbw: array[float] = field(default_factory=lambda: array("d"))
    steps: dict[int, _StepTally] = field(default_factory=dict)


def row_bytes(op: CommOp) -> int | None:
    """Bytes a row of `op`'s split sizes holds; None when they are cut or S is unknown or
    not a whole number of rows."""
    n = op.group_size
    cut = n is not None and (len(op.in_splits) != n or len(op.out_splits) != n)
    if cut or op.message_bytes is None or len(op.in_splits) != len(op.out_splits):
        return None
    sent, received = sum(op.in_splits), sum(op.out_splits)
    if 0 < sent < received and op.message_bytes == sent:
        return 1  # splits of bytes (an Nsight export's: S is the sends)
    rows = max(sent, received)
    if rows == 0:
        return 0
    return op.message_bytes // rows if op.message_bytes % rows == 0 else None


def uneven(instance: Instance) -> bool:
    """An all-to-all instance whose members recorded split sizes."""
    return instance.collective == ALLTOALL and any(
        op.in_splits or op.out_splits for op in instance.calls.values()
    )


def imbalance(values: Iterable[int]) -> float | None:
    """max/mean of `values` (1 = balanced); None when there are none or all are 0."""
    found = list(values)
    total = sum(found)
    return max(found) * len(found) / total if total > 0 else None


def busiest(sent: Mapping[int, int], received: Mapping[int, int]) -> int | None:
    """The rank that sent or received the most bytes (ties: the lowest rank)."""
    ranks = sorted(set(sent) | set(received))
    return max(ranks, key=lambda r: (max(sent.get(r, 0), received.get(r, 0)), -r), default=None)


def calls_of(result: RankResult, pg_ranks: Mapping[str, Sequence[int]]) -> AllToAllCalls | None:
    """A rank's all-to-all calls in its window, each keyed as `matching` keys it and placed in
    its profiled step, with its groups' members from its pg_config (None: it ran none)."""
    if all(op.collective != ALLTOALL for op in result.calls):
        return None  # the common case, found without keying every call
    spans = _steps(result)
    unseq = {
        group_of(op) for op in result.calls if op.seq is None and op.collective != POINT_TO_POINT
    }
    index: Counter[str] = Counter()
    found = []
    for op in result.calls:
        if op.collective == POINT_TO_POINT:
            continue
        group = group_of(op)
        place, index[group] = index[group], index[group] + 1
        if op.collective == ALLTOALL:
            found.append(AllToAllCall(op, place, group in unseq, _step_of(spans, op.start_ns)))
    if not found:
        return None
    groups = sorted({group_of(call.op) for call in found})
    return AllToAllCalls(
        calls=found, members={g: list(pg_ranks[g]) for g in groups if g in pg_ranks}
    )


def tally(parts: Mapping[int, AllToAllCalls], ranks: Iterable[int]) -> Tally:
    """A window's tally over its ranks' all-to-all calls (`calls_of`), matched as `matching`
    matches a group's calls: by Seq, or by index where some rank's calls carry none. The
    same calls give the same tally whichever process saw them (a report, or a merge)."""
    members = _members(parts)
    unseq = {group_of(c.op) for part in parts.values() for c in part.calls
             if c.by_index or c.op.seq is None}  # fmt: skip
    keyed = {rank: [_keyed(c, unseq) for c in part.calls] for rank, part in sorted(parts.items())}
    steps = {id(op): c.step for rank, part in parts.items()
             for op, c in zip(keyed[rank], part.calls, strict=True)}  # fmt: skip
    found = Tally()
    placed_ranks = sorted(ranks)
    for instance in match(keyed, members).instances:
        if uneven(instance):
            _add(found, instance, _placed(instance, members, placed_ranks), steps)
    return found


def _members(parts: Mapping[int, AllToAllCalls]) -> dict[str, Sequence[int]]:
    """Each group's members as the lowest rank whose pg_config lists them gives them."""
    members: dict[str, Sequence[int]] = {}
    for rank in sorted(parts):
        for group, ranks in parts[rank].members.items():
            members.setdefault(group, ranks)
    return members


def _keyed(call: AllToAllCall, unseq: set[str]) -> CommOp:
    """The call with its matching key as its Seq: its index where its group is keyed so."""
    return replace(call.op, seq=call.index) if group_of(call.op) in unseq else call.op


def _placed(
    instance: Instance, members: Mapping[str, Sequence[int]], ranks: list[int]
) -> list[int]:
    """The group's global ranks in group-rank order; empty when unknown."""
    known = members.get(instance.group)
    if known:
        return sorted(known)
    return ranks if instance.group_size == len(ranks) else []


def _add(
    found: Tally,
    instance: Instance,
    placed: list[int],
    steps: Mapping[int, int | None],
) -> None:
    rows = {rank: row_bytes(op) for rank, op in instance.calls.items()}
    found.calls += 1
    if any(row is None for row in rows.values()):
        found.unknown += 1
        return
    sizes = {rank: row or 0 for rank, row in rows.items()}
    sent = {r: sum(op.in_splits) * sizes[r] for r, op in instance.calls.items()}
    received = {r: sum(op.out_splits) * sizes[r] for r, op in instance.calls.items()}
    found.sent.update(sent)
    found.received.update(received)
    found.rank_calls.update(sent.keys())
    _call_figures(found, instance, sent, received)
    _to_steps(found, instance, sent, received, steps)
    if placed:
        _to_matrix(found.matrix, instance.calls, sizes, placed)
    else:
        found.unplaced += 1


def _call_figures(
    found: Tally, instance: Instance, sent: Mapping[int, int], received: Mapping[int, int]
) -> None:
    """The call's imbalances and its busbw by the busiest member."""
    for sample, values in ((found.call_sent, sent), (found.call_received, received)):
        value = imbalance(values.values())
        if value is not None:
            sample.append(value)
    rank = busiest(sent, received)
    n = instance.group_size
    if rank is None or n is None or instance.durations[rank] <= 0:
        return
    moved = max(sent[rank], received[rank])
    found.busbw.append(moved / (instance.durations[rank] * 1e-9) * (n - 1) / n)


def _to_matrix(
    matrix: Counter[tuple[int, int]],
    calls: Mapping[int, CommOp],
    sizes: Mapping[int, int],
    placed: list[int],
) -> None:
    """Each traced sender's row; a sender without a trace from its receivers' columns."""
    for rank, op in calls.items():
        for place, rows in enumerate(op.in_splits[: len(placed)]):
            matrix[(rank, placed[place])] += rows * sizes[rank]
        for place, rows in enumerate(op.out_splits[: len(placed)]):
            if placed[place] not in calls:
                matrix[(placed[place], rank)] += rows * sizes[rank]


_Steps = tuple[list[int], list[int], list[int]]  # starts, ends, numbers (by start)


def _steps(result: RankResult) -> _Steps:
    spans = sorted((start, start + result.steps.get(step, 0), step)
                   for step, start in result.step_starts.items())  # fmt: skip
    return [s for s, _, _ in spans], [e for _, e, _ in spans], [n for _, _, n in spans]


def _step_of(steps: _Steps, start_ns: int) -> int | None:
    """The profiled step whose span holds `start_ns` (the trace's own clock)."""
    starts, ends, numbers = steps
    at = bisect_right(starts, start_ns) - 1
    return numbers[at] if at >= 0 and start_ns < ends[at] else None


def _to_steps(
    found: Tally,
    instance: Instance,
    sent: Mapping[int, int],
    received: Mapping[int, int],
    steps: Mapping[int, int | None],
) -> None:
    first = min(instance.calls)
    for rank, op in instance.calls.items():
        step = steps[id(op)]
        if step is None:
            continue
        into = found.steps.setdefault(step, _StepTally())
        into.sent[rank] += sent[rank]
        into.received[rank] += received[rank]
        into.calls += rank == first  # an instance counts in its lowest member's step


def pooled(parts: Sequence[Tally]) -> Tally:
    """The windows' tallies summed (a left fold)."""
    total = Tally()
    for part in parts:
        total.calls += part.calls
        total.unknown += part.unknown
        total.unplaced += part.unplaced
        for mine, theirs in _counters(total, part):
            mine.update(theirs)
        total.matrix.update(part.matrix)
        for sample, more in _samples(total, part):
            sample.extend(more)
        for step, facts in part.steps.items():
            into = total.steps.setdefault(step, _StepTally())
            into.sent.update(facts.sent)
            into.received.update(facts.received)
            into.calls += facts.calls
    return total


def _counters(a: Tally, b: Tally) -> list[tuple[Counter[int], Counter[int]]]:
    return [(a.sent, b.sent), (a.received, b.received), (a.rank_calls, b.rank_calls)]


def _samples(a: Tally, b: Tally) -> list[tuple[array[float], array[float]]]:
    return [(a.call_sent, b.call_sent), (a.call_received, b.call_received), (a.busbw, b.busbw)]


def section(found: Tally) -> AllToAllV | None:
    """The report's section; None when no all-to-all recorded split sizes."""
    if found.calls == 0:
        return None
    ranks, matrix, reason = _matrix(found)
    return AllToAllV(
        calls=found.calls,
        unknown_bytes=found.unknown,
        total_bytes=sum(found.sent.values()),
        sent_imbalance=imbalance(found.sent.values()),
        received_imbalance=imbalance(found.received.values()),
        busiest_rank=busiest(found.sent, found.received),
        call_sent_imbalance=summarize(found.call_sent),
        call_received_imbalance=summarize(found.call_received),
        busbw_Bps=summarize(found.busbw),
        per_rank=_per_rank(found),
        steps=[_step(step, found.steps[step]) for step in sorted(found.steps)],
        matrix_ranks=ranks,
        matrix_bytes=matrix,
        matrix_na_reason=reason,
        replay_bytes=replay_bytes(matrix, found.calls - found.unknown - found.unplaced),
    )


def _per_rank(found: Tally) -> dict[str, AllToAllRank]:
    return {
        str(rank): AllToAllRank(
            calls=found.rank_calls[rank],
            sent_bytes=found.sent[rank],
            received_bytes=found.received[rank],
        )
        for rank in sorted(set(found.sent) | set(found.received))
    }


def _step(step: int, facts: _StepTally) -> AllToAllStep:
    return AllToAllStep(
        step=step,
        calls=facts.calls,
        sent_imbalance=imbalance(facts.sent.values()),
        received_imbalance=imbalance(facts.received.values()),
        busiest_rank=busiest(facts.sent, facts.received),
    )


def _matrix(found: Tally) -> tuple[list[int], list[list[int]], str | None]:
    ranks = sorted({rank for pair in found.matrix for rank in pair})
    if len(ranks) > _MATRIX_RANKS:
        return [], [], _TOO_MANY
    rows = [[found.matrix.get((i, j), 0) for j in ranks] for i in ranks]
    return ranks, rows, _UNPLACED if found.unplaced else None


def replay_bytes(matrix: Sequence[Sequence[int]], calls: int) -> int | None:
    """nccl-tests' `-b` for the matrix's mean call: n x its largest entry (the per-peer
    count the fractions scale); None without a call or traffic."""
    largest = max((v for row in matrix for v in row), default=0)
    if calls <= 0 or largest == 0:
        return None
    return math.ceil(largest / calls) * len(matrix)
