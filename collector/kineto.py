"""Stream a PyTorch profiler (Kineto) trace into batches of typed events (pure over a stream).

`TraceReader(stream, path).batches()` parses the document once with ijson's C backend and
yields lists of events as it goes; `meta` and `stats` are complete once it is exhausted. A
document that is truncated, corrupt or not a trace raises `TraceError` with a plain reason;
the caller discards what it had read from that file.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Iterator
from typing import IO, Any, Final

import ijson
from commscope.collector.errors import NOT_A_TRACE, NotATraceError, TraceError
from commscope.collector.jsonstream import Tap, trace_items
from commscope.collector.normalize import Normalizer
from commscope.collector.schema import Event, FileStats, TraceMeta

BATCH_EVENTS: Final = 4096
_NOT_OBJECT: Final = "traceEvents item that is not an object"
_END: Final = object()
_ODD_CAT: Final = "event whose cat is not a string"


class TraceReader:
    """One pass over one trace document; see the module docstring."""

    def __init__(
        self, stream: IO[bytes], path: str, on_chunk: Callable[[int], None] | None = None
    ) -> None:
        self.path = path
        self._tap = Tap(stream, on_chunk)
        self._normalizer = Normalizer()

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
        try:
            yield from self._parse(size)
        except ijson.JSONError as exc:
            raise TraceError(self.path, self._json_reason(exc)) from None
        except EOFError:
            raise TraceError(self.path, "truncated gzip stream (still being written?)") from None
        except (OSError, zlib.error) as exc:
            raise TraceError(self.path, f"unreadable ({_short(exc)})") from None

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

    def _parse(self, size: int) -> Iterator[list[Event]]:
        normalizer = self._normalizer
        out, handlers, tap = normalizer.out, normalizer.handlers, self._tap
        items = trace_items(tap)
        first: Any = next(items, _END)  # the header is read by the time the first item is parsed
        if tap.head is None:
            error = NotATraceError if first is _END else TraceError
            raise error(self.path, NOT_A_TRACE)
        normalizer.set_top(tap.head)
        count = 0
        for raw in items if first is _END else itertools.chain((first,), items):
            count += 1
            try:
                handler = handlers.get(raw.get("cat"))
            except (AttributeError, TypeError):
                normalizer.drop(_NOT_OBJECT if type(raw) is not dict else _ODD_CAT)
                continue
            if handler is not None:
                handler(raw)
            if not count & 1023 and len(out) >= size:
                yield out[:]
                out.clear()
        normalizer.set_top(tap.trailing())
        normalizer.finish()
        normalizer.stats.events = count
        normalizer.stats.bytes_read = tap.bytes_read
        if out:
            yield out[:]
            out.clear()


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:160]
