"""Collective instances split by a window boundary, matched whole (pure).

An NCCL Inspector log is cut into time windows on each host's own clock
(`collector.inspector_windows`), so the members of one instance (process group, Seq, type)
can fall either side of a boundary on different hosts: their clocks differ, and a line is
written a little after its op ended. Seq numbers a communicator's collectives for the whole
run, so a key seen in two windows is one instance. An instance belongs to the window of its
earliest member: a window's matching takes, from the next window, the calls of the instances
it holds some but not all members of (`lent`), and the next window's matching leaves those
out (`given`: the keys taken). At most MAX_TAKEN keys a window (the instances near one
boundary; beyond, an instance stays split and each side counts it unmatched).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence, Set
from typing import Final

from commscope.model.inspector import log_folder
from commscope.model.schema import CommOp

Key = tuple[str, int, str]  # (process group, Seq, collective type)
_MAX_TAKEN: Final = 1 << 14
_POINT_TO_POINT: Final = "SendRecv"  # pairwise, never matched group-wide (`matching`)


def key(op: CommOp) -> Key | None:
    """The instance a call belongs to (None: no Seq or group, or a point-to-point call)."""
    if op.seq is None or op.process_group is None or op.collective == _POINT_TO_POINT:
        return None
    return (op.process_group, op.seq, op.collective)


def successors(names: Sequence[str]) -> dict[str, str]:
    """Each NCCL Inspector window's next (`names`: theirs, in the report's order), in the
    same log folder (`<folder>@<UTC start>`); the last of a folder's: ""."""
    found: dict[str, str] = {}
    for name, nxt in zip(names, [*names[1:], ""], strict=False):
        same = log_folder(nxt) == log_folder(name)
        found[name] = nxt if same and nxt else ""
    return found


def waiting(names: Sequence[str], complete: Set[str], open_: Set[str]) -> set[str]:
    """The Inspector windows (`names`, in order) whose matching must wait: those open, those
    whose next is not complete (or not there yet: it takes from the next), and those after a
    waiting one of the same log folder (it leaves out what the one before took)."""
    after = successors(names)
    found: set[str] = set()
    held = False
    for name in names:
        nxt = after[name]
        if held or name in open_ or nxt not in complete:
            found.add(name)
        held = name in found and bool(nxt)
    return found


def affected(names: Sequence[str], changed: Set[str]) -> set[str]:
    """The Inspector windows (`names`, in order) to match again when `changed` did: each
    changed one's window before and every one after it in the same log folder."""
    after = successors(names)
    found: set[str] = set()
    for before, name in zip(["", *names], names, strict=False):
        if name in changed or (before in found and after.get(before) == name):
            found.add(name)
            if before and after.get(before) == name:
                found.add(before)
    return found


def lent(
    own: Mapping[int, Sequence[CommOp]],
    after: Mapping[int, Sequence[CommOp]],
    given: frozenset[Key],
) -> tuple[dict[int, list[CommOp]], frozenset[Key]]:
    """A window's calls to match: its own, but those of instances the window before took
    (`given`), and the next window's (`after`) of instances it holds some but not all members
    of (by their group size), unless a member there is of a rank with no file here; the keys
    it took from the next window."""
    mine = {rank: [op for op in ops if key(op) not in given] for rank, ops in own.items()}
    held: Counter[Key] = Counter()
    sizes: dict[Key, int] = {}
    for ops in mine.values():
        for op in ops:
            found = key(op)
            if found is not None and op.group_size is not None:
                held[found] += 1
                sizes[found] = op.group_size
    split = {found for found, members in held.items() if members < sizes[found]}
    outside = {k for rank, ops in after.items() if rank not in mine for op in ops if (k := key(op))}
    wanted = {k for ops in after.values() for op in ops if (k := key(op)) in split} - outside
    taken = frozenset(sorted(wanted)[:_MAX_TAKEN])
    for rank, theirs in after.items():
        borrowed = [op for op in theirs if key(op) in taken]
        if borrowed:
            mine[rank] = [*mine[rank], *borrowed]
    return mine, taken
