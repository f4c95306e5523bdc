"""stream.py: a file's records, with the waits (quiet, settle) on an injected clock, so a
writer's long pause is tested without sleeping; and a whole file reduced in a worker (the
pool stood in for by futures made in this thread)."""

from __future__ import annotations

import errno
import gzip
import queue
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from commscope.collector.stream import (
    ATTEMPTS,
    FileStream,
    Item,
    Reduced,
    StreamSettings,
    fingerprint,
    fingerprint_of_path,
)
from commscope.model.schema import Event, Facts, GpuOp, KernelTime, StreamEnd, StreamStart
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.edge import Reduction, from_facts
from commscope.service.collect import reduce_whole
from kineto_builder import dist_head, kernel, trace


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def stream(path: Path, clock: FakeClock, **kw: int | None) -> tuple[FileStream, queue.Queue[Item]]:
    out: queue.Queue[Item] = queue.Queue()
    made = FileStream(
        path=path,
        root=path.parent,
        node="n",
        skip=0,
        generation=1,
        out=out,
        settings=StreamSettings(quiet_s=2.0, settle_s=300.0, poll_s=0.5),
        stopping=lambda: False,
        reducer=Reduction,
        clock=clock,
        sleep=clock.sleep,
        **kw,  # type: ignore[arg-type]
    )
    return made, out


def items(out: queue.Queue[Item]) -> list[Item]:
    return [out.get_nowait() for _ in range(out.qsize())]


def test_a_document_cut_short_is_truncated_after_settle_s_on_the_clock(tmp_path: Path) -> None:
    """The file never changes again: the reader waits quiet_s (2) for the end of the data,
    then settle_s (300) for the writer, in 0.5 s polls of the fake clock, then says
    truncated; no real time passes."""
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 1)], head=dist_head())[:-30])
    clock = FakeClock()
    worker, out = stream(path, clock)
    worker.run()  # in this thread
    start, end = (item.record for item in items(out))
    assert isinstance(start, StreamStart) and isinstance(end, StreamEnd)
    assert end.error is not None and end.error.startswith("truncated")
    assert 302.0 <= clock.now <= 303.0  # quiet 2 s, then settle 300 s
    assert set(clock.slept) == {0.5}


def test_a_resumed_stream_fingerprints_the_bytes_it_is_told(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 1)], head=dist_head()))
    worker, out = stream(path, FakeClock(), fingerprint_bytes=100)
    worker.run()
    first = items(out)[0]
    assert first.record.stream == fingerprint(path, 100)[0] != fingerprint(path)[0]
    assert (first.fingerprint_bytes, first.path) == (100, str(path))


def test_a_complete_document_is_emitted_without_any_quiet_wait(tmp_path: Path) -> None:
    """The document closes at the file's end: its StreamEnd comes with the fake clock still at
    0 (quiet_s is 2 s); the document cut short above still waits quiet_s and settle_s."""
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 1)], head=dist_head()))
    clock = FakeClock()
    worker, out = stream(path, clock)
    worker.run()
    end = items(out)[-1].record
    assert isinstance(end, StreamEnd) and end.error is None
    assert (clock.now, clock.slept) == (0.0, [])


def test_a_complete_gzip_document_is_emitted_without_any_quiet_wait(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json.gz"
    path.write_bytes(gzip.compress(trace([kernel("gemm", 1, 1)], head=dist_head())))
    clock = FakeClock()
    worker, out = stream(path, clock)
    worker.run()
    end = items(out)[-1].record
    assert isinstance(end, StreamEnd) and end.error is None and end.stats.events == 1
    assert (clock.now, clock.slept) == (0.0, [])


def test_a_complete_file_is_its_start_its_facts_and_its_end(tmp_path: Path) -> None:
    """Two overlapping gemm kernels (1-3 µs and 2-5 µs): one Facts record holding the compute
    union [1000, 5000) ns and 5000 ns of gemm time (of the kernel name `gemm` too), the same
    result as the events give."""
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 2), kernel("gemm", 2, 3)], head=dist_head()))
    worker, out = stream(path, FakeClock())
    worker.run()
    start, part, end = (item.record for item in items(out))
    assert isinstance(start, StreamStart) and isinstance(part, Facts)
    assert isinstance(end, StreamEnd) and (part.seq, end.seq, end.error) == (1, 2, None)
    assert list(from_facts([part]).compute.runs()) == [(1000, 5000)]
    assert part.kernel_ns == {"gemm": 5000}
    events = Accumulator()
    events.add_all([GpuOp("compute", 1000, 2000, "gemm"), GpuOp("compute", 2000, 3000, "gemm"),
                    KernelTime("gemm", 2, 5000)])  # fmt: skip
    assert from_facts([part]).result() == events.result()


def test_a_resumed_stream_hands_out_only_the_records_not_acknowledged(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 2)], head=dist_head()))
    worker, out = stream(path, FakeClock())
    worker.skip = 2  # records 0 and 1 were acknowledged before
    worker.run()
    assert [type(item.record) for item in items(out)] == [StreamEnd]


def test_a_file_still_being_written_sends_facts_only_of_its_whole_document(
    tmp_path: Path,
) -> None:
    """The file holds its document up to the second kernel's name when the stream begins;
    while the reader waits, the writer finishes it: the one Facts record covers both kernels,
    nothing was sent of the half."""
    path = tmp_path / "rank0_trace.json"
    whole = trace([kernel("gemm", 1, 1), kernel("gemm", 10, 1)], head=dist_head())
    path.write_bytes(whole[: whole.rindex(b'"gemm"')])
    clock = FakeClock()

    def finish(seconds: float) -> None:
        clock.sleep(seconds)
        path.write_bytes(whole)

    worker, out = stream(path, clock)
    worker.sleep = finish
    worker.run()
    records = [item.record for item in items(out)]
    assert [type(r) for r in records] == [StreamStart, Facts, StreamEnd]
    part, end = records[1], records[2]
    assert isinstance(part, Facts) and part.kernel_ns == {"gemm": 2000}
    assert isinstance(end, StreamEnd) and (end.seq, end.stats.events) == (2, 2)


def done(result: Reduced | BaseException) -> Future[Reduced]:
    future: Future[Reduced] = Future()
    if isinstance(result, BaseException):
        future.set_exception(result)
    else:
        future.set_result(result)
    return future


def in_a_worker(path: Path, stream: str) -> Future[Reduced]:
    """What the collector's pool does, in this thread: `reduce_whole` of the file."""
    return done(reduce_whole(str(path), stream, 4096))


def test_a_whole_file_reduced_in_a_worker_gives_the_same_records(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 2), kernel("gemm", 2, 3)], head=dist_head()))
    here, out_here = stream(path, FakeClock())
    here.run()
    there, out_there = stream(path, FakeClock())
    there.whole = in_a_worker
    there.run()
    records = [item.record for item in items(out_there)]
    assert records == [item.record for item in items(out_here)]
    # two GpuOps and their name's KernelTime
    assert (there.elsewhere, here.elsewhere, there.events) == (True, False, 3)


def test_a_file_the_worker_finds_cut_short_is_read_here_as_it_grows(tmp_path: Path) -> None:
    """The worker reads the half written so far (truncated); the thread follows the file,
    the writer finishes it while it waits: one Facts of both kernels, as without a worker."""
    path = tmp_path / "rank0_trace.json"
    whole = trace([kernel("gemm", 1, 1), kernel("gemm", 10, 1)], head=dist_head())
    path.write_bytes(whole[: whole.rindex(b'"gemm"')])
    clock = FakeClock()

    def finish(seconds: float) -> None:
        clock.sleep(seconds)
        path.write_bytes(whole)

    worker, out = stream(path, clock)
    worker.whole, worker.sleep = in_a_worker, finish
    worker.run()
    records = [item.record for item in items(out)]
    assert [type(r) for r in records] == [StreamStart, Facts, StreamEnd]
    assert isinstance(records[1], Facts) and records[1].kernel_ns == {"gemm": 2000}
    assert not worker.elsewhere


def test_a_file_whose_worker_died_is_read_again_and_at_last_here(tmp_path: Path) -> None:
    """Every worker dies (killed): read 1 and 2 go to a worker, a pause of retry_s (1 s) and
    then 2 s on the clock before each; read 3 is made in the thread: the file whole, two
    failed reads, nothing lost."""
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 2)], head=dist_head()))
    clock = FakeClock()
    worker, out = stream(path, clock)
    sent: list[Path] = []
    worker.whole = lambda path, stream: sent.append(path) or done(BrokenProcessPool("killed"))
    worker.run()
    records = [item.record for item in items(out)]
    assert [type(r) for r in records] == [StreamStart, Facts, StreamEnd]
    assert not worker.elsewhere and records[2].error is None
    assert (worker.failures, worker.lost, len(sent)) == (["worker_died"] * 2, None, 2)
    assert clock.now == 3.0  # paused 1 s, then 2 s


def test_a_worker_that_died_once_is_replaced_by_the_next(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 2)], head=dist_head()))
    outcomes: list[Future[Reduced]] = [done(BrokenProcessPool("killed"))]
    worker, out = stream(path, FakeClock())
    worker.whole = lambda path, stream: outcomes.pop() if outcomes else in_a_worker(path, stream)
    worker.run()
    assert [type(item.record) for item in items(out)] == [StreamStart, Facts, StreamEnd]
    assert (worker.failures, worker.lost, worker.elsewhere) == (["worker_died"], None, True)


def test_a_file_no_read_of_which_succeeds_is_lost_with_the_reason(tmp_path: Path) -> None:
    """A folder under a trace's name cannot be opened: three reads fail alike, then its stream
    (over its name alone: no byte was read) ends with why, so the report names it."""
    path = tmp_path / "rank0_trace.json"
    path.mkdir()
    worker, out = stream(path, FakeClock())
    worker.run()
    start, end = (item.record for item in items(out))
    assert isinstance(start, StreamStart) and isinstance(end, StreamEnd)
    assert start.stream == fingerprint_of_path(path)[0] == end.stream
    assert end.error == f"lost after {ATTEMPTS} reads: unreadable (Is a directory)"
    assert end.lost
    assert (worker.failures, worker.lost) == (["unreadable"] * ATTEMPTS, "unreadable")


class Faulty:
    """A reducer that raises `fault` on its first `times` batches, then reduces."""

    fault: Exception = RuntimeError("boom")
    times = 10**9

    def __init__(self) -> None:
        self.inner = Reduction()

    def add_all(self, events: Iterable[Event]) -> None:
        if Faulty.times > 0:
            Faulty.times -= 1
            raise Faulty.fault
        self.inner.add_all(events)

    def facts(self, stream: str, first_seq: int) -> Iterator[Facts]:
        return self.inner.facts(stream, first_seq)


def test_a_reader_that_fails_every_time_loses_the_file_with_its_error(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 2)], head=dist_head()))
    Faulty.fault, Faulty.times = RuntimeError("boom"), 10**9
    worker, out = stream(path, FakeClock())
    worker.reducer = Faulty
    worker.run()
    start, end = (item.record for item in items(out))
    assert start.stream == end.stream == fingerprint(path)[0]  # its bytes were read
    assert isinstance(end, StreamEnd) and end.seq == 1
    assert end.error == "lost after 3 reads: the reader failed (RuntimeError: boom)"
    assert (worker.failures, worker.lost) == (["reader_failed"] * 3, "reader_failed")


def test_an_io_error_that_passes_costs_one_read(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 2)], head=dist_head()))
    Faulty.fault, Faulty.times = OSError(errno.EIO, "Input/output error"), 1
    worker, out = stream(path, FakeClock())
    worker.reducer = Faulty
    worker.run()
    records = [item.record for item in items(out)]
    assert [type(r) for r in records] == [StreamStart, Facts, StreamEnd]
    assert records[2].error is None and records[2].seq == 2
    assert (worker.failures, worker.lost) == (["unreadable"], None)


@pytest.mark.parametrize(
    "doc", [b'{"traceEvents": []}', b'{"schemaVersion": 1, "traceEvents": []}']
)
@pytest.mark.parametrize("where", ["here", "in a worker"])
def test_an_empty_trace_ends_at_once_with_its_reason(
    tmp_path: Path, doc: bytes, where: str
) -> None:
    """No event: not a failed read (nothing is read again, nothing lost), a file skipped."""
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(doc)
    clock = FakeClock()
    worker, out = stream(path, clock)
    if where != "here":
        worker.whole = in_a_worker
    worker.run()
    _, end = (item.record for item in items(out))
    assert isinstance(end, StreamEnd) and end.error == "empty trace: traceEvents holds no event"
    assert (worker.failures, worker.lost, clock.now) == ([], None, 0.0)


def test_a_corrupt_file_is_no_failed_read(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(b'{"traceEvents": [}')
    worker, out = stream(path, FakeClock())
    worker.run()
    end = items(out)[-1].record
    assert isinstance(end, StreamEnd) and end.error is not None
    assert end.error.startswith("corrupt JSON") and worker.failures == []
