"""NCCL Inspector logs as a source, read whole for the offline report (pure: the bytes come
through the file's opener).

`INSPECTOR` claims the logs' names and reads one log into the ranks it holds: one per global
rank the log places (`collector.inspector.place`) in each of its windows, keyed (window, rank)
with their ops as communication events; TraceError when nothing in it can be used. Lines that
cannot be read (not JSON, cut short, an unknown format version, keys missing) are counted by
reason in the window's `FileStats.dropped`, which the report names; the rest is used. A
whole-run log maps onto one report window: the folder holding it, as a flat folder of Kineto
traces does. Its ranks' results say "nccl inspector" as their evidence (`as_result`): there are
no compute kernels, so overlap is not applicable. Live, the log is tailed
(`inspector_stream`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

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
from commscope.collector.source import File, Live, Rank, Reading
from commscope.model.errors import TraceError
from commscope.model.inspector import LACKS, as_result
from commscope.model.names import is_inspector_name
from commscope.model.schema import INSPECTOR_LOGS, Event, FileStats, TraceMeta, reason_text
from commscope.model.schema import Source as SourceKind

_CHUNK: Final = 1 << 20
DEFAULT_RULE: Final = WindowRule()  # the default windows (`--inspector-window`)


@dataclass(frozen=True)
class Inspector:
    """NCCL Inspector JSONL logs: offline read whole, live tailed."""

    kind: SourceKind = INSPECTOR_LOGS
    live: Live | None = "tail"
    lacks: Mapping[str, str] = field(default_factory=lambda: LACKS)

    def claims(self, name: str) -> bool:
        return is_inspector_name(name)

    def read(self, file: File) -> Reading:
        return _Log(file)


class _Log:
    """One read of a log: its ranks in each of its windows, in the order the windows closed."""

    def __init__(self, file: File) -> None:
        self.file = file
        self.found: list[Rank] = []

    def batches(self) -> Iterator[tuple[Hashable, list[Event]]]:
        file, rule = self.file, self.file.options.inspector
        slots, placed = _slots(file, rule)
        for slot in slots:
            window = window_folder(rule, file.window, slot.index)
            for rank, ops, stats in _ranks(slot, placed):
                key = (window, rank)
                self.found.append(Rank(key, meta(rank, placed.world_size, ops, placed.host), stats,
                                       window=window, finish=as_result))  # fmt: skip
                yield key, [op.comm_op() for op in ops]
        if file.on_chunk is not None:
            file.on_chunk(file.size)

    def ranks(self) -> list[Rank]:
        return self.found


INSPECTOR: Final = Inspector()


def _slots(file: File, rule: WindowRule) -> tuple[list[Slot], Placed]:
    """The log's windows and where its ops' ranks are; TraceError when it holds no usable op."""
    windowing = Windowing(rule)
    try:
        with file.open() as stream:
            slots = cut(stream.read, windowing)
    except (OSError, EOFError) as exc:
        raise TraceError(file.shown, f"unreadable ({exc})") from None
    placed = place([op for slot in slots for op in slot.ops])
    if not placed.by_rank or not slots:
        dropped: dict[str, int] = {}
        for stats in [windowing.pending, *(slot.stats for slot in slots)]:
            for why, n in stats.dropped.items():
                dropped[why] = dropped.get(why, 0) + n
        reasons = ", ".join(f"{n} {reason_text(why)}" for why, n in dropped.items()) or "no record"
        raise TraceError(file.shown, f"no NCCL Inspector operation ({reasons})")
    return slots, placed


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


def _ranks(slot: Slot, placed: Placed) -> Iterator[tuple[int, list[Op], FileStats]]:
    """One window's ranks and their ops (the window's counters go with its first rank:
    counted once)."""
    stats = slot.stats
    if placed.comm is None:  # one GPU per process: every op is its rank's
        yield next(iter(placed.by_rank)), slot.ops, stats
        return
    by_rank, left_out = split(slot.ops, placed.comm, sorted(placed.by_rank))
    if left_out:
        count_dropped(stats, OTHER_COMM, left_out)
    for i, (rank, ops) in enumerate(by_rank.items()):
        yield rank, ops, stats if i == 0 else FileStats()


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
