"""Point-to-point calls as the pairing takes them: batches split, group ranks made global
across a window's ranks (pure).

A batched SendRecv kernel that sends and receives (`CommOp.members`: `batch_isend_irecv`, an
NCCL group both ways) is one call in every tally but several for the pairing: each member is
a call of the kernel's span with its own peer and size, in the batch's order (the order both
ranks post them).

NCCL names a send's or receive's peer by its rank within the communicator (Nsight Systems'
NVTX payload `Peer rank`, NCCL Inspector's `p2p_peer`), and one rank's file cannot say which
process holds that group rank. Every rank's calls on the group say its own group rank
(`CommOp.group_rank`); together they give (group, group rank) -> global rank. A group rank
that two ranks claim is ambiguous and maps to nothing (never guessed); a call whose peer
stays unknown is left out of the pairing, as before (`pipeline.p2p`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from commscope.model.schema import CommOp
from msgspec.structs import replace

_Key = tuple[str, int]  # (process group, group rank)


def resolved(calls: Mapping[int, Sequence[CommOp]]) -> dict[int, Sequence[CommOp]]:
    """The calls with each group-rank peer made global where the window says whose it is
    (a rank's list is given back as it is when nothing in it changes)."""
    expanded = {rank: _expanded(ops) for rank, ops in calls.items()}
    ranks = _members(expanded)
    return {rank: _resolved(ops, ranks) for rank, ops in expanded.items()}


def _expanded(ops: Sequence[CommOp]) -> Sequence[CommOp]:
    """Each batched call as its members (a rank's list as it is when it has none)."""
    if not any(op.members for op in ops):
        return ops
    return [part for op in ops for part in (_parts(op) if op.members else (op,))]


def _parts(op: CommOp) -> list[CommOp]:
    return [
        replace(op, members=(), send_to=m.send_to, recv_from=m.recv_from,
                group_send_to=m.group_send_to, group_recv_from=m.group_recv_from,
                message_bytes=m.message_bytes)
        for m in op.members
    ]  # fmt: skip


def _members(calls: Mapping[int, Sequence[CommOp]]) -> dict[_Key, int]:
    """(group, group rank) -> the one global rank whose calls claim it."""
    claimed: dict[_Key, set[int]] = {}
    for rank, ops in calls.items():
        for op in ops:
            if op.group_rank is not None and op.process_group is not None:
                claimed.setdefault((op.process_group, op.group_rank), set()).add(rank)
    return {key: next(iter(who)) for key, who in claimed.items() if len(who) == 1}


def _resolved(ops: Sequence[CommOp], ranks: Mapping[_Key, int]) -> Sequence[CommOp]:
    if not any(_wanting(op) for op in ops):
        return ops
    return [_global(op, ranks) if _wanting(op) else op for op in ops]


def _wanting(op: CommOp) -> bool:
    """A call whose peer is known only as a group rank."""
    unknown = op.send_to is None and op.recv_from is None
    return unknown and (op.group_send_to is not None or op.group_recv_from is not None)


def _global(op: CommOp, ranks: Mapping[_Key, int]) -> CommOp:
    group = op.process_group
    if group is None:
        return op
    if op.group_send_to is not None:
        return replace(op, send_to=ranks.get((group, op.group_send_to)))
    if op.group_recv_from is not None:
        return replace(op, recv_from=ranks.get((group, op.group_recv_from)))
    return op
