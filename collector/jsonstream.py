"""One streaming pass over a Chrome-trace JSON document (pure: works on any binary stream).

ijson's C backend parses `traceEvents` items from a reader; every other parse pipeline costs
a second tokenisation of the whole file (measured: 2.5x slower). So the reader handed to ijson
is a `Tap`: it sees every chunk once and keeps what the metadata needs — the bytes before the
top-level `traceEvents` key (Kineto's header) and the last chunks (Kineto writes `traceName`,
`displayTimeUnit` and `baseTimeNanoseconds` after the events). Both ends are small objects
parsed with the stdlib `json` module; memory stays flat whatever the file size.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO, Any, Final

from commscope.collector.errors import BackendError

try:
    from ijson.backends import yajl2_c as _ijson
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    _IJSON_ERROR: Exception | None = exc
else:
    _IJSON_ERROR = None

CHUNK_BYTES: Final = 64 * 1024
HEAD_LIMIT_BYTES: Final = 4 * 1024 * 1024
TAIL_CHUNKS: Final = 2
_KEY: Final = b'"traceEvents"'


def require_c_backend() -> None:
    """Raise BackendError unless ijson's yajl2_c backend imports."""
    if _IJSON_ERROR is not None:
        raise BackendError(
            "ijson's C backend (yajl2_c) is not available "
            f"({_IJSON_ERROR}); reinstall ijson from a wheel: pip install --force-reinstall ijson"
        )


class Tap:
    """A file-like reader that remembers the document's head and tail as it is read."""

    def __init__(self, raw: IO[bytes], on_chunk: Callable[[int], None] | None = None) -> None:
        self._raw = raw
        self._on_chunk = on_chunk
        self._head = bytearray()
        self._head_done = False
        self._scan_from = 0
        self.head: dict[str, Any] | None = None
        self.tail: deque[bytes] = deque(maxlen=TAIL_CHUNKS)
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read(size)
        if data:
            self.bytes_read += len(data)
            self.tail.append(data)
            if not self._head_done:
                self._grow_head(data)
            if self._on_chunk is not None:
                self._on_chunk(len(data))
        return data

    def _grow_head(self, data: bytes) -> None:
        self._head += data
        while (found := self._head.find(_KEY, self._scan_from)) >= 0:
            self._scan_from = found + 1
            head = head_object(bytes(self._head[:found]))
            if head is not None:
                self.head = head
                self._finish_head()
                return
        self._scan_from = max(0, len(self._head) - len(_KEY))
        if len(self._head) > HEAD_LIMIT_BYTES:
            self._finish_head()

    def _finish_head(self) -> None:
        self._head_done = True
        self._head = bytearray()

    def trailing(self) -> dict[str, Any]:
        """Top-level keys written after the `traceEvents` array (call after the parse)."""
        return tail_object(b"".join(self.tail))


def head_object(prefix: bytes) -> dict[str, Any] | None:
    """The top-level keys before `"traceEvents"`, if `prefix` ends right before that key."""
    body = prefix.rstrip()
    if body.endswith(b","):
        body = body[:-1]
    elif not body.endswith(b"{"):
        return None
    try:
        value = json.loads(body + b"}")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def tail_object(tail: bytes, max_candidates: int = 64) -> dict[str, Any]:
    """Keys after the `traceEvents` array, given the document's last bytes.

    The array's closing `]` is the leftmost of the last `max_candidates` brackets after which
    the rest of the document reads as the remainder of an object.
    """
    found: dict[str, Any] = {}
    end = len(tail)
    for _ in range(max_candidates):
        end = tail.rfind(b"]", 0, end)
        if end < 0:
            break
        rest = tail[end + 1 :].lstrip()
        candidate = _remainder(rest)
        if candidate is not None:
            found = candidate
    return found


def _remainder(rest: bytes) -> dict[str, Any] | None:
    if rest.startswith(b"}"):
        body = b"{}" if not rest[1:].strip() else b""
    elif rest.startswith(b","):
        body = b"{" + rest[1:]
    else:
        return None
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def trace_items(tap: Tap) -> Iterator[dict[str, Any]]:
    """Every item of the top-level `traceEvents` array, parsed by ijson's C backend.

    Raises ijson's errors on a document that is truncated or not JSON: the caller decides.
    """
    require_c_backend()
    items: Iterator[dict[str, Any]] = _ijson.items(
        tap, "traceEvents.item", use_float=True, buf_size=CHUNK_BYTES
    )
    return items
