"""Collectives matched across ranks: one instance = the same collective on every member (pure).

Within a window, each rank's collectives are split by process group (`Process Group Name`;
calls without one form the group "(unnamed)"). A group whose calls all carry `Seq` is matched
by sequence number; otherwise by the running index of the group's calls on each rank (start
order). Members must agree on the collective type and, where both calls know it, on the
dtype and the message size; two all-to-all calls that both recorded their split sizes may
differ in size (uneven splits are legal), but what group rank i sends to j must be what j
receives from i wherever both recorded it (and the group's ranks are placed: pg_config, or
every member traced). A disagreement is a desync, named and never matched: the calls at that
position pair with nothing. A call with no partner although another member of its group has a
trace in the window is unmatched. SendRecv calls are pairwise, not group-wide: they are
counted, not matched.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from commscope.model.schema import CommOp, Desync, GroupMatch, Matching

_UNNAMED: Final = "(unnamed)"
MAX_DESYNCS: Final = 20
POINT_TO_POINT: Final = "SendRecv"
_UNEVEN: Final = frozenset({"AllToAll"})
_SHOWN_SPLITS: Final = 8  # split sizes a desync's description shows of each list


class Instance(msgspec.Struct, frozen=True, gc=False):
    """One collective as every member whose trace we have ran it (times: the rank's clock).
    A Struct, not a frozen dataclass: one is made per instance, ~15x faster (it holds no
    cycle, so the cyclic collector need not track it)."""

    group: str
    position: int
    collective: str
    message_bytes: int | None
    group_size: int | None
    starts: dict[int, int]
    durations: dict[int, int]
    calls: Mapping[int, CommOp] = msgspec.field(default_factory=dict)  # each member's call

    def ends(self) -> dict[int, int]:
        return {rank: start + self.durations[rank] for rank, start in self.starts.items()}


@dataclass
class Matched:
    instances: list[Instance] = field(default_factory=list)
    summary: Matching = field(default_factory=Matching)
    desynced: int = 0  # calls at the positions of desyncs (paired with nothing)


@dataclass(frozen=True)
class _Disagreement:
    """What the members' calls at one position differ in, and the ranks that depart."""

    differs: tuple[str, ...]
    ranks: tuple[int, ...]


def group_of(op: CommOp) -> str:
    return op.process_group if op.process_group is not None else _UNNAMED


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
        own: dict[str, list[CommOp]] = {}  # this rank's calls by process group (`group_of`)
        for op in ops:
            if op.collective == POINT_TO_POINT:
                result.summary.point_to_point += 1
                continue
            name = op.process_group if op.process_group is not None else _UNNAMED
            kept = own.get(name)
            if kept is None:
                kept = own[name] = []
            kept.append(op)
        for name, found in own.items():
            by_group.setdefault(name, {})[rank] = found
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
    before = len(result.instances)
    member_list = sorted(known) if known else sorted(ranks)
    with_traces = sorted(traced & set(member_list)) if known else sorted(ranks)
    stats = GroupMatch(
        members=member_list, ranks_with_traces=with_traces, key="seq" if by_seq else "index"
    )
    local = _placement(member_list, known is not None, ranks)
    for position, found in _positions(ranks, by_seq):
        if len(found) < 2:
            stats.unmatched += 1 if len(with_traces) > 1 else 0
            continue
        alike = _alike_instance(group, position, found, base_ns)
        if alike is not None:
            result.instances.append(alike)
            continue
        disagreement = disagree(found, local)
        if disagreement.differs:
            stats.desyncs += 1
            result.desynced += len(found)
            _desync(result.summary, group, (stats.key, position), found, disagreement)
            continue
        result.instances.append(instance(group, position, found, base_ns))
    stats.instances = len(result.instances) - before
    summary = result.summary
    summary.groups[group] = stats
    summary.unmatched += stats.unmatched
    summary.desync_count += stats.desyncs
    if by_seq:
        summary.by_seq += stats.instances
    else:
        summary.by_index += stats.instances


def _positions(
    ranks: Mapping[int, list[CommOp]], by_seq: bool
) -> list[tuple[int, dict[int, CommOp]]]:
    """(Seq or running index, its calls by rank in rank order: an instance's `calls` as they
    are), in position order. Keyed by the Seq or index alone while no rank repeats a Seq,
    else by (Seq, repeat) (`_keyed`)."""
    keys: dict[int, Sequence[Any]] = {rank: _keys(ops, by_seq) for rank, ops in ranks.items()}
    if any(len(set(found)) < len(found) for found in keys.values()):
        keys = {rank: _keyed(ops) for rank, ops in ranks.items()}
    positions: dict[Any, dict[int, CommOp]] = {}
    for rank in sorted(ranks):
        for position, op in zip(keys[rank], ranks[rank], strict=True):
            found = positions.get(position)
            if found is None:
                positions[position] = {rank: op}
            else:
                found[rank] = op
    return [(_seq(key), positions[key]) for key in sorted(positions)]


def _keys(ops: list[CommOp], by_seq: bool) -> list[int]:
    """Each call's Seq (None: 0), or its running index in a group matched by index."""
    if not by_seq:
        return list(range(len(ops)))
    return [op.seq if op.seq is not None else 0 for op in ops]


def _keyed(ops: list[CommOp]) -> list[tuple[int, int]]:
    """(Seq, repeat) of each call: a Seq seen twice on one rank (calls coalesced under one
    sequence number) keeps its calls apart by their order."""
    seen: dict[int, int] = {}
    keyed = []
    for op in ops:
        seq = op.seq if op.seq is not None else 0
        repeat = seen[seq] = seen.get(seq, -1) + 1
        keyed.append((seq, repeat))
    return keyed


def _seq(key: int | tuple[int, int]) -> int:
    return key if isinstance(key, int) else key[0]


def _placement(
    members: Sequence[int], known: bool, ranks: Mapping[int, Sequence[CommOp]]
) -> dict[int, int]:
    """Each member's group rank (its place in the sorted member list, as PyTorch numbers a
    group): known from pg_config, or when the traced ranks are every member (their calls'
    group size); else empty (split sizes cannot be checked across members)."""
    sizes = {op.group_size for ops in ranks.values() for op in ops}
    if known or sizes == {len(members)}:
        return {rank: index for index, rank in enumerate(members)}
    return {}


def disagree(ops: Mapping[int, CommOp], local: Mapping[int, int]) -> _Disagreement:
    """What the calls at one position disagree on (nothing: they are one instance)."""
    if _alike(ops.values()):
        return _AGREE  # the common case: the same call everywhere, no splits to cross-check
    checks = (
        ("collective", _odd({rank: op.collective for rank, op in ops.items()})),
        ("message size", _odd_sizes(ops)),
        ("dtype", _odd({rank: op.dtype for rank, op in ops.items()})),
        ("split sizes", _split_conflicts(ops, local)),
    )
    odd = [(what, ranks) for what, ranks in checks if ranks]
    departing = tuple(sorted(set().union(*(ranks for _, ranks in odd))))
    return _Disagreement(differs=tuple(what for what, _ in odd), ranks=departing)


_AGREE: Final = _Disagreement(differs=(), ranks=())


def _alike(ops: Iterable[CommOp]) -> bool:
    """Every call the same type, size and dtype, none with split sizes."""
    first, *rest = ops
    if first.in_splits or first.out_splits:
        return False
    kind, size, dtype = first.collective, first.message_bytes, first.dtype
    for op in rest:
        if op.collective != kind or op.message_bytes != size or op.dtype != dtype:
            return False
        if op.in_splits or op.out_splits:
            return False
    return True


def _common(values: Mapping[int, Hashable | None]) -> Hashable | None:
    """The most common known value (a tie: the lowest rank's); None if none is known."""
    counts = Counter(values[rank] for rank in sorted(values) if values[rank] is not None)
    return counts.most_common(1)[0][0] if counts else None


def _odd(values: Mapping[int, Hashable | None]) -> set[int]:
    """The ranks whose known value is not the one most of them hold; every rank with a known
    value when they differ and no value has a majority."""
    known = {rank: value for rank, value in values.items() if value is not None}
    common = _common(known)
    odd = {rank for rank, value in known.items() if value != common}
    return set(known) if odd and 2 * len(odd) >= len(known) else odd


def _uneven(op: CommOp) -> bool:
    """An all-to-all that recorded its split sizes: its size may differ from its peers'."""
    return op.collective in _UNEVEN and bool(op.in_splits or op.out_splits)


def _odd_sizes(ops: Mapping[int, CommOp]) -> set[int]:
    """Sizes are compared between two calls unless both recorded split sizes."""
    even = {rank: op.message_bytes for rank, op in ops.items() if not _uneven(op)}
    common = _common(even)
    odd = _odd(even)
    if common is not None:
        odd.update(rank for rank, op in ops.items()
                   if _uneven(op) and op.message_bytes not in (None, common))  # fmt: skip
    return odd


def _split_conflicts(ops: Mapping[int, CommOp], local: Mapping[int, int]) -> set[int]:
    """The ranks i, j of every all-to-all pair where what i records sending to j
    (`in_splits[j]`) is not what j records receiving from i (`out_splits[i]`)."""
    if any(op.collective not in _UNEVEN for op in ops.values()):
        return set()
    placed = {local[rank]: rank for rank in ops if rank in local}
    found: set[int] = set()
    for sender, op in ops.items():
        if sender not in local:
            continue
        at = local[sender]
        for place, sent in enumerate(op.in_splits):
            receiver = placed.get(place)
            if receiver is None:
                continue
            received = ops[receiver].out_splits
            if at < len(received) and received[at] != sent:
                found.update((sender, receiver))
    return found


def _desync(
    summary: Matching,
    group: str,
    where: tuple[str, int],
    ops: Mapping[int, CommOp],
    disagreement: _Disagreement,
) -> None:
    if len(summary.desyncs) >= MAX_DESYNCS:
        return
    key, position = where
    described = {str(rank): describe(op) for rank, op in sorted(ops.items())}
    found = Desync(process_group=group, key=key, position=position, calls=described,
                   differs=list(disagreement.differs), ranks=list(disagreement.ranks))  # fmt: skip
    summary.desyncs.append(found)


def describe(op: CommOp) -> str:
    """`AllToAll 4096 B Float splits in [2, 2] out [1, 3]` (what it knows of these)."""
    size = f"{op.message_bytes} B" if op.message_bytes is not None else "size unknown"
    parts = [op.collective, size, *([op.dtype] if op.dtype is not None else [])]
    if op.in_splits or op.out_splits:
        parts += ["splits in", _listed(op.in_splits), "out", _listed(op.out_splits)]
    return " ".join(parts)


def _listed(splits: Sequence[int]) -> str:
    shown = ", ".join(map(str, splits[:_SHOWN_SPLITS]))
    return f"[{shown}, ...]" if len(splits) > _SHOWN_SPLITS else f"[{shown}]"


def _alike_instance(
    group: str, position: int, ops: dict[int, CommOp], base_ns: Mapping[int, int]
) -> Instance | None:
    """`instance` of calls that are `_alike` (the common case, checked in the same pass),
    else None: every member's size is the first's, so the largest known is it."""
    first = next(iter(ops.values()))
    kind, size, dtype = first.collective, first.message_bytes, first.dtype
    starts, durations, largest, get = {}, {}, None, base_ns.get
    for rank, op in ops.items():
        if op.collective != kind or op.message_bytes != size or op.dtype != dtype:
            return None
        if op.in_splits or op.out_splits:
            return None
        starts[rank] = op.start_ns + get(rank, 0)
        durations[rank] = op.dur_ns
        n = op.group_size
        if n is not None and (largest is None or n > largest):
            largest = n
    return Instance(group, position, kind, size, largest, starts, durations, ops)


def instance(
    group: str,
    position: int,
    ops: dict[int, CommOp],
    base_ns: Mapping[int, int],
    group_size: int | None = None,
) -> Instance:
    """The instance of a position's calls, members in the order of `ops` (a collective's:
    rank order, `_positions`): each member's start on its clock plus its base, the largest
    known size, and the largest known group size unless `group_size` is given (a P2P
    pair's: 2)."""
    starts, durations = {}, {}
    size = largest = None
    for rank, op in ops.items():
        starts[rank] = op.start_ns + base_ns.get(rank, 0)
        durations[rank] = op.dur_ns
        if op.message_bytes is not None and (size is None or op.message_bytes > size):
            size = op.message_bytes
        if op.group_size is not None and (largest is None or op.group_size > largest):
            largest = op.group_size
    kind = next(iter(ops.values())).collective
    n = largest if group_size is None else group_size
    return Instance(group, position, kind, size, n, starts, durations, ops)
