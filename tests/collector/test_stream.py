"""stream.py: a file's records, with the waits (quiet, settle) on an injected clock, so a
writer's long pause is tested without sleeping; and a whole file reduced in a worker (the
pool stood in for by futures made in this thread)."""

from __future__ import annotations

import gzip
import queue
from concurrent.futures import Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from commscope.collector.schema import Facts, GpuOp, KernelTime, StreamEnd, StreamStart
from commscope.collector.stream import FileStream, Item, Reduced, StreamSettings, fingerprint
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


def test_a_file_whose_worker_died_is_read_here(tmp_path: Path) -> None:
    path = tmp_path / "rank0_trace.json"
    path.write_bytes(trace([kernel("gemm", 1, 2)], head=dist_head()))
    worker, out = stream(path, FakeClock())
    worker.whole = lambda path, stream: done(BrokenProcessPool("killed"))
    worker.run()
    records = [item.record for item in items(out)]
    assert [type(r) for r in records] == [StreamStart, Facts, StreamEnd]
    assert not worker.elsewhere and records[2].error is None
