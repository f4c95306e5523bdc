"""Reading Flight Recorder dumps: pickle through the restricted unpickler, JSON, the names
PyTorch gives them, and pickles that want more than plain data refused."""

from __future__ import annotations

import contextlib
import copyreg
import os
import pickle
from pathlib import Path

import pytest
from commscope.collector.flight import decode, plain_load, rank_of
from commscope.collector.sources import claiming
from commscope.model.errors import TraceError
from commscope.model.flight import FlightFrame, FlightStatus
from flight_builder import as_json, dump, entry, status
from hypothesis import given, settings
from hypothesis import strategies as st


class _Shell:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, ("echo pwned",)


def test_names_pytorch_gives_dumps() -> None:
    assert rank_of("nccl_trace_rank_3") == 3
    assert rank_of("nccl_trace_rank_12.json") == 12
    assert rank_of("torchcomm_fr_trace_5") == 5
    assert rank_of("rank3.pt.trace.json") is None
    assert claiming("nccl_trace_rank_0.json") is not None
    assert claiming("nccl_trace_rank_0.json").kind == "flight"  # type: ignore[union-attr]


def test_plain_data_survives_the_unpickler() -> None:
    data = {"a": [1, 2.5, None, True], "b": (b"x", "y"), "c": {3}}
    assert plain_load(pickle.dumps(data)) == data


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_a_reduce_calling_os_system_is_refused(protocol: int) -> None:
    hostile = pickle.dumps({"version": "2.10", "entries": [_Shell()]}, protocol=protocol)
    with pytest.raises(TraceError, match=r"refused: a pickle that builds objects \(\S*system\)"):
        decode(hostile, 0, "nccl_trace_rank_0")


def test_a_global_opcode_is_refused() -> None:
    hostile = b"cos\nsystem\n(S'echo pwned'\ntR."  # GLOBAL os.system, then REDUCE
    with pytest.raises(TraceError, match=r"refused: .*\(os\.system\)"):
        decode(hostile, 0, "nccl_trace_rank_0")


@pytest.mark.parametrize(
    "data",
    [
        b"\x80\x02]}b.",  # BUILD on a list
        b"\x80\x05\x97.",  # an out-of-band buffer
        b"\x80\x02K\x01)R.",  # REDUCE on an int
        b"\x80\x02N\x85R.",  # REDUCE with its stack short
    ],
)
def test_pickles_that_cannot_build_plain_data_are_no_dump(data: bytes) -> None:
    with pytest.raises(TraceError, match="not a Flight Recorder dump"):
        decode(data, 0, "x")


def test_garbage_is_no_dump() -> None:
    with pytest.raises(TraceError, match="truncated"):  # ends mid-opcode: maybe still written
        decode(b"\x80\x04garbage", 0, "x")
    with pytest.raises(TraceError, match="not a Flight Recorder dump"):
        decode(pickle.dumps({"entries": "no list"}), 0, "x")


def _both(found: dict[str, object]) -> list[bytes]:
    return [pickle.dumps(found), as_json(found)]


@pytest.mark.parametrize("form", ["pickle", "json"])
def test_a_dump_reads_alike_as_pickle_and_json(form: str) -> None:
    found = dump([entry(1), entry(2, state="started")], status(2, 2, 1))
    data = dict(zip(["pickle", "json"], _both(found), strict=True))[form]
    read = decode(data, 1, "nccl_trace_rank_1")
    assert read.rank == 1 and read.version == "2.10"
    assert read.members == {"0": [0, 1]}
    assert read.status == [FlightStatus(group="0", enqueued=2, started=2, completed=1)]
    first, second = read.entries
    assert (first.group, first.group_desc, first.collective_seq_id) == ("0", "default_pg", 1)
    assert first.collective == "AllReduce" and second.state == "started"
    assert first.started_ns is None and first.input_sizes == [[1024]]
    if form == "pickle":  # dump_json writes no stack
        assert first.frames == [FlightFrame("train_step", "train.py", 11)]


def test_no_collective_yet_is_none() -> None:
    read = decode(pickle.dumps(dump([], status(-1, -1, -1))), 0, "x")
    assert read.status == [FlightStatus(group="0")]


def test_an_older_dump_without_pg_status_reads(tmp_path: Path) -> None:
    read = decode(pickle.dumps(dump([entry(1)], None, version="2.3")), 0, "x")
    assert read.status == [] and read.version == "2.3" and len(read.entries) == 1


def test_an_extension_opcode_is_refused() -> None:
    """EXT1 looks its (module, name) up in copyreg's registry: still through find_class."""
    copyreg.add_extension("os", "system", 240)
    try:
        with pytest.raises(TraceError, match=r"refused: .*\(os\.system\)"):
            decode(b"\x80\x02\x82\xf0.", 0, "nccl_trace_rank_0")
    finally:
        copyreg.remove_extension("os", "system", 240)


_GOOD = pickle.dumps(dump([entry(1), entry(2)], status(2, 2, 1)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(_GOOD) - 1), st.integers(0, 255)), max_size=4),
       st.integers(0, len(_GOOD)))  # fmt: skip
def test_damaged_dumps_are_read_or_refused_never_crash(
    edits: list[tuple[int, int]], cut: int
) -> None:
    """Any bytes changed and any cut: a dump, or a TraceError with the reason."""
    data = bytearray(_GOOD[:cut] if cut else _GOOD)
    for at, value in edits:
        if at < len(data):
            data[at] = value
    with contextlib.suppress(TraceError):
        decode(bytes(data), 0, "x")


@pytest.mark.parametrize(
    "data",
    [
        b"\x80\x04\x95" + b"\xff" * 8 + b".",  # FRAME: a length past any size
        b"\x80\x04\x8e" + (1 << 62).to_bytes(8, "little") + b".",  # BINBYTES8: past the memory
    ],
)
def test_a_length_past_any_size_is_no_dump(data: bytes) -> None:
    """Lengths a damaged pickle claims: refused with the reason, never an OverflowError or a
    MemoryError out of the reader."""
    with pytest.raises(TraceError, match="not a Flight Recorder dump"):
        decode(data, 0, "x")
