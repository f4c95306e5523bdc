"""The aggregator's durable state on disk: the journal (open streams' records, finished
files), the nodes seen.

A journal frame is a 4-byte little-endian length and a msgpack `JournalEntry`; sizes below
are worked out from that (`entry_frame`) by hand.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from commscope.model.errors import ProtocolError
from commscope.model.schema import (
    STORE_VERSION,
    FinishedFile,
    JournalEntry,
    RankResult,
    RunEnd,
    StateVersion,
    TraceMeta,
)
from commscope.pipeline.stats import sample_values
from commscope.service.store import ENDED, Store, run_end, state_version

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
        result=RankResult(evidence_text="cpu (gloo)", comm_ns=10, compute_ns=30, steps={4: 100}),
    )


def entry_frame(kind: str, stream: str, data: bytes = b"") -> bytes:
    """A journal frame: msgpack of [kind, stream, data] (array_like), its length before."""
    return frame(msgspec.msgpack.encode(JournalEntry(kind=kind, stream=stream, data=data)))  # type: ignore[arg-type]


def read_logs(store: Store) -> dict[str, list[bytes]]:
    return {stream: list(frames) for stream, frames in store.logs()}


def segment(root: Path, number: int = 0) -> Path:
    return root / "journal" / f"{number:08d}.log"


def done_path(root: Path, stream: str) -> Path:
    """Where version 1 and 2 kept a finished file."""
    return root / "done" / f"{stream}.msgpack"


def log_path(root: Path, stream: str) -> Path:
    """Where version 1 and 2 kept an open stream's records."""
    return root / "open" / f"{stream}.log"


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
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal", "version.msgpack"]
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


def test_the_journal_is_the_entries_frames_back_to_back(store: Store, tmp_path: Path) -> None:
    store.append(A, b"one")
    store.append(B, b"three")
    store.finish(finished_file(A))
    store.sync()
    result = msgspec.msgpack.encode(finished_file(A))
    assert segment(tmp_path).read_bytes() == (
        entry_frame("record", A, b"one")
        + entry_frame("record", B, b"three")
        + entry_frame("finished", A, result)
    )


@pytest.mark.parametrize(
    "torn",
    [struct.pack("<I", 100) + b"x" * 10, b"\x07\x00", struct.pack("<I", 1), frame(b"\xc1")],
    ids=["short-body", "short-header", "no-body", "undecodable"],
)
def test_a_torn_last_frame_is_cut_off_when_the_store_opens(
    store: Store, tmp_path: Path, torn: bytes
) -> None:
    store.append(A, b"one")
    store.append(A, b"three")
    store.sync()
    kept = len(entry_frame("record", A, b"one") + entry_frame("record", A, b"three"))
    with segment(tmp_path).open("ab") as handle:
        handle.write(torn)
    again = reopen(store)
    try:
        assert read_logs(again) == {A: [b"one", b"three"]}
        assert segment(tmp_path).stat().st_size == kept
        again.append(A, b"four")
        again.sync()
        assert read_logs(again) == {A: [b"one", b"three", b"four"]}
        sizes = (segment(tmp_path).stat().st_size, segment(tmp_path, 1).stat().st_size)
        assert sizes == (kept, len(entry_frame("record", A, b"four")))  # a new segment a start
    finally:
        again.close()


def test_an_empty_segment_holds_no_stream(store: Store, tmp_path: Path) -> None:
    segment(tmp_path).write_bytes(b"")
    assert read_logs(reopen(store)) == {}


def test_log_bytes_counts_every_open_log(store: Store) -> None:
    store.append(A, b"abc")
    store.append(B, b"defgh")
    store.append(B, b"")
    store.sync()
    frames = [entry_frame("record", A, b"abc"), entry_frame("record", B, b"defgh")]
    assert store.log_bytes() == sum(map(len, frames)) + len(entry_frame("record", B))


# ---------------------------------------------------------------- finished files


def test_finish_keeps_the_result_and_drops_the_log(store: Store) -> None:
    store.append(A, b"start")
    store.append(B, b"start")
    store.sync()
    item = finished_file(A)
    store.finish(item)
    store.sync()
    assert (store.load(A), read_logs(store)) == (item, {B: [b"start"]})
    assert store.log_bytes() == len(entry_frame("record", B, b"start"))
    again = reopen(store)
    try:
        assert (list(again.finished()), read_logs(again)) == ([item], {B: [b"start"]})
    finally:
        again.close()


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
    store.sync()
    assert (list(store.finished()), read_logs(store), store.log_bytes()) == ([], {}, 0)
    again = reopen(store)
    try:
        assert (list(again.finished()), read_logs(again)) == ([], {})
    finally:
        again.close()


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


def test_a_sync_is_one_fsync_and_one_of_the_folder_for_a_new_segment(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """100 streams' records and 50 results: one fsync of the segment, one of the journal
    folder (the segment is new); then 1; then none when nothing was written."""
    made: list[int] = []
    monkeypatch.setattr(os, "fsync", made.append)
    streams = [f"{n:032x}" for n in range(100)]
    for stream in streams:
        store.append(stream, b"start")
    for stream in streams[:50]:
        store.finish(finished_file(stream))
    store.sync()
    assert len(made) == 2
    store.append(streams[99], b"more")
    store.sync()
    assert len(made) == 3
    store.sync()
    assert len(made) == 3


def test_segments_roll_and_a_dead_one_is_deleted_oldest_first(tmp_path: Path) -> None:
    """Segments of 64 bytes: each frame of a 40-byte record (~80 bytes) fills one. A's 3
    records and B's 1 are in segments 0-3; A finished (its result: segment 4) leaves 0-2
    dead, deleted at the sync; segment 3 (B's record) stays, and so do 4 and the last."""
    store = Store(tmp_path, segment_bytes=64)
    try:
        for stream in (A, A, A, B):
            store.append(stream, b"x" * 40)
        store.finish(finished_file(A))
        store.sync()
        names = sorted(p.name for p in (tmp_path / "journal").iterdir())
        assert names == ["00000003.log", "00000004.log"]
        assert (read_logs(store), store.load(A)) == ({B: [b"x" * 40]}, finished_file(A))
        again = reopen(store)
        assert (read_logs(again), list(again.finished())) == ({B: [b"x" * 40]}, [finished_file(A)])
        again.close()
    finally:
        store.close()


# ---------------------------------------------------------------- nodes


def test_nodes_round_trip(store: Store, tmp_path: Path) -> None:
    store.save_nodes({"node0": False, "node1": True})
    again = reopen(store)
    try:
        assert again.nodes() == {"node0": False, "node1": True}
    finally:
        again.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["journal", "nodes.msgpack", "version.msgpack"]


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
    old["stats"]["dropped"] = {
        "value beyond 64 bits, NaN or Infinity, or bytes not UTF-8 (mended)": 1
    }
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
        assert loaded.stats.dropped == {"value_mended": 1}  # its old reason keyed
        assert (store.nodes(), store.retired()) == ({"node0": True}, [B])
    finally:
        store.close()
    assert sorted(p.name for p in (tmp_path / "rejected").iterdir()) == [
        f"{B}.msgpack",
        f"{C}.msgpack",
    ]
    assert state_version(tmp_path) == STORE_VERSION
    again = Store(tmp_path)
    try:
        assert again.migrated_from is None
        assert [f.stream for f in again.finished()] == [A]
    finally:
        again.close()


def test_a_new_folder_starts_at_the_current_version(tmp_path: Path) -> None:
    assert state_version(tmp_path / "new") == 0
    Store(tmp_path / "new").close()
    assert state_version(tmp_path / "new") == STORE_VERSION


def test_a_store_of_a_newer_version_is_refused(tmp_path: Path) -> None:
    tmp_path.joinpath("version.msgpack").write_bytes(
        msgspec.msgpack.encode(StateVersion(version=STORE_VERSION + 1))
    )
    with pytest.raises(ProtocolError, match=f"state version {STORE_VERSION + 1}"):
        Store(tmp_path)


def test_a_stored_result_that_does_not_decode_is_dropped_not_raised(
    store: Store, tmp_path: Path
) -> None:
    store.finish(finished_file(A))
    store.sync()
    with segment(tmp_path).open("ab") as handle:
        handle.write(entry_frame("finished", B, b"\xc1 not msgpack"))
    again = reopen(store)
    try:
        assert [f.stream for f in again.finished()] == [A]
        assert again.load(B) is None
    finally:
        again.close()


def test_a_version_2_store_becomes_one_journal(tmp_path: Path) -> None:
    """A result file and a log (its torn tail cut) become entries of segment 0; the old
    folders go once version 3 is written."""
    (tmp_path / "done").mkdir()
    (tmp_path / "open").mkdir()
    tmp_path.joinpath("version.msgpack").write_bytes(
        msgspec.msgpack.encode(StateVersion(version=2))
    )
    done_path(tmp_path, A).write_bytes(msgspec.msgpack.encode(finished_file(A)))
    log_path(tmp_path, B).write_bytes(frame(b"start") + frame(b"facts") + b"\x07\x00")
    store = Store(tmp_path)
    try:
        assert store.migrated_from == 2
        assert (list(store.finished()), read_logs(store)) == (
            [finished_file(A)],
            {B: [b"start", b"facts"]},
        )
        assert sorted(p.name for p in tmp_path.iterdir()) == ["journal", "version.msgpack"]
    finally:
        store.close()


def test_the_run_s_end_is_read_back_without_opening_the_journal(tmp_path: Path) -> None:
    assert run_end(tmp_path / "state") is None  # a new folder: no run has ended
    store = Store(tmp_path / "state")
    assert run_end(tmp_path / "state") is None
    end = RunEnd(reports=["a.txt", "a.json", "a.html"], lost=["n1: no end-of-run"],
                 generated_utc="2026-11-28T22:00:00Z")  # fmt: skip
    store.save_end(end)
    store.close()
    assert run_end(tmp_path / "state") == end


def test_an_undecodable_end_mark_is_moved_aside_not_fatal(tmp_path: Path) -> None:
    Store(tmp_path).close()
    (tmp_path / ENDED).write_bytes(b"\xc1 not msgpack")
    assert run_end(tmp_path) is None
    assert not (tmp_path / ENDED).exists()
    assert (tmp_path / "rejected" / ENDED).exists()


# Drop reasons as commscope wrote them up to state version 3 (protocol 9), and their keys.
OLD_SPAN, OLD_TID = (
    "span without numeric ts/dur (or out of range)",
    "cpu event whose tid is " + ("neither a number nor a name"),
)


def with_old_reasons(stream: str) -> bytes:
    """A finished file as version 3 stored it: its drop reasons English sentences."""
    old = msgspec.msgpack.decode(msgspec.msgpack.encode(finished_file(stream)))
    old["stats"]["dropped"] = {OLD_SPAN: 2, OLD_TID: 1}
    return msgspec.msgpack.encode(old)


def test_a_version_3_store_gets_its_drop_reasons_keyed(tmp_path: Path) -> None:
    """Results and end records of the journal: old sentences under their keys; a segment with
    none is left byte for byte; a record that is no message stays as it was."""
    end = {"type": "end", "stream": B, "seq": 2, "stats": {"dropped": {OLD_TID: 4}}}
    (tmp_path / "journal").mkdir()
    segment(tmp_path).write_bytes(
        entry_frame("finished", A, with_old_reasons(A))
        + entry_frame("record", B, b"start")
        + entry_frame("record", B, msgspec.msgpack.encode(end))
    )
    untouched = entry_frame("finished", C, msgspec.msgpack.encode(finished_file(C)))
    segment(tmp_path, 1).write_bytes(untouched)
    tmp_path.joinpath("version.msgpack").write_bytes(
        msgspec.msgpack.encode(StateVersion(version=3))
    )
    store = Store(tmp_path)
    try:
        assert store.migrated_from == 3
        loaded = store.load(A)
        assert loaded is not None and loaded.stats.dropped == {"bad_span": 2, "bad_tid": 1}
        start, record = read_logs(store)[B]
        assert start == b"start"
        assert msgspec.msgpack.decode(record)["stats"] == {"dropped": {"bad_tid": 4}}
    finally:
        store.close()
    assert segment(tmp_path, 1).read_bytes() == untouched
    assert state_version(tmp_path) == STORE_VERSION == 4


def test_a_version_2_result_with_old_drop_reasons_is_kept_keyed(tmp_path: Path) -> None:
    (tmp_path / "done").mkdir()
    (tmp_path / "open").mkdir()
    tmp_path.joinpath("version.msgpack").write_bytes(
        msgspec.msgpack.encode(StateVersion(version=2))
    )
    done_path(tmp_path, A).write_bytes(with_old_reasons(A))
    store = Store(tmp_path)
    try:
        (loaded,) = store.finished()
        assert loaded.stats.dropped == {"bad_span": 2, "bad_tid": 1}
        assert not (tmp_path / "rejected").exists()
    finally:
        store.close()
