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
from commscope.collector.errors import ProtocolError
from commscope.collector.schema import (
    STATE_VERSION,
    FinishedFile,
    RankResult,
    StateVersion,
    TraceMeta,
)
from commscope.pipeline.stats import sample_values
from commscope.pipeline.store import Store, state_version

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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done", "open", "version.msgpack"]
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
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["version.msgpack"]
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
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["done", "nodes.msgpack", "open", "version.msgpack"]


def test_one_finished_file_loads_back_by_its_stream(store: Store) -> None:
    store.finish(finished_file(A))
    assert store.load(A) == finished_file(A)
    assert store.load(B) is None
    store.forget(A)
    assert store.load(A) is None


# ---------------------------------------------------------------- versions and migrations


def write_v1_store(root: Path) -> None:
    """A state folder as version 1 wrote it: no version file, samples as lists of floats,
    unchecked names (a node name with a space, a stream id that is not one)."""
    (root / "done").mkdir(parents=True)
    (root / "open").mkdir()
    old = msgspec.to_builtins(finished_file(A))
    old["result"]["ops"] = {"AllReduce": {"count": 2, "algbw_Bps": [1e9, 2.5e9], "busbw_Bps": []}}
    done_path(root, A).write_bytes(msgspec.msgpack.encode(old))
    done_path(root, B).write_bytes(msgspec.msgpack.encode([1, 2, 3]))  # not one at all
    wide = msgspec.to_builtins(finished_file(C))
    wide["meta"]["world_size"] = 10**12  # sizes loops: refused by the bounded schema
    done_path(root, C).write_bytes(msgspec.msgpack.encode(wide))
    nodes = {"node0": True, "a b": False}
    (root / "nodes.msgpack").write_bytes(msgspec.msgpack.encode(nodes))
    (root / "retired.msgpack").write_bytes(msgspec.msgpack.encode([B, "../x"]))


def test_a_version_1_store_is_migrated_explicitly(tmp_path: Path) -> None:
    """Samples packed, what does not fit the bounded schema moved aside (files) or dropped
    (names), the version written: a second open finds nothing to migrate."""
    write_v1_store(tmp_path)
    assert state_version(tmp_path) == 1
    store = Store(tmp_path)
    try:
        assert store.migrated_from == 1
        (loaded,) = store.finished()
        assert loaded.result is not None
        tally = loaded.result.ops["AllReduce"]
        samples = (list(sample_values(tally.algbw_Bps)), list(sample_values(tally.busbw_Bps)))
        assert (tally.count, samples) == (2, ([1e9, 2.5e9], []))
        assert (store.nodes(), store.retired()) == ({"node0": True}, [B])
    finally:
        store.close()
    assert sorted(p.name for p in (tmp_path / "rejected").iterdir()) == [
        f"{B}.msgpack",
        f"{C}.msgpack",
    ]
    assert state_version(tmp_path) == STATE_VERSION
    again = Store(tmp_path)
    try:
        assert again.migrated_from is None
        assert [f.stream for f in again.finished()] == [A]
    finally:
        again.close()


def test_a_new_folder_starts_at_the_current_version(tmp_path: Path) -> None:
    assert state_version(tmp_path / "new") == 0
    Store(tmp_path / "new").close()
    assert state_version(tmp_path / "new") == STATE_VERSION


def test_a_store_of_a_newer_version_is_refused(tmp_path: Path) -> None:
    tmp_path.joinpath("version.msgpack").write_bytes(
        msgspec.msgpack.encode(StateVersion(version=STATE_VERSION + 1))
    )
    with pytest.raises(ProtocolError, match=f"state version {STATE_VERSION + 1}"):
        Store(tmp_path)


def test_a_stored_file_that_does_not_decode_is_moved_aside_not_raised(
    store: Store, tmp_path: Path
) -> None:
    store.finish(finished_file(A))
    done_path(tmp_path, B).write_bytes(b"\xc1 not msgpack")
    assert [f.stream for f in store.finished()] == [A]
    assert store.load(B) is None
    assert (tmp_path / "rejected" / f"{B}.msgpack").exists()


def test_log_handles_are_capped_least_recently_used_first(tmp_path: Path) -> None:
    """Three handles for 100 streams: every record still lands in its own log, and what an
    evicted handle held was made durable before it was closed."""
    store = Store(tmp_path, max_handles=3)
    try:
        streams = [f"{n:032x}" for n in range(100)]
        for stream in streams:
            store.append(stream, stream[-2:].encode())
            assert store.open_handles() <= 3
        store.append(streams[0], b"again")
        store.sync()
        logs = read_logs(store)
        assert logs[streams[0]] == [b"00", b"again"] and logs[streams[99]] == [b"63"]
        assert len(logs) == 100 and store.open_handles() == 3
    finally:
        store.close()
