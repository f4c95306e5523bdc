"""The peer of a point-to-point call on a CPU (gloo) trace (pure).

PyTorch's gloo backend records a send or receive as a `gloo:send` / `gloo:recv` annotation
that starts inside the `c10d::send` / `c10d::recv_` operator of the training thread and ends
when the transfer completes. The annotation carries no peer; the operator does, as its third
argument (`Concrete Inputs[2]`: the destination or source rank within the call's process
group; -1 = any source). `PeerCalls` keeps those operators per thread (bounded) and gives the
peer of the annotation that starts inside one, innermost first. NCCL's `record_param_comms`
names the peer itself (`Dst Rank`, `Src Rank`: global ranks) and needs none of this.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from typing import Any, Final

_SEND_CALLS: Final = frozenset({"c10d::send", "c10d::isend"})
_RECV_CALLS: Final = frozenset({"c10d::recv_", "c10d::recv", "c10d::irecv"})
P2P_CALLS: Final = _SEND_CALLS | _RECV_CALLS
GLOO_P2P: Final = {"gloo:send": "send", "gloo:recv": "recv"}
_MEMORY: Final = 1 << 20  # operators kept per file; past it, later ones are not kept (counted)


def concrete_peer(args: Mapping[str, Any]) -> int | None:
    """The group rank a c10d send/recv operator names (`Concrete Inputs[2]`), else None."""
    given = args.get("Concrete Inputs")
    if not isinstance(given, list) or len(given) < 3 or not isinstance(given[2], str):
        return None
    text = given[2]
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 7 else None


class PeerCalls:
    """c10d send/recv operators per thread: (start ns, end ns, peer), in the order added."""

    def __init__(self) -> None:
        self._threads: dict[int, list[tuple[int, int, int | None]]] = {}
        self.held = 0
        self.missed = 0  # operators not kept (MEMORY)
        self._sorted: set[int] = set()  # threads whose list is in order

    def add(self, tid: int, start_ns: int, end_ns: int, peer: int | None) -> None:
        if self.held >= _MEMORY:
            self.missed += 1
            return
        self._threads.setdefault(tid, []).append((start_ns, end_ns, peer))
        self._sorted.discard(tid)
        self.held += 1

    def peer(self, tid: int, at_ns: int) -> int | None:
        """The peer of the innermost operator on `tid` that holds `at_ns` (None: none does,
        or it names none)."""
        calls = self._threads.get(tid, [])
        if tid not in self._sorted:
            calls.sort()
            self._sorted.add(tid)
        for start, end, peer in reversed(calls[: bisect_right(calls, (at_ns, 2**63, 2**63))]):
            if start <= at_ns <= end:
                return peer
        return None


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
