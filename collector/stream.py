"""One trace file as a stream of wire records (shell: reads the file, runs in a thread).

`FileStream` fingerprints the file (its path and first 64 KiB: the stable stream id), then
has its source (`collector.sources`: one followed as a document, one rank per file) read it as
it is written (`open_followed`, `read_document`) into a `_Reducer` (the shell injects one:
`pipeline.edge.Reduction`, which keeps interval unions, not events) and, once the document
has ended, hands out `StreamStart`, the reducer's `Facts`… and `StreamEnd` records, numbered
from 0, through a bounded queue: when the queue is full it waits, so a collector whose
aggregator is away holds a bounded amount. A file cut short sends no facts: only its start
and an end with the reason. Records below `skip` were acknowledged before (a restart, a
rewind): the file is parsed again from its start, which gives the same records (the
reduction of the same events is the same), and those are not handed out again.

Given `whole` (the shell's pool of worker processes, `commscope collect --jobs`), a file is
first reduced whole in a worker, from its start to its end as it is now: a file whose
document has ended is done there, on another core, with the same records; one still being
written (the worker finds it cut short) is read here as it grows, as without a pool, and so
is every file when no worker can take it (no pool, or it is shut down).

A read that fails — its worker died (killed, out of memory), an I/O error (`ReadError`), a
fault of the reader itself — is made again after a pause, `ATTEMPTS` reads in all, the last
one here in this thread whatever killed the workers. Then the file is lost (`lost`: the
`ReadFailure` key): its stream ends with the reason, so the report names it, and the shell
counts it and exits non-zero. What the bytes say (truncated, corrupt, no event) is no
failure: the stream ends with that reason at once, as offline.

A document that ends early is not reported at once: while the file changed within `settle_s`
the writer may be pausing, so it waits for the file to change and parses again. Only a file
quiet for `settle_s` (or any file once the collector stops) is reported truncated.
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import BrokenExecutor, Future
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final, Protocol

from commscope.collector.discover import file_size, rank_from_name, relative_folder, root_name
from commscope.collector.flight import parts
from commscope.collector.follow import open_followed
from commscope.collector.source import File, Opener, Rank, drain
from commscope.collector.sources import reader_of
from commscope.model.errors import DIED, ReadError, TraceError
from commscope.model.schema import (
    Event,
    Facts,
    FileStats,
    ReadFailure,
    Record,
    StreamEnd,
    StreamStart,
    TraceMeta,
)

FINGERPRINT_BYTES: Final = 64 * 1024
_RETRYABLE: Final = ("truncated", "empty file")
ATTEMPTS: Final = 3  # reads of a file that fail before it is lost (the last in its thread)


@dataclass(frozen=True)
class StreamSettings:
    quiet_s: float = 2.0  # a file not growing for this long is at its end (for this attempt)
    settle_s: float = 300.0  # a document still unfinished after this long is truncated
    poll_s: float = 0.2
    batch_events: int = 4096
    retry_s: float = 1.0  # the pause before a failed read is made again, doubled each time


@dataclass(frozen=True)
class Item:
    """A record on its way to the sender, with the stream's identity and its worker."""

    generation: int
    record: Record
    fingerprint_bytes: int
    path: str = ""
    log: str = ""  # a window of a tailed Inspector log: the log's stream id (`path`: the key)
    final: bool = False  # the last record of that log (its last window's end at the log's end)


@dataclass(frozen=True)
class Reduced:
    """A whole file reduced in a worker: its facts (records from 1), or why it cannot be."""

    facts: list[Facts]
    meta: TraceMeta
    stats: FileStats
    events: int
    error: str | None = None
    read_here: bool = False  # the worker could not (not whole yet, an I/O error): read it here


class _Reducer(Protocol):
    """What a file's events are reduced to while it is read (a fresh one per parse)."""

    def add_all(self, events: Iterable[Event]) -> None: ...

    def facts(self, stream: str, first_seq: int) -> Iterator[Facts]: ...


def read_document(
    path: Path,
    opener: Opener,
    reducer: Callable[[], _Reducer],
    batch_events: int,
    seen: Callable[[int], None] | None = None,
) -> tuple[Rank, _Reducer]:
    """A file of a source followed as a document (one rank per file: `source.Live`) read
    through `opener` into a fresh reducer by the one loop (`source.drain`); `seen`: told each
    batch's length. TraceError: what its bytes say; ReadError: the reading failed."""
    file = File(str(path), str(path), opener, batch_events=batch_events)
    try:
        ranks = drain(reader_of(path.name).read(file), reducer, seen)
    except OSError as exc:
        raise ReadError(str(path), f"unreadable ({exc.strerror or exc})") from None
    return ranks[0]


def finished_facts(rank: Rank, reduction: _Reducer, stream: str) -> Iterator[Facts]:
    """A whole file's records from 1: its reduction's facts, then a Flight Recorder dump's
    parts (`flight.parts`)."""
    seq = 1
    for part in reduction.facts(stream, 1):
        seq = part.seq + part.covers
        yield part
    if rank.flight is not None:
        yield from parts(rank.flight, stream, seq)


def retryable(reason: str) -> bool:
    """Whether a document with this reason may be whole later (cut short, or empty so far)."""
    return reason.startswith(_RETRYABLE)


def _read_failure(exc: Exception) -> tuple[ReadFailure, str]:
    """A failed read's key and reason."""
    if isinstance(exc, WorkerDiedError):
        return "worker_died", DIED
    if isinstance(exc, ReadError):
        return "unreadable", exc.reason
    if isinstance(exc, OSError):
        return "unreadable", f"unreadable ({exc.strerror or exc})"
    return "reader_failed", f"the reader failed ({type(exc).__name__}: {exc})"[:500]


def fingerprint_of_path(path: Path) -> tuple[str, int]:
    """The stream id of a file none of whose bytes could be read: over its name alone."""
    return _digest(path, b""), 0


def fingerprint(path: Path, length: int = FINGERPRINT_BYTES) -> tuple[str, int]:
    """The stream id of `path` (its name and first `length` bytes) and how many bytes it
    covers; OSError if it cannot be read."""
    with path.open("rb") as handle:
        head = handle.read(length)
    return _digest(path, head), len(head)


def _digest(path: Path, head: bytes) -> str:
    return hashlib.blake2b(str(path).encode() + b"\0" + head, digest_size=16).hexdigest()


class FileStream(threading.Thread):
    def __init__(
        self,
        *,
        path: Path,
        root: Path,
        node: str,
        skip: int,
        generation: int,
        out: queue.Queue[Item],
        settings: StreamSettings,
        stopping: Callable[[], bool],
        reducer: Callable[[], _Reducer],
        fingerprint_bytes: int | None = None,
        whole: Callable[[Path, str], Future[Reduced]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(name=f"stream {path.name}", daemon=True)
        self.path, self.root, self.node = path, root, node
        self.skip, self.generation = skip, generation
        self.out, self.settings, self.stopping = out, settings, stopping
        self.reducer, self.whole = reducer, whole
        self.fingerprint_bytes = (
            FINGERPRINT_BYTES if fingerprint_bytes is None else fingerprint_bytes
        )
        self.clock, self.sleep = clock, sleep
        self.cancelled = threading.Event()
        self.seq = 0
        self.events = 0
        self.error: str | None = None
        self.elsewhere = False  # reduced in a worker process
        self.stream: tuple[str, int] | None = None  # its stream id and the bytes it covers
        self.failures: list[ReadFailure] = []  # each read that failed
        self.lost: ReadFailure | None = None  # every read failed: why the last did

    def run(self) -> None:
        with contextlib.suppress(CancelledError):
            self._attempts()

    def _attempts(self) -> None:
        """Read the file, again after a failed read (see the module docstring), then lose it."""
        pause = self.settings.retry_s
        failure: tuple[ReadFailure, str] = ("reader_failed", "")
        for attempt in range(1, ATTEMPTS + 1):
            try:
                self._read(here=attempt == ATTEMPTS)
            except CancelledError:
                raise
            except Exception as exc:  # every failure is retried, then counted
                failure = _read_failure(exc)
                self.failures.append(failure[0])
            else:
                return
            if attempt < ATTEMPTS:
                self._pause(pause)
                pause *= 2
        self._lose(*failure)

    def _opened(self) -> tuple[str, int] | None:
        """The file's stream id and the bytes it covers, its StreamStart sent; None when it
        cannot be read (`error` says why). An empty file still gets its stream (and its
        reason) once it changes or the collector stops."""
        head = self._head()
        if head is not None:
            self.stream = head
            self._emit(self._start(head[0]), head[1])
        return head

    def _head(self) -> tuple[str, int] | None:
        """The file's stream id and the bytes it covers (`_opened`, no record sent)."""
        if file_size(self.path) == 0:
            self._wait_for_change(0)
        self.fingerprint_bytes = self._fingerprint_length()
        try:
            stream, covered = fingerprint(self.path, self.fingerprint_bytes)
        except OSError as exc:
            self.error = f"unreadable ({exc.strerror or exc})"
            return None
        self.error = None
        return stream, covered

    def _fingerprint_length(self) -> int:
        """How many of the file's first bytes its stream id covers."""
        return self.fingerprint_bytes

    def _read(self, here: bool) -> None:
        """One read of the file to its StreamEnd (`here`: not in a worker); raises what failed."""
        opened = self._opened()
        if opened is None:
            raise ReadError(str(self.path), self.error or "unreadable")
        stream, covered = opened
        reduced = None if here else self._reduced_elsewhere(stream)
        if reduced is not None:
            self.seq, self.events, self.elsewhere = 1, reduced.events, True
            for part in reduced.facts:
                self._emit(part, 0)
            self._emit(self._end(stream, reduced.meta, reduced.stats, reduced.error), covered)
            return
        while True:
            try:
                end = self._parse(stream)
            except ReadError:
                raise
            except TraceError as exc:
                if self._worth_retrying(exc.reason):
                    continue
                end = self._end(stream, TraceMeta(), FileStats(), exc.reason)
            self._emit(end, covered)
            return

    def _lose(self, key: ReadFailure, reason: str) -> None:
        """Every read failed: the stream (begun, else over the path alone) ends with why."""
        self.lost = key
        stream, covered = self.stream or fingerprint_of_path(self.path)
        self._emit(self._start(stream), covered)  # not again if it was handed out
        self.seq = max(self.seq, self.skip)
        why = f"lost after {ATTEMPTS} reads: {reason}"
        end = self._end(stream, TraceMeta(), FileStats(), why, lost=True)
        self._emit(end, covered)

    def _pause(self, seconds: float) -> None:
        """Wait `seconds` on the clock before a read again (CancelledError: told to stop)."""
        deadline = self.clock() + seconds
        while (left := deadline - self.clock()) > 0:
            if self.cancelled.is_set():
                raise CancelledError
            self.sleep(min(self.settings.poll_s, left))

    def _start(self, stream: str) -> StreamStart:
        return StreamStart(
            stream=stream,
            node=self.node,
            path=str(self.path),
            folder=relative_folder(self.root, self.path.parent),
            root_name=root_name(self.root),
            name_rank=rank_from_name(self.path),
        )

    def _parse(self, stream: str) -> StreamEnd:
        self.seq, self.events = 1, 0
        settings = self.settings
        opener = partial(
            open_followed,
            self.path,
            idle_s=settings.quiet_s,
            poll_s=settings.poll_s,
            stop=self._should_stop,
            clock=self.clock,
            sleep=self.sleep,
        )
        rank, reduction = read_document(
            self.path, opener, self.reducer, settings.batch_events, self._seen
        )
        for part in finished_facts(rank, reduction, stream):  # the document has ended
            self._emit(part, 0)
        return self._end(stream, rank.meta, rank.stats, None)

    def _seen(self, events: int) -> None:
        self.events += events

    def _reduced_elsewhere(self, stream: str) -> Reduced | None:
        """The file reduced whole by `whole`; None when there is no pool (or it cannot take
        the file) or when the worker could not (not whole yet: read here as it grows; an I/O
        error: read here, where it fails or not). WorkerDiedError: its worker died."""
        if self.whole is None:
            return None
        try:
            future = self.whole(self.path, stream)
        except (RuntimeError, OSError):  # shut down (the collector stops), or cannot start
            return None
        while not self.cancelled.is_set():
            try:
                reduced = future.result(timeout=0.1)
            except TimeoutError:
                continue
            except BrokenExecutor:  # a worker died (killed, out of memory)
                raise WorkerDiedError(DIED) from None
            return None if reduced.read_here else reduced
        future.cancel()
        raise CancelledError

    def _end(
        self, stream: str, meta: TraceMeta, stats: FileStats, error: str | None, lost: bool = False
    ) -> StreamEnd:
        size = file_size(self.path)
        return StreamEnd(
            stream=stream,
            seq=self.seq,
            meta=meta,
            stats=stats,
            size_bytes=size,
            error=error,
            lost=lost,
        )

    def _emit(self, record: Record, covered: int) -> None:
        if isinstance(record, Facts):
            self.seq += 1
        if record.seq < self.skip:
            return
        self._put(Item(self.generation, record, covered, str(self.path)))
        self.skip = record.seq + 1  # a parse again after a pause resumes after it

    def _put(self, item: Item) -> None:
        """Hand `item` out, waiting while the queue is full (CancelledError: told to stop)."""
        while True:
            if self.cancelled.is_set():
                raise CancelledError
            try:
                self.out.put(item, timeout=0.1)
            except queue.Full:
                continue
            return

    def _should_stop(self) -> bool:
        return self.stopping() or self.cancelled.is_set()

    def _worth_retrying(self, reason: str) -> bool:
        """A document cut short while its file still changes: wait for more, parse again."""
        if self._should_stop() or not retryable(reason):
            return False
        return self._wait_for_change(file_size(self.path))

    def _wait_for_change(self, size: int) -> bool:
        """Whether the file's size moves from `size` within `settle_s` (before a stop)."""
        deadline = self.clock() + self.settings.settle_s
        while self.clock() < deadline and not self._should_stop():
            if file_size(self.path) != size:
                return True
            self.sleep(self.settings.poll_s)
        if self.cancelled.is_set():
            raise CancelledError
        return False


class CancelledError(Exception):
    """The stream's worker was told to stop (a rewind, or the aggregator has it all)."""


class WorkerDiedError(Exception):
    """The worker process reducing the file died (the pool is broken)."""
