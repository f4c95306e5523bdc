"""Point-to-point (SendRecv) calls paired across ranks (pure).

A send from rank i to rank j (`CommOp.send_to` = j) pairs with a receive on j from i
(`recv_from` = i) within one process group: the k-th such send on i, in start order, with the
k-th such receive on j (the order both ranks post them: PyTorch's P2P sequence numbers are
per group and direction-blind, so the running index per (group, sender, receiver) is the
key). A pair is an `Instance` of two members, so the contract's waiting and transfer split
(`waiting`) applies to it as to a collective. Two calls at one position that disagree on
message size or dtype are a desync (counted, never paired); a call with no partner although
both ranks are traced in the window is unpaired. Calls whose peer or direction is unknown
are left out (still counted by `matching` as point-to-point).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from commscope.model.schema import CommOp
from commscope.pipeline.matching import Instance, group_of, instance

P2P = "SendRecv"


@dataclass(frozen=True)
class Pair:
    sender: int
    receiver: int
    instance: Instance  # members: the sender and the receiver (their own clocks + base)


@dataclass
class Paired:
    pairs: list[Pair] = field(default_factory=list)
    unpaired: int = 0
    desyncs: int = 0


Key = tuple[str, int, int]  # (process group, sender, receiver)


def pair(calls: Mapping[int, Sequence[CommOp]], base_ns: Mapping[int, int] | None = None) -> Paired:
    """The window's P2P pairs; `base_ns`: each rank's trace base time, added to its starts."""
    sends, receives = _sides(calls)
    found, base = Paired(), base_ns or {}
    for key in sorted(set(sends) | set(receives)):
        group, sender, receiver = key
        out, back = sends.get(key, []), receives.get(key, [])
        if sender not in calls or receiver not in calls:
            continue
        for index in range(max(len(out), len(back))):
            if index >= len(out) or index >= len(back):
                found.unpaired += 1
            elif _agree(out[index], back[index]):
                ops = {sender: out[index], receiver: back[index]}
                found.pairs.append(Pair(sender, receiver, instance(group, index, ops, base, 2)))
            else:
                found.desyncs += 1
    found.pairs.sort(key=lambda p: min(p.instance.starts.values()))
    return found


def _sides(
    calls: Mapping[int, Sequence[CommOp]],
) -> tuple[dict[Key, list[CommOp]], dict[Key, list[CommOp]]]:
    """Sends and receives per (group, sender, receiver), each in start order."""
    sends: dict[Key, list[CommOp]] = {}
    receives: dict[Key, list[CommOp]] = {}
    for rank, ops in calls.items():
        for op in sorted((o for o in ops if o.collective == P2P), key=lambda o: o.start_ns):
            if op.send_to is not None and op.send_to != rank:
                sends.setdefault((group_of(op), rank, op.send_to), []).append(op)
            elif op.recv_from is not None and op.recv_from != rank:
                receives.setdefault((group_of(op), op.recv_from, rank), []).append(op)
    return sends, receives


def _agree(a: CommOp, b: CommOp) -> bool:
    """Sizes and dtypes agree where both are known."""
    sizes = a.message_bytes is None or b.message_bytes is None or a.message_bytes == b.message_bytes
    return sizes and (a.dtype is None or b.dtype is None or a.dtype == b.dtype)
