"""The fast reader of Kineto's indented layout (pure: works on a `Tap` over any binary stream).

Kineto writes `traceEvents` as one object per indented block: `  {` opens an event on its own
line and `  },` + newline + `  {` separates two, at the indentation of the first event. A raw
newline is never inside a JSON string, so that separator is found with a byte search, and all
the events before the last separator of a read are decoded in one call by msgspec. Every byte
still goes through the tap (head, tail, guard, byte count are those of the ijson path).

Nothing is approximated: whatever this reader cannot prove it reads exactly as ijson's C
backend does raises `LayoutMissError`, and the caller reads the document again with ijson,
passing over the items already handed. msgspec refuses everything yajl refuses (measured: bad
numbers, floats beyond a double, control bytes, bad escapes and UTF-8, trailing commas or
bytes) and more (a lone surrogate escape, which yajl reads as "?"), and reads every value both
accept alike (same types: int, or float as `use_float=True` gives), but for integers beyond
int64 (and -2**63): yajl refuses them, msgspec reads them. So a miss is: no separator in
MAX_PENDING_BYTES (compact JSON, other writers), a head or tail not in that layout, a chunk
msgspec refuses, and any integer yajl cannot hold or any `NaN` / `Infinity`, even inside a
string (`jsonguard` mends those on the ijson path).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

import msgspec
from commscope.collector.errors import LayoutMissError
from commscope.collector.jsonguard import _unholdable
from commscope.collector.jsonstream import HEAD_LIMIT_BYTES, Tap

READ_BYTES: Final = 256 * 1024
MAX_PENDING_BYTES: Final = 16 * 1024 * 1024
_WS: Final = b" \t\r\n"
_OPENING: Final = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[[ \t\r]*\n([ \t]*)\{')
_DIGITS: Final = bytes(ord("0") if 48 <= b <= 57 else ord(" ") for b in range(256))
_OPENING_BYTES: Final = 4096  # the most bytes from the key to the first `{` looked at
_LONG: Final = b"0" * 19  # the digits of an integer that may not fit int64
_NUMBER: Final = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_NUMBER_BYTES: Final = frozenset(b"0123456789.eE+-")
_DECODER: Final = msgspec.json.Decoder()


def fast_items(tap: Tap, read_bytes: int = READ_BYTES) -> Iterator[Any]:
    """Every item of `traceEvents`, as ijson's items would give them (see `fast_chunks`)."""
    for chunk in fast_chunks(tap, read_bytes):
        yield from chunk


def fast_chunks(tap: Tap, read_bytes: int = READ_BYTES) -> Iterator[list[Any]]:
    """The items of `traceEvents` in lists, as ijson's items would give them; LayoutMissError
    if the document is not Kineto's layout or holds anything only the ijson path reads right.
    `tap` must not have been read yet."""
    buf = _read_head(tap, read_bytes)
    at = tap.head_at
    assert at is not None  # _read_head returns once the tap has the head
    _check_head(bytes(buf[:at]))
    opening = _OPENING.match(buf, at)
    while opening is None and len(buf) - at < _OPENING_BYTES and (data := tap.read(read_bytes)):
        buf += data  # the head ends at the key: the reads so far may stop before `[` or `{`
        opening = _OPENING.match(buf, at)
    if opening is None:
        raise LayoutMissError("traceEvents does not open with an event on its own line")
    indent = opening.group(1)
    del buf[: opening.end() - 1]  # buf now starts with the first event's `{`
    sep = b"\n" + indent + b"},\n" + indent + b"{"
    while data := tap.read(read_bytes):
        buf += data
        cut = buf.rfind(sep)
        if cut >= 0:
            yield decode_events(bytes(buf[: cut + len(indent) + 2]))
            del buf[: cut + len(sep) - 1]
        elif len(buf) > MAX_PENDING_BYTES:
            raise LayoutMissError(f"no event boundary in {MAX_PENDING_BYTES // 2**20} MB")
    yield _last_events(bytes(buf), indent)


def _read_head(tap: Tap, read_bytes: int) -> bytearray:
    """Everything read until the tap has found the head (LayoutMissError if it does not)."""
    buf = bytearray()
    while tap.head is None:
        data = tap.read(read_bytes)
        if not data or len(buf) > HEAD_LIMIT_BYTES:
            raise LayoutMissError("no top-level traceEvents key in the head")
        buf += data
    return buf


def _check_head(head: bytes) -> None:
    """LayoutMissError unless the head (read by `json`) is JSON yajl reads too."""
    body = head.rstrip(_WS)
    body = body[:-1] if body.endswith(b",") else body
    check_numbers(body)
    try:
        _DECODER.decode(body + b"}")
    except msgspec.DecodeError as exc:
        raise LayoutMissError(f"head: {exc}") from None


def _last_events(rest: bytes, indent: bytes) -> list[Any]:
    """The events after the last separator, then a check of what follows the array."""
    closing = re.compile(re.escape(b"\n" + indent + b"}") + rb"[ \t\r\n]*\]").search(rest)
    if closing is None:
        raise LayoutMissError("traceEvents does not close after an event on its own line")
    events = decode_events(rest[: closing.start() + len(indent) + 2])
    _check_tail(rest[closing.end() :])
    return events


def _check_tail(tail: bytes) -> None:
    """LayoutMissError unless the bytes after `traceEvents` close the document as valid JSON."""
    body = tail.lstrip(_WS)
    if body.startswith(b"}") and not body[1:].strip(_WS):
        return
    if not body.startswith(b","):
        raise LayoutMissError("traceEvents is not followed by `,` or the document's end")
    check_numbers(body)
    try:
        _DECODER.decode(b"{" + body[1:])
    except msgspec.DecodeError as exc:
        raise LayoutMissError(f"after traceEvents: {exc}") from None


def decode_events(chunk: bytes) -> list[Any]:
    """The events of `chunk` (whole events joined by commas); LayoutMissError if msgspec refuses
    it or it holds a value yajl reads otherwise."""
    check_numbers(chunk)
    try:
        events: list[Any] = _DECODER.decode(b"[" + chunk + b"]")
    except msgspec.DecodeError as exc:
        raise LayoutMissError(f"events: {exc}") from None
    return events


def check_numbers(data: bytes) -> None:
    """LayoutMissError if `data` may hold an integer yajl cannot hold, NaN or Infinity (see the
    module docstring). Digits are found at C speed; only the rare runs of 19 digits or more are
    looked at closely (floats beyond a double: msgspec refuses them)."""
    if b"NaN" in data or b"Infinity" in data:
        raise LayoutMissError("NaN or Infinity (mended on the ijson path)")
    digits = data.translate(_DIGITS)
    found = digits.find(_LONG)
    while found >= 0:
        found = digits.find(_LONG, _check_token(data, found))


def _check_token(data: bytes, at: int) -> int:
    """LayoutMissError if the token around `at` is a number yajl cannot hold; its end. A token
    that is not a number lies inside a string (elsewhere msgspec refuses it): harmless."""
    start, end = at, at
    while start > 0 and data[start - 1] in _NUMBER_BYTES:
        start -= 1
    while end < len(data) and data[end] in _NUMBER_BYTES:
        end += 1
    token = data[start:end]
    if _NUMBER.fullmatch(token) is not None and _unholdable(token):  # else not a number
        raise LayoutMissError("a number beyond int64 or a double (mended on the ijson path)")
    return end
