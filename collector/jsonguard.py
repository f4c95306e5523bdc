"""Keeping a JSON byte stream within what the parser can hold (pure: works on bytes).

`Guard` looks at every chunk before ijson does and refuses a document nested deeper than
MAX_DEPTH or holding a string longer than MAX_STRING_BYTES: ijson builds each item with a
path prefix per level (depth d costs O(d²) memory: 10,000 levels took 250 MB) and a string
whole, so a few hundred KB of garbage could cost gigabytes. It tracks, at C speed, whether the
stream is inside a string: the chunk is reduced to its quotes and brackets (escape pairs gone
first), adjacent quote pairs and whole strings are dropped, then matched bracket pairs are
removed pass by pass; what remains are the levels opened or closed in the chunk. Its bound is
loose (up to four times the true depth), so a document nested 17 levels or more may be refused
or not depending on where the reads fall; one nested at most SAFE_DEPTH levels never is.
`nesting` measures one whole JSON value exactly, for a reader that must prove a document is
within those limits without walking every byte (`fastparse`).

`NumberFixer` rewrites the number tokens yajl cannot hold — integers beyond 64 bits (a u64
NCCL `Comms Id`), floats beyond a double, NaN and Infinity — as strings, and bytes that are
not UTF-8 as U+FFFD, so that only those values are lost, never the file. It tokenises strings
exactly, so it costs more: the reader turns it on only for a document that failed on such a
token.
"""

from __future__ import annotations

import codecs
import re
from typing import Final

from commscope.model.errors import LimitError

MAX_DEPTH: Final = 64  # Kineto nests 6 levels (traceEvents, event, args, Input Dims, ...)
MAX_STRING_BYTES: Final = 8 * 1024 * 1024
SAFE_DEPTH: Final = MAX_DEPTH // 4  # the guard's bound is at most 4x the true depth
_NOT_STRUCTURE: Final = bytes(b for b in range(256) if b not in b'"[]{}')
_ESCAPE_PAIR: Final = re.compile(rb"\\.", re.DOTALL)
_QUOTED: Final = re.compile(rb'"[^"]*"')
_EIGHT_QUOTES: Final = b'"' * 8
_LEVELS: Final = bytes.maketrans(b"[]{}", b"()()")  # both kinds of brackets as one
_TOKEN: Final = re.compile(
    rb'"[^"\\]*(?:\\.[^"\\]*)*"|-?(?:NaN|Infinity)|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?', re.DOTALL
)
_CONTINUING: Final = b"-+." + bytes(b for b in range(256) if chr(b).isalnum() and b < 128)
_INT64: Final = range(-(2**63) + 1, 2**63)  # ijson use_float=True refuses -2**63 too
_INT64_DIGITS: Final = 19
_REPLACEMENT: Final = "\ufffd".encode()
_QUOTE, _MINUS = ord('"'), ord("-")


class Guard:
    """The nesting depth and the string being read, chunk by chunk; see the module docstring."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self._escaping = False  # the last chunk ended on a backslash inside a string
        self._string_bytes = 0  # whole chunks read inside the current string

    def check(self, chunk: bytes) -> None:
        """Raise LimitError if `chunk` takes the document past a limit."""
        data = self._unescaped(chunk)
        brackets, inside = _outside_strings(data.translate(None, _NOT_STRUCTURE), self.in_string)
        self._string_bytes = self._string_bytes + len(chunk) if inside and b'"' not in data else 0
        if self._string_bytes > MAX_STRING_BYTES:
            raise LimitError(f"a string longer than {MAX_STRING_BYTES // 2**20} MB (not a trace)")
        self.in_string = inside
        self.depth = _deeper(self.depth, brackets)

    def _unescaped(self, chunk: bytes) -> bytes:
        """`chunk` without its escape pairs (`\\"`, `\\\\`...), which never open or close."""
        data = chunk[1:] if self._escaping else chunk
        self._escaping = False
        if b"\\" not in data:
            return data
        data = _ESCAPE_PAIR.sub(b"", data)
        if data.endswith(b"\\"):  # its pair is the next chunk's first byte
            self._escaping = True
            data = data[:-1]
        return data


def _outside_strings(reduced: bytes, in_string: bool) -> tuple[bytes, bool]:
    """The brackets of a chunk reduced to quotes and brackets that lie outside strings, and
    whether the chunk ends inside one. Dropping two adjacent quotes keeps every later quote's
    role (an even number went), and nothing structural lies between them."""
    if in_string:
        reduced = b'"' + reduced
    # A run of n quotes leaves n mod 2 whichever even runs go: eight at a time first (an
    # event's keys and plain strings make runs of ~20), then the pairs left (~3x fewer cuts).
    reduced = reduced.replace(_EIGHT_QUOTES, b"").replace(b'""', b"")
    if b'"' in reduced:
        reduced = _QUOTED.sub(b"", reduced)
    opened = reduced.find(b'"')
    return (reduced[:opened], True) if opened >= 0 else (reduced, False)


def _deeper(depth: int, brackets: bytes) -> int:
    """The depth after `brackets`; LimitError if it may pass MAX_DEPTH on the way. Each pass
    removes the innermost pairs (at least one level, at most two), so 2 x passes bounds the
    nesting of what was matched."""
    passes = 0
    while brackets:
        shorter = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if len(shorter) == len(brackets):
            break
        brackets, passes = shorter, passes + 1
        if 2 * passes > MAX_DEPTH:
            break
    closing = brackets.count(b"]") + brackets.count(b"}")
    opening = len(brackets) - closing
    if depth + 2 * passes + opening > MAX_DEPTH:
        raise LimitError(f"nested deeper than {MAX_DEPTH} levels (not a trace)")
    return max(depth - closing, 0) + opening


def nesting(value: bytes, limit: int) -> int:
    """How deeply the JSON `value` nests (0 for a scalar), exactly for valid JSON; a number
    above `limit` (without counting on) when it nests deeper, or when its brackets do not
    match outside strings. Escape pairs go first, then the strings, then the innermost pairs
    of brackets, one level a pass."""
    if b"\\" in value:
        value = _ESCAPE_PAIR.sub(b"", value)
    brackets, open_string = _outside_strings(value.translate(_LEVELS, _NOT_STRUCTURE), False)
    if open_string:
        return limit + 1  # a quote left open
    depth = 0
    while brackets and depth <= limit:
        shorter = brackets.replace(b"()", b"")
        if len(shorter) == len(brackets):
            return limit + 1  # brackets that do not match
        brackets, depth = shorter, depth + 1
    return depth


class NumberFixer:
    """Number tokens yajl cannot hold, rewritten as strings; see the module docstring."""

    def __init__(self) -> None:
        self._carry = b""
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self.fixed = 0

    def feed(self, chunk: bytes, final: bool = False) -> bytes:
        """The mended bytes that can be told apart so far (all of them when `final`)."""
        text = self._utf8.decode(chunk, final)
        utf8 = text.encode("utf-8", "surrogatepass")
        self.fixed += max(0, text.count("\ufffd") - chunk.count(_REPLACEMENT))
        data = self._carry + utf8
        end = len(data) if final else _undecided(data)
        parts, written, last = [], 0, 0
        for match in _TOKEN.finditer(data, 0, end):
            if data.find(b'"', last, match.start()) >= 0:
                break  # a string that does not end before `end`: wait for the rest
            last = match.end()
            token = match.group()
            if token[0] != _QUOTE and _unholdable(token):
                parts += [data[written : match.start()], b'"', token, b'"']
                written, self.fixed = last, self.fixed + 1
        quote = data.find(b'"', last, end)
        cut = quote if quote >= 0 else end
        parts.append(data[written:cut])
        self._carry = data[cut:]
        return b"".join(parts)


def _undecided(data: bytes) -> int:
    """Where the tail the next chunk may continue begins: a final run of word, digit, sign
    or point bytes (`1.`, `-`, `Na`, `12e+`), which holds no quote."""
    return len(data.rstrip(_CONTINUING))


def _unholdable(token: bytes) -> bool:
    """NaN, ±Infinity, an integer outside int64, or a float beyond a double."""
    if token.endswith((b"NaN", b"Infinity")):
        return True
    digits = token[1:] if token[0] == _MINUS else token
    if digits.isdigit():
        return len(digits) > _INT64_DIGITS or int(token) not in _INT64
    return float(token) in (float("inf"), float("-inf"))
