"""Collectives matched across ranks: one instance = the same collective on every member (pure).

Within a window, each rank's collectives are split by process group (`Process Group Name`;
calls without one form the group "(unnamed)"). A group whose calls all carry `Seq` is matched
by sequence number; otherwise by the running index of the group's calls on each rank (start
order). Members must agree on the collective type, and on the message size except for
AllToAll (uneven splits are legal): a disagreement is a desync, reported and never matched.
A call with no partner although another member of its group has a trace in the window is
unmatched. SendRecv calls are pairwise, not group-wide: they are counted, not matched.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from commscope.collector.schema import CommOp, Desync, GroupMatch, Matching

UNNAMED: Final = "(unnamed)"
MAX_DESYNCS: Final = 20
_POINT_TO_POINT: Final = "SendRecv"
_UNEVEN: Final = frozenset({"AllToAll"})


@dataclass(frozen=True)
class Instance:
    """One collective as every member whose trace we have ran it (times: the rank's clock)."""

    group: str
    position: int
    collective: str
    message_bytes: int | None
    group_size: int | None
    starts: dict[int, int]
    durations: dict[int, int]

    def ends(self) -> dict[int, int]:
        return {rank: start + self.durations[rank] for rank, start in self.starts.items()}


@dataclass
class Matched:
    instances: list[Instance] = field(default_factory=list)
    summary: Matching = field(default_factory=Matching)


def group_of(op: CommOp) -> str:
    return op.process_group if op.process_group is not None else UNNAMED


def group_order(name: str) -> tuple[bool, int, str]:
    """Numeric process group names in numeric order, then the others."""
    return (not name.isdigit(), int(name) if name.isdigit() else 0, name)


def match(
    calls: Mapping[int, Sequence[CommOp]],
    members: Mapping[str, Sequence[int]] | None = None,
    base_ns: Mapping[int, int] | None = None,
) -> Matched:
    """Instances over the ranks' calls. `members`: known group members (pg_config);
    `base_ns`: each rank's trace base time, added to its timestamps."""
    by_group: dict[str, dict[int, list[CommOp]]] = {}
    result = Matched()
    for rank, ops in calls.items():
        for op in ops:
            if op.collective == _POINT_TO_POINT:
                result.summary.point_to_point += 1
                continue
            by_group.setdefault(group_of(op), {}).setdefault(rank, []).append(op)
    for group in sorted(by_group, key=group_order):
        known = (members or {}).get(group)
        _match_group(
            result,
            group,
            ranks=by_group[group],
            known=known,
            traced=set(calls),
            base_ns=base_ns or {},
        )
    result.summary.instances = len(result.instances)
    return result


def _match_group(
    result: Matched,
    group: str,
    *,
    ranks: dict[int, list[CommOp]],
    known: Sequence[int] | None,
    traced: set[int],
    base_ns: Mapping[int, int],
) -> None:
    by_seq = all(op.seq is not None for ops in ranks.values() for op in ops)
    member_list = sorted(known) if known else sorted(ranks)
    with_traces = sorted(traced & set(member_list)) if known else sorted(ranks)
    stats = GroupMatch(
        members=member_list, ranks_with_traces=with_traces, key="seq" if by_seq else "index"
    )
    positions: dict[tuple[int, int], dict[int, CommOp]] = {}
    for rank, own in ranks.items():
        for position, op in _keyed(own, by_seq):
            positions.setdefault(position, {})[rank] = op
    for position in sorted(positions):
        found = positions[position]
        if len(found) < 2:
            stats.unmatched += 1 if len(with_traces) > 1 else 0
            continue
        if not _agree(list(found.values())):
            stats.desyncs += 1
            _desync(result.summary, group, stats.key, position[0], found)
            continue
        stats.instances += 1
        result.instances.append(_instance(group, position[0], found, base_ns))
    summary = result.summary
    summary.groups[group] = stats
    summary.unmatched += stats.unmatched
    summary.desync_count += stats.desyncs
    if by_seq:
        summary.by_seq += stats.instances
    else:
        summary.by_index += stats.instances


def _keyed(ops: list[CommOp], by_seq: bool) -> list[tuple[tuple[int, int], CommOp]]:
    """((Seq or running index, repeat), call). A Seq seen twice on one rank (calls coalesced
    under one sequence number) keeps its calls apart by their order."""
    if not by_seq:
        return [((index, 0), op) for index, op in enumerate(ops)]
    seen: dict[int, int] = {}
    keyed = []
    for op in ops:
        seq = op.seq if op.seq is not None else 0
        repeat = seen[seq] = seen.get(seq, -1) + 1
        keyed.append(((seq, repeat), op))
    return keyed


def _agree(ops: list[CommOp]) -> bool:
    kinds = {op.collective for op in ops}
    if len(kinds) > 1:
        return False
    if kinds <= _UNEVEN:
        return True
    sizes = {op.message_bytes for op in ops if op.message_bytes is not None}
    return len(sizes) <= 1


def _desync(
    summary: Matching, group: str, key: str, position: int, ops: Mapping[int, CommOp]
) -> None:
    if len(summary.desyncs) >= MAX_DESYNCS:
        return
    described = {str(rank): describe(op) for rank, op in sorted(ops.items())}
    summary.desyncs.append(Desync(process_group=group, key=key, position=position, calls=described))


def describe(op: CommOp) -> str:
    size = f"{op.message_bytes} B" if op.message_bytes is not None else "size unknown"
    return f"{op.collective} {size}"


def _instance(
    group: str, position: int, ops: Mapping[int, CommOp], base_ns: Mapping[int, int]
) -> Instance:
    sizes = [op.message_bytes for op in ops.values() if op.message_bytes is not None]
    groups = [op.group_size for op in ops.values() if op.group_size is not None]
    first = next(iter(ops.values()))
    return Instance(
        group=group,
        position=position,
        collective=first.collective,
        message_bytes=max(sizes) if sizes else None,
        group_size=max(groups) if groups else None,
        starts={rank: op.start_ns + base_ns.get(rank, 0) for rank, op in sorted(ops.items())},
        durations={rank: op.dur_ns for rank, op in sorted(ops.items())},
    )
