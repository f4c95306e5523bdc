"""What a trace source is, and the one loop that reads any of them (pure: bytes come through
the opener the shell gives).

A source is one input format (`Source`): its kind (`TraceMeta.source`), the file names it
claims, how it reads a file (`read`: event batches keyed by rank, then those ranks), how the
live collector follows it (`live`) and the report sections it cannot fill (`lacks`). The
registry is `collector.sources`; `drain` is the loop "open, read, add each batch to its
rank's sink" that the offline report, the live collector and its worker processes share.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import IO, Literal, Protocol, TypeVar

from commscope.collector.inspector_windows import WindowRule
from commscope.model.flight import FlightDump
from commscope.model.schema import Event, FileStats, RankResult, TraceMeta
from commscope.model.schema import Source as SourceKind

# How the live collector follows a file of a source: read once its document has ended, one
# rank per file (`stream.FileStream`); the same, and read again as a new stream whenever it is
# rewritten in place (its size or modification time changes: a Flight Recorder dump, which
# PyTorch writes again on a later dump); or tailed for the whole run and cut into windows
# (`inspector_stream.InspectorStream`).
Live = Literal["document", "rewritten", "tail"]
Opener = Callable[[], AbstractContextManager[IO[bytes]]]


@dataclass(frozen=True)
class ReadOptions:
    """The command line's settings of the sources that take one."""

    inspector: WindowRule = field(default_factory=WindowRule)  # `--inspector-window`


@dataclass(frozen=True)
class File:
    """A file to read: where it is, what the report calls it and how its bytes are opened
    (whole, or followed as it is written)."""

    path: str
    shown: str
    open: Opener
    window: str = ""  # the window (folder) it lies in
    size: int = 0  # its size when the read began
    on_chunk: Callable[[int], None] | None = None  # told the bytes read, as they are read
    batch_events: int | None = None  # events per batch (None: the source's own)
    options: ReadOptions = field(default_factory=ReadOptions)


@dataclass(frozen=True)
class Rank:
    """One rank a file holds, known once its batches are read."""

    key: Hashable  # the key its batches came with
    meta: TraceMeta
    stats: FileStats
    name_rank: int | None = None  # the rank its file's name gives
    window: str | None = None  # its own window (an Inspector log's), else the file's
    note: str | None = None  # how it was placed where the file did not say
    finish: Callable[[RankResult], RankResult] | None = None  # applied to its result
    flight: FlightDump | None = None  # a Flight Recorder dump's content (it has no event)


class Reading(Protocol):
    """One read of one file."""

    def batches(self) -> Iterator[tuple[Hashable, list[Event]]]: ...

    def ranks(self) -> list[Rank]: ...  # after the batches: the file's ranks, in report order


class Source(Protocol):
    """An input format (see the module docstring)."""

    @property
    def kind(self) -> SourceKind: ...

    @property
    def live(self) -> Live | None: ...  # None: read offline only

    @property
    def lacks(self) -> Mapping[str, str]: ...  # report section -> why it cannot fill it

    def claims(self, name: str) -> bool: ...

    def read(self, file: File) -> Reading: ...


class _Sink(Protocol):
    def add_all(self, events: Iterable[Event]) -> None: ...


S = TypeVar("S", bound=_Sink)


def drain(
    reading: Reading, sink: Callable[[], S], seen: Callable[[int], None] | None = None
) -> list[tuple[Rank, S]]:
    """Every batch added to its rank's sink (`seen`: told each batch's length), then the
    file's ranks, each with its sink (a fresh one for a rank without events)."""
    sinks: dict[Hashable, S] = {}
    for key, batch in reading.batches():
        if seen is not None:
            seen(len(batch))
        if key not in sinks:
            sinks[key] = sink()
        sinks[key].add_all(batch)
    return [(rank, sinks[rank.key] if rank.key in sinks else sink()) for rank in reading.ranks()]


def finished(rank: Rank, result: RankResult) -> RankResult:
    """A rank's result as its source gives it."""
    return result if rank.finish is None else rank.finish(result)
