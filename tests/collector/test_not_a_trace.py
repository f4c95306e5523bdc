"""Valid JSON that is not a trace is told apart from a damaged trace: the first may only be
ignored beside traces (`NotATraceError`, and a name that does not say "trace"), the second
is skipped with its reason."""

from __future__ import annotations

import pytest
from commscope.model.errors import NOT_A_TRACE, NotATraceError, TraceError
from commscope.model.names import looks_like_trace
from kineto_builder import read


@pytest.mark.parametrize(
    "doc",
    [
        b'{"step": 1200, "world_size": 8}',  # a checkpoint's meta.json
        b'{"data": {"traceEvents": [{"ph": "X"}]}}',  # nested: not top-level
        b"[1, 2, 3]",
        b"42",
        b'"text"',
    ],
    ids=["object", "nested", "list", "number", "string"],
)
def test_valid_json_without_top_level_trace_events_is_not_a_trace(doc: bytes) -> None:
    with pytest.raises(NotATraceError) as caught:
        read(doc)
    assert caught.value.reason == NOT_A_TRACE


@pytest.mark.parametrize(
    "doc",
    [b'{"step": 1200, "world_', b'{"step": 12 00}', b'{"traceEvents": [{"ph": "X"}'],
    ids=["truncated", "corrupt", "truncated trace"],
)
def test_damaged_json_is_a_trace_error_but_not_a_non_trace(doc: bytes) -> None:
    with pytest.raises(TraceError) as caught:
        read(doc)
    assert not isinstance(caught.value, NotATraceError)


def test_an_empty_trace_is_a_trace() -> None:
    assert read(b'{"traceEvents": []}').events == []


@pytest.mark.parametrize(
    ("path", "trace"),
    [
        ("run/iteration_10/rank3_trace.json", True),
        ("run/rank-3.json.gz", True),
        ("run/worker3.json", True),
        ("run/host_1234.1700000000.pt.trace.json", True),
        ("run/my_TRACE.json", True),
        ("run/meta.json", False),
        ("run/config.json", False),
        ("run/traces/meta.json", False),  # a folder's name says nothing of the file
    ],
)
def test_a_name_looks_like_a_trace(path: str, trace: bool) -> None:
    assert looks_like_trace(path) is trace
