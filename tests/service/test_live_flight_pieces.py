"""The pieces of picking Flight Recorder dumps up live, each on its own: the watcher reports a
dump rewritten in place again, a dump cut short is "truncated" (read again once whole), a dump
rides the wire in parts of a bounded size and is whole again at the aggregator, a rank's later
dump supersedes its earlier one, a restart keeps them, and what does not decode is skipped
with the reason. The whole path, with real daemons, is test_live_flight.py."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import msgspec
import pytest
from commscope.collector.flight import decode
from commscope.collector.stream import finished_facts, read_document, retryable
from commscope.collector.watch import Watcher
from commscope.model.errors import TraceError
from commscope.model.schema import Facts, FinishedFile, Record, Report, StreamEnd, StreamStart
from commscope.model.wire import FLIGHT_PART_BYTES
from commscope.pipeline.aggregation import RETIRED_SEQ, Aggregation
from commscope.pipeline.edge import Reduction
from commscope.pipeline.report import Options
from commscope.service.offline import analyse
from flight_builder import as_json, dump, entry, status, write

REAL = Path(__file__).resolve().parent / "data" / "flight_gloo_3rank"
# 3 ranks; rank 2 stopped after all_reduce 2, the others entered 3
FULL = dump([entry(1), entry(2), entry(3, state="scheduled")], status(3, 3, 2), ranks="[0, 1, 2]")
BEHIND = dump([entry(1), entry(2)], status(2, 2, 2), ranks="[0, 1, 2]")


def deep(entries: int) -> dict[str, object]:
    """A dump whose stacks make it longer than one part on the wire."""
    frames = [{"name": f"f{i}" * 50, "filename": "train.py", "line": i} for i in range(20)]
    return dump([entry(n, frames=frames) for n in range(1, entries + 1)], ranks="[0, 1]")


def records(path: Path, stream: str) -> list[Record]:
    """A dump file's records as its collector sends them (`FileStream`)."""
    rank, reduction = read_document(path, lambda: path.open("rb"), Reduction, 4096)
    facts = list(finished_facts(rank, reduction, stream))
    start = StreamStart(stream=stream, node="n1", path=str(path), folder="dumps",
                        root_name="job", name_rank=rank.name_rank)  # fmt: skip
    end = StreamEnd(stream=stream, seq=len(facts) + 1, meta=rank.meta, stats=rank.stats)
    return [start, *facts, end]


def wire(record: Record) -> Record:
    """The record as the aggregator decodes it (bounds checked)."""
    return msgspec.msgpack.decode(msgspec.msgpack.encode(record), type=Record)  # type: ignore[arg-type]


def applied(aggregation: Aggregation, path: Path, stream: str) -> tuple[str, ...]:
    """Every record of the file applied; the streams its end superseded."""
    superseded: tuple[str, ...] = ()
    for record in records(path, stream):
        superseded = aggregation.apply(wire(record)).superseded
    return superseded


def section(report: Report) -> tuple[object, list[str]]:
    return msgspec.to_builtins(report.flight_recorder), report.inputs.notes


# ---------------------------------------------------------------- the collector


def test_a_dump_cut_short_is_truncated_so_it_is_read_again_once_whole() -> None:
    for data in (pickle.dumps(FULL), as_json(FULL)):
        with pytest.raises(TraceError) as cut:
            decode(data[: len(data) // 2], 0, "x")
        assert cut.value.reason.startswith("truncated") and retryable(cut.value.reason)
    with pytest.raises(TraceError) as empty:
        decode(b"", 0, "x")
    assert retryable(empty.value.reason)


def test_every_prefix_of_a_real_dump_is_truncated_never_a_dump_or_garbage() -> None:
    data = (REAL / "nccl_trace_rank_2").read_bytes()  # torch 2.13's pickle (gloo, CPU)
    reasons = set()
    for end in range(len(data)):
        with pytest.raises(TraceError) as cut:
            decode(data[:end], 2, "x")
        reasons.add(cut.value.reason)
    assert all(retryable(reason) for reason in reasons), reasons
    assert decode(data, 2, "x").status[0].enqueued == 3


def test_a_dump_beyond_the_wires_bounds_is_refused_offline_too() -> None:
    long_name = dump([entry(1, process_group=("g" * 257, "default_pg"))])
    with pytest.raises(TraceError, match="beyond commscope's bounds"):
        decode(pickle.dumps(long_name), 0, "x")


def test_a_long_dump_rides_in_parts_each_within_the_bound(tmp_path: Path) -> None:
    path = write(tmp_path, 0, deep(500))
    found = records(path, "a" * 32)
    parts = [r.flight for r in found if isinstance(r, Facts) and r.flight]
    assert len(parts) == 2 and all(len(p) <= FLIGHT_PART_BYTES for p in parts)
    assert [r.seq for r in found] == list(range(len(found)))  # numbered as any stream
    with pytest.raises(msgspec.ValidationError):
        wire(Facts(stream="a" * 32, seq=1, flight=bytes(FLIGHT_PART_BYTES + 1)))


@pytest.mark.parametrize("mode", ["inotify", "polling"])
def test_the_watcher_reports_a_dump_rewritten_in_place_again_not_a_trace(
    tmp_path: Path, mode: str
) -> None:
    dumped, trace = write(tmp_path, 0, BEHIND), tmp_path / "rank0_trace.json"
    trace.write_bytes(b'{"traceEvents": []}')
    with Watcher(tmp_path, poll_s=0.05, rescan_s=3600.0, use_inotify=mode == "inotify") as seen:
        if seen.mode != mode:
            pytest.skip("inotify is unavailable here")
        assert sorted(seen.poll(0)) == sorted([dumped, trace])
        inode = dumped.stat().st_ino
        for path, data in ((dumped, pickle.dumps(FULL)), (trace, b'{"traceEvents": [] }')):
            with path.open("r+b") as handle:  # in place, as std::ofstream: truncated, written
                handle.truncate(0)
                handle.write(data)
            os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
        assert dumped.stat().st_ino == inode
        reported: list[Path] = []
        deadline = time.monotonic() + 10
        while dumped not in reported and time.monotonic() < deadline:
            reported += seen.poll(0.1)
        reported += seen.poll(0.3)
        assert set(reported) == {dumped}


# ---------------------------------------------------------------- the aggregator


def test_a_dump_in_parts_reports_at_the_aggregator_as_offline(tmp_path: Path) -> None:
    folder = tmp_path / "dumps"
    for rank, found in ((0, deep(500)), (1, deep(499))):
        write(folder, rank, found)
    aggregation = Aggregation()
    for rank in (0, 1):
        applied(aggregation, folder / f"nccl_trace_rank_{rank}", f"{rank}" * 32)
    live = aggregation.report(Options())
    assert live.flight_recorder is not None and live.flight_recorder.stuck[0].rank == 1
    assert section(live) == section(analyse(tmp_path, Options()))


def test_a_ranks_later_dump_supersedes_the_earlier_and_a_restart_keeps_it(tmp_path: Path) -> None:
    first = write(tmp_path / "a", 2, BEHIND)
    later = write(tmp_path / "b", 2, FULL, json_form=True)
    write(tmp_path / "b", 0, FULL)
    aggregation = Aggregation()
    applied(aggregation, tmp_path / "b" / "nccl_trace_rank_0", "0" * 32)
    assert applied(aggregation, first, "1" * 32) == ()
    assert applied(aggregation, later, "2" * 32) == ("1" * 32,)
    assert aggregation.position("1" * 32) == (RETIRED_SEQ, True)  # a resend is a duplicate
    report = aggregation.report(Options())
    assert report.flight_recorder is not None
    assert (report.flight_recorder.dumps, report.flight_recorder.stuck) == (2, [])
    stored = [
        msgspec.msgpack.decode(msgspec.msgpack.encode(f), type=FinishedFile)
        for f in aggregation.finished.values()
    ]
    restarted = Aggregation()
    restarted.restore(stored, aggregation.retired)
    assert section(restarted.report(Options())) == section(report)


def test_a_dump_that_does_not_decode_is_skipped_with_the_reason(tmp_path: Path) -> None:
    path = write(tmp_path, 0, FULL)
    aggregation = Aggregation()
    for record in records(path, "3" * 32):
        bad = isinstance(record, Facts) and record.flight
        aggregation.apply(wire(msgspec.structs.replace(record, flight=b"\xc1") if bad else record))
    report = aggregation.report(Options())
    assert report.flight_recorder is None
    (skipped,) = report.inputs.skipped
    assert skipped.reason.startswith("a Flight Recorder dump that does not decode")
