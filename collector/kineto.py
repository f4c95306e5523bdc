"""Stream a PyTorch profiler (Kineto) trace into batches of typed events (pure over a stream).

`TraceReader(stream, path).batches()` parses the document once — Kineto's indented layout and
compact JSON on a seekable stream by `fastparse` (msgspec, straight into RawEvents), anything
else, or after a fast-path miss from the start again, with ijson's C backend — and yields lists
of events as it goes (one normaliser reads both); `meta` and `stats` are complete once it is
exhausted. A document that is truncated, corrupt or not a trace raises `TraceError` with a
plain reason; the caller discards what it had read from that file. Read as a trace to analyse
(`trace_batches`), a document with no event the reader keeps (`"traceEvents": []`, or
metadata alone: a profiler that recorded nothing) raises it too: skipped, never "analysed".

yajl holds no integer beyond 64 bits, no float beyond a double, no NaN or Infinity, and Python
no text that is not UTF-8: a document that fails on such a value is valid JSON (or nearly), so
on a seekable stream it is read again from its start with those numbers turned into strings
and those bytes into U+FFFD (`jsonguard.NumberFixer`), and the items already handled are
passed over: only the offending values are lost, never the file. `KINETO` is the source
(`collector.source`) that reads traces so.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Final

import ijson
from commscope.collector.fastparse import fast_chunks
from commscope.collector.jsonstream import Tap, trace_items
from commscope.collector.normalize import Normalizer, from_item
from commscope.collector.source import File, Live, Rank, Reading
from commscope.model.errors import (
    NOT_A_TRACE,
    LayoutMissError,
    LimitError,
    NotATraceError,
    ReadError,
    TraceError,
)
from commscope.model.names import base_name, rank_in_name
from commscope.model.schema import Event, FileStats, TraceMeta
from commscope.model.schema import Source as SourceKind

BATCH_EVENTS: Final = 4096
_END: Final = object()
# yajl's complaints that a mended value cures (NaN and Infinity are invalid chars to it): the
# only errors, with Python's UnicodeDecodeError, worth reading a document again for.
_MENDED: Final = "value_mended"
_MENDABLE: Final = (
    "integer overflow",
    "numeric (floating point) overflow",
    "invalid char",
    "invalid bytes in UTF8",
)


class TraceReader:
    """One pass over one trace document; see the module docstring."""

    def __init__(
        self,
        stream: IO[bytes],
        path: str,
        on_chunk: Callable[[int], None] | None = None,
        fast: bool = True,
    ) -> None:
        self.path = path
        self._stream, self._on_chunk = stream, on_chunk
        self._tap = Tap(stream, on_chunk)
        self._normalizer = Normalizer()
        self._head_read = False
        seekable = bool(getattr(stream, "seekable", bool)())  # a bare reader may lack it
        self.parser = "fast" if fast and seekable else "ijson"  # the path that read the events
        self.fast_miss = "" if seekable else "stream not seekable"  # why ijson read them
        if not fast:
            self.fast_miss = "fast path off"

    @property
    def meta(self) -> TraceMeta:
        return self._normalizer.meta

    @property
    def stats(self) -> FileStats:
        return self._normalizer.stats

    @property
    def has_gpu(self) -> bool:
        return self._normalizer.has_gpu

    def batches(self, size: int = BATCH_EVENTS) -> Iterator[list[Event]]:
        """The file's events in lists of `size` (the last may be shorter); TraceError on a
        document that cannot be read."""
        try:
            yield from self._parse(size)
        except ijson.JSONError as exc:
            raise TraceError(self.path, self._json_reason(exc)) from None
        except LimitError as exc:
            raise TraceError(self.path, str(exc)) from None
        except UnicodeDecodeError:
            raise TraceError(self.path, "corrupt: text that is not UTF-8") from None
        except RecursionError:
            raise TraceError(self.path, "nested too deeply to read (not a trace)") from None
        except EOFError:
            raise TraceError(self.path, "truncated gzip stream (still being written?)") from None
        except (OSError, zlib.error) as exc:
            # with an errno the reading failed (worth another read), else the bytes did (gzip's
            # BadGzipFile, zlib's error)
            failed = ReadError if getattr(exc, "errno", None) else TraceError
            raise failed(self.path, f"unreadable ({_short(exc)})") from None

    def trace_batches(self, size: int = BATCH_EVENTS) -> Iterator[list[Event]]:
        """`batches` of a trace to analyse: TraceError after the last when none held an event."""
        kept = 0
        for batch in self.batches(size):
            kept += len(batch)
            yield batch
        if not kept:
            raise TraceError(self.path, _no_events(self.stats.events))

    def _json_reason(self, exc: Exception) -> str:
        """Truncated or corrupt, as yajl tells: an error at the end of the input (its context
        line is blank) means the document was cut short, unless a NUL byte (never in JSON
        text) blanked that line."""
        if self._tap.bytes_read == 0:
            return "empty file (still being written?)"
        text = str(exc)
        lines = text.split("\n")
        at_end = len(lines) > 1 and not lines[1].strip()
        if "premature EOF" in text or (at_end and b"\x00" not in self._tap.tail[-256:]):
            return "truncated: the JSON ends before the document is complete (still being written?)"
        return f"corrupt JSON ({_short(exc)})"

    @property
    def _mended(self) -> int:
        """Values mended on the second read (numbers read as strings, bytes as U+FFFD)."""
        return self._tap.fixer.fixed if self._tap.fixer is not None else 0

    def _chunks(self) -> Iterator[list[Any]]:
        """Every item of `traceEvents` once, in lists, reading the document again (see the
        module docstring) after an error a mended value cures, or a fast-path miss."""
        handed = 0
        while True:
            try:
                seen = 0
                for chunk in self._raw_chunks():
                    seen += len(chunk)
                    if seen > handed:
                        fresh = chunk[len(chunk) - (seen - handed) :] if handed else chunk
                        handed = seen
                        yield fresh
                return
            except LayoutMissError as miss:
                self._to_ijson(str(miss))
            except (ijson.JSONError, UnicodeDecodeError) as exc:
                if not self._rewind(exc):
                    raise

    def _to_ijson(self, reason: str) -> None:
        """Read the document again from its first byte with ijson (see `fastparse`)."""
        self.parser, self.fast_miss = "ijson", reason
        self._stream.seek(0)
        self._tap = Tap(self._stream, _beyond(self._on_chunk, self._tap.bytes_read))

    def _raw_chunks(self) -> Iterator[list[Any]]:
        tap = self._tap
        items = fast_chunks(tap) if self.parser == "fast" else _lists(trace_items(tap))
        first: Any = next(items, _END)  # the header is read by the time the first item is parsed
        if self._tap.head is None:
            error = NotATraceError if first is _END else TraceError
            raise error(self.path, NOT_A_TRACE)
        if not self._head_read:
            self._normalizer.set_top(self._tap.head)
            self._head_read = True
        if first is not _END:
            yield first
        yield from items

    def _rewind(self, error: Exception) -> bool:
        """Start again from the document's first byte, mending numbers and UTF-8; False if
        that cannot help (done already, another error, or a stream that cannot go back)."""
        stream = self._stream
        first_line = str(error).split("\n", 1)[0]
        mendable = isinstance(error, UnicodeDecodeError) or any(m in first_line for m in _MENDABLE)
        if self._tap.fixer is not None or not mendable or not stream.seekable():
            return False
        stream.seek(0)
        self._tap = Tap(stream, _beyond(self._on_chunk, self._tap.bytes_read), mend=True)
        return True

    def _parse(self, size: int) -> Iterator[list[Event]]:
        """Batches of `size` events (the last may be shorter), cut by the count of events
        emitted: the same batches whatever the reads were (a stream parsed again after a pause
        passes over the batches it handed by their number)."""
        if size < 1:
            raise ValueError(f"batches of {size} events")
        normalizer = self._normalizer
        out = normalizer.out
        count = 0
        for chunk in self._chunks():
            normalizer.feed(chunk)
            count += len(chunk)
            if len(out) >= size:
                yield from _cut(out, size)
        normalizer.set_top(self._tap.trailing())
        normalizer.finish()
        normalizer.stats.events = count
        normalizer.stats.bytes_read = self._tap.bytes_read
        if self._mended:
            normalizer.drop(_MENDED, self._mended)
        yield from _cut(out, size, whole=True)


def _no_events(items: int) -> str:
    """Why a whole document with no event kept is skipped (`items`: traceEvents' length)."""
    if not items:
        return "empty trace: traceEvents holds no event"
    return (
        f"empty trace: none of its {items} traceEvents items is an event commscope reads "
        "(no kernel, op, annotation or step)"
    )


def _cut(out: list[Event], size: int, whole: bool = False) -> Iterator[list[Event]]:
    """The events of `out` in lists of `size`, taken out of it; what is left over when
    `out` does not divide stays there, unless `whole` (then it is the last, shorter list)."""
    end = len(out) if whole else len(out) - len(out) % size
    for start in range(0, end, size):
        yield out[start : start + size]
    del out[:end]


def _lists(items: Iterator[Any]) -> Iterator[list[Any]]:
    """ijson's items as RawEvents in lists: the first alone (the head is checked after it),
    then 1024."""
    items = map(from_item, items)
    yield from ([item] for item in itertools.islice(items, 1))
    while chunk := list(itertools.islice(items, 1024)):
        yield chunk


def _beyond(on_chunk: Callable[[int], None] | None, reported: int) -> Callable[[int], None] | None:
    """A progress callback that stays quiet over the first `reported` bytes (read again)."""
    if on_chunk is None:
        return None
    seen = 0

    def report(nbytes: int) -> None:
        nonlocal seen
        fresh = min(nbytes, seen + nbytes - reported)
        seen += nbytes
        if fresh > 0:
            on_chunk(fresh)

    return report


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:160]


# ---------------------------------------------------------------- the source


@dataclass(frozen=True)
class Kineto:
    """PyTorch profiler (Kineto) traces: one rank per file, followed live as documents."""

    kind: SourceKind = "kineto"
    live: Live | None = "document"
    lacks: Mapping[str, str] = field(default_factory=dict)
    suffixes: tuple[str, ...] = (".json", ".json.gz")

    def claims(self, name: str) -> bool:
        return name.endswith(self.suffixes)

    def read(self, file: File) -> Reading:
        return _Trace(file)


class _Trace:
    """One read of a trace (`TraceReader`): its one rank, keyed 0."""

    def __init__(self, file: File) -> None:
        self.file = file
        self.reader: TraceReader | None = None

    def batches(self) -> Iterator[tuple[Hashable, list[Event]]]:
        file = self.file
        with file.open() as stream:
            self.reader = TraceReader(stream, file.shown, file.on_chunk)
            for batch in self.reader.trace_batches(file.batch_events or BATCH_EVENTS):
                yield 0, batch

    def ranks(self) -> list[Rank]:
        if self.reader is None:
            return []
        named = rank_in_name(base_name(self.file.shown))
        return [Rank(0, self.reader.meta, self.reader.stats, name_rank=named)]


KINETO: Final = Kineto()
