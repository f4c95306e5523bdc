"""An NCCL Inspector log tailed while the job runs (shell: reads a growing file, a thread).

Inspector appends lines to one log for the whole run, so an `InspectorStream` does not wait for
the file to end: it cuts the log into time windows (`collector.inspector_windows`: W seconds on
the log's own clock, aligned across ranks, a function of the file's bytes) and ships each
window as its own stream, as a Kineto window's file is: its `StreamStart` (the log's path, its
folder named with `@` and the window's UTC start) when its first op is read, the ops of the
complete lines of each chunk at once as `Facts` records (the ops' calls and intervals,
`pipeline.edge` through the injected reducer) of at most `GROUP_OPS` ops, and its `StreamEnd`
(with the rank the log places so far, `_Tail.placed`) when the window closes, so the aggregator
finishes, matches and sheds it while the log grows on.

A window's ops are numbered 1, 2, … in the order of the log's lines, and a record of ops k …
k+c-1 is seq k covering c (`Facts.covers`): the numbering is a function of the file's bytes
alone, however the records were cut, so a restarted collector that reads the log again from its
start passes over the windows and ops acknowledged before (`skip`, `windows`: the session's
checkpoint) and ships the rest from exactly there (nothing lost or counted twice). A record
holds ops all verbose or none (its `call_starts`). A partial last line is held until its
newline.

Lines left out are counted in the lowest window open. Every window open closes when the
collector stops, or at the file's current end for `--once`, the log's bytes counted with its
last; a file found shorter than what was read (truncated or rewritten in place) ends there,
keeping what was shipped (a file replaced under its name is a new stream: the watcher reports
it). A gzipped log is read whole once. With W = 0 the whole log is one stream, the log's own.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import IO, Any, Final

from commscope.collector.discover import file_size, open_trace
from commscope.collector.inspector import (
    TOO_LONG,
    Bad,
    LineReader,
    Op,
    cut_lines,
    largest,
)
from commscope.collector.inspector_windows import (
    NO_TIME,
    Slot,
    Windowing,
    WindowRule,
    window_folder,
    window_stream,
)
from commscope.collector.session import DONE
from commscope.collector.stream import (
    FINGERPRINT_BYTES,
    CancelledError,
    FileStream,
    Item,
)
from commscope.model.schema import (
    MAX_FACT_ITEMS,
    Facts,
    Record,
    StreamEnd,
    TraceMeta,
    reason_text,
)
from msgspec.structs import replace

_log = logging.getLogger(__name__)
_CHUNK: Final = 1 << 20
# ops a record holds: each is one call and at most one run of the GPU communication union,
# plus an entry for each of the 4 unions (`pipeline.edge.RUNS`), so a record is one `Facts`
# within MAX_FACT_ITEMS (never split: a test ships GROUP_OPS ops through the reducer)
GROUP_OPS: Final = (MAX_FACT_ITEMS - 4) // 2


@dataclass
class _Tail:
    """What the stream knows of its log so far: bounded whatever its length."""

    reader: LineReader = field(default_factory=LineReader)
    rest: bytes = b""
    read: int = 0
    comms: dict[tuple[int, str], set[int]] = field(default_factory=dict)  # (n, comm) -> ranks
    ops: dict[tuple[int, str], int] = field(default_factory=dict)
    starts: bool = True  # every op so far had its start (a verbose log)
    host: str | None = None  # the first op's metadata.hostname
    skipping: bool = False  # passing over a line too long to hold, up to its newline

    def count(self, op: Op) -> None:
        self.starts = self.starts and op.start_us is not None
        self.host = self.host or op.header.host
        key = (op.header.n_ranks, op.header.comm)
        self.comms.setdefault(key, set()).add(op.header.rank)
        self.ops[key] = self.ops.get(key, 0) + 1

    def placed(self) -> tuple[TraceMeta, str | None]:
        """The log's rank and world (`place`'s reading), or why the log cannot be placed."""
        if not self.ops:
            return TraceMeta(source="inspector"), "no NCCL Inspector operation"
        world = largest(self.ops)
        ranks = sorted(self.comms[world])
        meta = TraceMeta(
            backend="nccl",
            world_size=world[0],
            source="inspector",
            call_starts=self.starts,
            host=self.host,
        )
        if len(ranks) > 1:
            why = f"one process drove ranks {ranks}: use `commscope report` to split them"
            return meta, why
        return replace(meta, rank=ranks[0]), None


@dataclass
class Window:
    """One window of the log as its own stream: its records numbered as a log's are (its
    ops 1, 2, …), those below `skip` acknowledged before (its ops: `inspector_windows.Slot`)."""

    slot: Slot
    stream: str
    key: str  # the session's name for the stream: the log's path, or `path\0w<index>`
    skip: int
    seq: int = 1


class InspectorStream(FileStream):
    """A `FileStream` for an Inspector log (the same construction, the same queue of records,
    and `rule`: its windows; `windows`: each window's records acknowledged before, by index).

    The log's id covers its first line only (it never changes as the log grows), and each
    window's stream id derives from it (`inspector_windows.window_stream`), so a collector
    restarted before its checkpoint recorded a stream finds the same ids and the aggregator
    refuses what it already has, instead of taking the grown log for another. With windows,
    `skip` is the lowest window whose stream may not be whole at the aggregator yet."""

    def __init__(self, **settings: Any) -> None:
        self.rule: WindowRule = settings.pop("rule", WindowRule())
        self.acked: dict[int, int] = dict(settings.pop("windows", ()))
        super().__init__(**settings)
        self.first_line = settings.get("fingerprint_bytes") is None
        self.cut = Windowing(self.rule)
        self.live: dict[int, Window] = {}  # the windows open
        self.log, self.covered = "", 0

    def _fingerprint_length(self) -> int:
        return self._first_line_length() if self.first_line else self.fingerprint_bytes

    def _run(self) -> None:
        head = self._head()
        if head is None:
            return
        (self.log, self.covered), tail = head, _Tail()
        for index in self.cut.opened:
            self._open(index)
        try:
            with open_trace(self.path) as handle:
                self._follow(tail, handle)
        except (OSError, EOFError):  # a gzipped log cut short, or the file gone
            _log.warning("inspector log unreadable", extra={"path": str(self.path)})
        self._final(tail)

    def _first_line_length(self) -> int:
        """The first line's length with its newline (waited for; at most the usual bytes)."""
        while True:
            try:
                with self.path.open("rb") as handle:
                    head = handle.read(FINGERPRINT_BYTES)
            except OSError:
                return FINGERPRINT_BYTES  # the fingerprint says why
            end = head.find(b"\n")
            if end >= 0 or len(head) >= FINGERPRINT_BYTES or self._should_stop():
                return end + 1 if end >= 0 else len(head)
            self.sleep(self.settings.poll_s)

    def _follow(self, tail: _Tail, handle: IO[bytes]) -> None:
        whole = self.path.name.endswith(".gz")
        while True:
            chunk = handle.read(_CHUNK)
            if chunk:
                tail.read += len(chunk)
                lines, tail.rest, tail.skipping, too_long = cut_lines(
                    tail.rest, chunk, tail.skipping
                )
                if too_long:
                    self.cut.drop(TOO_LONG)
                for line in lines:
                    self._line(tail, line)
                for window in sorted(self.live):
                    self._ship(self.live[window])
                continue
            if whole or self._should_stop() or self._shrunk(tail):
                return
            self.sleep(self.settings.poll_s)

    def _shrunk(self, tail: _Tail) -> bool:
        if file_size(self.path) >= tail.read:
            return False
        _log.warning("inspector log shrank while tailed", extra={"path": str(self.path)})
        return True

    def _line(self, tail: _Tail, line: bytes) -> None:
        found = tail.reader.line(line)
        if isinstance(found, Bad):
            self.cut.drop(found.reason)
        elif isinstance(found, Op):
            self._op(tail, found)

    def _op(self, tail: _Tail, op: Op) -> None:
        """One op into its window; the windows it opens and closes sent."""
        cut = self.cut.op(op)
        if cut is None:
            return
        tail.count(op)
        self.events += 1
        for index in cut.opened:
            self._open(index)
            if index in cut.closed:  # an empty window between two ends at once: a long jump
                self._close(tail, index)  # never holds hundreds of streams open
        for index in cut.closed:
            if index in self.live:
                self._close(tail, index)

    def _open(self, index: int) -> None:
        whole = self.rule.whole
        stream = self.log if whole else window_stream(self.log, index)
        key = str(self.path) if whole else f"{self.path}\0w{index}"
        window = self.live[index] = Window(self.cut.live[index], stream, key, self._skip(index))
        start = self._start(stream)
        folder = window_folder(self.rule, start.folder, index)
        self._send(window, replace(start, folder=folder))

    def _skip(self, index: int) -> int:
        if self.rule.whole:
            return self.skip
        return DONE if index < self.skip else self.acked.get(index, 0)

    def _ship(self, window: Window) -> None:
        """The window's ops read (numbered on from its `seq`, those acknowledged before
        passed over) as records of at most GROUP_OPS ops, all verbose or none."""
        ops, window.slot.ops = window.slot.ops, []
        first = max(0, window.skip - window.seq)
        window.seq += min(first, len(ops))
        for group in groups(ops[first:]):
            reduction = self.reducer()
            reduction.add_all([op.comm_op() for op in group])
            (part,) = reduction.facts(window.stream, window.seq)
            timed = group[0].start_us is not None
            self._send(window, replace(part, covers=len(group), call_starts=timed))

    def _send(self, window: Window, record: Record, final: bool = False) -> None:
        """Hand a record of `window` out (unless acknowledged before); its seqs taken."""
        if isinstance(record, Facts):
            window.seq += record.covers
        elif isinstance(record, StreamEnd):
            window.seq += 1
        if record.seq < window.skip:
            return
        log = "" if self.rule.whole else self.log
        self._put(Item(self.generation, record, self.covered, window.key, log, final))
        window.skip = window.seq  # a record handed out is not handed out again

    def _close(self, tail: _Tail, index: int, final: bool = False) -> None:
        window = self.live.pop(index)
        self._ship(window)
        del self.cut.live[index]
        meta, error = tail.placed()
        end = StreamEnd(
            stream=window.stream,
            seq=window.seq,
            meta=replace(meta, call_starts=window.slot.starts),
            stats=window.slot.stats,
            size_bytes=file_size(self.path),
            error=error,
        )
        self._send(window, end, final)

    def _final(self, tail: _Tail) -> None:
        """At the log's end every window open closes; a log that opened none is one
        stream, the log's own, with the reason."""
        closing = self.cut.end(tail.read, tail.rest)
        if not closing:
            self._nothing(tail)
        for index in closing:
            self._close(tail, index, final=index == closing[-1])

    def _nothing(self, tail: _Tail) -> None:
        window = Window(Slot(0, self.cut.pending), self.log, str(self.path), self.skip)
        self._send(window, self._start(self.log))
        meta, error = tail.placed()
        end = StreamEnd(
            stream=self.log, seq=1, meta=meta, stats=window.slot.stats,
            size_bytes=file_size(self.path),
            error=error or f"no NCCL Inspector operation with a time ({reason_text(NO_TIME)})",
        )  # fmt: skip
        self._send(window, end, final=True)

    def run(self) -> None:
        with contextlib.suppress(CancelledError):
            self._run()


def groups(ops: list[Op]) -> list[list[Op]]:
    """`ops` in order, cut into runs of at most GROUP_OPS, each all verbose or none."""
    found: list[list[Op]] = []
    for op in ops:
        last = found[-1] if found else None
        timed = op.start_us is not None
        if last is None or len(last) >= GROUP_OPS or (last[0].start_us is not None) != timed:
            found.append([op])
        else:
            last.append(op)
    return found
