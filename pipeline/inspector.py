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
from commscope.collector.inspector import (
    OTHER_COMM,
    TOO_LONG,
    TRUNCATED,
    Bad,
    LineReader,
    Op,
    Placed,
    count_dropped,
    cut_lines,
    place,
    split,
)
from commscope.collector.inspector_windows import Slot, Windowing, WindowRule, window_folder
from commscope.model.errors import TraceError
from commscope.model.inspector import as_result
from commscope.model.schema import INSPECTOR_LOGS, FileStats, RankResult, TraceMeta, reason_text
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.report import ParsedFile

_CHUNK: Final = 1 << 20
DEFAULT_RULE: Final = WindowRule()  # the default windows (`--inspector-window`)


def read(window: str, path: Path, rule: WindowRule = DEFAULT_RULE) -> list[ParsedFile]:
    """The log's ranks in each of its windows; TraceError when it holds no usable op."""
    windowing = Windowing(rule)
    try:
        with open_trace(path) as stream:
            slots = cut(stream.read, windowing)
    except (OSError, EOFError) as exc:
        raise TraceError(str(path), f"unreadable ({exc})") from None
    placed = place([op for slot in slots for op in slot.ops])
    if not placed.by_rank or not slots:
        dropped: dict[str, int] = {}
        for stats in [windowing.pending, *(slot.stats for slot in slots)]:
            for why, n in stats.dropped.items():
                dropped[why] = dropped.get(why, 0) + n
        reasons = ", ".join(f"{n} {reason_text(why)}" for why, n in dropped.items()) or "no record"
        raise TraceError(str(path), f"no NCCL Inspector operation ({reasons})")
    return [
        item
        for slot in slots
        for item in _window(window_folder(rule, window, slot.index), str(path), slot, placed)
    ]


def cut(read_some: Callable[[int], bytes], windowing: Windowing) -> list[Slot]:
    """A whole log's windows (`inspector_windows`: as the tailed log is cut), in the order
    they closed, each with its ops."""
    reader, rest, skipping, read_bytes = LineReader(), b"", False, 0
    slots: list[Slot] = []
    while chunk := read_some(_CHUNK):
        read_bytes += len(chunk)
        lines, rest, skipping, too_long = cut_lines(rest, chunk, skipping)
        if too_long:
            windowing.drop(TOO_LONG)
        for line in lines:
            found = reader.line(line)
            if isinstance(found, Bad):
                windowing.drop(found.reason)
            elif isinstance(found, Op) and (placed := windowing.op(found)) is not None:
                slots.extend(windowing.live.pop(index) for index in placed.closed)
    slots.extend(windowing.live.pop(index) for index in windowing.end(read_bytes, rest))
    return slots


def _window(name: str, path: str, slot: Slot, placed: Placed) -> Iterator[ParsedFile]:
    """One window's ranks (the window's counters go with its first rank: counted once)."""
    stats = slot.stats
    if placed.comm is None:  # one GPU per process: every op is its rank's
        yield _parsed(name, path, next(iter(placed.by_rank)), slot.ops, placed, stats)
        return
    by_rank, left_out = split(slot.ops, placed.comm, sorted(placed.by_rank))
    if left_out:
        count_dropped(stats, OTHER_COMM, left_out)
    for i, (rank, ops) in enumerate(by_rank.items()):
        yield _parsed(name, path, rank, ops, placed, stats if i == 0 else FileStats())


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


def meta(
    rank: int, world_size: int | None, ops: Iterable[Op], host: str | None = None
) -> TraceMeta:
    """`call_starts` only when every op has its start (a verbose log); `host`: the log's (its
    first op's, as the live reader takes it: a window without ops still names it), else the
    first of these ops'."""
    ops = list(ops)
    starts = all(op.start_us is not None for op in ops)
    host = host or next((op.header.host for op in ops if op.header.host is not None), None)
    return TraceMeta(
        rank=rank,
        world_size=world_size,
        backend="nccl",
        source=INSPECTOR_LOGS,
        call_starts=starts,
        host=host,
    )


def _parsed(  # noqa: PLR0917  # the fields of one ParsedFile
    window: str, path: str, rank: int, ops: list[Op], placed: Placed, stats: FileStats
) -> ParsedFile:
    return ParsedFile(
        window=window,
        path=path,
        name_rank=None,
        meta=meta(rank, placed.world_size, ops, placed.host),
        result=rank_result(ops, [path]),
        stats=stats,
    )
