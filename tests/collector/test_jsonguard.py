"""jsonguard.py: depth and string limits tracked chunk by chunk; numbers yajl cannot hold,
mended; and TraceReader reading such documents whole."""

from __future__ import annotations

import gzip
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from commscope.collector.follow import open_followed
from commscope.collector.jsonguard import (
    MAX_DEPTH,
    MAX_STRING_BYTES,
    SAFE_DEPTH,
    Guard,
    NumberFixer,
    nesting,
)
from commscope.model.errors import LimitError, TraceError
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import ChunkedReader, kernel, read, trace

U64_COMMS_ID = 10159970886766084423  # > 2^63: yajl's "integer overflow"


def chunks(doc: bytes, sizes: list[int]) -> list[bytes]:
    out, pos, turn = [], 0, 0
    while pos < len(doc):
        size = sizes[turn % len(sizes)]
        out.append(doc[pos : pos + size])
        pos, turn = pos + size, turn + 1
    return out


def oracle(doc: bytes) -> tuple[int, bool, int]:
    """Byte by byte: the depth at the end, whether it ends inside a string, the deepest."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in doc:
        char = chr(byte)
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return depth, in_string, deepest


# ------------------------------------------------------------------ Guard


json_text = st.text(alphabet='ab[]{}"\\:, 0', max_size=12)
json_values = st.recursive(
    st.none() | st.integers() | json_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(json_text, inner, max_size=3),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values, sizes=st.lists(st.integers(1, 17), min_size=1, max_size=5))
def test_depth_and_string_state_agree_with_a_byte_by_byte_oracle(
    value: Any, sizes: list[int]
) -> None:
    doc = json.dumps({"traceEvents": [value]}).encode()
    guard = Guard()
    seen = b""
    for part in chunks(doc, sizes):
        guard.check(part)
        seen += part
        depth, in_string, _ = oracle(seen)
        assert (guard.depth, guard.in_string) == (depth, in_string)


@pytest.mark.parametrize("opener", [b"[", b'{"a":'])
def test_nesting_past_the_limit_is_refused(opener: bytes) -> None:
    closer = b"]" if opener == b"[" else b"}"
    deep = b'{"traceEvents":[' + opener * (MAX_DEPTH + 1) + b"1" + closer * (MAX_DEPTH + 1)
    with pytest.raises(LimitError, match="nested deeper than 64"):
        Guard().check(deep)


def test_nesting_spread_over_many_chunks_is_refused() -> None:
    guard = Guard()
    with pytest.raises(LimitError):
        for part in chunks(b'{"a":' * 10_000, [7]):
            guard.check(part)


def test_a_document_as_deep_as_kineto_writes_passes() -> None:
    doc = json.dumps({"traceEvents": [{"args": {"Input Dims": [[[1, 2], [3]], []]}}]}).encode()
    guard = Guard()
    guard.check(doc)
    assert guard.depth == 0


def test_brackets_and_escaped_quotes_inside_strings_do_not_count() -> None:
    doc = json.dumps({"traceEvents": [{"name": '\\"' + "[" * 10_000 + '"'}]}).encode()
    guard = Guard()
    for part in chunks(doc, [333]):
        guard.check(part)
    assert (guard.depth, guard.in_string) == (0, False)


def test_a_string_longer_than_the_limit_is_refused() -> None:
    guard = Guard()
    guard.check(b'{"traceEvents":[{"name":"')
    with pytest.raises(LimitError, match="a string longer than 8 MB"):
        for _ in range(MAX_STRING_BYTES // 65536 + 2):
            guard.check(b"a" * 65536)


def test_long_strings_within_the_limit_pass() -> None:
    guard = Guard()
    for _ in range(3):  # three strings of 6 MB each: the count starts again at every string
        guard.check(b'"')
        for _ in range(6 * 16):
            guard.check(b"a" * 65536)
        guard.check(b'",')


def _deep(levels: int, leaf: Any) -> Any:
    """`leaf` inside `levels` containers, lists and objects in turn."""
    for level in range(levels):
        leaf = [leaf] if level % 2 else {"k": leaf}
    return leaf


deep_values = st.integers(0, 2 * SAFE_DEPTH).flatmap(
    lambda levels: json_values.map(lambda leaf: _deep(levels, leaf))
)


@settings(max_examples=300, deadline=None)
@given(value=deep_values, sizes=st.lists(st.integers(1, 97), min_size=1, max_size=5))
def test_a_document_nested_at_most_safe_depth_passes_whatever_the_reads(
    value: Any, sizes: list[int]
) -> None:
    """The guard's bound is loose (up to 4x the depth, by where the reads fall), but never
    refuses what nests at most SAFE_DEPTH levels: the fast path relies on it."""
    doc = json.dumps({"traceEvents": [value]}).encode()
    if oracle(doc)[2] > SAFE_DEPTH:
        return
    guard = Guard()
    for part in chunks(doc, sizes):
        guard.check(part)
    assert guard.depth == 0


def test_the_guard_refuses_or_not_by_where_the_reads_fall_past_safe_depth() -> None:
    """Why SAFE_DEPTH is a quarter of MAX_DEPTH: 25 levels opened, 24 closed and opened again
    (never deeper than 25). After the first 25 bytes the depth is 25; 24 pairs matched within
    one read count 2 x 24 on top of it (73 > 64: refused), but read after the closing bytes
    they count on top of depth 1 (49: passes)."""
    doc = b"[" * 25 + b"]" * 24 + b"[" * 24 + b"]" * 25
    assert oracle(doc)[2] == 25
    guard = Guard()
    for part in (doc[:25], doc[25:49], doc[49:]):
        guard.check(part)
    guard = Guard()
    guard.check(doc[:25])
    with pytest.raises(LimitError):
        guard.check(doc[25:])


@settings(max_examples=300, deadline=None)
@given(value=deep_values, limit=st.integers(0, 2 * SAFE_DEPTH))
def test_nesting_is_the_depth_a_byte_by_byte_walk_finds(value: Any, limit: int) -> None:
    """Exact up to `limit`; past it, some number above `limit`."""
    doc = json.dumps(value).encode()
    deepest = oracle(doc)[2]
    found = nesting(doc, limit)
    assert found == deepest if deepest <= limit else found > limit


@pytest.mark.parametrize("value", [b"[1", b'{"a": "]"', b'["]', b"]["])
def test_nesting_of_brackets_that_do_not_match_is_past_the_limit(value: bytes) -> None:
    assert nesting(value, 5) == 6


# ------------------------------------------------------------------ NumberFixer


def mend(doc: bytes, sizes: list[int]) -> bytes:
    fixer = NumberFixer()
    out = b"".join(fixer.feed(part) for part in chunks(doc, sizes))
    return out + fixer.feed(b"", final=True)


def test_numbers_beyond_what_yajl_holds_become_strings() -> None:
    doc = b'{"a": 10159970886766084423, "b": -99999999999999999999, "c": 1e400, "d": NaN, '
    doc += b'"e": -Infinity, "f": 9223372036854775807, "g": "1e400 NaN 10159970886766084423"}'
    assert json.loads(mend(doc, [5])) == {
        "a": "10159970886766084423",
        "b": "-99999999999999999999",
        "c": "1e400",
        "d": "NaN",
        "e": "-Infinity",
        "f": 9223372036854775807,
        "g": "1e400 NaN 10159970886766084423",
    }


held = st.integers(-(2**63) + 1, 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
beyond = st.integers(2**63, 2**80) | st.integers(
    -(2**80), -(2**63)
)  # use_float=True refuses -2**63 too
awkward_text = st.text(alphabet='ab"\\1e9N: ,[]{}', max_size=12)
documents = st.recursive(
    st.none() | held | beyond | st.sampled_from([math.inf, -math.inf, math.nan]) | awkward_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(awkward_text, inner, max_size=3),
    max_leaves=15,
)


def as_yajl_reads(value: Any) -> Any:
    """What a mended document reads as: each number yajl cannot hold is its own text."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value if -(2**63) < value < 2**63 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else json.dumps(value)
    if isinstance(value, list):
        return [as_yajl_reads(v) for v in value]
    return {k: as_yajl_reads(v) for k, v in value.items()}


def same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@settings(max_examples=300, deadline=None)
@given(value=documents, sizes=st.lists(st.integers(1, 19), min_size=1, max_size=5))
def test_any_chunking_mends_exactly_the_unholdable_numbers(value: Any, sizes: list[int]) -> None:
    doc = json.dumps(value).encode()  # Python writes NaN, Infinity and big integers as is
    assert same(json.loads(mend(doc, sizes)), as_yajl_reads(value))


# ------------------------------------------------------------------ TraceReader


def comm_id_trace() -> bytes:
    return trace(
        [
            kernel("gemm_a", 0, 10),
            kernel("gemm_b", 20, 10, args={"Comms Id": "ID"}),
            kernel("gemm_c", 40, 10),
        ]
    ).replace(b'"ID"', str(U64_COMMS_ID).encode())


def test_a_u64_comms_id_loses_that_value_only() -> None:
    parsed = read(comm_id_trace())
    assert [(e.start_ns, e.dur_ns) for e in parsed.events] == [(0, 10_000), (20_000, 10_000),
                                                             (40_000, 10_000)]  # fmt: skip
    assert parsed.stats.dropped == {"value_mended": 1}


def test_a_nan_duration_drops_that_event_only() -> None:
    doc = trace([kernel("a", 0, 10), kernel("b", 20, 10)]).replace(b'"dur": 10}', b'"dur": NaN}', 1)
    parsed = read(doc)
    assert [e.start_ns for e in parsed.events] == [20_000]
    assert parsed.stats.dropped["bad_span"] == 1


def test_a_byte_order_mark_is_read_past() -> None:
    doc = b"\xef\xbb\xbf" + trace([kernel("a", 0, 10)])
    assert len(read(doc, stream=ChunkedReader(doc, [1])).events) == 1  # type: ignore[arg-type]


def test_a_gzip_stream_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json.gz"
    path.write_bytes(gzip.compress(comm_id_trace()))
    with gzip.open(path, "rb") as stream:
        assert len(read(b"", stream=stream).events) == 3


def test_a_followed_file_is_read_again_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(comm_id_trace())
    with open_followed(path, idle_s=0) as stream:
        assert len(read(b"", stream=stream).events) == 3


def test_progress_counts_each_byte_once_when_read_again() -> None:
    from commscope.collector.kineto import TraceReader

    doc = comm_id_trace()
    counted: list[int] = []
    reader = TraceReader(io.BytesIO(doc), "x.json", counted.append)
    for _ in reader.batches():
        pass
    assert sum(counted) == len(doc)


def test_a_stream_that_cannot_go_back_reports_the_number() -> None:
    doc = comm_id_trace()

    class Forward(io.RawIOBase):
        def __init__(self) -> None:
            self._data = io.BytesIO(doc)

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            return self._data.readinto(buffer)

    with pytest.raises(TraceError, match="integer overflow"):
        read(b"", stream=io.BufferedReader(Forward()))


def test_garbage_that_no_mending_cures_is_still_corrupt() -> None:
    doc = trace([kernel("a", 0, 10)]).replace(b'"ts"', b"ts")
    with pytest.raises(TraceError, match="corrupt JSON"):
        read(doc)
