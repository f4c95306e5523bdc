"""fastparse.py: Kineto's indented layout read by msgspec gives exactly what the ijson path
gives (events, metadata, stats, dropped counts), and every document it cannot prove that for
is read by ijson (`TraceReader.parser` says which path read the events). The fast path decodes
straight into RawEvents (args decoded as typed values); the ijson path copies its dicts into
RawEvents: the same normaliser reads both."""

from __future__ import annotations

import gzip
import io
import json
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec
import pytest
from commscope.collector import fastparse
from commscope.collector.fastparse import fast_items
from commscope.collector.follow import open_followed
from commscope.collector.jsonguard import SAFE_DEPTH
from commscope.collector.jsonstream import Tap, tail_object, trace_items
from commscope.collector.kineto import TraceReader
from commscope.collector.normalize import RawEvent, from_item
from commscope.model.errors import LayoutMissError, TraceError
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import (
    TALLIES,
    ChunkedReader,
    annotation,
    cpu_op,
    dist_head,
    kernel,
    launch,
    span,
)
from msgspec.structs import replace as struct_replace
from tools import needs_shared, shared_traces

REAL = shared_traces("kineto")
U64_COMMS_ID = 10159970886766084423  # > 2^63: yajl's "integer overflow", mended by ijson's path


class SeekableChunks:
    """A seekable reader over `inner` whose reads return at most `size` bytes."""

    def __init__(self, inner: Any, size: int) -> None:
        self.inner, self.size = inner, size

    def read(self, size: int = -1) -> bytes:
        data: bytes = self.inner.read(self.size if size < 0 else min(size, self.size))
        return data

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int) -> int:
        position: int = self.inner.seek(offset)
        return position


def kineto_doc(
    events: list[Any],
    head: dict[str, Any] | None = None,
    tail: dict[str, Any] | None = None,
    *,
    indent: str = "  ",
    step: str = "  ",
    one_line: bool = True,
    close: str = "  ",
    ascii_only: bool = True,
) -> bytes:
    """A document in Kineto's layout: head keys one a line, each event a block opening with
    `indent{` on its own line, the array closed by `close]`, then the tail keys."""
    lines = ["{"] + [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in (head or {}).items()]
    lines.append('  "traceEvents": [')
    blocks = [_block(e, indent, step, one_line, ascii_only) for e in events]
    lines.append(",\n".join(blocks))
    after = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in (tail or {}).items()]
    lines.append(close + ("]," if after else "]"))
    lines.append(",\n".join(after))
    return ("\n".join(lines) + "\n}\n").encode()


def _block(event: Any, indent: str, step: str, one_line: bool, ascii_only: bool) -> str:
    if one_line:  # Kineto: several keys on a line inside the block
        body = json.dumps(event, ensure_ascii=ascii_only)[1:-1]
        return f"{indent}{{\n{indent}{step}{body}\n{indent}}}"
    text = json.dumps(event, indent=step, ensure_ascii=ascii_only)
    return "\n".join(indent + line for line in text.split("\n"))  # not splitlines: \x85


def both(doc: bytes, size: int = 1 << 20, gz: bool = False) -> tuple[Any, Any, TraceReader]:
    """The (events, meta, stats, has_gpu) of the default reader and of the ijson path."""
    out = []
    for fast in (True, False):
        inner = gzip.GzipFile(fileobj=io.BytesIO(gzip.compress(doc))) if gz else io.BytesIO(doc)
        stream: Any = SeekableChunks(inner, size)
        reader = TraceReader(stream, "x.json", fast=fast)
        events = [e for batch in reader.batches(64) for e in batch]
        out.append(((events, reader.meta, reader.stats, reader.has_gpu), reader))
    return out[0][0], out[1][0], out[0][1]


# ------------------------------------------------------------------ random layouts and values

_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63) + 1, 2**63 - 1),  # yajl holds no -2**63
    st.floats(allow_nan=False, allow_infinity=False),
    _text,
)
_value = st.recursive(
    _scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3)
)
_time = st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False))
_args = st.none() | st.dictionaries(_text, _value, max_size=3)
# Names, categories and args keys the handlers act on, so that every handler (and every
# lazily decoded args) is reached, with values of every type, and keys missing or null.
_NAMES = ["ncclDevKernel_AllReduce_Sum_f32_RING_LL", "ncclKernel_SendRecv", "nccl:all_reduce",
          "record_param_comms", "c10d::allgather_", "gloo:all_reduce", "ProfilerStep#3",
          "[memory]", "cudaLaunchKernel", "aten::mm", "aten::wait", "sm80_xmma_gemm"]  # fmt: skip
_CATS = ["kernel", "Kernel", "cpu_op", "Operator", "user_annotation", "cuda_runtime",
         "cpu_instant_event", "gpu_memcpy", "Memset", "ac2g", "python_function"]  # fmt: skip
_ARG_KEYS = ["Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size",
             "Process Group Name", "Seq", "correlation", "Input Dims", "Input type",
             "Device Id", "Device Type", "Total Allocated", "Total Reserved"]  # fmt: skip
_arg_value = st.one_of(
    st.integers(-2, 40),
    st.sampled_from(["allreduce", "allgather", "Float", "c10::BFloat16", "0", "pg"]),
    st.lists(st.lists(st.integers(0, 4), max_size=3), max_size=2),
    st.lists(st.sampled_from(["float", "c10::Half"]), max_size=2),
    _value,
)
# PyTorch 1.8-1.10's string tids and pids (a thread's number, a stream's or Kineto's names)
_tid = st.one_of(
    st.integers(0, 3),
    st.sampled_from(["0", "3", "007", "-1", "stream 7", "stream 7 user", "", "9" * 20]),
    _text,
)
_pid = st.one_of(st.integers(0, 3), st.sampled_from(["Spans", "Traces", "", "gpu 0", "0"]))
_known_args = st.dictionaries(st.sampled_from(_ARG_KEYS) | _text, _arg_value, max_size=6)
_field = st.one_of(_time, st.none(), _text, st.lists(st.integers(0, 3), max_size=2))
_kineto_event = st.fixed_dictionaries(
    {},
    optional={
        "ph": st.sampled_from(["X", "i", "s"]) | _scalar,
        "cat": st.sampled_from(_CATS) | _scalar | st.lists(st.integers(0, 9), max_size=1),
        "name": st.sampled_from(_NAMES) | _scalar,
        "pid": _pid,
        "tid": _tid,
        "ts": _field,
        "dur": _field,
        "args": _known_args | _args | st.lists(st.integers(0, 9), max_size=2) | _text,
    },
).filter(bool)  # Kineto writes no {}
_event = st.one_of(
    st.builds(kernel, _text, _time, _time, _args),
    st.builds(cpu_op, _text, _time, _time, _tid, _args),
    st.builds(annotation, _text, _time, _time, _tid, _args),
    st.builds(launch, st.integers(0, 50), _time, _tid),
    st.dictionaries(_text, _value, min_size=1, max_size=4),
    _kineto_event,
    _kineto_event,
)
_tail = st.sampled_from(
    [
        None,
        {"traceName": "t.json"},
        {"traceName": "t", "displayTimeUnit": "ms", "x": [1, {}]},
        {"traceName": "t", "baseTimeNanoseconds": 1_700_000_000_000_000_000, "y": "]"},
    ]
)


_layout = st.fixed_dictionaries(
    {
        "indent": st.sampled_from(["", " ", "  ", "    ", "\t", "        "]),
        "step": st.sampled_from([" ", "  ", "    ", "\t"]),  # nested blocks sit deeper
        "one_line": st.booleans(),
        "close": st.sampled_from(["", "  ", "    "]),
        "ascii_only": st.booleans(),
    }
)


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(_event, min_size=1, max_size=30),
    layout=_layout,
    tail=_tail,
    gz=st.booleans(),
    size=st.integers(1, 4096),
)
def test_random_kineto_layouts_read_as_the_ijson_path_reads_them(
    events: list[Any], layout: dict[str, Any], tail: dict[str, Any] | None, gz: bool, size: int
) -> None:
    """Random events, indentations, key layouts, tails, gzip and read sizes. The fast path
    reads them unless an event holds a key Kineto does not write, a container outside `args`,
    or `args` nested deeper than it proves (then ijson does, alike)."""
    doc = kineto_doc(events, dist_head(gpu="H100"), tail, **layout)
    fast, slow, reader = both(doc, size, gz)
    assert fast == slow
    want = "fast" if all(map(_fast_shape, events)) else "ijson"
    assert reader.parser == want, reader.fast_miss  # NaN/Infinity and big ints not generated


_KINETO_KEYS = set(fastparse.FastEvent.__struct_fields__)


def _depth(value: Any) -> int:
    """How deeply `value` nests as JSON (0 for a scalar): the oracle of `jsonguard.nesting`."""
    if isinstance(value, dict | list):
        inner = value.values() if isinstance(value, dict) else value
        return 1 + max(map(_depth, inner), default=0)
    return 0


def _fast_shape(event: Any) -> bool:
    """Whether the fast path may read `event`: Kineto's keys only, scalars but `args`, and
    `args` nested at most ARGS_DEPTH levels."""
    if not isinstance(event, dict) or not event.keys() <= _KINETO_KEYS:
        return False
    scalars = all(_depth(v) == 0 for k, v in event.items() if k != "args")
    return scalars and _depth(event.get("args")) <= fastparse.ARGS_DEPTH


def _fields(event: RawEvent) -> tuple[Any, ...]:
    return (event.ph, event.cat, event.name, event.ts, event.dur, event.tid, event.args)


@settings(max_examples=150, deadline=None)
@given(values=st.lists(_kineto_event.filter(_fast_shape), min_size=1, max_size=20))
def test_raw_events_hold_the_values_ijson_gives(values: list[Any]) -> None:
    """Same types too (1 and 1.0 differ in repr): ijson's use_float=True reads, per value,
    args included."""
    doc = kineto_doc(values)
    fast = [_fields(e) for e in fast_items(Tap(io.BytesIO(doc)), read_bytes=97)]
    slow = [_fields(from_item(item)) for item in trace_items(Tap(io.BytesIO(doc)))]
    assert repr(fast) == repr(slow)


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"ph": "X", "cname": "good", "flow": 1}, "unknown field `flow`"),  # not Kineto's key
        ({"ph": "X", "name": ["a"]}, "got `array`"),  # a container outside args
        ({"ph": "X", "args": {"a": [[[[[[[[1]]]]]]]]}}, "got `array`"),  # args nested 9 deep
    ],
)
def test_an_event_the_types_do_not_hold_is_read_by_ijson_alike(
    event: dict[str, Any], reason: str
) -> None:
    """Kineto's keys only, scalars but args, args nested at most ARGS_DEPTH (8) levels: only
    those bound the nesting, so anything else is the ijson path's to read."""
    fast, slow, reader = both(kineto_doc([*_many(20), event]), size=512)
    assert fast == slow
    assert (reader.parser, reason in reader.fast_miss) == ("ijson", True), reader.fast_miss


def test_args_nests_within_what_the_guard_never_refuses() -> None:
    assert fastparse.ARGS_DEPTH <= SAFE_DEPTH - 3  # the document, traceEvents, the event


@pytest.mark.parametrize("where", ["head", "tail"])
def test_a_head_or_tail_nested_past_safe_depth_is_read_by_ijson_alike(where: str) -> None:
    """17 levels (with the document's own): the guard may refuse that or not by its reads,
    so the fast path leaves it to the ijson path, which reads it here."""
    deep: Any = 1
    for _ in range(SAFE_DEPTH):
        deep = [deep]
    head, tail = ({"deep": deep}, None) if where == "head" else (None, {"deep": deep})
    fast, slow, reader = both(kineto_doc(_many(20), head, tail), size=512)
    assert fast == slow
    assert reader.parser == "ijson"
    assert "nested deeper than 16 levels" in reader.fast_miss


def test_a_chunk_longer_than_the_string_limit_is_read_by_ijson(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No string is longer than the chunk holding it: a longer chunk is not proven."""
    monkeypatch.setattr(fastparse, "MAX_STRING_BYTES", 300)
    fast, slow, reader = both(kineto_doc([*_many(20), kernel("k" * 400, 1, 2)]), size=4096)
    assert fast == slow
    assert (reader.parser, "a chunk longer than" in reader.fast_miss) == ("ijson", True)


# ------------------------------------------------------------------ real traces


def _real_traces() -> list[Path]:
    return sorted(p for p in REAL.glob("*/*") if p.name.endswith((".json", ".json.gz")))


@needs_shared("kineto")
@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name)
def test_every_real_trace_reads_the_same_by_both_paths(path: Path) -> None:
    """Kineto's layout and the sampled files' compact JSON (one line) both read fast. The
    MI300 trace holds "...4e913" inside hex strings: no number, so fast."""
    raw = path.read_bytes()
    doc = gzip.decompress(raw) if path.name.endswith(".gz") else raw
    fast, slow, reader = both(doc, size=65536, gz=path.name.endswith(".gz"))
    assert fast == slow
    assert reader.parser == "fast", reader.fast_miss


@needs_shared("kineto")
def test_the_real_traces_are_all_there() -> None:
    assert len(_real_traces()) == 14  # 8 DLRM + 2 sampled + 4 single-rank


def test_a_pytorch_1_8_layout_reads_fast_as_the_ijson_path_reads_it() -> None:
    # string tids and pids, capitalised categories, Kineto's own spans (pytorch/kineto 1.8-1.10)
    events = [
        span("Operator", "ProfilerStep#3", 0, 500, "4242"),
        span("Operator", "nccl:all_reduce", 10, 40, "4242", args={"Input dims": [[8]]}),
        span("Runtime", "cudaLaunchKernel", 20, 5, "4242", args={"correlation": 6}),
        span("Kernel", "ncclAllReduceRingLLKernel_sum_f32", 200, 100, "stream 7",
             args={"correlation": 6}),
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
         "tid": "PyTorch Profiler", "ts": 0, "dur": 1000},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 1000},
    ]  # fmt: skip
    fast, slow, reader = both(kineto_doc(events, dist_head()))
    assert fast == slow
    assert reader.parser == "fast"
    assert [type(e).__name__ for e in timed(fast[0])] == ["Step", "CommOp", "CpuSpan", "CpuSpan"]


# ------------------------------------------------------------------ what takes the ijson path


def test_a_stream_that_cannot_seek_takes_the_ijson_path() -> None:
    doc = kineto_doc([kernel("a", 0, 10)], dist_head())
    reader = TraceReader(ChunkedReader(doc, [100]), "x.json")  # type: ignore[arg-type]
    # the GpuOp, then its name's KernelTime
    assert len([e for batch in reader.batches() for e in batch]) == 2
    assert (reader.parser, reader.fast_miss) == ("ijson", "stream not seekable")


def timed(events: list[Any]) -> list[Any]:
    """The events but the file's tallies (kernel names, launches) given at its end."""
    return [e for e in events if not isinstance(e, TALLIES)]


def _many(n: int) -> list[Any]:
    return [kernel(f"k{i}", 10 * i, 5) for i in range(n)]


@pytest.mark.parametrize(
    ("odd", "reason"),
    [
        ({"name": "\ud800"}, "events"),  # lone surrogate: ijson gives "?", msgspec refuses
        ({"args": {"Comms Id": U64_COMMS_ID}}, "Expected `int` <="),  # mended on the ijson path
        ({"args": {"x": float("nan")}}, "invalid character"),  # bare NaN: mended by ijson's path
        ({"pid": float("inf")}, "invalid character"),  # in a key the fast path skips
        ({"args": {"x": 1e308 * 10}}, "invalid character"),  # json.dumps writes Infinity
    ],
)
def test_an_odd_value_mid_file_falls_back_and_gives_the_ijson_result(
    odd: dict[str, Any], reason: str
) -> None:
    """300 events before it, read 512 bytes at a time: many were handed by the fast path."""
    events = [*_many(300), kernel("odd", 4000, 1) | odd, *_many(5)]
    fast, slow, reader = both(kineto_doc(events, dist_head()), size=512)
    assert fast == slow
    assert reader.parser == "ijson"
    assert reason in reader.fast_miss


def _with_raw(events: list[Any], placeholder: str, raw: bytes) -> bytes:
    """A Kineto document with the string `"placeholder"` replaced by `raw` bytes."""
    return kineto_doc(events, dist_head()).replace(json.dumps(placeholder).encode(), raw)


@pytest.mark.parametrize(
    ("where", "raw", "reason"),
    [
        ({"pid": "@"}, b"1e400", "Number out of range"),  # a key the normaliser does not read
        ({"args": {"Bytes": "@"}}, b"-2.5E+309", "Number out of range"),
        ({"args": {"Bytes": "@"}}, b"17976931348623159e292", "Number out of range"),
        ({"args": {"x": "@"}}, b'"caf\xe9"', "events"),  # Latin-1, not UTF-8
    ],
)
def test_what_yajl_cannot_hold_msgspec_refuses_in_every_value(
    where: dict[str, Any], raw: bytes, reason: str
) -> None:
    """msgspec skips no value (every key is named and typed, every string decoded), so it
    refuses floats beyond a double and text that is not UTF-8 wherever they are; the ijson
    path mends them (one value dropped)."""
    events = [*_many(100), kernel("odd", 4000, 1) | where, *_many(5)]
    fast, slow, reader = both(_with_raw(events, "@", raw), size=512)
    assert fast == slow
    assert len(timed(fast[0])) == 106
    assert sum(fast[2].dropped.values()) == 1
    assert (reader.parser, reason in reader.fast_miss) == ("ijson", True), reader.fast_miss


@pytest.mark.parametrize(
    "text", ["0x7f4e913a", "run 1e999x", "1e400 words", "9" * 25 + "a", "a 1e400 b"]
)
def test_number_like_text_inside_strings_reads_fast(text: str) -> None:
    """A string holding digits and exponents is no miss: msgspec reads numbers as numbers, no
    scan of the bytes takes text for one."""
    events = [*_many(10), kernel(text, 200, 1, {"Label": text})]
    fast, slow, reader = both(kineto_doc(events, dist_head()), size=512)
    assert fast == slow
    assert reader.parser == "fast", reader.fast_miss


def test_a_document_nested_too_deeply_fails_alike_on_both_paths() -> None:
    """The fast path cannot prove it within the limit: the ijson path reads it, and its guard
    refuses it (the same limit, the same reason)."""
    deep: Any = 1
    for _ in range(80):
        deep = [deep]
    doc = kineto_doc([*_many(50), kernel("deep", 600, 1, {"x": deep})], dist_head())
    reasons = []
    for fast in (True, False):
        with pytest.raises(TraceError) as caught:
            list(
                TraceReader(SeekableChunks(io.BytesIO(doc), 1 << 20), "x.json", fast=fast).batches()
            )
        reasons.append(caught.value.reason)
    assert reasons[0] == reasons[1]
    assert "nested deeper than 64" in reasons[0]


class FakeTime:
    """A clock that moves only when slept on; each sleep appends the next piece to `path`."""

    def __init__(self, path: Path, pieces: list[bytes]) -> None:
        self.now, self.path, self.pieces = 0.0, path, pieces

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.pieces:
            with self.path.open("ab") as out:
                out.write(self.pieces.pop(0))


@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(0, 10**6), max_size=10), gz=st.booleans())
def test_a_growing_file_reads_fast_as_a_whole_file_reads(
    tmp_path_factory: pytest.TempPathFactory, cuts: list[int], gz: bool
) -> None:
    """The file is written in pieces cut anywhere (mid-event, mid-separator) while it is
    followed; the fast path reads it, and gives what the ijson path gives on the whole file."""
    events = [*_many(60), launch(3, 5, 1), kernel("ncclKernel_AllReduce", 9, 2, {"correlation": 3})]
    doc = kineto_doc(events, dist_head(), {"traceName": "t"})
    data = gzip.compress(doc) if gz else doc
    points = sorted({c % len(data) for c in cuts})
    pieces = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    path = tmp_path_factory.mktemp("grow") / "t.json"
    path.write_bytes(pieces[0])
    fake = FakeTime(path, pieces[1:])
    with open_followed(path, idle_s=30.0, poll_s=0.25, clock=fake.clock, sleep=fake.sleep) as f:
        reader = TraceReader(f, str(path))
        events_read = [e for batch in reader.batches(16) for e in batch]
    _, slow, _ = both(doc)
    # a followed file has ended once its object closes: whitespace after it (the last newline)
    # may not be written yet, and is then not read
    read = reader.stats.bytes_read
    assert doc[read:].strip() == b"" and read <= len(doc)
    assert (events_read, reader.meta, reader.stats) == (
        *slow[:2],
        struct_replace(slow[2], bytes_read=read),
    )
    assert reader.parser == "fast", reader.fast_miss


@settings(max_examples=60, deadline=None)
@given(tail=_tail, events=st.integers(1, 3000), gap=st.sampled_from(["", " ", " " * 70]))
def test_the_trailer_the_fast_path_reads_is_what_the_tail_scan_finds(
    tail: dict[str, Any] | None, events: int, gap: str
) -> None:
    """The fast path hands the keys after the events to the tap, sparing the ijson path's scan
    of the last 128 KB, only where that scan finds the same keys: the array's `[` within 64
    bytes of its key (else the scan finds none)."""
    doc = kineto_doc(_many(events), dist_head(), tail).replace(
        b'"traceEvents": [', b'"traceEvents":' + gap.encode() + b"["
    )
    tap = Tap(io.BytesIO(doc))
    assert len(list(fast_items(tap))) == events
    assert tap.trailing() == tail_object(tap.tail)
    assert (tap.trailer is not None) == (len(gap) < 50)


def test_batches_are_the_same_whatever_the_reads_and_the_path() -> None:
    """A stream parsed again (after a pause, a rewind) passes over the batches it handed by
    their number: they must not depend on how the reads fell. Cut by the count of events:
    5000 kernels of 5000 names (a GpuOp and, at the end, a KernelTime each) in batches of 1000
    -> ten of 1000."""
    doc = kineto_doc(_many(5000), dist_head())
    cuts = []
    for fast, size in [(True, 300), (True, 70_000), (True, 1 << 20), (False, 4096)]:
        reader = TraceReader(SeekableChunks(io.BytesIO(doc), size), "x.json", fast=fast)
        cuts.append([len(batch) for batch in reader.batches(1000)])
        assert reader.parser == ("fast" if fast else "ijson")
    assert cuts == [[1000] * 10] * 4


def test_a_mended_value_keeps_its_dropped_count() -> None:
    events = [*_many(50), kernel("odd", 600, 1, {"Comms Id": U64_COMMS_ID})]
    fast, slow, _ = both(kineto_doc(events, dist_head()), size=256)
    assert fast == slow
    assert sum(fast[2].dropped.values()) == 1  # one value mended: counted once, both paths


def test_a_truncated_document_fails_as_on_the_ijson_path() -> None:
    doc = kineto_doc(_many(100), dist_head())[:-1000]
    reasons = []
    for fast in (True, False):
        with pytest.raises(TraceError) as caught:
            list(TraceReader(SeekableChunks(io.BytesIO(doc), 300), "x.json", fast=fast).batches())
        reasons.append(caught.value.reason)
    assert reasons[0] == reasons[1]
    assert reasons[0].startswith("truncated")


def test_trailing_garbage_falls_back() -> None:
    doc = kineto_doc(_many(3), dist_head()) + b"]"
    with pytest.raises(LayoutMissError):
        list(fast_items(Tap(io.BytesIO(doc))))


# ------------------------------------------------------------------ memory stays flat


def test_events_are_decoded_a_read_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each decoded chunk holds at most one read plus the event it cut (the first: what the
    head's read held too): memory bounded by the read size, not the file's."""
    sizes: list[int] = []
    decode = fastparse.decode_events

    def record(chunk: bytes) -> list[Any]:
        sizes.append(len(chunk))
        return decode(chunk)

    monkeypatch.setattr(fastparse, "decode_events", record)
    doc = kineto_doc(_many(2000), dist_head())
    assert len(list(fast_items(Tap(io.BytesIO(doc)), read_bytes=4096))) == 2000
    biggest_event = max(len(_block(e, "  ", "  ", True, True)) for e in _many(2000))
    assert len(sizes) > 30  # ~200 KB in 4 KB reads
    assert max(sizes[1:]) <= 4096 + biggest_event
    assert sizes[0] <= 2 * 4096 + biggest_event  # the first also holds the rest of the head's read


def test_minus_two_to_the_63_is_mended_on_both_paths() -> None:
    """yajl refuses -2**63 ("integer overflow") though int64 holds it: it was a corrupt file;
    now mended like any number yajl cannot hold (one value dropped), by both paths."""
    events = [*_many(20), kernel("odd", 600, 1, {"x": -(2**63)})]
    fast, slow, reader = both(kineto_doc(events, dist_head()), size=256)
    assert fast == slow
    assert len(timed(fast[0])) == 21  # every kernel read
    assert sum(fast[2].dropped.values()) == 1
    assert reader.parser == "ijson"


def test_split_sizes_and_dtypes_read_alike_on_both_paths() -> None:
    """The args matching compares (`dtype`, `In/Out split size`, `Input type`) come from
    msgspec's typed decode as from ijson's dicts."""
    splits = {"In split size": "[2, 6, ...]", "Out split size": "[4, 4]"}
    args = {"Collective name": "all_to_allv", "In msg nelems": 8, "Out msg nelems": 8,
            "dtype": "Float", **splits}  # fmt: skip
    events = [
        cpu_op(
            "c10d::alltoall_base_", 9, 14, 11, {"Input Dims": [[8]], "Input type": ["long int"]}
        ),
        cpu_op("record_param_comms", 10, 10, 11, args),
        launch(3, 12, 11),
        kernel("ncclKernel_SendRecv(x)", 30, 2, {"correlation": 3}),
    ]
    fast, slow, reader = both(kineto_doc(events, dist_head(world_size=8)))
    assert fast == slow and reader.parser == "fast"
    (call,) = [e for e in fast[0] if type(e).__name__ == "CommOp"]
    assert (call.dtype, call.in_splits, call.out_splits) == ("Float", (2, 6), (4, 4))


# ------------------------------------------------------------------ other layouts, any key order
#
# The same events written by another writer: compact (`json.dump` with separators `,` `:`, HTA's
# and TraceLens' filters), spaced (`json.dump`'s default), one event a line, indented by
# `json.dump(indent=...)`; keys shuffled, strings escaped every way JSON allows, numbers in
# every form. Oracle: the ijson path, event for event.

_ESCAPES = {'"': ['\\"', "\\u0022"], "\\": ["\\\\", "\\u005C"], "/": ["/", "\\/"],
            "\b": ["\\b"], "\f": ["\\f"], "\n": ["\\n"], "\r": ["\\r"], "\t": ["\\t"]}  # fmt: skip


def _char(c: str, rnd: random.Random) -> str:
    """One character of a JSON string, as itself or escaped in any form JSON allows."""
    forms = [*_ESCAPES.get(c, [] if ord(c) < 0x20 else [c])]
    if ord(c) < 0x10000:
        forms += [f"\\u{ord(c):04x}", f"\\u{ord(c):04X}"]
    else:  # a surrogate pair
        high, low = divmod(ord(c) - 0x10000, 0x400)
        forms.append(f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04X}")
    return rnd.choice(forms)


def _number(value: int | float, rnd: random.Random) -> str:
    """`value` written in one of the forms that read back as the same type and value (an
    integer also as an exponent form, which both paths read as the same float)."""
    if isinstance(value, int):
        forms = [str(value)] + ([f"{value}e0", f"{value}.0E+0"] if abs(value) < 2**53 else [])
    else:
        forms = [repr(value), f"{value:.17g}", f"{value:.17e}", f"{value:.17E}".replace("E", "E+")]
        forms = [f.replace("E++", "E+").replace("E+-", "E-") for f in forms]
    return rnd.choice(forms)


@dataclass(frozen=True)
class Style:
    """How a writer lays out JSON: between items, between a key and its value, between two
    events; keys shuffled or not."""

    item: str = ","
    colon: str = ":"
    event: str = ","
    shuffle: bool = False


def write(value: Any, rnd: random.Random, style: Style) -> str:
    """`value` as JSON in `style`, strings and numbers in random forms."""
    if isinstance(value, dict):
        items = list(value.items())
        if style.shuffle:
            rnd.shuffle(items)
        pairs = (write(k, rnd, style) + style.colon + write(v, rnd, style) for k, v in items)
        return "{" + style.item.join(pairs) + "}"
    if isinstance(value, list):
        return "[" + style.item.join(write(v, rnd, style) for v in value) + "]"
    if isinstance(value, str):
        return '"' + "".join(_char(c, rnd) for c in value) + '"'
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return _number(value, rnd)


def laid_out(
    events: list[Any],
    style: Style,
    seed: int,
    head: dict[str, Any],
    tail: dict[str, Any] | None = None,
) -> bytes:
    """A trace document: `head`'s keys, the events in `style`, then `tail`'s keys."""
    rnd = random.Random(seed)
    body = style.event.join(write(e, rnd, style) for e in events)
    opening = "".join(f"{write(k, rnd, style)}{style.colon}{write(v, rnd, style)}{style.item}"
                      for k, v in head.items())  # fmt: skip
    after = "".join(f"{style.item}{write(k, rnd, style)}{style.colon}{write(v, rnd, style)}"
                    for k, v in (tail or {}).items())  # fmt: skip
    return f'{{{opening}"traceEvents"{style.colon}[{body}]{after}}}'.encode()


_STYLES = [Style(), Style(", ", ": ", ", "), Style(", ", ": ", ",\n"), Style(",", ":", ",\n")]
# Strings that look like separators and closings, inside names and args
_tricky = st.sampled_from(["},{", "}, {", "},\n{", "}]", '"}, {"', '},{"ph":', "\\", "/"])
_tricky_text = st.lists(_tricky | _text, max_size=3).map("".join)
_tricky_event = st.fixed_dictionaries(
    {"ph": st.just("X"), "name": _tricky_text, "ts": _time, "dur": _time},
    optional={"args": st.dictionaries(_tricky_text, st.lists(
        st.dictionaries(_tricky_text, _scalar, max_size=2), max_size=3), max_size=2)},
)  # fmt: skip


_writer = st.tuples(st.sampled_from(_STYLES), st.booleans(), st.integers(0, 2**32)).map(
    lambda drawn: (replace(drawn[0], shuffle=drawn[1]), drawn[2])
)


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(_event | _tricky_event, min_size=1, max_size=30),
    writer=_writer,
    tail=_tail,
    gz=st.booleans(),
    size=st.integers(1, 4096),
)
def test_random_compact_layouts_read_as_the_ijson_path_reads_them(
    events: list[Any], writer: tuple[Style, int], tail: dict[str, Any] | None, gz: bool, size: int
) -> None:
    """Any key order, escapes, number forms and separators (also inside strings and nested
    values: a cut there is tried, refused by the decode and taken elsewhere)."""
    doc = laid_out(events, *writer, dist_head(gpu="H100"), tail)
    fast, slow, reader = both(doc, size, gz)
    assert fast == slow
    want = "fast" if all(map(_fast_shape, events)) else "ijson"
    assert reader.parser == want, reader.fast_miss


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(_event, min_size=1, max_size=20),
    indent=st.sampled_from([1, 2, 4, "\t"]),
    size=st.integers(1, 4096),
)
def test_json_dump_indented_reads_as_the_ijson_path_reads_it(
    events: list[Any], indent: int | str, size: int
) -> None:
    doc = json.dumps({**dist_head(), "traceEvents": events}, indent=indent).encode()
    fast, slow, reader = both(doc, size)
    assert fast == slow
    assert reader.parser == ("fast" if all(map(_fast_shape, events)) else "ijson")


@pytest.mark.parametrize("style", _STYLES, ids=["compact", "spaced", "lines", "compact-lines"])
def test_compact_json_reads_fast(style: Style) -> None:
    """Nested objects closing lists at the end of the events and after them: the array ends
    at the last `}` then `]` that ends an event."""
    nested = {"x": [{"a": [{"b": "}]"}]}]}
    events = [kernel("a", 0, 10, nested), kernel("b", 20, 5, nested)]
    doc = laid_out(events, style, 0, dist_head(), {"traceName": "t", **nested, "y": [{}]})
    fast, slow, reader = both(doc)
    assert fast == slow
    assert reader.parser == "fast", reader.fast_miss


@pytest.mark.parametrize(("objects", "path"), [(1, "fast"), (40, "ijson")])
def test_separators_in_strings_and_args_cost_no_wrong_event(objects: int, path: str) -> None:
    """Every event's name and args hold `},{`: cuts there are tried and refused. Where they
    outnumber the events by more than the budget of wrong cuts (args holding 40 objects), the
    ijson path reads the rest, alike."""
    args = {"x": [{"a": "},{"}] * objects}
    events = [kernel("},{" * 5, i, 1, args) for i in range(400)]
    fast, slow, reader = both(laid_out(events, Style(), 0, dist_head()), size=300)
    assert fast == slow
    assert reader.parser == path, reader.fast_miss
    assert path == "fast" or "separators inside strings" in reader.fast_miss


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (b'{"traceEvents":[{"ph":"X"} ,{"ph":"X"}]', "not followed by"),  # truncated
        (b'{"traceEvents":[{"ph":"X"},{"ph":"X"},]}', "does not close"),  # trailing comma
        (b'{"traceEvents":[{"ph":"X"},{"ph":"X"}]]}', "not followed by"),
    ],
)
def test_compact_json_yajl_refuses_is_the_ijson_paths_to_refuse(doc: bytes, reason: str) -> None:
    with pytest.raises(LayoutMissError, match=reason):
        list(fast_items(Tap(io.BytesIO(doc))))


def test_an_event_longer_than_the_compact_pending_bytes_is_read_by_ijson(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fastparse._Compact, "pending_bytes", 2000)
    events = [*_many(20), kernel("k" * 3000, 1, 2), *_many(3)]
    fast, slow, reader = both(laid_out(events, Style(), 0, dist_head()), size=512)
    assert fast == slow
    assert (reader.parser, "no event boundary" in reader.fast_miss) == ("ijson", True)


@needs_shared("kineto")
@pytest.mark.parametrize("path", _real_traces(), ids=lambda p: p.name)
def test_every_real_trace_written_compact_reads_the_same_by_both_paths(path: Path) -> None:
    """Each real trace loaded and written again by `json.dumps(separators=(",", ":"))`."""
    with gzip.open(path) if path.name.endswith(".gz") else path.open("rb") as f:
        doc = json.dumps(json.load(f), separators=(",", ":")).encode()
    fast, slow, reader = both(doc, size=65536)
    assert fast == slow
    assert reader.parser == "fast", reader.fast_miss


@pytest.mark.parametrize(
    ("chunk", "wrong"),
    [
        (b'[{"name":"a}]', True),  # the `}` inside a string: the string never closes
        (b'[{"args":{"x":{"a":1}]', True),  # closes a nested object: `]` refused, last byte
        (b'[{"args":{"x":[{"a":1}]', True),  # `]` closes a nested array: then truncated
        (b'[{"ph":"X"}],"k":[{}]', True),  # past the array's end: trailing bytes
        (b'[{"ph":"X"},{"ts":01}]', False),  # the document's own bytes are refused
        (b'[{"ph":"X"},{"ts":1,"ts":}]', False),
        (b'[{"ph":"X","flow":1}]', False),  # a key Kineto does not write (ValidationError)
    ],
)
def test_a_cut_that_ends_no_event_is_told_from_a_refused_document(
    chunk: bytes, wrong: bool
) -> None:
    with pytest.raises(msgspec.DecodeError) as caught:
        fastparse._EVENTS.decode(chunk)
    assert fastparse._wrong_cut(caught.value, len(chunk)) is wrong
