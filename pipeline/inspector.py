"""An NCCL Inspector log read whole for the offline report (shell: reads one file).

`read(window, path)` has the shape of every offline reader: one file in, the `ParsedFile`s it
holds out (one per global rank the log places, `collector.inspector.place`), or TraceError
when nothing in it can be used. Lines that cannot be read (not JSON, cut short, an unknown
format version, keys missing) are counted by reason in the file's `FileStats.dropped`, which
the report names; the rest is used. A whole-run log maps onto one report window: the folder
holding it, as a flat folder of Kineto traces does. Its ranks' results say "nccl inspector"
as their source: there are no compute kernels, so overlap is not applicable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Final

from commscope.collector.discover import open_trace
from commscope.collector.errors import TraceError
from commscope.collector.inspector import (
    OTHER_COMM,
    TOO_LONG,
    TRUNCATED,
    Bad,
    LineReader,
    Op,
    Placed,
    as_result,
    count_dropped,
    cut_lines,
    place,
)
from commscope.collector.schema import INSPECTOR_LOGS, FileStats, RankResult, TraceMeta
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.report import ParsedFile

_CHUNK: Final = 1 << 20


def read(window: str, path: Path) -> list[ParsedFile]:
    """The log's ranks; TraceError when it holds no usable op."""
    stats = FileStats()
    try:
        with open_trace(path) as stream:
            ops = list(parse(_chunks(stream.read, stats), stats))
    except (OSError, EOFError) as exc:
        raise TraceError(str(path), f"unreadable ({exc})") from None
    placed = place(ops)
    if placed.left_out:
        count_dropped(stats, OTHER_COMM, placed.left_out)
    if not placed.by_rank:
        reasons = ", ".join(f"{n} {why}" for why, n in stats.dropped.items()) or "no record"
        raise TraceError(str(path), f"no NCCL Inspector operation ({reasons})")
    ranks = list(_ranks(placed))  # the file's counters go with its first rank (counted once)
    return [
        _parsed(window, str(path), rank, ops, placed.world_size, stats if i == 0 else FileStats())
        for i, (rank, ops) in enumerate(ranks)
    ]


def _ranks(placed: Placed) -> Iterator[tuple[int, list[Op]]]:
    return iter(sorted(placed.by_rank.items()))


def _chunks(read_some: Callable[[int], bytes], stats: FileStats) -> Iterator[bytes]:
    while chunk := read_some(_CHUNK):
        stats.bytes_read += len(chunk)
        yield chunk


def parse(chunks: Iterable[bytes], stats: FileStats) -> Iterator[Op]:
    """The ops of a whole log given in chunks of any size; a last line without its newline
    is counted as cut short."""
    reader, rest, skipping = LineReader(), b"", False
    for chunk in chunks:
        lines, rest, skipping, too_long = cut_lines(rest, chunk, skipping)
        if too_long:
            count_dropped(stats, TOO_LONG)
        yield from _ops(reader, lines, stats)
    if rest.strip():
        count_dropped(stats, TRUNCATED)


def _ops(reader: LineReader, lines: list[bytes], stats: FileStats) -> Iterator[Op]:
    for line in lines:
        found = reader.line(line)
        if isinstance(found, Op):
            stats.events += 1
            yield found
        elif isinstance(found, Bad):
            count_dropped(stats, found.reason)


def rank_result(ops: Iterable[Op], files: Iterable[str]) -> RankResult:
    """One rank's ops as a result: communication only (no compute kernels: no overlap)."""
    accumulator = Accumulator()
    accumulator.add_all(op.comm_op() for op in ops)
    return as_result(accumulator.result(files))


def meta(rank: int, world_size: int | None, ops: Iterable[Op]) -> TraceMeta:
    """`call_starts` only when every op has its start (a verbose log)."""
    starts = all(op.start_us is not None for op in ops)
    return TraceMeta(
        rank=rank, world_size=world_size, backend="nccl", source=INSPECTOR_LOGS, call_starts=starts
    )


def _parsed(  # noqa: PLR0917  # the fields of one ParsedFile
    window: str, path: str, rank: int, ops: list[Op], world_size: int | None, stats: FileStats
) -> ParsedFile:
    return ParsedFile(
        window=window,
        path=path,
        name_rank=None,
        meta=meta(rank, world_size, ops),
        result=rank_result(ops, [path]),
        stats=stats,
    )
