"""The peer of a point-to-point call on a CPU (gloo) trace (pure).

PyTorch's gloo backend records a send or receive as a `gloo:send` / `gloo:recv` annotation
that starts inside the `c10d::send` / `c10d::recv_` operator of the training thread and ends
when the transfer completes. The annotation carries no peer; the operator does, as its third
argument (`Concrete Inputs[2]`: the destination or source rank within the call's process
group; -1 = any source). `PeerCalls` keeps those operators per thread (bounded) and gives the
peer of the annotation that starts inside one, innermost first.

`HeldSpans` resolves each annotation as soon as an operator holding its start is known (when
the annotation arrives, or when such an operator arrives later), with the innermost operator
known then (PyTorch nests no c10d send/recv operator in another, so that is the innermost of
the file). An annotation is held only while it waits for its operator or, before the file's
process groups are final, for them; at most `_HELD` at once: past it the one held longest is
resolved now with what is known (counted in `early`, the normalizer's
`comm_kernel_unresolved`).

NCCL's `record_param_comms` (ProcessGroupNCCL's send/recv: `Collective name` "send"/"recv")
names the peer itself: `Dst Rank` / `Src Rank`, global ranks (torch/csrc/profiler/util.cpp
`saveNcclMeta`: `groupRanks[rank]`, written only when the group lists its ranks). Without
them (older releases, or a group that lists none) its `Rank` arg, else its fourth concrete
input (`RECORD_PARAM_COMMS_DATA`'s inputs: tensors, seq, group name, rank, ...), is the
peer's rank within the group (`record_group_peer`); made global through the record's
`Process Group Ranks`, else its `Global rank start` + `stride` x rank (`record_global`), else
the trace's pg_config (`group_global`); never guessed. Sources that name only group ranks
(Nsight Systems, NCCL Inspector) carry them as `Peers.group_*`, made global across ranks by
`pipeline.p2pranks`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

_SEND_CALLS: Final = frozenset({"c10d::send", "c10d::isend"})
_RECV_CALLS: Final = frozenset({"c10d::recv_", "c10d::recv", "c10d::irecv"})
P2P_CALLS: Final = _SEND_CALLS | _RECV_CALLS
GLOO_P2P: Final = {"gloo:send": "send", "gloo:recv": "recv"}
_WAYS: Final = {"send": "send", "isend": "send", "recv": "recv", "irecv": "recv"}
_MEMORY: Final = 1 << 20  # operators kept per file; past it, later ones are not kept (counted)
_HELD: Final = 4096  # annotations held at once per file (`HeldSpans`)


def concrete_peer(args: Mapping[str, Any]) -> int | None:
    """The group rank a c10d send/recv operator names (`Concrete Inputs[2]`), else None."""
    return _digits(args.get("Concrete Inputs"), 2)


class PeerCalls:
    """c10d send/recv operators per thread: (start ns, end ns, peer), in start order."""

    def __init__(self) -> None:
        self._threads: dict[int, list[tuple[int, int, int | None]]] = {}
        self.held = 0
        self.missed = 0  # operators not kept (MEMORY)

    def add(self, tid: int, start_ns: int, end_ns: int, peer: int | None) -> None:
        if self.held >= _MEMORY:
            self.missed += 1
            return
        calls = self._threads.setdefault(tid, [])
        if calls and _sortable((start_ns, end_ns, peer)) < _sortable(calls[-1]):
            insort(calls, (start_ns, end_ns, peer), key=_sortable)
        else:
            calls.append((start_ns, end_ns, peer))
        self.held += 1

    def peer(self, tid: int, at_ns: int) -> int | None:
        """The peer of the innermost operator on `tid` that holds `at_ns` (None: none does,
        or it names none)."""
        calls = self._threads.get(tid, [])
        for start, end, peer in reversed(calls[: bisect_right(calls, at_ns, key=_start)]):
            if start <= at_ns <= end:
                return peer
        return None


def _sortable(call: tuple[int, int, int | None]) -> tuple[int, int, int]:
    return call[0], call[1], -1 if call[2] is None else call[2]


def _start(call: tuple[int, int, int | None]) -> int:
    return call[0]


class HeldSpans:
    """gloo send/recv annotations waiting for their operator (see the module docstring):
    `span` and `call` give what they resolve, as (annotation, the operator's group-rank peer)."""

    def __init__(self, memory: int = _HELD) -> None:
        self.calls = PeerCalls()
        self.early = 0  # annotations resolved before their operator or the groups were known
        self._memory = memory
        self._held: dict[
            int, tuple[int, Any, int | None]
        ] = {}  # seq -> (tid, span, peer), oldest first
        self._waiting: dict[int, list[tuple[int, int]]] = {}  # tid -> (start ns, seq) sorted
        self._seq = 0

    @property
    def held(self) -> int:
        return len(self._held)

    def span(self, tid: int, facts: Any, settled: bool) -> list[tuple[Any, int | None]]:
        """`facts` (a gloo:send/recv span on `tid`) now if its peer is known and `settled`
        (the file's process groups are final), else held; and what falls out of memory."""
        peer = self.calls.peer(tid, facts.start_ns) if facts.peer is None else None
        if settled and (facts.peer is not None or peer is not None):
            return [(facts, peer)]
        self._seq += 1
        self._held[self._seq] = (tid, facts, peer)
        if facts.peer is None and peer is None:
            insort(self._waiting.setdefault(tid, []), (facts.start_ns, self._seq))
        return self._overflow()

    def call(
        self, tid: int, start_ns: int, end_ns: int, peer: int | None, settled: bool
    ) -> list[tuple[Any, int | None]]:
        """Keep a c10d send/recv operator; the held spans on `tid` it holds, resolved."""
        self.calls.add(tid, start_ns, end_ns, peer)
        waiting = self._waiting.get(tid)
        if not waiting:
            return []
        low = bisect_left(waiting, (start_ns, 0))
        high = bisect_right(waiting, (end_ns, self._seq + 1))
        found = [seq for _, seq in waiting[low:high]]
        del waiting[low:high]
        for seq in found:
            held_tid, facts, _ = self._held[seq]
            self._held[seq] = (held_tid, facts, self.calls.peer(tid, facts.start_ns))
        return [self._pop(seq) for seq in found] if settled else []

    def _pop(self, seq: int) -> tuple[Any, int | None]:
        _, facts, peer = self._held.pop(seq)
        return facts, peer

    def _overflow(self) -> list[tuple[Any, int | None]]:
        if len(self._held) <= self._memory:
            return []
        seq = next(iter(self._held))
        tid, facts, _ = self._held[seq]
        waiting = self._waiting.get(tid, [])
        at = bisect_left(waiting, (facts.start_ns, seq))
        if at < len(waiting) and waiting[at][1] == seq:
            del waiting[at]
        self.early += 1
        return [self._pop(seq)]

    def finish(self) -> list[tuple[Any, int | None]]:
        """Every span still held (the file has ended)."""
        found = [self._pop(seq) for seq in list(self._held)]
        self._waiting.clear()
        return found


def global_rank(peer: int | None, groups: Mapping[str, Sequence[int]]) -> int | None:
    """A group rank as a global rank: through the trace's only process group (pg_config),
    as it is when the trace lists none (the default group); else unknown (never guessed)."""
    if peer is None:
        return None
    if not groups:
        return peer
    if len(groups) == 1:
        ranks = next(iter(groups.values()))
        return ranks[peer] if peer < len(ranks) else None
    return None


class Peers(NamedTuple):
    """A SendRecv call's peer fields, in `CommOp`'s order (global ranks, then group ranks)."""

    send_to: int | None = None
    recv_from: int | None = None
    group_rank: int | None = None
    group_send_to: int | None = None
    group_recv_from: int | None = None


def way_of(name: str | None) -> str | None:
    """ "send" or "recv" for a P2P call's `Collective name` (send, isend, recv, irecv, in any
    case), else None."""
    return _WAYS.get(name.lower()) if name is not None else None


def peers(
    way: str | None, peer: int | None, group_peer: int | None = None, group_rank: int | None = None
) -> Peers:
    """The peer fields of a call going `way` ("send", "recv"; else none): the global peer and,
    where the source names them, this rank's and the peer's ranks within the group."""
    own = group_rank if group_peer is not None else None
    if way == "send":
        return Peers(peer, None, own, group_peer, None)
    if way == "recv":
        return Peers(None, peer, own, None, group_peer)
    return Peers()


def record_group_peer(args: Mapping[str, Any], limit: int) -> int | None:
    """The group rank of a send's or receive's peer in a record_param_comms' args: its `Rank`
    arg, else its fourth concrete input; None for other calls or a value out of [0, limit)."""
    if str(args.get("Collective name", "")).lower() not in {"send", "recv"}:
        return None
    given = args.get("Rank")
    if type(given) is not int:
        given = _digits(args.get("Concrete Inputs"), 3)
    return given if given is not None and 0 <= given < limit else None


def record_global(peer: int | None, args: Mapping[str, Any], limit: int) -> int | None:
    """A group rank as a global rank through the record's own group description: its
    `Process Group Ranks` list, else `Global rank start` + `Global rank stride` x rank."""
    if peer is None:
        return None
    ranks = _rank_list(args.get("Process Group Ranks"))
    if ranks:
        return ranks[peer] if peer < len(ranks) and ranks[peer] < limit else None
    start, stride = args.get("Global rank start"), args.get("Global rank stride")
    if type(start) is int and type(stride) is int and start >= 0 and stride > 0:
        found = start + stride * peer
        return found if found < limit else None
    return None


def group_global(
    peer: int | None, group: str | None, groups: Mapping[str, Sequence[int]]
) -> int | None:
    """A group rank as a global rank through pg_config: the call's own group's ranks when the
    trace lists them, else as `global_rank` says."""
    if peer is not None and group is not None and group in groups:
        ranks = groups[group]
        return ranks[peer] if peer < len(ranks) else None
    return global_rank(peer, groups)


def _digits(values: object, index: int) -> int | None:
    if not isinstance(values, list) or len(values) <= index or not isinstance(values[index], str):
        return None
    text = values[index]
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 7 else None


def _rank_list(text: object) -> list[int]:
    """`Process Group Ranks` as recorded ("[0, 1, 2]"), else [] (bounded: 64 KiB of text)."""
    if not isinstance(text, str) or len(text) > 1 << 16:
        return []
    found = [item.strip() for item in text.strip().strip("[]").split(",")]
    ok = all(x.isascii() and x.isdigit() and len(x) <= 7 for x in found)
    return [int(x) for x in found] if ok else []
