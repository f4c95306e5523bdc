"""Which rank each trace file is, window by window (pure).

`distributedInfo.rank` when the trace has it. A file without one takes the rank in its name
(`rank7`, `rank-7`, `worker7`); the only file of its window is rank 0; several without either
take the one number that differs between their names, when those numbers can be ranks (each
below the world size, or 0 … k-1 for k files when no trace gives the world size). Anything
else is refused with the reason. Every rank that did not come from the trace is said in a
note. Two files claiming one rank in one window are both skipped, each naming the other.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Generic, Protocol, TypeVar

from commscope.model.names import base_name
from commscope.model.schema import Skipped, TraceMeta

_NUMBER: Final = re.compile(r"\d+")
_FROM_PATTERN: Final = "the rankN/workerN in the file name"
_FROM_NUMBER: Final = "the one number that tells the file names apart"


class _RankedFile(Protocol):
    @property
    def window(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def name_rank(self) -> int | None: ...
    @property
    def meta(self) -> TraceMeta: ...


F = TypeVar("F", bound=_RankedFile)


@dataclass
class Placement(Generic[F]):
    """Files keyed by (window, rank); the files refused; how ranks were found where the
    traces did not say."""

    placed: dict[tuple[str, int], F] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


_MAX_RANK: Final = 1 << 20  # a rank set's spec names no rank above this


def rank_set(spec: str) -> frozenset[int]:
    """The ranks of a spec such as `0-255,512-767` (ranges inclusive); ValueError with the
    reason for anything else."""
    found: set[int] = set()
    for part in spec.split(","):
        match = re.fullmatch(r"\s*(\d{1,7})\s*(?:-\s*(\d{1,7})\s*)?", part)
        if match is None:
            raise ValueError(f"{part.strip()!r} is not a rank or a range such as 0-255")
        low, high = int(match[1]), int(match[2] or match[1])
        if high < low or high > _MAX_RANK:
            raise ValueError(f"{part.strip()!r}: a range low-high with high below {_MAX_RANK}")
        found.update(range(low, high + 1))
    return frozenset(found)


@dataclass(frozen=True)
class Ranked(Generic[F]):
    """One window's files at their ranks (`ranked`): those placed, those whose rank could not
    be found, those that claim a rank another file claims too, and how the ranks that the
    traces did not say were found (the paths by way)."""

    placed: dict[int, F]
    refused: list[Skipped]
    conflicts: list[Skipped]
    named: dict[str, list[str]]


def assign(files: Iterable[F]) -> Placement[F]:
    by_window: dict[str, list[F]] = {}
    for item in files:
        by_window.setdefault(item.window, []).append(item)
    return merged([(window, ranked(window, items)) for window, items in by_window.items()])


def ranked(window: str, items: Sequence[F]) -> Ranked[F]:
    """One window's files at their ranks."""
    refused: list[Skipped] = []
    claims: dict[int, list[F]] = {}
    named: dict[str, list[str]] = {_FROM_PATTERN: [], _FROM_NUMBER: [], "lone": []}
    for rank, item, how in _window_ranks(items, refused):
        claims.setdefault(rank, []).append(item)
        if how:
            named[how].append(item.path)
    placed: dict[int, F] = {}
    conflicts: list[Skipped] = []
    for rank, claiming in claims.items():
        if len(claiming) == 1:
            placed[rank] = claiming[0]
        else:
            conflicts.extend(_conflict((window, rank), item, claiming) for item in claiming)
    return Ranked(placed, refused, conflicts, named)


def merged(windows: Sequence[tuple[str, Ranked[F]]]) -> Placement[F]:
    """The windows' placements as one (`assign`): the files refused in window order, then the
    conflicts; the notes over every window."""
    out: Placement[F] = Placement()
    named: dict[str, list[str]] = {_FROM_PATTERN: [], _FROM_NUMBER: [], "lone": []}
    for window, found in windows:
        out.placed.update({(window, rank): item for rank, item in found.placed.items()})
        out.skipped.extend(found.refused)
        for how, paths in found.named.items():
            named[how].extend(paths)
    for _, found in windows:
        out.skipped.extend(found.conflicts)
    out.notes = _notes(named)
    return out


def _conflict(key: tuple[str, int], item: F, items: Sequence[F]) -> Skipped:
    others = ", ".join(o.path for o in items if o is not item)
    return Skipped(item.path, f"rank {key[1]} in window {key[0]} is also claimed by {others}")


def _window_ranks(items: Sequence[F], refused: list[Skipped]) -> list[tuple[int, F, str]]:
    """(rank, file, how the rank was found: "" when the trace says) for one window's files."""
    found = [(item.meta.rank, item, "") for item in items if item.meta.rank is not None]
    rankless = [item for item in items if item.meta.rank is None]
    found += [(i.name_rank, i, _FROM_PATTERN) for i in rankless if i.name_rank is not None]
    nameless = [item for item in rankless if item.name_rank is None]
    if len(items) == 1 and nameless:
        return [(0, nameless[0], "lone")]
    if not nameless:
        return found
    world = max((item.meta.world_size or 0 for item in items), default=0) or None
    ranks = ranks_from_numbers([base_name(item.path) for item in nameless], world)
    if isinstance(ranks, str):
        reason = f"no rank: no distributedInfo.rank, no rankN/workerN in the name, and {ranks}"
        refused.extend(Skipped(item.path, reason) for item in nameless)
        return found
    return found + [(rank, item, _FROM_NUMBER) for rank, item in zip(ranks, nameless, strict=True)]


def ranks_from_numbers(names: Sequence[str], world: int | None) -> list[int] | str:
    """The ranks in the one number field that differs between `names`, or why there are none.
    Ranks are below `world`, or are 0 … k-1 for k names when the world size is unknown: a
    process id or a time stamp is never taken for a rank."""
    if len(names) < 2:
        return "it is not the only file of its window"
    if len({_NUMBER.sub("#", name) for name in names}) != 1:
        return "the names of the files without a rank differ in more than one number"
    fields = [_NUMBER.findall(name) for name in names]
    differ = [i for i in range(len(fields[0])) if len({f[i] for f in fields}) > 1]
    if len(differ) != 1:
        return f"{len(differ)} numbers differ between the names of the files without a rank"
    values = [int(f[differ[0]]) for f in fields]
    bound = world if world is not None else len(names)
    if len(set(values)) != len(values) or max(values) >= bound:
        limit = f"below the world size {world}" if world else f"0 to {bound - 1}"
        return f"the numbers that tell their names apart ({_few(values)}) are not ranks {limit}"
    return values


def _few(values: Sequence[int]) -> str:
    shown = ", ".join(map(str, values[:4]))
    return shown + (", …" if len(values) > 4 else "")


def _notes(named: dict[str, list[str]]) -> list[str]:
    notes = []
    lone = named.pop("lone")
    if lone:
        each = "the only file of its window" if len(lone) == 1 else "each alone in its window"
        notes.append(f"{_files(lone)}: no distributedInfo.rank, {each}: taken as rank 0")
    for how, paths in named.items():
        if paths:
            notes.append(f"{_files(paths)}: no distributedInfo.rank: rank taken from {how}")
    return notes


def _files(paths: Sequence[str]) -> str:
    if len(paths) == 1:
        return paths[0]
    return f"{len(paths)} files ({paths[0]} …)"
