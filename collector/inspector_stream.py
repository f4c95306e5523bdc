"""An NCCL Inspector log tailed while the job runs (shell: reads a growing file, a thread).

Inspector appends lines to one log for the whole run, so an `InspectorStream` does not wait
for the file to end: after its `StreamStart` it ships the operations of the complete lines of
each chunk it reads at once, as `Facts` records (the ops' calls and intervals, `pipeline.edge`
through the injected reducer) of at most `GROUP_OPS` ops. The log's ops are numbered 1, 2, …
in the order of its lines, and a record of ops k … k+c-1 is seq k covering c
(`Facts.covers`): the numbering is a function of the file's bytes alone, however the records
were cut, so a restarted collector that reads the log again from its start passes over the
ops acknowledged before and ships the rest from exactly there (nothing lost or counted
twice). A record holds ops all verbose or none (its `call_starts`). A partial last line is
held until its newline. The stream ends (`StreamEnd`
with the rank the log places, `collector.inspector.place`) when the collector stops, or at
the file's current end for `--once`; a file found shorter than what was read (truncated or
rewritten in place) ends the stream where it was, keeping what was shipped (a file replaced
under its name is a new stream: the watcher reports it). A gzipped log is read whole once.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import IO, Any, Final

import msgspec
from commscope.collector.discover import file_size, open_trace
from commscope.collector.inspector import (
    TOO_LONG,
    TRUNCATED,
    Bad,
    LineReader,
    Op,
    count_dropped,
    cut_lines,
    largest,
)
from commscope.collector.schema import (
    MAX_FACT_ITEMS,
    Facts,
    FileStats,
    Record,
    StreamEnd,
    TraceMeta,
)
from commscope.collector.stream import (
    FINGERPRINT_BYTES,
    CancelledError,
    FileStream,
)

_log = logging.getLogger(__name__)
_CHUNK: Final = 1 << 20
# ops a record holds: each is one call and at most one run of the GPU communication union,
# plus an entry for each of the 4 unions (`pipeline.edge.RUNS`), so a record is one `Facts`
# within MAX_FACT_ITEMS (never split: a test ships GROUP_OPS ops through the reducer)
GROUP_OPS: Final = (MAX_FACT_ITEMS - 4) // 2


@dataclass
class Tail:
    """What the stream knows of its log so far: bounded whatever its length."""

    reader: LineReader = field(default_factory=LineReader)
    rest: bytes = b""
    read: int = 0
    stats: FileStats = field(default_factory=FileStats)
    comms: dict[tuple[int, str], set[int]] = field(default_factory=dict)  # (n, comm) -> ranks
    ops: dict[tuple[int, str], int] = field(default_factory=dict)
    starts: bool = True  # every op so far had its start (a verbose log)
    skipping: bool = False  # passing over a line too long to hold, up to its newline

    def count(self, op: Op) -> None:
        self.starts = self.starts and op.start_us is not None
        key = (op.header.n_ranks, op.header.comm)
        self.comms.setdefault(key, set()).add(op.header.rank)
        self.ops[key] = self.ops.get(key, 0) + 1
        self.stats.events += 1

    def drop(self, reason: str) -> None:
        count_dropped(self.stats, reason)

    def placed(self) -> tuple[TraceMeta, str | None]:
        """The log's rank and world (`place`'s reading), or why the log cannot be placed."""
        if not self.ops:
            return TraceMeta(source="inspector"), "no NCCL Inspector operation"
        world = largest(self.ops)
        ranks = sorted(self.comms[world])
        meta = TraceMeta(
            backend="nccl", world_size=world[0], source="inspector", call_starts=self.starts
        )
        if len(ranks) > 1:
            why = f"one process drove ranks {ranks}: use `commscope report` to split them"
            return meta, why
        return msgspec.structs.replace(meta, rank=ranks[0]), None


class InspectorStream(FileStream):
    """A `FileStream` for an Inspector log (same construction, same queue of records).

    A new stream's id covers the log's first line only (it never changes as the log grows),
    so a collector restarted before its checkpoint recorded the stream finds the same id and
    the aggregator refuses what it already has, instead of taking the grown log for another."""

    def __init__(self, **settings: Any) -> None:
        super().__init__(**settings)
        self.first_line = settings.get("fingerprint_bytes") is None

    def _fingerprint_length(self) -> int:
        return self._first_line_length() if self.first_line else self.fingerprint_bytes

    def _run(self) -> None:
        opened = self._opened()
        if opened is None:
            return
        stream, covered = opened
        self.seq, tail = 1, Tail()
        try:
            with open_trace(self.path) as handle:
                self._follow(stream, tail, handle)
        except (OSError, EOFError):  # a gzipped log cut short, or the file gone
            _log.warning("inspector log unreadable", extra={"path": str(self.path)})
        self._emit(self._final(stream, tail), covered)

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

    def _follow(self, stream: str, tail: Tail, handle: IO[bytes]) -> None:
        whole = self.path.name.endswith(".gz")
        while True:
            chunk = handle.read(_CHUNK)
            if chunk:
                tail.read += len(chunk)
                lines, tail.rest, tail.skipping, too_long = cut_lines(
                    tail.rest, chunk, tail.skipping
                )
                if too_long:
                    tail.drop(TOO_LONG)
                self._ship(stream, [op for line in lines if (op := self._line(tail, line))])
                continue
            if whole or self._should_stop() or self._shrunk(tail):
                return
            self.sleep(self.settings.poll_s)

    def _shrunk(self, tail: Tail) -> bool:
        if file_size(self.path) >= tail.read:
            return False
        _log.warning("inspector log shrank while tailed", extra={"path": str(self.path)})
        return True

    def _line(self, tail: Tail, line: bytes) -> Op | None:
        found = tail.reader.line(line)
        if isinstance(found, Bad):
            tail.drop(found.reason)
            return None
        if not isinstance(found, Op):
            return None
        tail.count(found)
        self.events += 1
        return found

    def _ship(self, stream: str, ops: list[Op]) -> None:
        """One chunk's ops (numbered on from `seq`, those acknowledged before passed over)
        as records of at most GROUP_OPS ops, all verbose or none."""
        first = max(0, self.skip - self.seq)
        self.seq += min(first, len(ops))
        for group in groups(ops[first:]):
            reduction = self.reducer()
            reduction.add_all([op.comm_op() for op in group])
            (part,) = reduction.facts(stream, self.seq)
            timed = group[0].start_us is not None
            part = msgspec.structs.replace(part, covers=len(group), call_starts=timed)
            self._emit(part, 0)

    def _emit(self, record: Record, covered: int) -> None:
        """As `FileStream._emit`, a record of facts taking the seqs it covers."""
        if isinstance(record, Facts):
            self.seq += record.covers - 1  # `FileStream._emit` adds the last one
        super()._emit(record, covered)

    def _final(self, stream: str, tail: Tail) -> StreamEnd:
        if tail.rest.strip():
            tail.drop(TRUNCATED)
        tail.stats.bytes_read = tail.read
        meta, error = tail.placed()
        return self._end(stream, meta, tail.stats, error)

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
