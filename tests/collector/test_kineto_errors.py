"""Bad input: a file that cannot be analysed raises TraceError with a plain reason."""

from __future__ import annotations

import errno
import gzip
import io
from typing import Any

import pytest
from commscope.collector.kineto import TraceReader
from commscope.model.errors import ReadError, TraceError
from kineto_builder import annotation, collective_args, cpu_op, dist_head, kernel, read, trace

GOOD = trace(
    [
        cpu_op("aten::mm", 1.5, 2),
        annotation("ProfilerStep#1", 1, 10, 1, {"note": 'a ] and "traceEvents"'}),
        kernel("ncclKernel_AllReduce_x", 3.25, 1, collective_args("allreduce", 4, 4, "Float")),
    ],
    dist_head(rank=0, world_size=2),
    {"traceName": "t.json", "baseTimeNanoseconds": 1711964646000000000},
)


def reason_of(doc: bytes | None = None, stream: io.RawIOBase | gzip.GzipFile | None = None) -> str:
    with pytest.raises(TraceError) as caught:
        read(doc or b"", stream)  # type: ignore[arg-type]
    assert caught.value.path == "x.json"
    return caught.value.reason


def test_the_good_document_reads() -> None:
    assert len(read(GOOD).events) == 3


@pytest.mark.parametrize("cut", [1, 20, 60, len(GOOD) // 2, len(GOOD) - 60, len(GOOD) - 1])
def test_truncated_json_is_reported_as_truncated(cut: int) -> None:
    assert "truncated" in reason_of(GOOD[:cut])


def test_every_cut_of_the_document_is_an_error() -> None:
    # no prefix of a document is mistaken for a whole one: events before the damage never count
    for cut in range(len(GOOD)):
        with pytest.raises(TraceError):
            read(GOOD[:cut])


@pytest.mark.parametrize(
    "doc",
    [
        b'{"traceEvents": [{"ts": 1.',
        b'{"traceEvents": [{"ts": -',
        b'{"traceEvents": [{"ts": 1e',
        b'{"traceEvents": [{"n": "\\',
        b'{"traceEvents": [{"n": nul',
    ],
    ids=["after a decimal point", "after a minus", "after an exponent", "in an escape", "in null"],
)
def test_truncated_inside_a_token_is_reported_as_truncated(doc: bytes) -> None:
    assert "truncated" in reason_of(doc)


@pytest.mark.parametrize("cut", [2, 10, 20, 0.5, -9, -8, -1])
def test_truncated_gzip_is_reported_as_truncated(cut: float) -> None:
    packed = gzip.compress(GOOD)
    end = int(len(packed) * cut) if isinstance(cut, float) else cut
    stream = gzip.GzipFile(fileobj=io.BytesIO(packed[:end]))
    assert "truncated gzip" in reason_of(stream=stream)


def test_gzip_with_a_corrupt_byte_is_unreadable() -> None:
    packed = bytearray(gzip.compress(GOOD))
    packed[len(packed) // 2] ^= 0xFF
    stream = gzip.GzipFile(fileobj=io.BytesIO(bytes(packed)))
    assert "unreadable" in reason_of(stream=stream)


def test_plain_json_read_as_gzip_is_unreadable() -> None:
    reason = reason_of(stream=gzip.GzipFile(fileobj=io.BytesIO(GOOD)))
    assert "unreadable" in reason
    assert "Not a gzipped file" in reason


class FailingDisk(io.RawIOBase):
    """A stream whose second read fails as a failing disk does (EIO)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.reads = data, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.reads += 1
        if self.reads > 1:
            raise OSError(errno.EIO, "Input/output error")
        n = min(len(buffer), 100)
        buffer[:n] = self.data[:n]
        return n


def test_a_read_that_fails_is_a_read_error_the_bytes_are_not() -> None:
    """An errno: the reading failed (ReadError: worth reading again); gzip's complaints about
    the bytes are plain TraceErrors."""
    with pytest.raises(ReadError, match=r"unreadable \(\[Errno 5\] Input/output error\)"):
        read(b"", FailingDisk(GOOD))  # type: ignore[arg-type]
    with pytest.raises(TraceError) as caught:
        read(b"", gzip.GzipFile(fileobj=io.BytesIO(GOOD)))  # type: ignore[arg-type]
    assert not isinstance(caught.value, ReadError)


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        (b'{"traceEvents": []}', "empty trace: traceEvents holds no event"),
        (
            b'{"schemaVersion": 1, "traceEvents": [], "traceName": "t"}',
            "empty trace: traceEvents holds no event",
        ),
        (
            b'{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {}}]}',
            "empty trace: none of its 1 traceEvents items is an event commscope reads "
            "(no kernel, op, annotation or step)",
        ),
    ],
)
def test_a_trace_with_no_event_is_no_trace_to_analyse(doc: bytes, reason: str) -> None:
    """`batches` gives nothing (its metadata is read); `trace_batches`, read to analyse,
    ends with the reason the file is skipped for."""
    assert read(doc).events == []
    with pytest.raises(TraceError) as caught:
        list(TraceReader(io.BytesIO(doc), "x.json").trace_batches())
    assert caught.value.reason == reason


def test_a_trace_with_one_event_is_analysed() -> None:
    assert sum(map(len, TraceReader(io.BytesIO(GOOD), "x.json").trace_batches())) > 0


@pytest.mark.parametrize(
    "doc",
    [
        b"\x00\x01\x02",
        GOOD[:40] + b"\xff\xfe" + GOOD[42:],
        GOOD.replace(b'"traceEvents": [', b'"traceEvents": ('),
        GOOD + b"x",
    ],
    ids=["binary", "invalid utf-8", "bad bracket", "trailing garbage"],
)
def test_corrupt_bytes_are_reported_as_corrupt_json(doc: bytes) -> None:
    assert "corrupt JSON" in reason_of(doc)


def test_document_without_trace_events_is_not_a_kineto_trace() -> None:
    reason = reason_of(b'{"schemaVersion": 1, "deviceProperties": []}')
    assert "no top-level traceEvents" in reason


def test_nested_trace_events_is_not_a_kineto_trace() -> None:
    assert "no top-level traceEvents" in reason_of(b'{"data": {"traceEvents": [{"ph": "X"}]}}')


def test_top_level_array_is_not_a_kineto_trace() -> None:
    assert "no top-level traceEvents" in reason_of(b'[{"ph": "X", "cat": "kernel"}]')


def test_empty_file_is_reported_as_empty() -> None:
    assert "empty file" in reason_of(b"")


def test_non_object_items_are_dropped_and_counted() -> None:
    good = b'{"cat": "kernel", "ph": "X", "name": "k", "ts": 1, "dur": 1}'
    doc = b'{"traceEvents": [1, "s", [2], null, ' + good + b"]}"
    parsed = read(doc)
    assert len(parsed.events) == 1
    assert parsed.stats.dropped == {"event_not_object": 4}
    assert parsed.stats.events == 5


def test_a_scalar_trace_events_value_reads_as_no_events() -> None:
    parsed = read(b'{"distributedInfo": {"rank": 1}, "traceEvents": 5}')
    assert (parsed.events, parsed.meta.rank) == ([], 1)


# ------------------------------------------------------------------ malformed values inside events


@pytest.mark.parametrize("args", [[1], "s"])
def test_comm_kernel_with_non_object_args_is_kept_without_args_and_counted(args: object) -> None:
    parsed = read(trace([kernel("ncclKernel_AllReduce_x", 1, 1, args)]))
    (op,) = parsed.events
    assert (op.collective, op.message_bytes) == ("AllReduce", None)  # type: ignore[union-attr]
    assert parsed.stats.dropped == {"args_not_object": 1}


def test_event_with_a_list_cat_is_dropped_and_counted() -> None:
    parsed = read(b'{"traceEvents": [{"cat": ["kernel"], "ph": "X", "ts": 1, "dur": 1}]}')
    assert parsed.events == []
    assert parsed.stats.dropped == {"cat_not_string": 1}


def test_device_properties_that_are_not_objects_give_no_gpu_name() -> None:
    assert read(b'{"deviceProperties": [1], "traceEvents": []}').meta.gpu_name is None
