"""The sends and receives of a coalesced NCCL batch (`batch_isend_irecv`) on a Kineto trace
(pure).

With NCCL, `torch.distributed.batch_isend_irecv` (and everything torch.distributed.pipelining
sends: its `_batch_p2p`) runs its ops inside `_coalescing_manager`: each `isend` / `irecv`
records its own `record_param_comms` ("send"/"recv", its peer, its size) on the training
thread but launches nothing; `ProcessGroupNCCL::endCoalescing` then opens the `nccl:coalesced`
work (its profiling title) and ends the NCCL group, which launches one SendRecv kernel for the
whole batch. That kernel's launch lies inside `nccl:coalesced` (or, in releases that end the
CPU-side `nccl:coalesced` at once, pytorch/pytorch#160680, inside no comm call) and inside
none of its ops' records: its members are the P2P records on the launching thread since the
previous batch.

`Batches` keeps those records per thread (bounded) and gives a batch's members once. A batch
whose members all go one way to one peer is that call (its peer and size); one that sends and
receives, or talks to several peers, is one SendRecv call with no single peer: its members
(`CommOp.members`, each paired alone by the report). A plain send or receive (its record
encloses its own kernel's launch) is no batch's (`launched`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from commscope.collector.p2ppeers import Peers, group_global, peers, way_of
from commscope.model.schema import MAX_MEMBERS, P2PMember

COALESCED = "nccl:coalesced"  # ProcessGroupNCCL::endCoalescing's profiling title
_PER_THREAD = 4096  # records held per thread; past it the oldest are dropped (`dropped`)


class Record(Protocol):
    """What a batch reads of a record_param_comms (`normalize.CommCall`)."""

    @property
    def start_ns(self) -> int: ...
    @property
    def collective_name(self) -> str | None: ...
    @property
    def nelems_bytes(self) -> int | None: ...
    @property
    def pg(self) -> str | None: ...
    @property
    def peer(self) -> int | None: ...
    @property
    def group_peer(self) -> int | None: ...


class Batches:
    """P2P records per thread, in start order, each given to at most one batch."""

    def __init__(self) -> None:
        self._threads: dict[int, list[Record]] = {}
        self._since: dict[int, int] = {}  # tid -> start of the last batch given
        self.dropped = 0

    def add(self, tid: int, record: Record) -> None:
        if way_of(record.collective_name) is None:
            return
        held = self._threads.setdefault(tid, [])
        held.append(record)
        if len(held) > _PER_THREAD:
            del held[0]
            self.dropped += 1

    def launched(self, tid: int, records: Sequence[Record]) -> None:
        """`records` enclosed their own kernel's launch (a plain send or receive): no batch's."""
        held = self._threads.get(tid)
        if not held:
            return
        starts = {r.start_ns for r in records if way_of(r.collective_name) is not None}
        if starts:  # else (a collective's kernel, say) nothing to take back
            self._threads[tid] = [r for r in held if r.start_ns not in starts]

    def members(self, tid: int, batch_ns: int) -> list[Record]:
        """The records on `tid` that start after the last batch given and before `batch_ns`
        (the batch's `nccl:coalesced` start); none once a later batch was given."""
        since = self._since.get(tid)
        if since is not None and batch_ns <= since:
            return []
        held = self._threads.get(tid, [])
        found = [
            r for r in held if r.start_ns < batch_ns and (since is None or r.start_ns >= since)
        ]
        self._threads[tid] = [r for r in held if r.start_ns >= batch_ns]
        self._since[tid] = batch_ns
        return found


def batch_peers(members: Sequence[Record], groups: Mapping[str, Sequence[int]]) -> Peers:
    """The peer fields of a batch: those of its one direction and one peer, else none."""
    ways = {way_of(r.collective_name) for r in members}
    found = {r.peer if r.peer is not None else group_global(r.group_peer, r.pg, groups)
             for r in members}  # fmt: skip
    if len(ways) != 1 or len(found) != 1:
        return Peers()
    return peers(ways.pop(), found.pop())


def batch_bytes(members: Sequence[Record]) -> int | None:
    """S of a batch as of an NCCL group (`collector.nsys`): the sum of its sends, of its
    receives when it sends nothing; None when one of them has no size."""
    sends = [r for r in members if way_of(r.collective_name) == "send"]
    sizes = [r.nelems_bytes for r in sends or members]
    return None if not sizes or None in sizes else sum(s for s in sizes if s is not None)


def batch_members(
    members: Sequence[Record], groups: Mapping[str, Sequence[int]]
) -> tuple[P2PMember, ...]:
    """A batch's sends and receives, in its order (none past MAX_MEMBERS: unpaired)."""
    if len(members) > MAX_MEMBERS:
        return ()
    return tuple(_member(r, groups) for r in members)


def _member(record: Record, groups: Mapping[str, Sequence[int]]) -> P2PMember:
    peer = record.peer
    if peer is None:
        peer = group_global(record.group_peer, record.pg, groups)
    found = peers(way_of(record.collective_name), peer, record.group_peer if peer is None else None)
    size = record.nelems_bytes
    return P2PMember(*found[:2], *found[3:], size)
