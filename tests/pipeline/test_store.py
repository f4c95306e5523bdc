"""The aggregator's durable state on disk: stream logs, finished files, the nodes seen.

A log frame is a 4-byte little-endian length and the payload; sizes below are worked out
from that by hand.
"""

from __future__ import annotations

import struct
from collections.abc import Generator, Iterator
from pathlib import Path

import msgspec
import pytest
from commscope.collector.schema import FinishedFile, RankResult, TraceMeta
from commscope.pipeline.stats import sample_values
from commscope.pipeline.store import Store

A = "a" * 32
B = "b" * 32
C = "c" * 32


def frame(payload: bytes) -> bytes:
    return struct.pack("<I", len(payload)) + payload


def finished_file(stream: str) -> FinishedFile:
    return FinishedFile(
        stream=stream,
        node="node0",
        path=f"/run/iteration_4/rank0_{stream[:4]}.json",
        folder="iteration_4",
        root_name="run",
        name_rank=0,
        next_seq=5,
        size_bytes=4096,
        meta=TraceMeta(rank=0, world_size=2, backend="gloo"),
        result=RankResult(source="cpu (gloo)", comm_ns=10, compute_ns=30, steps={4: 100}),
    )


def read_logs(store: Store) -> dict[str, list[bytes]]:
    """Every log read to its end (which is what mends a torn tail)."""
    return {stream: list(frames) for stream, frames in store.logs()}


def log_path(root: Path, stream: str) -> Path:
    return root / "open" / f"{stream}.log"


def done_path(root: Path, stream: str) -> Path:
    return root / "done" / f"{stream}.msgpack"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path)
    yield opened
    opened.close()


def reopen(store: Store) -> Store:
    """A restart: the old store closed, a new one on the same folder."""
    store.close()
    return Store(store.root)


# ---------------------------------------------------------------- logs


def test_a_new_store_is_empty(store: Store, tmp_path: Path) -> None:
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done", "open"]
    assert (read_logs(store), list(store.finished()), store.nodes(), store.log_bytes()) == (
        {},
        [],
        {},
        0,
    )


def test_appended_records_read_back_in_order_per_stream(store: Store) -> None:
    for stream, payload in [(B, b"b0"), (A, b"a0"), (B, b"b1"), (A, b""), (B, b"b2" * 100)]:
        store.append(stream, payload)
    store.sync()
    assert read_logs(store) == {A: [b"a0", b""], B: [b"b0", b"b1", b"b2" * 100]}
    assert [stream for stream, _ in store.logs()] == [A, B]  # by stream id


def test_synced_records_survive_a_restart(store: Store) -> None:
    store.append(A, b"one")
    store.append(A, b"two")
    store.sync()
    again = reopen(store)
    try:
        assert read_logs(again) == {A: [b"one", b"two"]}
    finally:
        again.close()


def test_a_log_is_the_frames_back_to_back(store: Store, tmp_path: Path) -> None:
    store.append(A, b"one")
    store.append(A, b"three")
    store.sync()
    assert log_path(tmp_path, A).read_bytes() == b"\x03\x00\x00\x00one\x05\x00\x00\x00three"


@pytest.mark.parametrize(
    "torn",
    [struct.pack("<I", 100) + b"x" * 10, b"\x07\x00", struct.pack("<I", 1)],
    ids=["short-body", "short-header", "no-body"],
)
def test_a_torn_last_frame_is_cut_off_when_the_log_is_read(
    store: Store, tmp_path: Path, torn: bytes
) -> None:
    store.append(A, b"one")
    store.append(A, b"three")
    store.sync()
    with log_path(tmp_path, A).open("ab") as handle:
        handle.write(torn)
    again = reopen(store)
    try:
        assert read_logs(again) == {A: [b"one", b"three"]}
        assert log_path(tmp_path, A).stat().st_size == (4 + 3) + (4 + 5)
        again.append(A, b"four")
        again.sync()
        assert read_logs(again) == {A: [b"one", b"three", b"four"]}
        assert log_path(tmp_path, A).stat().st_size == (4 + 3) + (4 + 5) + (4 + 4)
    finally:
        again.close()


def test_an_empty_log_is_a_stream_with_no_records(store: Store, tmp_path: Path) -> None:
    log_path(tmp_path, A).write_bytes(b"")
    assert read_logs(store) == {A: []}


def test_a_log_read_only_in_part_is_left_as_it_was(store: Store, tmp_path: Path) -> None:
    store.append(A, b"one")
    store.sync()
    with log_path(tmp_path, A).open("ab") as handle:
        handle.write(b"\x07\x00")
    (stream, frames), *_ = store.logs()
    assert (stream, next(frames)) == (A, b"one")
    assert isinstance(frames, Generator)
    frames.close()
    assert log_path(tmp_path, A).read_bytes() == frame(b"one") + b"\x07\x00"


def test_log_bytes_counts_every_open_log(store: Store) -> None:
    store.append(A, b"abc")
    store.append(B, b"defgh")
    store.append(B, b"")
    store.sync()
    assert store.log_bytes() == (4 + 3) + (4 + 5) + 4


# ---------------------------------------------------------------- finished files


def test_finish_writes_the_result_and_removes_the_log(store: Store, tmp_path: Path) -> None:
    store.append(A, b"start")
    store.append(B, b"start")
    store.sync()
    item = finished_file(A)
    store.finish(item)
    assert sorted(p.name for p in (tmp_path / "done").iterdir()) == [f"{A}.msgpack"]
    assert done_path(tmp_path, A).read_bytes() == msgspec.msgpack.encode(item)
    assert sorted(p.name for p in (tmp_path / "open").iterdir()) == [f"{B}.log"]
    assert read_logs(store) == {B: [b"start"]}
    assert store.log_bytes() == 4 + 5


def test_finished_files_decode_back_equal(store: Store) -> None:
    errored = FinishedFile(
        stream=C, node="n", path="p", folder=".", root_name="r", error="corrupt JSON (x)"
    )
    items = [finished_file(B), finished_file(A), errored]
    for item in items:
        store.finish(item)
    again = reopen(store)
    try:
        assert list(again.finished()) == [items[1], items[0], items[2]]  # by stream id
    finally:
        again.close()


def test_forget_removes_the_log_and_the_result(store: Store, tmp_path: Path) -> None:
    store.finish(finished_file(A))
    store.append(B, b"start")
    store.sync()
    store.forget(A)
    store.forget(B)
    store.forget(C)  # never seen: nothing to do
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == []
    assert (list(store.finished()), read_logs(store), store.log_bytes()) == ([], {}, 0)


def test_forget_keeping_done_removes_only_the_log(store: Store, tmp_path: Path) -> None:
    store.finish(finished_file(A))
    store.append(A, b"again")
    store.sync()
    store.forget(A, keep_done=True)
    assert (list(store.finished()), read_logs(store)) == ([finished_file(A)], {})


def test_a_forgotten_stream_starts_a_new_log(store: Store) -> None:
    store.append(A, b"old")
    store.sync()
    store.forget(A)
    store.append(A, b"new")
    store.sync()
    assert read_logs(store) == {A: [b"new"]}


def test_a_crash_between_done_and_the_log_removal_keeps_both(tmp_path: Path) -> None:
    item = finished_file(A)
    (tmp_path / "done").mkdir()
    (tmp_path / "open").mkdir()
    done_path(tmp_path, A).write_bytes(msgspec.msgpack.encode(item))
    log_path(tmp_path, A).write_bytes(frame(b"start") + frame(b"batch"))
    store = Store(tmp_path)
    try:
        assert list(store.finished()) == [item]
        assert read_logs(store) == {A: [b"start", b"batch"]}
    finally:
        store.close()


def test_a_leftover_temp_file_is_not_a_finished_file(store: Store, tmp_path: Path) -> None:
    # a crash inside the atomic write leaves `<stream>.msgpack.tmp`: it is not read back
    (tmp_path / "done" / f"{A}.msgpack.tmp").write_bytes(b"\x81")
    assert list(store.finished()) == []


# ---------------------------------------------------------------- nodes


def test_nodes_round_trip(store: Store, tmp_path: Path) -> None:
    store.save_nodes({"node0": False, "node1": True})
    again = reopen(store)
    try:
        assert again.nodes() == {"node0": False, "node1": True}
    finally:
        again.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done", "nodes.msgpack", "open"]


def test_one_finished_file_loads_back_by_its_stream(store: Store) -> None:
    store.finish(finished_file(A))
    assert store.load(A) == finished_file(A)
    assert store.load(B) is None
    store.forget(A)
    assert store.load(A) is None


def test_a_file_stored_before_samples_were_packed_is_read_with_them_packed(
    store: Store, tmp_path: Path
) -> None:
    """An aggregator upgraded in the middle of a run reads its state folder as it was."""
    item = finished_file(A)
    old = msgspec.to_builtins(item)
    old["result"]["ops"] = {"AllReduce": {"count": 2, "algbw_Bps": [1e9, 2.5e9], "busbw_Bps": []}}
    done_path(tmp_path, A).write_bytes(msgspec.msgpack.encode(old))
    (loaded,) = store.finished()
    assert loaded == store.load(A)
    assert loaded.result is not None
    tally = loaded.result.ops["AllReduce"]
    assert (
        tally.count,
        list(sample_values(tally.algbw_Bps)),
        list(sample_values(tally.busbw_Bps)),
    ) == (
        2,
        [1e9, 2.5e9],
        [],
    )
    done_path(tmp_path, B).write_bytes(msgspec.msgpack.encode([1, 2, 3]))  # not one at all
    with pytest.raises(msgspec.ValidationError):
        store.load(B)
