"""The fast reader of the common layouts of `traceEvents` (pure: works on a `Tap` over any
binary stream).

Kineto writes `traceEvents` as one object per indented block: `  {` opens an event on its own
line and `  },` + newline + `  {` separates two, at the indentation of the first event. A raw
newline is never inside a JSON string, so that separator is found with a byte search, and all
the events before the last separator of a read are decoded in one call by msgspec, straight
into typed `FastEvent`s (`RawEvent`s). Other writers (`json.dump`, HTA's and TraceLens' trace
filters) put events one after another: `},{`, `}, {` or `},` + newline + `{` between two, keys
in any order. Such a `}` may lie inside a string or close a nested value, so each is only a
candidate: the bytes up to it, then `]`, are decoded, and they form a whole array exactly when
it ends an event (`_wrong_cut`: elsewhere msgspec fails at the end of those bytes); a read
tries its last _TRIES candidates back. Every byte still goes through the tap (head, tail, byte
count are those of the ijson path).

Nothing is approximated: whatever this reader cannot prove it reads exactly as ijson's C
backend does raises `LayoutMissError`, and the caller reads the document again with ijson,
passing over the items already handed. msgspec refuses everything yajl refuses (measured: bad
numbers, control bytes, bad escapes, NaN and Infinity, trailing commas or bytes) and more (a
lone surrogate escape, which yajl reads as "?"), and reads every value both accept alike (same
types: int, or float as `use_float=True` gives). What it would let through in a value it skips
or keeps raw (bytes that are not UTF-8, floats beyond a double, integers beyond int64 and
-2**63) it refuses here in every value, for it skips none: an event's keys are all Kineto's
(`forbid_unknown_fields`), each typed so (`Scalar`, `_Args`) that an integer yajl cannot hold is
a ValidationError, and every string is decoded (so checked as UTF-8).

So a miss is: no separator in MAX_PENDING_BYTES (1 MiB between cuts in the other layouts, or
more wrong candidates than cuts plus 64: the ijson path is cheaper), a head or tail in no
layout read here, a key Kineto does not write, a chunk msgspec refuses, and any number token
yajl cannot hold (`jsonguard` mends those on the ijson path; the head and trailer, decoded
untyped, are scanned for them: `_check_numbers`).

The depth and string-length limits (`jsonguard`) are proven rather than walked byte by byte
(the tap's guard cost a quarter of this path): the tap guards the head, then `unguard`s.
msgspec would read a document nested hundreds of levels deep (to Python's recursion limit) that
the ijson path refuses, and the guard there refuses or not by where its reads fall once a
document nests deeper than SAFE_DEPTH. So this path reads only what nests at most SAFE_DEPTH
levels and lets the ijson path decide the rest: every key but `args` holds a scalar and `args`
nests at most ARGS_DEPTH levels (at most SAFE_DEPTH - 3: the document, traceEvents and the
event hold it), both by type; the head and the keys after the events are measured whole
(`nesting`). No string is longer than the chunk holding it, and a chunk longer than
MAX_STRING_BYTES is a miss.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Final, Union

import msgspec
from commscope.collector.jsonguard import MAX_STRING_BYTES, SAFE_DEPTH, _unholdable, nesting
from commscope.collector.jsonstream import HEAD_LIMIT_BYTES, TAIL_BYTES, Tap, key_before
from commscope.collector.normalize import RawEvent
from commscope.model.errors import LayoutMissError, LimitError

# Small reads pay: a read's events (~130 of Kineto's) are normalised while their objects are
# still in the core's cache, and a decode then keeps fewer than the cyclic GC's 700 young
# containers alive at once (at 256 KiB, ~1,000: a young collection per read). Measured on the
# 500 MB bench input: CPU time -12-20%, young collections 1,181 -> 95.
_READ_BYTES: Final = 32 * 1024
_MAX_PENDING_BYTES: Final = MAX_STRING_BYTES
# How deeply an event's `args` may nest here: twice the deepest of the real traces (4, `Input
# Dims` of a list of tensors), within SAFE_DEPTH - 3 (the document, traceEvents and the event
# hold it). msgspec's form of the type doubles with each level, so no deeper than needed.
ARGS_DEPTH: Final = 8
_WS: Final = b" \t\r\n"
_OPENING: Final = re.compile(rb'"traceEvents"[ \t\r\n]*:[ \t\r\n]*\[([ \t\r\n]*)\{')
_INDENT: Final = re.compile(rb"[ \t\r]*\n([ \t]+)")  # Kineto's: the first event indented
# Compact layouts: what may stand between two events (`,` right after the `}` in each), how
# many of the last `}`s a read tries as an event's end, and how many wrong ones the whole
# document may hold beyond the cuts made before the ijson path is cheaper.
_SEPARATORS: Final = (b"},{", b"}, {", b"},\n{")
_CLOSING: Final = re.compile(rb"\}[ \t\r\n]*\]")
_TRIES: Final = 4
_WRONG_CUTS: Final = 64
_COMPACT_PENDING_BYTES: Final = 1 << 20  # a cut tried each read: no event may hold more
_CLOSING_TRIES: Final = 16  # the last `}]`s tried as the array's end
_TRUNCATED: Final = "Input data was truncated"
_TRAILING: Final = "JSON is malformed: trailing characters"
_AT_BYTE: Final = re.compile(r"\(byte (\d+)\)$")
_OPENING_BYTES: Final = 4096  # the most bytes from the key to the first `{` looked at
# Number bytes marked: digits and `+` as 0, exponents as e, the rest blank. Any number token
# yajl cannot hold has 19 digits in a row or a positive exponent of 3 digits or more (`e400`,
# `E+400`: both read `e000`); a negative one only underflows, which yajl reads.
_MARKS: Final = bytes(
    ord("0") if 48 <= b <= 57 or b == ord("+") else ord("e") if b in b"eE" else 32
    for b in range(256)
)
_SUSPECTS: Final = (b"0" * 19, b"e000")
_NUMBER: Final = re.compile(rb"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_NUMBER_BYTES: Final = frozenset(b"0123456789.eE+-")
_BEFORE_NUMBER: Final = frozenset(b":[, \t\r\n")
_AFTER_NUMBER: Final = frozenset(b",]} \t\r\n")
_DECODER: Final = msgspec.json.Decoder()


# What msgspec reads a value as, as `Any` would, but refusing (ValidationError, so a miss) an
# integer yajl cannot hold: msgspec itself refuses floats beyond a double.
Scalar = bool | Annotated[int, msgspec.Meta(ge=-(2**63) + 1, le=2**63 - 1)] | float | str | None


def _nested(levels: int) -> Any:
    """Any JSON value nested at most `levels` deep (a container nests 1 + what it holds)."""
    value: Any = Scalar
    for _ in range(levels):
        value = Union[Scalar, list[value], dict[str, value]]  # noqa: UP007 - built at runtime
    return value


if TYPE_CHECKING:
    _Args = Any  # mypy reads no type built at runtime
else:
    _Args = _nested(ARGS_DEPTH)


class FastEvent(RawEvent, gc=False, forbid_unknown_fields=True):
    """A RawEvent as msgspec decodes it. Every key Kineto writes is named, each a scalar but
    `args`, which nests at most ARGS_DEPTH levels: anything else is a ValidationError. The
    fields stand in the order Kineto writes the keys (msgspec tries the next field first)."""

    ph: Scalar = None
    cat: Scalar = None
    name: Scalar = None
    pid: Scalar = None
    tid: Scalar = None
    ts: Scalar = None
    dur: Scalar = None
    args: _Args = None
    id: Scalar = None
    bp: Scalar = None
    s: Scalar = None
    cname: Scalar = None
    tts: Scalar = None
    tdur: Scalar = None


_EVENTS: Final = msgspec.json.Decoder(list[FastEvent])


def fast_items(tap: Tap, read_bytes: int = _READ_BYTES) -> Iterator[RawEvent]:
    """Every item of `traceEvents` as a RawEvent (see `fast_chunks`)."""
    for chunk in fast_chunks(tap, read_bytes):
        yield from chunk


def fast_chunks(tap: Tap, read_bytes: int = _READ_BYTES) -> Iterator[list[FastEvent]]:
    """The items of `traceEvents` as RawEvents in lists; LayoutMissError if the document is in
    no layout read here or holds anything only the ijson path reads right. `tap` must not have
    been read yet. The buffer always starts with `[`: a chunk is decoded as one JSON array, its
    last event's `,` turned into `]` for the call, in place (a view of the buffer, no copy)."""
    try:
        buf, cutter, near = _first_event(tap, read_bytes)
    except LimitError as exc:
        raise LayoutMissError(f"head: {exc}") from None
    tap.unguard()
    while data := tap.read(read_bytes):
        buf += data
        events = cutter.cut(buf)
        if events is not None:
            yield events
        elif len(buf) > cutter.pending_bytes:
            raise LayoutMissError(f"no event boundary in {cutter.pending_bytes // 2**10} KiB")
    events, after, trailer = cutter.last(bytes(buf))
    if near and after < TAIL_BYTES:  # what `tail_object` would find in the tap's tail
        tap.trailer = trailer
    yield events


class _Indented:
    """Kineto's layout: `indent},` + newline + `indent{` between two events. A raw newline is
    never inside a string and nested blocks sit deeper, so that separator is an event's end."""

    pending_bytes: Final = _MAX_PENDING_BYTES

    def __init__(self, indent: bytes) -> None:
        self.indent = indent
        self.sep = b"\n" + indent + b"},\n" + indent + b"{"

    def cut(self, buf: bytearray) -> list[FastEvent] | None:
        """The events before the last separator in `buf`, dropped from it (None if none)."""
        found = buf.rfind(self.sep)
        if found < 0:
            return None
        return _split(buf, found + len(self.indent) + 2)

    def last(self, rest: bytes) -> tuple[list[FastEvent], int, dict[str, Any]]:
        """The events after the last separator (`rest` starts with `[`), the number of bytes
        after the array's `]`, and the top-level keys they hold."""
        closing = re.compile(re.escape(b"\n" + self.indent + b"}") + rb"[ \t\r\n]*\]")
        found = closing.search(rest)
        if found is None:
            raise LayoutMissError("traceEvents does not close after an event on its own line")
        events = decode_events(rest[: found.start() + len(self.indent) + 2] + b"]")
        after = rest[found.end() :]
        return events, len(after), _trailer(after)


class _Compact:
    """Events one after another, `},{`, `}, {` or `},` + newline + `{` between two (compact
    JSON, `json.dumps`' own, one event a line), keys in any order. Such a `}` may lie inside a
    string or a nested value too: a cut is tried from the last one back, and only a decode
    proves it. Cut elsewhere, the array read up to that `}` then `]` cannot be whole (see
    `_wrong_cut`): msgspec fails at its end; an event's end, it reads what yajl reads."""

    pending_bytes: Final = _COMPACT_PENDING_BYTES

    def __init__(self) -> None:
        self.cuts = 0
        self.wrong = 0
        self.refused: set[int] = set()  # offsets in the buffer of `}`s that end no event

    def cut(self, buf: bytearray) -> list[FastEvent] | None:
        """The events before the last `}` in `buf` that ends one, dropped from it; None if
        none of the last _TRIES `}`s not refused yet ends one."""
        for found in itertools.islice(self._untried(buf), _TRIES):
            events = _split(buf, found + 1, compact=True)
            if events is not None:
                self.cuts += 1
                self.refused.clear()  # offsets in the old buffer
                return events
            self.refused.add(found)  # the buffer only grows until a cut: it stays refused
            self._count_wrong()
        return None

    def _untried(self, buf: bytearray) -> Iterator[int]:
        """The offsets of `}`s followed by a separator, from the last back, not refused yet."""
        before = len(buf)
        while (found := max(buf.rfind(sep, 0, before) for sep in _SEPARATORS)) >= 0:
            if found not in self.refused:
                yield found
            before = found

    def _count_wrong(self) -> None:
        """LayoutMissError once separators inside strings cost more decodes than they save."""
        self.wrong += 1
        if self.wrong > _WRONG_CUTS + self.cuts:
            raise LayoutMissError("event separators inside strings or nested values")

    def last(self, rest: bytes) -> tuple[list[FastEvent], int, dict[str, Any]]:
        """As `_Indented.last`: the array closes at the last `}` then `]` that ends an event
        (one in the keys after it leaves bytes after the array: "trailing characters")."""
        for found in itertools.islice(reversed(list(_CLOSING.finditer(rest))), _CLOSING_TRIES):
            chunk = rest[: found.start() + 1] + b"]"
            try:
                events = decode_events(chunk)
            except LayoutMissError as miss:
                if _wrong_cut(miss.__cause__, len(chunk)):
                    continue
                raise
            after = rest[found.end() :]
            return events, len(after), _trailer(after)
        raise LayoutMissError("traceEvents does not close after an event")


def _split(buf: bytearray, comma: int, compact: bool = False) -> list[FastEvent] | None:
    """The events of `buf[:comma]` (from `[`), which are then dropped, `buf[comma]` (a `,`)
    turned into the `[` the rest starts with. Compact, None if `comma` follows no event's end
    (`buf` left as it was)."""
    buf[comma] = ord("]")
    try:
        with memoryview(buf) as view, view[: comma + 1] as chunk:
            events = decode_events(chunk)  # no copy: msgspec keeps no view of its input
    except LayoutMissError as miss:
        buf[comma] = ord(",")
        if compact and _wrong_cut(miss.__cause__, comma + 1):
            return None
        raise
    buf[comma] = ord("[")
    del buf[:comma]
    return events


def _wrong_cut(error: BaseException | None, length: int) -> bool:
    """Whether msgspec's `error` on an array of `length` bytes cut at a `}` then `]` says the
    `}` ends no event. The bytes up to the `}` are the document's: read alike up to there, so a
    `}` inside a string leaves the string open to the end ("truncated"), and one closing a
    nested object leaves the event open: the `]` is refused (at the last byte) or closes a
    nested array, then the input ends; a `}` after the array's end leaves trailing bytes. Any
    other error lies in the document's own bytes."""
    if isinstance(error, msgspec.ValidationError) or error is None:
        return False
    text = str(error)
    at = _AT_BYTE.search(text)
    early = text.startswith(_TRAILING)  # the array closed before the `}`: cut too far
    return text == _TRUNCATED or early or (at is not None and int(at.group(1)) >= length - 1)


def _first_event(tap: Tap, read_bytes: int) -> tuple[bytearray, _Indented | _Compact, bool]:
    """The bytes read from the array's `[` on (blanks before the first event dropped), how
    its events are cut, and whether the `[` follows its key within 64 bytes (as the tail scan
    of the ijson path requires); LayoutMissError unless the array opens with an event."""
    buf = _read_head(tap, read_bytes)
    at = tap.head_at
    assert at is not None  # _read_head returns once the tap has the head
    _check_head(bytes(buf[:at]))
    opening = _OPENING.match(buf, at)
    while opening is None and len(buf) - at < _OPENING_BYTES and (data := tap.read(read_bytes)):
        buf += data  # the head ends at the key: the reads so far may stop before `[` or `{`
        opening = _OPENING.match(buf, at)
    if opening is None:
        raise LayoutMissError("traceEvents does not open with an event")
    indented = _INDENT.fullmatch(opening.group(1))  # before buf changes: groups read from buf
    cutter = _Indented(indented.group(1)) if indented else _Compact()
    near = key_before(buf, buf.index(b"[", at))
    del buf[: opening.end() - 2]
    buf[0] = ord("[")  # buf now holds `[{` and the rest of the first event
    return buf, cutter, near


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
    _check_numbers(body)
    _check_nesting(body + b"}", "head")
    try:
        _DECODER.decode(body + b"}")
    except msgspec.DecodeError as exc:
        raise LayoutMissError(f"head: {exc}") from None


def _trailer(tail: bytes) -> dict[str, Any]:
    """The keys in the bytes after `traceEvents`; LayoutMissError unless they close the
    document as valid JSON that yajl reads alike."""
    body = tail.lstrip(_WS)
    if body.startswith(b"}") and not body[1:].strip(_WS):
        return {}
    if not body.startswith(b","):
        raise LayoutMissError("traceEvents is not followed by `,` or the document's end")
    _check_numbers(body)
    _check_nesting(b"{" + body[1:], "after traceEvents")
    try:
        trailer: dict[str, Any] = _DECODER.decode(b"{" + body[1:])
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise LayoutMissError(f"after traceEvents: {_short(exc)}") from None
    return trailer


def decode_events(chunk: bytes | memoryview) -> list[FastEvent]:
    """The events of `chunk` (a JSON array of whole events); LayoutMissError if msgspec refuses
    it or it holds a value yajl reads otherwise."""
    if len(chunk) > MAX_STRING_BYTES:
        raise LayoutMissError(f"events: a chunk longer than {MAX_STRING_BYTES // 2**20} MB")
    try:
        events: list[FastEvent] = _EVENTS.decode(chunk)
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise LayoutMissError(f"events: {_short(exc)}") from exc  # the cause: see `_wrong_cut`
    return events


def _check_nesting(value: bytes, where: str, limit: int = SAFE_DEPTH) -> None:
    """LayoutMissError if `value` nests deeper than `limit` (the ijson path decides)."""
    if nesting(value, limit) > limit:
        raise LayoutMissError(f"{where}: nested deeper than {limit} levels")


def _check_numbers(data: bytes) -> None:
    """LayoutMissError if `data` may hold a number yajl cannot hold (see the module docstring).
    Number bytes are marked at C speed; only the rare runs of 19 digits or exponents of 3
    digits are looked at closely."""
    marks = data.translate(_MARKS)
    for suspect in _SUSPECTS:
        found = marks.find(suspect)
        while found >= 0:
            found = marks.find(suspect, _check_token(data, found))


def _check_token(data: bytes, at: int) -> int:
    """LayoutMissError if the token around `at` is a number yajl cannot hold; its end. A token
    that is not a number, or not set apart as JSON sets a number, lies inside a string
    (elsewhere msgspec refuses it): harmless."""
    start, end = at, at
    while start > 0 and data[start - 1] in _NUMBER_BYTES:
        start -= 1
    while end < len(data) and data[end] in _NUMBER_BYTES:
        end += 1
    token = data[start:end]
    apart = (start == 0 or data[start - 1] in _BEFORE_NUMBER) and (
        end == len(data) or data[end] in _AFTER_NUMBER
    )
    if apart and _NUMBER.fullmatch(token) is not None and _unholdable(token):
        raise LayoutMissError("a number beyond int64 or a double (mended on the ijson path)")
    return end


def _short(exc: Exception) -> str:
    return " ".join(str(exc).split())[:160]
