"""The collector's protocol core (`Session`) against a real in-process `Aggregator`, with a fake
clock and no sleeps: kills and restarts from the checkpoint at any point, the aggregator
restarted (or its state lost), resend backoff, credit, rewind, end-of-run, and a hypothesis
test of random kill/restart/drop/duplicate schedules whose final report is the offline one.

`Node` drives a `Session` the way service/collect.py does, with `Reader`s standing in for the
file threads: a reader fingerprints its file as `FileStream` does (over the length its
`Start` says) and hands out the records of a real parse of the sample traces (gzip, 16 KB
each, so every fingerprint covers less than 64 KiB). A file being written hands out only its
StreamStart until it is complete.
"""

from __future__ import annotations

import functools
import queue
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
from commscope.collector.discover import (
    file_size,
    open_trace,
    rank_from_name,
    relative_folder,
    root_name,
)
from commscope.collector.inspector_stream import InspectorStream
from commscope.collector.kineto import TraceReader
from commscope.collector.session import Limits, Session, Start, dump_checkpoint, load_checkpoint
from commscope.collector.stream import FINGERPRINT_BYTES, Item, StreamSettings, fingerprint
from commscope.collector.transport import MemoryTransport
from commscope.exporters import jsonreport
from commscope.model.schema import (
    Ack,
    Event,
    Facts,
    FileStats,
    Record,
    RunAck,
    StreamEnd,
    StreamStart,
    TraceMeta,
    Welcome,
)
from commscope.pipeline.edge import Reduction, facts
from commscope.pipeline.report import Options
from commscope.service.aggregate import Aggregator, AggregatorSettings
from commscope.service.offline import analyse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inspector_builder import coll

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"
NODE = "node0"
BATCH = 40  # events per parse batch
ITEMS = 40  # items per Facts record: each sample file gives 3 to 6 records
LIMITS = Limits(window=4, resend_s=1.0, max_resend_s=8.0, heartbeat_s=5.0, silence_s=30.0)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@functools.cache
def parsed(path: Path) -> tuple[tuple[tuple[Event, ...], ...], TraceMeta, FileStats]:
    with open_trace(path) as handle:
        reader = TraceReader(handle, str(path))
        batches = tuple(tuple(b) for b in reader.batches(BATCH))
    return batches, reader.meta, reader.stats


def records(root: Path, path: Path, stream: str, complete: bool) -> list[Record]:
    """What FileStream hands out for `path` as stream `stream` (only the start if the file
    is still being written)."""
    start = StreamStart(
        stream=stream,
        node=NODE,
        path=str(path),
        folder=relative_folder(root, path.parent),
        root_name=root_name(root),
        name_rank=rank_from_name(path),
    )
    if not complete:
        return [start]
    batches, meta, stats = parsed(SAMPLE / path.relative_to(root))
    reduction = Reduction()
    for batch in batches:
        reduction.add_all(batch)
    out: list[Record] = [start, *facts(reduction, stream, 1, limit=ITEMS)]
    end = StreamEnd(stream=stream, seq=len(out), meta=meta, stats=stats, size_bytes=file_size(path))
    return [*out, end]


@dataclass
class Reader:
    """A file thread's stand-in: the records of one Start still to hand out."""

    start: Start
    stream: str
    covered: int
    pending: list[Record]
    complete: bool


@dataclass
class World:
    """The files on disk, the collector's state folder and the aggregator, across restarts."""

    tmp: Path
    clock: Clock = field(default_factory=Clock)
    disk: dict[str, bytes] = field(default_factory=dict)  # the collector's checkpoint file
    growing: set[Path] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.root = self.tmp / "run"
        self.settings = AggregatorSettings(
            listen="inproc://unused", out=self.tmp / "out", state=self.tmp / "agg"
        )
        self.aggregator = Aggregator(self.settings, clock=self.clock)
        self.transport = MemoryTransport(self.aggregator, NODE.encode())

    def files(self) -> list[Path]:
        return sorted(self.root.rglob("*.json.gz"))

    def write(self, name: str, part: int = 0) -> Path:
        """The sample file `name` into the run folder; `part` > 0: only its first `part`
        bytes (being written)."""
        target = self.root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        data = (SAMPLE / name).read_bytes()
        target.write_bytes(data[:part] if part else data)
        self.growing.discard(target)
        if part:
            self.growing.add(target)
        return target

    def restart_aggregator(self, lose_state: bool = False) -> None:
        self.aggregator.store.close()
        if lose_state:
            shutil.rmtree(self.settings.state)
        self.aggregator = Aggregator(self.settings, clock=self.clock)
        self.transport.aggregator = self.aggregator
        self.transport.outbox.clear()  # what was on the wire is lost
        self.transport.inbox.clear()

    def report(self) -> dict[str, Any]:
        report = self.aggregator.aggregation.report(self.settings.options, final=True)
        return normalised(jsonreport.to_document(report))


def normalised(document: dict[str, Any]) -> dict[str, Any]:
    return msgspec.json.decode(msgspec.json.encode(document))  # type: ignore[no-any-return]


class Node:
    """One collector process: a Session restored from the checkpoint, driven as the shell
    drives it (no threads: readers hand out one record per turn)."""

    def __init__(self, world: World) -> None:
        self.world = world
        saved = world.disk.get("checkpoint")
        files = load_checkpoint(saved) if saved is not None else {}
        self.session = Session(NODE, "test", LIMITS, files, world.clock())
        self.readers: dict[str, Reader] = {}
        self.started: list[Start] = []

    def discover(self) -> None:
        for path in self.world.files():
            length = self.session.fingerprint_length(str(path))
            head = None if length is None else fingerprint(path, length)
            self.session.found(str(path), head)

    def turn(self) -> None:
        world, session, now = self.world, self.session, self.world.clock()
        for reply in world.transport.receive(0):
            session.receive(reply, now)
        saved = session.checkpoint()
        if saved is not None:
            world.disk["checkpoint"] = saved
        self._start()
        self._pump(now)
        for payload in session.due(now):
            world.transport.send(payload)

    def _start(self) -> None:
        for path in self.session.cancels:
            self.readers.pop(path, None)
        self.session.cancels.clear()
        while self.session.starts:
            start = self.session.starts.popleft()
            self.started.append(start)
            path = Path(start.path)
            stream, covered = fingerprint(path, start.fingerprint_bytes or FINGERPRINT_BYTES)
            complete = path not in self.world.growing
            pending = records(self.world.root, path, stream, complete)
            pending = [r for r in pending if r.seq >= start.skip]
            self.readers[start.path] = Reader(start, stream, covered, pending, complete)

    def _pump(self, now: float) -> None:
        for key, reader in list(self.readers.items()):
            if not reader.complete and Path(key) not in self.world.growing:
                reader.complete = True  # the file is finished: parse it again, past the start
                reader.pending += records(self.world.root, Path(key), reader.stream, True)[1:]
            while reader.pending and self.session.has_credit():
                record = reader.pending.pop(0)
                payload = self.session.take(
                    key, reader.start.generation, record, reader.covered, now
                )
                if payload is not None:
                    self.world.transport.send(payload)
            if not reader.pending and reader.complete:
                del self.readers[key]

    def idle(self) -> bool:
        """Everything acknowledged (a file still being written waits for more)."""
        waiting = all(not r.pending and not r.complete for r in self.readers.values())
        return waiting and self.session.idle()

    def settle(self, turns: int = 400) -> None:
        """Turns (a second apart) until every file is acknowledged; bounded."""
        for _ in range(turns):
            self.turn()
            if self.idle() and not self.world.transport.outbox:
                return
            self.world.clock.now += 1.0
        raise AssertionError(f"not settled: {self.session.unacked.keys()} {self.readers}")

    def end_run(self) -> None:
        payload = self.session.end_run(self.world.clock(), "stopped")
        assert payload is not None
        self.world.transport.send(payload)
        for _ in range(50):
            self.turn()
            if self.session.run_acked:
                return
            self.world.clock.now += 1.0
        raise AssertionError("end of run never acknowledged")


def offline_report(root: Path) -> dict[str, Any]:
    return normalised(jsonreport.to_document(analyse(root, Options())))


NAMES = [
    "iteration_4/rank0_trace.json.gz",
    "iteration_4/rank1_trace.json.gz",
    "iteration_8/rank0_trace.json.gz",
    "iteration_8/rank1_trace.json.gz",
]


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(tmp_path)
    yield made
    made.aggregator.store.close()


# ---------------------------------------------------------------- the loss (issue 10)


def test_a_file_shorter_than_64k_at_its_start_resumes_as_the_same_stream(world: World) -> None:
    """The loss of issue 10: a gzip file written in place, the collector killed after its
    StreamStart was acknowledged (the fingerprint then covered 5000 bytes), restarted once
    the file is complete. The restarted stream must keep its id: the Start carries the
    recorded 5000 bytes, and the file's records reach the report."""
    for name in NAMES[1:]:
        world.write(name)
    growing = world.write(NAMES[0], part=5000)
    node = Node(world)
    node.discover()
    node.settle()
    entry = node.session.files[str(growing)]
    assert (entry.fingerprint_bytes, entry.acked, entry.done) == (5000, 1, False)
    world.write(NAMES[0])  # finished while the collector is down
    again = Node(world)
    again.discover()
    assert again.session.starts[0] == Start(str(growing), 1, 5000, 1)
    again.settle()
    assert again.session.stats.dropped == {}
    again.end_run()
    assert world.report() == offline_report(world.root)


def test_64k_over_the_grown_file_would_be_another_stream(world: World) -> None:
    """Why the fingerprint length must be carried: over 64 KiB the grown file reads as
    another id than over the 5000 bytes its stream began with."""
    path = world.write(NAMES[0], part=5000)
    began, _ = fingerprint(path, FINGERPRINT_BYTES)
    world.write(NAMES[0])
    assert fingerprint(path, 5000)[0] == began
    assert fingerprint(path, FINGERPRINT_BYTES)[0] != began


def test_a_file_rewritten_since_the_checkpoint_is_a_new_stream_from_zero(world: World) -> None:
    path = world.write(NAMES[0])
    node = Node(world)
    node.discover()
    node.settle()
    old = node.session.files[str(path)].stream
    path.write_bytes((SAMPLE / NAMES[1]).read_bytes())  # another document under the name
    again = Node(world)
    again.discover()
    assert list(again.session.starts) == [Start(str(path), 0, None, 1)]
    again.settle()
    assert again.session.files[str(path)].stream != old
    assert again.session.files[str(path)].done


def test_a_file_that_shrank_is_a_new_stream_from_zero(world: World) -> None:
    """A file cut shorter than its fingerprint's bytes (truncated for a rewrite) cannot be
    the stream the checkpoint knows, even if what is left is the same prefix."""
    path = world.write(NAMES[0], part=9000)
    node = Node(world)
    node.discover()
    node.settle()
    assert node.session.files[str(path)].fingerprint_bytes == 9000
    world.write(NAMES[0], part=3000)
    again = Node(world)
    again.discover()
    assert list(again.session.starts) == [Start(str(path), 0, None, 1)]


def test_a_resumed_file_whose_id_changed_under_the_reader_starts_again_from_zero(
    world: World,
) -> None:
    """The file changed between the check and the read: the records of an id the aggregator
    does not know are not sent; the file is streamed anew (counted as a drop reason)."""
    path = world.write(NAMES[0], part=5000)
    node = Node(world)
    node.discover()
    node.settle()
    world.write(NAMES[0])
    again = Node(world)
    again.discover()
    start = again.session.starts[0]
    batch = Facts(stream="f" * 32, seq=1)
    assert again.session.take(str(path), start.generation, batch, 0, world.clock()) is None
    assert again.session.stats.dropped == {"file_changed": 1}
    assert list(again.session.starts)[-1] == Start(str(path), 0, None, 2)


def test_a_fully_acknowledged_file_is_not_sent_again_after_a_restart(world: World) -> None:
    for name in NAMES:
        world.write(name)
    node = Node(world)
    node.discover()
    node.settle()
    again = Node(world)
    again.discover()
    assert list(again.session.starts) == []
    again.turn()
    assert world.transport.outbox == []


# ---------------------------------------------------------------- kills at many points


@pytest.mark.parametrize("turns", [0, 1, 2, 3, 5, 8, 13])
def test_a_collector_killed_after_any_turn_resumes_with_nothing_lost(
    world: World, turns: int
) -> None:
    """Killed after `turns` turns (before any ack, between acks, mid-file, with a file still
    growing): the restarted collector ends with the offline report."""
    for name in NAMES[:3]:
        world.write(name)
    world.write(NAMES[3], part=4000)
    node = Node(world)
    node.discover()
    for _ in range(turns):
        node.turn()
        world.clock.now += 0.5
    world.transport.outbox.clear()  # what the killed process had not handed over is lost
    world.write(NAMES[3])
    again = Node(world)
    again.discover()
    again.settle()
    again.end_run()
    assert world.report() == offline_report(world.root)


def test_an_aggregator_restarted_on_its_state_keeps_everything(world: World) -> None:
    for name in NAMES:
        world.write(name)
    node = Node(world)
    node.discover()
    for _ in range(3):
        node.turn()
    world.restart_aggregator()
    node.settle()
    node.end_run()
    assert world.report() == offline_report(world.root)


def test_an_aggregator_that_lost_its_state_makes_the_collector_rewind(world: World) -> None:
    """Acked records the aggregator no longer holds: its Ack says next_seq 0 below what the
    collector had acknowledged, and the collector sends the file again from its start."""
    path = world.write(NAMES[0])
    world.write(NAMES[1], part=4000)
    node = Node(world)
    node.discover()
    node.settle()
    growing = str(world.root / NAMES[1])
    assert node.session.files[growing].acked == 1
    world.restart_aggregator(lose_state=True)
    world.write(NAMES[1])
    node.settle()
    assert node.started[-1] == Start(growing, 0, 4000, 2)
    assert node.session.files[growing].done
    assert node.session.files[str(path)].done  # finished before: not the aggregator's to undo


def test_a_rewind_cancels_the_reader_and_forgets_the_window() -> None:
    entry_files = {"/r/a.json": _entry("a" * 32, 100, acked=5)}
    session = Session(NODE, "i", LIMITS, entry_files, 0.0)
    session.receive(_ack("a" * 32, 2), 1.0)
    assert session.cancels == ["/r/a.json"]
    assert list(session.starts) == [Start("/r/a.json", 2, 100, 1)]
    assert session.files["/r/a.json"].acked == 2
    assert session.checkpoint() is not None


# ---------------------------------------------------------------- window, credit, backoff


def _entry(stream: str, covered: int, acked: int = 0) -> Any:
    from commscope.model.schema import CheckpointEntry

    return CheckpointEntry(stream=stream, fingerprint_bytes=covered, acked=acked)


def _ack(stream: str, next_seq: int, done: bool = False, credit: int = 0) -> bytes:
    return msgspec.msgpack.encode(Ack(stream=stream, next_seq=next_seq, done=done, credit=credit))


def _started(session: Session, path: str, count: int, now: float = 0.0) -> str:
    """Take a StreamStart and `count - 1` facts of a new stream at `path`."""
    session.found(path, None)
    start = session.starts.popleft()
    stream = "b" * 32
    first = StreamStart(stream=stream, node=NODE, path=path, folder=".", root_name="r")
    assert session.take(path, start.generation, first, 10, now) is not None
    for seq in range(1, count):
        record = Facts(stream=stream, seq=seq)
        assert session.take(path, start.generation, record, 10, now) is not None
    return stream


def test_no_record_is_taken_beyond_the_credit() -> None:
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    _started(session, "/r/a.json", 4)
    assert not session.has_credit()  # the window of 4 is full
    session.receive(msgspec.msgpack.encode(Welcome(protocol=3, instance="x", credit=6)), 0.0)
    assert session.has_credit()
    session.receive(_ack("b" * 32, 2, credit=2), 0.0)  # 2 of 4 acked, the credit now 2
    assert not session.has_credit()
    session.receive(_ack("b" * 32, 3, credit=2), 0.0)
    assert session.has_credit()


def test_an_ack_past_records_covering_many_seqs_releases_them() -> None:
    # a tailed Inspector log: its start (seq 0), a record of ops 1 … 1000 (seq 1 covering
    # 1000) and one of ops 1001 … 1500 (seq 1001 covering 500)
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    stream = _started(session, "/r/node0-pid1.log", 1)
    generation = session.generation.get("/r/node0-pid1.log", 0)
    for seq, covers in ((1, 1000), (1001, 500)):
        record = Facts(stream=stream, seq=seq, covers=covers)
        assert session.take("/r/node0-pid1.log", generation, record, 10, 0.0) is not None
    session.receive(_ack(stream, 1001), 0.0)  # the start and the first record
    assert list(session.unacked) == [(stream, 1001)]
    session.receive(_ack(stream, 1501), 0.0)
    assert session.unacked == {} and session.stats.batches_acked == 3


def test_resends_back_off_doubling_to_the_cap_and_progress_counts_from_the_ack() -> None:
    """resend_s 1, max 8: the window goes again at t=1, 3, 7, 15, 23 (gaps 1, 2, 4, 8, 8);
    an ack that moves forward (t=30) counts the gap from itself; the record it acknowledges
    was resent, so it measures no round trip (Karn's rule) and the gap stays 8 (t=38)."""
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    stream = _started(session, "/r/a.json", 3)
    sent_at = [t for t in range(30) if session.due(float(t))]
    assert sent_at == [1, 3, 7, 15, 23]
    session.receive(_ack(stream, 1), 30.0)
    assert session.due(31.0) == [] and session.due(37.5) == []
    resent = session.due(38.0)
    assert len(resent) == 3  # a hello, then the two records still unacknowledged
    assert session.stats.batches_resent == 5 * 3 + 2


def test_a_fresh_round_trip_brings_the_backoff_back_to_the_timeout() -> None:
    """Resent at t=1 and 3 (the gap is now 4), seq 0 is acknowledged at t=4 (no sample: it
    was resent); seq 3, taken at t=4 and acknowledged at t=4.5, is a fresh round trip of 0.5:
    srtt 0.5, rttvar 0.25, timeout max(1, 0.5 + 4 x 0.25 = 1.5) = 1.5, counted from t=4.5."""
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    stream = _started(session, "/r/a.json", 3)
    assert session.due(1.0) and session.due(3.0)
    session.receive(_ack(stream, 1), 4.0)
    path_generation = session.generation["/r/a.json"]
    assert session.take("/r/a.json", path_generation, Facts(stream=stream, seq=3), 10, 4.0)
    session.receive(_ack(stream, 1), 4.5)  # no progress: nothing changes
    assert session.resend_every == 4.0
    session.receive(_ack(stream, 4), 4.5)
    assert (session.srtt, session.rttvar, session.timeout()) == (0.5, 0.25, 1.5)
    assert session.resend_every == 1.5


def test_a_busy_aggregator_answering_steadily_gets_no_duplicates() -> None:
    """The aggregator acknowledges every record 3 s after it was sent (resend_s 1, max 8).
    Seq 0 (t=0) is resent at t=1 and t=3 (nothing measured yet; gaps 1, 2: the next is 4) and
    its ack at t=3 measures nothing (Karn). Seq 1, sent at t=3, is not resent before its ack at
    t=6 (the gap of 4 is kept, counted from t=3): a sample of 3, srtt 3, rttvar 1.5, timeout
    min(3 + 4 x 1.5, 8) = 8, and from then on every ack comes within it: 2 resends in 20
    rounds. The old rule (back to resend_s on every ack) resent every record twice."""
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    session.receive(_welcome("a"), 0.0)
    stream = _started(session, "/r/a.json", 1)
    generation = session.generation["/r/a.json"]
    now = 0.0
    for seq in range(1, 21):
        for tick in range(1, 31):  # the collector's loop asks every 0.1 s until the ack
            session.due(now + tick / 10)
        now += 3.0
        session.receive(_ack(stream, seq), now)
        assert session.take("/r/a.json", generation, Facts(stream=stream, seq=seq), 10, now)
    assert session.stats.batches_resent == 2


def _welcome(instance: str) -> bytes:
    return msgspec.msgpack.encode(Welcome(protocol=4, instance=instance, credit=4))


def test_a_restarted_aggregator_gets_the_window_at_once_not_after_the_grown_backoff() -> None:
    """Away long enough for the gap to reach the cap of 8 (resends at t=1, 3, 7, 15, 23), the
    aggregator comes back as a new instance at t=24: the window goes at once, and the backoff
    starts over (that resend was the first: the next gap is 2, t=26), where without the
    Welcome the next resend would have been t=31."""
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    session.receive(_welcome("first"), 0.0)
    _started(session, "/r/a.json", 2)
    assert [t for t in range(24) if session.due(float(t))] == [1, 3, 7, 15, 23]
    session.receive(_welcome("first"), 23.5)  # the same aggregator answering: no change
    assert session.due(24.0) == []
    session.receive(_welcome("second"), 24.0)
    assert len(session.due(24.0)) == 3  # a hello and the two records
    assert session.due(25.0) == [] and session.due(26.0)


def test_the_first_aggregator_to_answer_gets_the_window_at_once() -> None:
    """A collector that started while no aggregator ran (resends at t=1, 3, 7, 15) hears its
    first Welcome at t=20: the window goes at once, not at t=23."""
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    _started(session, "/r/a.json", 2)
    assert [t for t in range(20) if session.due(float(t))] == [1, 3, 7, 15]
    session.receive(_welcome("first"), 20.0)
    assert len(session.due(20.0)) == 3


def test_a_welcome_with_nothing_waiting_sends_nothing_early() -> None:
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    session.receive(_welcome("first"), 0.0)
    _started(session, "/r/a.json", 1, now=5.0)
    assert session.due(5.5) == [] and session.due(6.0)  # resend_s after it was first sent


def test_an_ack_that_does_not_move_keeps_the_backoff() -> None:
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    stream = _started(session, "/r/a.json", 2)
    assert session.due(1.0) and session.due(3.0)  # gaps 1, 2: the next is 4
    session.receive(_ack(stream, 0), 3.5)
    assert session.due(6.0) == [] and session.due(7.0)


def test_end_of_run_is_resent_until_acknowledged() -> None:
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    first = session.end_run(0.0, "stopped")
    assert first is not None and session.end_run(0.5, "stopped") is None
    again = session.due(1.0)
    assert again[-1] == first
    assert session.due(2.0) == [] and session.due(3.0)[-1] == first
    session.receive(msgspec.msgpack.encode(RunAck(node=NODE)), 3.5)
    assert session.run_acked and session.due(100.0) == []


def test_a_run_ack_before_end_of_run_is_ignored() -> None:
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    session.receive(msgspec.msgpack.encode(RunAck(node=NODE)), 1.0)
    assert not session.run_acked


def test_a_malformed_reply_is_counted_not_raised() -> None:
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    session.receive(b"\xc1", 1.0)
    assert session.stats.dropped == {"malformed_reply": 1}


def test_the_link_warns_once_after_the_silence_and_once_when_it_answers() -> None:
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    assert [session.link(t) for t in (0.0, 29.0)] == [None, None]
    assert session.link(30.0) is False and session.link(31.0) is None
    session.receive(msgspec.msgpack.encode(Welcome(protocol=3, instance="x", credit=4)), 40.0)
    assert session.link(40.0) is True and session.connected
    assert session.link(69.0) is None and session.link(70.0) is False
    assert not session.connected


# ---------------------------------------------------------------- random schedules

ACTIONS = st.sampled_from(
    ["turn", "turn", "turn", "tick", "kill", "restart_aggregator", "drop_out", "drop_in", "dup"]
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(schedule=st.lists(ACTIONS, max_size=40), grow_at=st.integers(0, 40))
def test_random_kills_restarts_drops_and_duplicates_lose_and_double_nothing(
    tmp_path_factory: pytest.TempPathFactory, schedule: list[str], grow_at: int
) -> None:
    """Whatever happens, once it settles the aggregator holds every record exactly once:
    its final report is the offline one."""
    world = World(tmp_path_factory.mktemp("w"))
    try:
        for name in NAMES[:3]:
            world.write(name)
        world.write(NAMES[3], part=6000)
        node = Node(world)
        node.discover()
        for step, action in enumerate(schedule):
            if step == grow_at:
                world.write(NAMES[3])
            node = _act(world, node, action)
        world.write(NAMES[3])
        node.settle()
        node.end_run()
        assert world.report() == offline_report(world.root)
    finally:
        world.aggregator.store.close()


def _act(world: World, node: Node, action: str) -> Node:
    transport = world.transport
    effects: dict[str, Callable[[], None]] = {
        "turn": node.turn,
        "tick": lambda: setattr(world.clock, "now", world.clock.now + 1.5),
        "restart_aggregator": world.restart_aggregator,
        "drop_out": transport.outbox.clear,
        "drop_in": transport.inbox.clear,
        "dup": lambda: transport.outbox.extend(transport.outbox),
    }
    if action == "kill":
        transport.outbox.clear()
        transport.inbox.clear()
        node = Node(world)
        node.discover()
    else:
        effects[action]()
    return node


# ---------------------------------------------------------------- a tailed log's windows


def test_a_logs_windows_are_checkpointed_by_index_pruned_once_whole_and_resumed() -> None:
    # a tailed Inspector log at P (stream id L): window K (its start, a record of ops 1-2,
    # its end at seq 3), then window K + 1 (its start, ops 1-4 at seq 1)
    log, key, key1, k = "/r/h-pid1.log", "/r/h-pid1.log\0w7", "/r/h-pid1.log\0w8", 7
    ids = {k: "a" * 32, k + 1: "b" * 32}
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    session.found(log, None)
    generation = session.starts.popleft().generation

    def take(key: str, record: Record, final: bool = False) -> None:
        assert session.take(key, generation, record, 90, 0.0, "l" * 32, final) is not None

    def start(index: int) -> StreamStart:
        return StreamStart(stream=ids[index], node=NODE, path=log, folder=".@x", root_name="r")

    take(key, start(k))
    take(key, Facts(stream=ids[k], seq=1, covers=2))
    take(key1, start(k + 1))
    take(key, StreamEnd(stream=ids[k], seq=3, size_bytes=0))
    take(key1, Facts(stream=ids[k + 1], seq=1, covers=4))
    assert session.files[log].stream == "l" * 32  # the log's own entry, for its fingerprint
    session.receive(_ack(ids[k], 4, done=True), 1.0)
    session.receive(_ack(ids[k + 1], 5), 1.0)
    # K whole at the aggregator: pruned, the log's entry says windows below K + 1 are whole
    assert sorted(session.files) == [log, key1]
    assert (session.files[log].acked, session.files[key1].acked) == (k + 1, 5)
    saved = session.checkpoint()
    assert saved is not None
    # a restarted collector: the log's reader starts at window K + 1, which holds 5 seqs
    again = Session(NODE, "j", LIMITS, load_checkpoint(saved), 2.0)
    again.found(log, ("l" * 32, 90))
    assert list(again.starts) == [Start(log, k + 1, 90, 1, ((k + 1, 5),))]
    # the aggregator lost K + 1's ops: the log's reader starts again, K + 1 from seq 1
    again.starts.clear()
    again.receive(_ack(ids[k + 1], 1), 3.0)
    assert again.cancels == [log]
    assert list(again.starts) == [Start(log, k + 1, 90, 2, ((k + 1, 1),))]
    # the log's end: K + 1's end is its last record; once whole the log is done
    generation = again.starts.popleft().generation
    session = again
    take(key1, StreamEnd(stream=ids[k + 1], seq=5, size_bytes=0), final=True)
    session.receive(_ack(ids[k + 1], 6, done=True), 4.0)
    assert session.files[log].done and sorted(session.files) == [log]
    session.found(log, ("l" * 32, 90))
    assert not session.starts  # a log done is not read again (as before windows)


def test_a_log_rewritten_under_its_name_forgets_its_windows() -> None:
    log, key = "/r/h-pid1.log", "/r/h-pid1.log\0w7"
    entries = {log: _entry("l" * 32, 90, acked=7), key: _entry("a" * 32, 0, acked=3)}
    session = Session(NODE, "i", LIMITS, entries, 0.0)
    session.found(log, ("m" * 32, 90))  # another first line: another log
    assert sorted(session.files) == [log]
    assert list(session.starts) == [Start(log, 0, None, 1, ())]


# ---------------------------------------------------------------- a tailed log, end to end


class LogNode(Node):
    """A collector tailing NCCL Inspector logs: its readers are `InspectorStream`s, each read
    to the log's current end at once (then every window open ends, as at a stop)."""

    def discover(self) -> None:
        for path in sorted(self.world.root.rglob("*.log")):
            length = self.session.fingerprint_length(str(path))
            head = None if length is None else fingerprint(path, length)
            self.session.found(str(path), head)

    def _start(self) -> None:
        for path in self.session.cancels:
            self.readers.pop(path, None)
        self.session.cancels.clear()
        while self.session.starts:
            start = self.session.starts.popleft()
            self.started.append(start)
            out: queue.Queue[Item] = queue.Queue()
            InspectorStream(
                path=Path(start.path), root=self.world.root, node=NODE, skip=start.skip,
                generation=start.generation, out=out, settings=StreamSettings(poll_s=0.01),
                stopping=lambda: True, reducer=Reduction,
                fingerprint_bytes=start.fingerprint_bytes, windows=start.windows,
            ).run()  # fmt: skip
            self.items[start.path] = [out.get_nowait() for _ in range(out.qsize())]

    def _pump(self, now: float) -> None:
        for key, pending in list(self.items.items()):
            while pending and self.session.has_credit():
                item = pending.pop(0)
                payload = self.session.take(
                    item.path, item.generation, item.record, item.fingerprint_bytes, now,
                    item.log, item.final,
                )  # fmt: skip
                if payload is not None:
                    self.world.transport.send(payload)
            if not pending:
                del self.items[key]

    def idle(self) -> bool:
        return not self.items and self.session.idle()

    @property
    def items(self) -> dict[str, list[Item]]:
        return self.__dict__.setdefault("_items", {})


def write_two_logs(root: Path) -> None:
    """Two ranks' verbose logs over windows K … K + 3 (K + 2 empty: ops 4 and 5 end 620 s
    apart), AllReduces of 1 MB matched by sn, rank 1 starting 20 µs after rank 0; op 3
    ends 5 ms before K + 1 on rank 0 and 5 ms into it on rank 1: split by the boundary."""
    base = 1_752_867_000_000_000  # a multiple of 300 s
    for rank in (0, 1):
        ends_s = [10, 20, 299.995 + 0.01 * rank, 310, 380, 1000]
        lines = [
            coll(rank, sn=sn, start_us=base + int(end * 1e6) - 100 + 20 * rank) + "\n"
            for sn, end in enumerate(ends_s, start=1)
        ]
        path = root / "insp" / f"node0-pid{100 + rank}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(lines))


@pytest.mark.parametrize("turns", [0, 1, 2, 3, 5])
def test_a_collector_tailing_logs_killed_after_any_turn_resumes_with_nothing_lost(
    world: World, turns: int
) -> None:
    write_two_logs(world.root)
    node = LogNode(world)
    node.discover()
    for _ in range(turns):
        node.turn()
        world.clock.now += 0.5
    world.transport.outbox.clear()  # what the killed process had not handed over is lost
    again = LogNode(world)
    again.discover()
    again.settle()
    again.end_run()
    # killed after 2 turns, the checkpoint held rank 0's log from window K + 1 (5842891: K
    # was whole at the aggregator, pruned) with K + 1's start acknowledged; rank 1's nothing.
    # After 3 both logs were done (every window whole): not read again
    starts = [(Path(s.path).name, s.skip, s.windows) for s in again.started]
    if turns == 2:
        rank0 = ("node0-pid100.log", 5842891, ((5842891, 1),))
        assert starts == [rank0, ("node0-pid101.log", 0, ())]
    if turns >= 3:
        assert starts == []
    report = world.report()
    assert report == offline_report(world.root)
    assert report["collectives"]["all_ranks"]["AllReduce"]["count"] == 12  # each op once
    assert len(report["windows"]) == 4
    # op 3, split by K's end, is matched once, in K: 6 instances, none unmatched
    assert (report["matching"]["instances"], report["matching"]["unmatched"]) == (6, 0)


def test_an_aggregator_restarted_mid_log_keeps_every_window(world: World) -> None:
    write_two_logs(world.root)
    node = LogNode(world)
    node.discover()
    for _ in range(4):
        node.turn()
        world.clock.now += 0.5
    world.restart_aggregator()
    node.settle()
    node.end_run()
    assert world.report() == offline_report(world.root)


def test_an_aggregator_restarted_on_finished_windows_matches_them_in_order(
    world: World,
) -> None:
    # every window finished and stored: the restarted aggregator matches K … K + 2 in order,
    # each with its next (op 3, split by K's end, once), and drops their calls; the last,
    # K + 3, keeps its calls (it waits for a next window)
    write_two_logs(world.root)
    node = LogNode(world)
    node.discover()
    node.settle()
    world.restart_aggregator()
    dropped = {
        folder[-7:]: len(d)
        for folder, (_, d) in world.aggregator.aggregation.residency._shed.items()
    }
    assert dropped == {"193000Z": 2, "193500Z": 2, "194000Z": 0}  # K + 2: empty, no calls
    node.end_run()
    report = world.report()
    assert report == offline_report(world.root)
    assert (report["matching"]["instances"], report["matching"]["unmatched"]) == (6, 0)


def test_an_ack_inside_a_record_held_makes_the_log_read_again_from_there() -> None:
    # a restarted collector's checkpoint said 1 (the start) while the aggregator held op 1
    # too; read again, ops 1-3 went as one record (seq 1 covering 3): a duplicate there, its
    # ack says 2. Ops 2 and 3 must not be lost: the log is read again from seq 2
    log = "/r/h-pid1.log"
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    session.found(log, None)
    generation = session.starts.popleft().generation
    start = StreamStart(stream="a" * 32, node=NODE, path=log, folder=".", root_name="r")
    assert session.take(log, generation, start, 90, 0.0) is not None
    assert session.take(log, generation, Facts(stream="a" * 32, seq=1, covers=3), 90, 0.0)
    session.receive(_ack("a" * 32, 1), 1.0)
    assert session.cancels == [] and not session.starts  # a whole record ahead: waits
    session.receive(_ack("a" * 32, 2), 1.0)
    assert session.cancels == [log]
    assert list(session.starts) == [Start(log, 2, 90, generation + 1)]
    assert session.unacked == {}


class TailNode(LogNode):
    """A LogNode whose logs never end: the end of each window read at the log's end (as at
    a stop) is held back, so the windows stay open (here: one window a log)."""

    def _start(self) -> None:
        super()._start()
        for key, items in self.items.items():
            self.items[key] = [i for i in items if not isinstance(i.record, StreamEnd)]


def test_a_restart_behind_the_aggregator_sends_the_ops_it_had_not(world: World) -> None:
    # a one-rank log: op 1 applied and acknowledged, but the collector died before its
    # checkpoint said so (it says the window's start only); op 2 appended. Read again, ops
    # 1-2 go as one record, a duplicate at the aggregator (it has op 1): op 2 is sent anyway
    log = world.root / "insp" / "node0-pid100.log"
    log.parent.mkdir(parents=True)
    log.write_text(coll(0, n_ranks=1, sn=1) + "\n")
    node = TailNode(world)
    node.discover()
    node.settle()
    files = load_checkpoint(world.disk["checkpoint"])
    (key,) = [k for k in files if "\0w" in k]
    assert files[key].acked == 2
    files[key].acked = 1
    world.disk["checkpoint"] = dump_checkpoint(files)
    with log.open("a") as handle:
        handle.write(coll(0, n_ranks=1, sn=2) + "\n")
    again = TailNode(world)
    again.discover()
    again.settle()
    (stream,) = world.aggregator.aggregation.open.values()
    assert stream.next_seq == 3  # ops 1 and 2, each once
    assert stream.accumulator.result([str(log)]).ops["AllReduce"].count == 2


def test_failed_reads_and_lost_files_are_counted_by_reason_and_snapshot_apart() -> None:
    """Two files: one read again after its worker died (not lost), one lost after three
    unreadable reads; a heartbeat's snapshot does not change with later counts."""
    session = Session(NODE, "i", LIMITS, {}, 0.0)
    session.failed(["worker_died"], None)
    session.failed(["unreadable"] * 3, "unreadable")
    snap = session.snapshot(0.0)
    assert snap.read_failures == {"worker_died": 1, "unreadable": 3}
    assert snap.files_lost == {"unreadable": 1}
    session.failed(["reader_failed"], "reader_failed")
    assert snap.files_lost == {"unreadable": 1}  # a copy
    assert session.snapshot(0.0).files_lost == {"unreadable": 1, "reader_failed": 1}
