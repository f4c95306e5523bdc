"""jsonstream.py: the document's head and tail, found in one streaming pass."""

from __future__ import annotations

import io
import json

import pytest
from commscope.collector.jsonstream import Tap, document_closed, head_object, tail_object
from kineto_builder import ChunkedReader

KINETO_TRAILER = {
    "traceName": "./traces/rank0.json",
    "displayTimeUnit": "ms",
    "baseTimeNanoseconds": 1711964646000000000,
}


def drain(tap: Tap, size: int = 64 * 1024) -> None:
    while tap.read(size):
        pass


def tap_over(doc: bytes, chunk: int | None = None) -> Tap:
    raw = io.BytesIO(doc) if chunk is None else ChunkedReader(doc, [chunk])
    tap = Tap(raw)  # type: ignore[arg-type]
    drain(tap)
    return tap


# ------------------------------------------------------------------ head_object


def test_head_is_empty_when_trace_events_is_the_first_key() -> None:
    assert head_object(b"{") == {}


def test_head_ignores_whitespace_before_the_key() -> None:
    assert head_object(b"\n{\n  ") == {}


def test_head_holds_the_keys_before_trace_events() -> None:
    prefix = b'{"schemaVersion": 1, "distributedInfo": {"rank": 2, "world_size": 4},\n  '
    assert head_object(prefix) == {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 2, "world_size": 4},
    }


@pytest.mark.parametrize(
    "prefix",
    [b'{"a": ', b'{"a": ["x", ', b'{"a": {', b'{"a": {"b": 1, ', b"[", b'{"a": 1'],
    ids=["a value", "inside an array", "nested key", "nested later key", "array", "no comma"],
)
def test_no_head_where_trace_events_is_not_a_top_level_key(prefix: bytes) -> None:
    assert head_object(prefix) is None


# ------------------------------------------------------------------ Tap: head


def test_tap_finds_an_empty_head_when_trace_events_comes_first() -> None:
    assert tap_over(b'{"traceEvents": [], "traceName": "t"}').head == {}


def test_tap_finds_the_metadata_before_trace_events() -> None:
    doc = json.dumps({"schemaVersion": 1, "distributedInfo": {"rank": 3}, "traceEvents": []})
    assert tap_over(doc.encode()).head == {"schemaVersion": 1, "distributedInfo": {"rank": 3}}


def test_tap_skips_trace_events_inside_header_strings_and_nested_objects() -> None:
    head = {
        "note": 'says "traceEvents": [',
        "name": "traceEvents",
        "nested": {"traceEvents": [1]},
        "list": ["traceEvents"],
    }
    doc = json.dumps({**head, "traceEvents": [{"name": "traceEvents"}]}).encode()
    assert tap_over(doc).head == head


@pytest.mark.parametrize("chunk", [1, 7])
def test_tap_fed_tiny_chunks_finds_the_same_head(chunk: int) -> None:
    head = {"schemaVersion": 1, "name": "traceEvents", "distributedInfo": {"rank": 5}}
    doc = json.dumps({**head, "traceEvents": [{"ph": "X"}], **KINETO_TRAILER}).encode()
    assert tap_over(doc, chunk).head == tap_over(doc).head == head


def test_tap_counts_every_byte_read() -> None:
    doc = b'{"traceEvents": [{"ph": "X"}]}'
    assert tap_over(doc, 7).bytes_read == len(doc) == 30


# ------------------------------------------------------------------ tail_object


def test_tail_holds_kineto_keys_written_after_the_events() -> None:
    tail = b'{"ph": "X", "ts": 1}\n  ],\n  ' + json.dumps(KINETO_TRAILER)[1:].encode()
    assert tail_object(tail) == KINETO_TRAILER


def test_tail_is_empty_when_nothing_follows_the_events() -> None:
    assert tail_object(b'{"ph": "X", "args": {"dims": [[1, 2]]}}\n]\n}\n') == {}


def test_tail_reads_a_bracket_inside_a_trailing_string() -> None:
    assert tail_object(b'{"ph": "X"}], "traceName": "a]b", "x": "]"}') == {
        "traceName": "a]b",
        "x": "]",
    }


def test_tail_reads_trace_events_inside_a_trailing_string() -> None:
    tail = b'{"ph": "X"}], "traceName": "\\"traceEvents\\": [1]", "y": 2}'
    assert tail_object(tail) == {"traceName": '"traceEvents": [1]', "y": 2}


def test_tail_reads_nested_arrays_in_trailing_values() -> None:
    tail = b'{"ph": "X"}], "INFO": ["Profiler.cpp:333] x", ["y", [1]]], "b": [[1], [2]]}'
    assert tail_object(tail) == {"INFO": ["Profiler.cpp:333] x", ["y", [1]]], "b": [[1], [2]]}


def test_tail_ignores_brackets_inside_the_last_event() -> None:
    tail = b'{"name": "k]", "args": {"dims": [[1, 2]], "s": "], \\"q\\": ["}}], "traceName": "t"}'
    assert tail_object(tail) == {"traceName": "t"}


def test_tail_without_any_closing_bracket_is_empty() -> None:
    assert tail_object(b'"ts": 1}') == {}


def test_tail_survives_a_long_kineto_info_log() -> None:
    info = [f"INFO:2024-05-22 17:15:23 1:1 CuptiActivityProfiler.cpp:{i}] line" for i in range(70)]
    trailer = {"INFO": info, **KINETO_TRAILER}
    tail = b'{"ph": "X"}\n  ],\n  ' + json.dumps(trailer)[1:].encode()
    assert tail_object(tail) == trailer


# ------------------------------------------------------------------ Tap: tail


def test_tap_keeps_the_trailer_when_read_in_full_chunks() -> None:
    doc = json.dumps(
        {"traceEvents": [{"ph": "X", "ts": i} for i in range(10000)], **KINETO_TRAILER}
    )
    assert len(doc) > 2 * 64 * 1024  # the trailer is found in the last of several chunks
    assert tap_over(doc.encode()).trailing() == KINETO_TRAILER


@pytest.mark.parametrize("chunk", [1, 7])
def test_tap_keeps_the_trailer_when_fed_tiny_chunks(chunk: int) -> None:
    doc = json.dumps({"traceEvents": [{"ph": "X"}], **KINETO_TRAILER}).encode()
    assert tap_over(doc, chunk).trailing() == KINETO_TRAILER


def test_a_document_is_closed_only_once_its_last_byte_is_read() -> None:
    # Kineto's shape: events, then trailer keys, then the closing brace; every shorter prefix
    # (cut inside an event, after the array, inside the trailer) is not closed
    doc = json.dumps({"traceEvents": [{"ph": "X", "args": {"l": [{"a": "}]"}]}}], **KINETO_TRAILER})
    whole = doc.encode() + b"\n"
    assert document_closed(whole)
    assert not any(document_closed(whole[:cut]) for cut in range(len(doc)))


def test_a_closed_object_of_another_shape_is_not_a_closed_trace() -> None:
    assert not document_closed(b'{"a": [1]}')
    assert not document_closed(b'[{"ph": "X"}]')
