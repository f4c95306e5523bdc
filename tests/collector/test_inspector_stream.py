"""A tailed Inspector log as wire records (`InspectorStream`, in this process)."""

from __future__ import annotations

import queue
from pathlib import Path

import msgspec
from commscope.collector.inspector import LineReader, Op
from commscope.collector.inspector_stream import GROUP_OPS, InspectorStream, groups
from commscope.collector.inspector_windows import WindowRule
from commscope.collector.stream import Item, StreamSettings
from commscope.model.schema import Facts, Record, StreamEnd, StreamStart
from commscope.pipeline.edge import Reduction
from inspector_builder import DUMP_US, coll

# the default 300 s window holding every line the builder dates (DUMP_US + sn ms): it starts
# at 1752867000 s (DUMP_US // 3e8 = 5842890), 2025-07-18 19:30:00 UTC
K = DUMP_US // 300_000_000
BASE_US = K * 300_000_000


def items(
    path: Path, skip: int = 0, windows: dict[int, int] | None = None, width_s: int = 300
) -> list[Item]:
    """Every item a stream of `path` hands out, read to its current end (as for --once)."""
    out: queue.Queue[Item] = queue.Queue()
    stream = InspectorStream(
        path=path, root=path.parent, node="n0", skip=skip, generation=1, out=out,
        settings=StreamSettings(poll_s=0.01), stopping=lambda: True, reducer=Reduction,
        rule=WindowRule(width_s), windows=windows or {},
    )  # fmt: skip
    stream.run()
    return [out.get_nowait() for _ in range(out.qsize())]


def records(
    path: Path, skip: int = 0, windows: dict[int, int] | None = None, width_s: int = 300
) -> list[Record]:
    return [item.record for item in items(path, skip, windows, width_s)]


def test_the_ops_read_at_once_go_as_one_record_then_the_end_with_the_rank(
    tmp_path: Path,
) -> None:
    log = tmp_path / "node0-pid7.log"
    log.write_text(coll(3, n_ranks=4, sn=1) + "\nnot json\n" + coll(3, n_ranks=4, sn=2) + "\n")
    found = records(log)
    assert [type(r) for r in found] == [StreamStart, Facts, StreamEnd]
    # ops 1 and 2 (the bad line is no op): seq 1 covering 2, so the end is seq 3
    assert [r.seq for r in found] == [0, 1, 3]
    facts = found[1]
    assert isinstance(facts, Facts) and facts.covers == 2
    assert [(c.seq, c.message_bytes) for c in facts.calls] == [(1, 10**6), (2, 10**6)]
    end = found[-1]
    assert isinstance(end, StreamEnd) and end.error is None
    assert (end.meta.rank, end.meta.world_size, end.meta.source) == (3, 4, "inspector")
    assert end.stats.dropped == {"inspector_not_json": 1}


def test_read_again_from_its_start_it_ships_the_ops_not_acknowledged(tmp_path: Path) -> None:
    # what a restarted collector relies on: the numbering is the ops', so resuming at the
    # acknowledged position ships exactly the rest, whatever the first read's records were
    log = tmp_path / "node0-pid7.log"
    log.write_text("".join(coll(0, sn=sn) + "\n" for sn in range(1, 4)))
    first = records(log)
    assert [(r.seq, getattr(r, "covers", None)) for r in first[1:]] == [(1, 3), (4, None)]
    log.write_text("".join(coll(0, sn=sn) + "\n" for sn in range(1, 6)))
    # the log's lines all fall in window K: its ops 1 … 3 acknowledged, next seq 4 (the
    # session's checkpoint says so by window: `windows`; the StreamStart went before)
    again = records(log, windows={K: 4})
    assert [type(r) for r in again] == [Facts, StreamEnd]
    facts, end = again
    assert isinstance(facts, Facts) and (facts.seq, facts.covers) == (4, 2)
    assert [c.seq for c in facts.calls] == [4, 5]
    assert end.seq == 6
    # acknowledged up to op 2 (within the first read's record): ops 2 … 5 again, from seq 2
    middle = records(log, windows={K: 2})[0]
    assert isinstance(middle, Facts) and (middle.seq, middle.covers) == (2, 4)


def test_a_partial_last_line_is_not_shipped_but_named(tmp_path: Path) -> None:
    log = tmp_path / "node0-pid7.log"
    log.write_text(coll(0, sn=1) + "\n" + coll(0, sn=2)[:25])
    found = records(log)
    assert sum(isinstance(r, Facts) for r in found) == 1
    end = found[-1]
    assert isinstance(end, StreamEnd)
    assert end.stats.dropped == {"inspector_cut_short": 1}


def test_a_log_of_a_multi_gpu_process_ends_with_the_reason(tmp_path: Path) -> None:
    log = tmp_path / "node0-pid7.log"
    log.write_text(coll(0, sn=1) + "\n" + coll(1, sn=1) + "\n")
    end = records(log)[-1]
    assert isinstance(end, StreamEnd) and end.error is not None
    assert "one process drove ranks [0, 1]" in end.error


def test_the_stream_id_stays_the_same_as_the_log_grows(tmp_path: Path) -> None:
    # a collector restarted before its checkpoint named the stream must find the same id
    log = tmp_path / "node0-pid7.log"
    log.write_text(coll(0, sn=1) + "\n")
    first = records(log)[0]
    log.write_text(coll(0, sn=1) + "\n" + coll(0, sn=2) + "\n")
    again = records(log)[0]
    assert isinstance(first, StreamStart) and isinstance(again, StreamStart)
    assert first.stream == again.stream


def ops(*starts: int | None) -> list[Op]:
    """One Op per entry (verbose when given a start), as the reader makes them."""
    reader = LineReader()
    found = [reader.line(coll(0, sn=sn + 1, start_us=start)) for sn, start in enumerate(starts)]
    assert all(isinstance(op, Op) for op in found)
    return found  # type: ignore[return-value]  # checked above


def test_a_record_holds_ops_all_verbose_or_none() -> None:
    found = groups(ops(DUMP_US, DUMP_US, None, DUMP_US))
    assert [[op.seq for op in group] for group in found] == [[1, 2], [3], [4]]


def test_a_record_holds_at_most_group_ops() -> None:
    # one more op than a record holds: two records, the second of one op
    found = groups(ops(*[None] * (GROUP_OPS + 1)))
    assert [len(group) for group in found] == [GROUP_OPS, 1]


def test_a_full_record_is_one_valid_facts() -> None:
    # GROUP_OPS verbose ops 1 ms apart (each its own run of the GPU communication union: the
    # most items a record can hold) reduce to one Facts within the wire's bounds
    reduction = Reduction()
    reduction.add_all(op.comm_op() for op in ops(*(DUMP_US + 1000 * i for i in range(GROUP_OPS))))
    (part,) = reduction.facts("a" * 32, 1)
    wire = msgspec.msgpack.encode(part)
    assert msgspec.msgpack.decode(wire, type=Record) == part


def test_records_chain_their_seqs_over_a_long_log(tmp_path: Path) -> None:
    # GROUP_OPS + 1 ops: records of at most GROUP_OPS, cut where the reads fell, each
    # starting where the last one's ops ended; the end after the last op
    log = tmp_path / "node0-pid7.log"
    log.write_text("".join(coll(0, sn=sn) + "\n" for sn in range(1, GROUP_OPS + 2)))
    found = records(log)
    facts = [r for r in found if isinstance(r, Facts)]
    assert all(f.covers <= GROUP_OPS for f in facts)
    assert [f.seq for f in facts] == [1, *(f.seq + f.covers for f in facts[:-1])]
    assert sum(f.covers for f in facts) == GROUP_OPS + 1
    assert found[-1].seq == GROUP_OPS + 2


def timed(end_s: float, sn: int) -> str:
    """A verbose line of rank 0 whose op ends `end_s` seconds into window K (100 µs long)."""
    return coll(0, sn=sn, exec_us=100, start_us=BASE_US + int(end_s * 1e6) - 100) + "\n"


def test_a_log_over_two_windows_is_a_stream_per_window(tmp_path: Path) -> None:
    # ops ending at 10 s (K), 310 s (K + 1), 290 s (late: K is still open, within its
    # grace up to 360 s), 400 s (K + 1; past K's grace: K closes after it)
    log = tmp_path / "node0-pid7.log"
    log.write_text(timed(10, 1) + timed(310, 2) + timed(290, 3) + timed(400, 4))
    found = items(log)
    kinds = [(type(i.record).__name__, i.record.seq) for i in found]
    assert kinds == [
        ("StreamStart", 0), ("StreamStart", 0), ("Facts", 1), ("StreamEnd", 3),
        ("Facts", 1), ("StreamEnd", 3),
    ]  # fmt: skip
    start_k, start_k1 = found[0].record, found[1].record
    assert isinstance(start_k, StreamStart) and isinstance(start_k1, StreamStart)
    assert (start_k.folder, start_k1.folder) == (".@20250718T193000Z", ".@20250718T193500Z")
    assert start_k.path == start_k1.path == str(log)  # the log's path: `tailed` live
    assert found[2].record.stream == start_k.stream != start_k1.stream
    facts_k, facts_k1 = found[2].record, found[4].record
    assert isinstance(facts_k, Facts) and isinstance(facts_k1, Facts)
    assert [c.seq for c in facts_k.calls] == [1, 3]
    assert [c.seq for c in facts_k1.calls] == [2, 4]
    # the session's keys: the log's path and the window's index; the log's id beside
    assert [i.path for i in found] == [f"{log}\0w{K}", f"{log}\0w{K + 1}", *[f"{log}\0w{K}"] * 2,
                                       *[f"{log}\0w{K + 1}"] * 2]  # fmt: skip
    assert {i.log for i in found} == {found[0].log} and found[0].log
    assert [i.final for i in found] == [False] * 5 + [True]
    end_k, end_k1 = found[3].record, found[5].record
    assert isinstance(end_k, StreamEnd) and isinstance(end_k1, StreamEnd)
    assert (end_k.meta.rank, end_k.meta.call_starts, end_k.stats.events) == (0, True, 2)
    assert end_k.meta.host == end_k1.meta.host == "node0"  # metadata.hostname
    # the log's bytes go with its last window
    assert (end_k.stats.bytes_read, end_k1.stats.bytes_read) == (0, log.stat().st_size)


def test_read_again_it_passes_over_the_windows_acknowledged(tmp_path: Path) -> None:
    # window K whole at the aggregator (`skip` K + 1: the lowest not whole), K + 1 holding
    # its start and op 1: only K + 1's op 2 and its end are handed out again
    log = tmp_path / "node0-pid7.log"
    log.write_text(timed(10, 1) + timed(310, 2) + timed(290, 3) + timed(400, 4))
    again = records(log, skip=K + 1, windows={K + 1: 2})
    assert [(type(r).__name__, r.seq) for r in again] == [("Facts", 2), ("StreamEnd", 3)]
    assert isinstance(again[0], Facts) and [c.seq for c in again[0].calls] == [4]


def test_a_line_left_out_counts_in_the_lowest_window_open(tmp_path: Path) -> None:
    log = tmp_path / "node0-pid7.log"
    log.write_text("not json\n" + timed(10, 1) + timed(310, 2) + "nor this\n" + timed(400, 3))
    ends = [r for r in records(log) if isinstance(r, StreamEnd)]
    # the first bad line before any window: K's; the second while K and K + 1 are open: K's
    assert [e.stats.dropped for e in ends] == [{"inspector_not_json": 2}, {}]


def test_w_0_keeps_the_whole_log_one_stream(tmp_path: Path) -> None:
    log = tmp_path / "node0-pid7.log"
    log.write_text(timed(10, 1) + timed(900, 2))
    found = items(log, width_s=0)
    assert [type(i.record) for i in found] == [StreamStart, Facts, StreamEnd]
    start = found[0].record
    assert isinstance(start, StreamStart) and start.folder == "."
    assert {i.path for i in found} == {str(log)} and {i.log for i in found} == {""}


def test_the_empty_windows_of_a_jump_end_one_by_one(tmp_path: Path) -> None:
    # op 2 ends 10 windows on (3010 s): K + 1 … K + 9 open empty; K + 1 … K + 8 end at once,
    # each before the next starts, K + 9 keeps its grace (to 3060 s) and ends with K + 10
    # at the log's end: at most 3 of the log's streams open at a time
    log = tmp_path / "node0-pid7.log"
    log.write_text(timed(10, 1) + timed(10 * 300 + 10, 2))
    found = records(log)
    streams: set[str] = set()
    most = 0
    for record in found:
        if isinstance(record, StreamStart):
            streams.add(record.stream)
        elif isinstance(record, StreamEnd):
            streams.discard(record.stream)
        most = max(most, len(streams))
    assert most == 3
    ends = [r for r in found if isinstance(r, StreamEnd)]
    assert [e.stats.events for e in ends] == [0] * 8 + [1, 0, 1]  # 8 empty, K, K + 9, K + 10
    assert all(e.error is None and e.meta.rank == 0 for e in ends)
