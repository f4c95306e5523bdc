"""One streaming pass over a Chrome-trace JSON document (pure: works on any binary stream).

ijson's C backend parses `traceEvents` items from a reader; every other parse pipeline costs
a second tokenisation of the whole file (measured: 2.5x slower). So the reader handed to ijson
is a `Tap`: it sees every chunk once and keeps what the metadata needs — the bytes before the
top-level `traceEvents` key (Kineto's header) and the last chunks (Kineto writes `traceName`,
`displayTimeUnit` and `baseTimeNanoseconds` after the events). Both ends are small objects
parsed with the stdlib `json` module; memory stays flat whatever the file size.

The tap also hands every chunk to a `Guard` (depth and string-length limits; a reader that
proves the limits itself may turn it off with `unguard`), drops a UTF-8 byte-order mark, and
with `mend` mends the values yajl cannot hold (`jsonguard`).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Callable, Iterator
from typing import IO, Any, Final

from commscope.collector.jsonguard import Guard, NumberFixer
from commscope.model.errors import BackendError

try:
    from ijson.backends import yajl2_c as _ijson
except ImportError as exc:  # pragma: no cover - exercised only on a broken install
    _IJSON_ERROR: Exception | None = exc
else:
    _IJSON_ERROR = None

_CHUNK_BYTES: Final = 64 * 1024
HEAD_LIMIT_BYTES: Final = 4 * 1024 * 1024
TAIL_BYTES: Final = 128 * 1024
_KEY: Final = b'"traceEvents"'
_STRUCTURE: Final = re.compile(rb'["\[\]{}]')
_KEY_BEFORE: Final = re.compile(rb'"traceEvents"\s*:\s*\Z')
_QUOTE, _BACKSLASH, _OPEN_ARRAY, _CLOSE_ARRAY = ord('"'), ord("\\"), ord("["), ord("]")
_CLOSERS: Final = frozenset(b"]}")
_BOM: Final = b"\xef\xbb\xbf"


def require_c_backend() -> None:
    """Raise BackendError unless ijson's yajl2_c backend imports."""
    if _IJSON_ERROR is not None:
        raise BackendError(
            "ijson's C backend (yajl2_c) is not available "
            f"({_IJSON_ERROR}); reinstall ijson from a wheel: pip install --force-reinstall ijson"
        )


class Tap:
    """A file-like reader that remembers the document's head and tail as it is read."""

    def __init__(
        self,
        raw: IO[bytes],
        on_chunk: Callable[[int], None] | None = None,
        mend: bool = False,
    ) -> None:
        self._raw = raw
        self._on_chunk = on_chunk
        self._guard: Guard | None = Guard()
        self.fixer = NumberFixer() if mend else None
        self._head = bytearray()
        self._head_done = False
        self._scan_from = 0
        self.head: dict[str, Any] | None = None
        self.head_at: int | None = None  # offset of the `"traceEvents"` key the head ends at
        self.trailer: dict[str, Any] | None = None  # the keys after the events, if read already
        self._tail: deque[bytes] = deque()
        self._tail_bytes = 0
        self.bytes_read = 0

    def read(self, size: int = -1) -> bytes:
        data = self._next(size)
        if not data:
            return data
        if self._guard is not None:
            self._guard.check(data)
        self._keep_tail(data)
        if not self._head_done:
            self._grow_head(data)
        return data

    def unguard(self) -> None:
        """Stop handing reads to the guard: the reader proves the limits on what follows."""
        self._guard = None

    def _next(self, size: int) -> bytes:
        """The next bytes of the document as the parser should see them (b"" at its end)."""
        while True:
            raw = self._raw.read(size) if self.bytes_read else self._first(size)
            if raw and self._on_chunk is not None:
                self._on_chunk(len(raw))
            data = raw[len(_BOM) :] if not self.bytes_read and raw.startswith(_BOM) else raw
            self.bytes_read += len(raw)
            if self.fixer is not None:
                data = self.fixer.feed(data, final=not raw)
            if data or not raw:
                return data

    def _first(self, size: int) -> bytes:
        """The first read, long enough to tell whether the document opens with a BOM."""
        data = self._raw.read(size)
        while data and len(data) < len(_BOM) and (more := self._raw.read(size)):
            data += more
        return data

    def _keep_tail(self, data: bytes) -> None:
        """Keep the fewest last reads that hold TAIL_BYTES (reads may be any size)."""
        self._tail.append(data)
        self._tail_bytes += len(data)
        while self._tail_bytes - len(self._tail[0]) >= TAIL_BYTES:
            self._tail_bytes -= len(self._tail.popleft())

    @property
    def tail(self) -> bytes:
        """The document's last TAIL_BYTES (fewer if it is shorter)."""
        return b"".join(self._tail)[-TAIL_BYTES:]

    def _grow_head(self, data: bytes) -> None:
        self._head += data
        while (found := self._head.find(_KEY, self._scan_from)) >= 0:
            self._scan_from = found + 1
            head = head_object(bytes(self._head[:found]))
            if head is not None:
                self.head, self.head_at = head, found
                self._finish_head()
                return
        self._scan_from = max(0, len(self._head) - len(_KEY))
        if len(self._head) > HEAD_LIMIT_BYTES:
            self._finish_head()

    def _finish_head(self) -> None:
        self._head_done = True
        self._head = bytearray()

    def trailing(self) -> dict[str, Any]:
        """Top-level keys written after the `traceEvents` array (call after the parse): those
        the reader set in `trailer`, else from the document's last TAIL_BYTES."""
        return self.trailer if self.trailer is not None else tail_object(self.tail)


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


def tail_object(tail: bytes) -> dict[str, Any]:
    """Keys after the `traceEvents` array, given the document's last bytes ({} if none)."""
    end = _array_end(tail)
    if end is None:
        return {}
    return _remainder(tail[end + 1 :].lstrip()) or {}


def document_closed(tail: bytes) -> bool:
    """Whether a document whose last bytes are `tail` ends whole: its `traceEvents` array
    closes, and what follows is the rest of the top-level object, closed."""
    end = _array_end(tail)
    return end is not None and _remainder(tail[end + 1 :].lstrip()) is not None


def _array_end(tail: bytes) -> int | None:
    """Offset in `tail` of the `]` that closes the top-level `traceEvents` array.

    Scans back from the document's end over structural bytes only, outside strings (a quote
    after an odd run of backslashes is escaped). A top-level array is `traceEvents` when its
    key says so, or when it does not even open within `tail` (it is the big one).
    """
    depth, in_string, candidate = 0, False, None
    for match in reversed(list(_STRUCTURE.finditer(tail))):
        pos = match.start()
        byte = tail[pos]
        if byte == _QUOTE:
            if not _escaped(tail, pos):
                in_string = not in_string
        elif in_string:
            continue
        elif byte in _CLOSERS:
            depth += 1
            if depth == 2 and byte == _CLOSE_ARRAY:
                candidate = pos
        else:
            depth -= 1
            if depth == 1 and candidate is not None:
                if byte == _OPEN_ARRAY and key_before(tail, pos):
                    return candidate
                candidate = None
            if depth <= 0:
                return None
    return candidate if depth >= 2 else None


def key_before(data: bytes | bytearray, pos: int) -> bool:
    """Whether the `[` at `pos` follows the `"traceEvents"` key within 64 bytes."""
    return _KEY_BEFORE.search(data, max(0, pos - 64), pos) is not None


def _escaped(data: bytes, pos: int) -> bool:
    slashes = 0
    while pos - slashes - 1 >= 0 and data[pos - slashes - 1] == _BACKSLASH:
        slashes += 1
    return slashes % 2 == 1


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
        tap, "traceEvents.item", use_float=True, buf_size=_CHUNK_BYTES
    )
    return items
