"""The collector daemon's shell in one process: the real `Collector` (watcher, file threads,
checkpoint file) speaking through a `MemoryTransport` to a real `Aggregator`. Each wait is a
bounded number of loop turns, never a timing assertion.

The first test is the loss of issue 10 as users met it, through service/collect.py: a gzip
trace written in place, the collector killed while it is half written (its stream began on
fewer than 64 KiB), restarted on its state folder after the file is complete.
"""

from __future__ import annotations

import errno
import gzip
import logging
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import msgspec
import pytest
from commscope.collector import stream as stream_module
from commscope.collector.stream import ATTEMPTS, Reduced, StreamSettings
from commscope.collector.transport import MemoryTransport
from commscope.collector.watch import Watcher
from commscope.exporters import jsonreport
from commscope.pipeline.report import Options
from commscope.service.aggregate import Aggregator, AggregatorSettings
from commscope.service.collect import CHECKPOINT, Collector, CollectorSettings
from commscope.service.offline import analyse
from kineto_builder import dist_head, kernel, trace

from service.harness import normalised

pytestmark = pytest.mark.timeout(120)
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"
NODE = "node0"


class Rig:
    """A folder, an aggregator on its state folder, and collectors started on demand."""

    def __init__(self, tmp: Path) -> None:
        self.watch, self.state = tmp / "run", tmp / "col-state"
        self.watch.mkdir()
        self.settings = AggregatorSettings(
            listen="inproc://unused", out=tmp / "out", state=tmp / "agg"
        )
        self.aggregator = Aggregator(self.settings)
        self.transport = MemoryTransport(self.aggregator, NODE.encode())

    def collector(self) -> tuple[Collector, Watcher]:
        settings = CollectorSettings(
            watch=self.watch,
            aggregator="inproc://unused",
            node=NODE,
            state=self.state,
            stream=StreamSettings(
                quiet_s=0.05, settle_s=30.0, poll_s=0.01, batch_events=64, retry_s=0.01
            ),
            use_inotify=False,
            poll_s=0.01,
            resend_s=0.05,
            max_resend_s=0.2,
        )
        return Collector(settings, self.transport), Watcher(self.watch, poll_s=0.01)

    def turns(
        self, collector: Collector, watcher: Watcher, until: Callable[[], bool], stop: bool = False
    ) -> bool | None:
        """Loop turns until `until()` or the run ends: at most 3000 turns, each giving the
        file threads 5 ms (the in-memory transport does not wait)."""
        event, pause = threading.Event(), threading.Event()
        if stop:
            event.set()
        for _ in range(3000):
            over = collector.step(self.transport, watcher, event, 0)
            if over is not None or until():
                return over
            pause.wait(0.005)
        raise AssertionError("no progress in 3000 turns")

    def report(self) -> dict[str, Any]:
        report = self.aggregator.aggregation.report(self.settings.options, final=True)
        return normalised(jsonreport.to_document(report))

    def close(self) -> None:
        self.aggregator.store.close()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.close()


def offline(root: Path) -> dict[str, Any]:
    return normalised(jsonreport.to_document(analyse(root, Options())))


def test_a_collector_killed_while_a_gzip_file_is_written_in_place_loses_nothing(
    rig: Rig,
) -> None:
    shutil.copytree(SAMPLE / "iteration_4", rig.watch / "iteration_4")
    target = rig.watch / "iteration_8" / "rank0_trace.json.gz"
    target.parent.mkdir()
    shutil.copy(
        SAMPLE / "iteration_8" / "rank1_trace.json.gz", target.with_name("rank1_trace.json.gz")
    )
    data = (SAMPLE / "iteration_8" / "rank0_trace.json.gz").read_bytes()
    target.write_bytes(data[:5000])  # a gzip stream cut short: its document is unfinished

    collector, watcher = rig.collector()
    entry = lambda: collector.session.files.get(str(target))  # noqa: E731
    rig.turns(collector, watcher, lambda: entry() is not None and entry().acked >= 1)  # type: ignore[union-attr]
    assert entry().fingerprint_bytes == 5000  # type: ignore[union-attr]
    collector.close()  # killed: its file threads stop, no end-of-run
    watcher.close()
    assert (rig.state / CHECKPOINT).exists()

    target.write_bytes(data)  # the writer finishes while the collector is down
    again, watcher = rig.collector()
    try:
        done = lambda: again.session.files[str(target)].done  # noqa: E731
        rig.turns(again, watcher, lambda: str(target) in again.session.files and done())
        assert rig.turns(again, watcher, lambda: False, stop=True) is True
    finally:
        again.close()
        watcher.close()
    assert again.session.stats.dropped == {}
    assert rig.report() == offline(rig.watch)


def test_a_collector_stopped_before_its_first_turn_still_finishes_the_file_it_resumes(
    rig: Rig,
) -> None:
    """SIGTERM while a restarted collector starts: its checkpoint holds a stream open at the
    aggregator, so it reads that file to its end before its end-of-run (it used to skip the
    first scan when stopping, end its run at once and leave the aggregator waiting)."""
    shutil.copytree(SAMPLE / "iteration_4", rig.watch / "iteration_4")
    target = rig.watch / "iteration_4" / "rank0_trace.json.gz"
    data = target.read_bytes()
    target.write_bytes(data[:5000])  # still being written when the collector is killed
    collector, watcher = rig.collector()
    entry = lambda: collector.session.files.get(str(target))  # noqa: E731
    rig.turns(collector, watcher, lambda: entry() is not None and entry().acked >= 1)  # type: ignore[union-attr]
    collector.close()  # killed
    watcher.close()
    target.write_bytes(data)

    again, watcher = rig.collector()
    try:
        assert rig.turns(again, watcher, lambda: False, stop=True) is True
    finally:
        again.close()
        watcher.close()
    assert again.session.files[str(target)].done
    assert rig.report() == offline(rig.watch)


def test_a_kernel_lasting_1e300_us_costs_its_event_not_the_collector(rig: Rig) -> None:
    """The trace of issue 10 that killed the collector on every restart: the reader drops the
    span (counted), the file's stream ends normally, and the collector ends its run."""
    head = dist_head(rank=0, world_size=1)
    doc = trace([kernel("gemm", 1, 1e300), kernel("gemm", 5, 1)], head=head)
    path = rig.watch / "rank0_trace.json.gz"
    path.write_bytes(gzip.compress(doc))
    collector, watcher = rig.collector()
    try:
        finished = rig.aggregator.aggregation.finished
        rig.turns(collector, watcher, lambda: bool(finished))
        assert rig.turns(collector, watcher, lambda: False, stop=True) is True
    finally:
        collector.close()
        watcher.close()
    (done,) = finished.values()
    assert done.error is None and done.result is not None
    assert done.stats.dropped == {"bad_span": 1}


class DyingPool:
    """Worker processes that are killed whatever they are given (the OOM killer's victims)."""

    def __init__(self) -> None:
        self.tasks = 0

    def submit(self, work: Callable[..., Reduced], /, *args: Any) -> Future[Reduced]:
        self.tasks += 1
        future: Future[Reduced] = Future()
        future.set_exception(BrokenProcessPool("A process in the process pool was terminated"))
        return future

    def shutdown(self) -> None:
        pass


def test_a_file_no_read_of_which_succeeds_is_counted_logged_and_named_in_the_report(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every worker dies; rank 0 is read at its third read, in its thread; rank 1 cannot be
    opened there either (EACCES): lost. The counts by reason, one log line, the collector's
    `lost` (its exit), and the final report names the file and why."""
    shutil.copytree(SAMPLE / "iteration_4", rig.watch / "iteration_4")
    refused = rig.watch / "iteration_4" / "rank1_trace.json.gz"
    opened = stream_module.open_followed

    def open_but_refused(path: Path, **kw: Any) -> Any:
        if path == refused:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return opened(path, **kw)

    monkeypatch.setattr(stream_module, "open_followed", open_but_refused)
    caplog.set_level(logging.INFO, logger="commscope")
    collector, watcher = rig.collector()
    collector.pool = dying = DyingPool()  # type: ignore[assignment]
    try:
        assert rig.turns(collector, watcher, lambda: False, stop=True) is True
    finally:
        collector.close()
        watcher.close()
    stats = collector.snapshot(0.0)
    assert stats.read_failures == {"worker_died": 4, "unreadable": 1}  # 2 + 2 deaths
    assert stats.files_lost == {"unreadable": 1} and dying.tasks == 4
    assert collector.lost == [str(refused)]
    assert [r.getMessage() for r in caplog.records].count("file lost") == 1
    skipped = rig.report()["inputs"]["skipped"]
    reason = f"lost after {ATTEMPTS} reads: unreadable (Permission denied)"
    assert skipped == [{"path": str(refused), "reason": reason}]


def test_a_missing_watch_folder_is_waited_for(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="commscope")
    shutil.rmtree(rig.watch)
    collector, watcher = rig.collector()
    try:
        rig.turns(collector, watcher, lambda: True)
        assert "watch folder missing; waiting for it" in caplog.text
        shutil.copytree(SAMPLE / "iteration_4", rig.watch)
        rig.turns(collector, watcher, lambda: len(rig.aggregator.aggregation.finished) == 2)
        assert "watch folder found" in caplog.text
    finally:
        collector.close()
        watcher.close()


def test_a_version_1_checkpoint_is_resumed_from(rig: Rig) -> None:
    """A state folder written before STATE_VERSION (a bare map of path to entry): the
    collector reads it, sends nothing again for the files it says are done, and writes
    version 2 at its next acknowledgement."""
    shutil.copytree(SAMPLE / "iteration_4", rig.watch / "iteration_4")
    collector, watcher = rig.collector()
    try:
        rig.turns(collector, watcher, lambda: len(rig.aggregator.aggregation.finished) == 2)
        rig.turns(collector, watcher, lambda: all(e.done for e in collector.session.files.values()))
    finally:
        collector.close()
        watcher.close()
    files = collector.session.files
    (rig.state / CHECKPOINT).write_bytes(msgspec.msgpack.encode(files))  # as version 1 wrote
    again, watcher = rig.collector()
    try:
        assert again.session.files == files
        shutil.copytree(SAMPLE / "iteration_8", rig.watch / "iteration_8")
        rig.turns(again, watcher, lambda: len(rig.aggregator.aggregation.finished) == 4)
        rig.turns(again, watcher, lambda: len(again.session.files) == 4 and not again.session.dirty)
    finally:
        again.close()
        watcher.close()
    assert again.session.stats.batches_sent == sum(
        e.acked for p, e in again.session.files.items() if "iteration_8" in p
    )
    saved = msgspec.msgpack.decode((rig.state / CHECKPOINT).read_bytes())
    assert saved["version"] == 2 and len(saved["files"]) == 4


class Silent:
    """A transport to an aggregator that never answers."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, payload: bytes) -> None:
        self.sent += 1

    def receive(self, timeout_s: float) -> list[bytes]:
        return []

    def close(self) -> None:
        pass


def test_once_against_a_silent_aggregator_ends_after_drain_seconds(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A fake clock: nothing heard since the start (t = 1000 s), `--drain 60`: still trying
    at 1060 s, over (False: the CLI's exit 1) just after, with end-of-run sent and one line."""
    now = [1000.0]
    (tmp_path / "run").mkdir()
    settings = CollectorSettings(
        watch=tmp_path / "run", aggregator="inproc://unused", node=NODE,
        state=tmp_path / "st", use_inotify=False, poll_s=0.01, once=True, drain_s=60.0,
    )  # fmt: skip
    transport = Silent()
    collector = Collector(settings, transport, clock=lambda: now[0])
    watcher = Watcher(settings.watch, poll_s=0.01)
    stop = threading.Event()
    try:
        for now[0] in (1000.0, 1030.0, 1060.0):
            assert collector.step(transport, watcher, stop, 0) is None
        assert collector.session.end_sent is not None
        now[0] = 1060.5
        with caplog.at_level(logging.WARNING, logger="commscope.collect"):
            assert collector.step(transport, watcher, stop, 0) is False
    finally:
        collector.close()
        watcher.close()
    (said,) = [r for r in caplog.records if r.getMessage().startswith("--once")]
    assert said.getMessage().startswith("--once: the aggregator has not answered for --drain")
