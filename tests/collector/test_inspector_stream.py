"""A tailed Inspector log as wire records (`InspectorStream`, in this process)."""

from __future__ import annotations

import queue
from pathlib import Path

import msgspec
from commscope.collector.inspector import LineReader, Op
from commscope.collector.inspector_stream import GROUP_OPS, InspectorStream, groups
from commscope.collector.schema import Facts, Record, StreamEnd, StreamStart
from commscope.collector.stream import Item, StreamSettings
from commscope.pipeline.edge import Reduction
from inspector_builder import DUMP_US, coll


def records(path: Path, skip: int = 0) -> list[Record]:
    """Every record of one stream of `path`, read to its current end (as for --once)."""
    out: queue.Queue[Item] = queue.Queue()
    stream = InspectorStream(
        path=path, root=path.parent, node="n0", skip=skip, generation=1, out=out,
        settings=StreamSettings(poll_s=0.01), stopping=lambda: True, reducer=Reduction,
    )  # fmt: skip
    stream.run()
    return [out.get_nowait().record for _ in range(out.qsize())]


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
    assert end.stats.dropped == {"inspector line that is not JSON": 1}


def test_read_again_from_its_start_it_ships_the_ops_not_acknowledged(tmp_path: Path) -> None:
    # what a restarted collector relies on: the numbering is the ops', so resuming at the
    # acknowledged position ships exactly the rest, whatever the first read's records were
    log = tmp_path / "node0-pid7.log"
    log.write_text("".join(coll(0, sn=sn) + "\n" for sn in range(1, 4)))
    first = records(log)
    assert [(r.seq, getattr(r, "covers", None)) for r in first[1:]] == [(1, 3), (4, None)]
    log.write_text("".join(coll(0, sn=sn) + "\n" for sn in range(1, 6)))
    again = records(log, skip=4)  # ops 1 … 3 acknowledged: next seq 4
    assert [type(r) for r in again] == [Facts, StreamEnd]
    facts, end = again
    assert isinstance(facts, Facts) and (facts.seq, facts.covers) == (4, 2)
    assert [c.seq for c in facts.calls] == [4, 5]
    assert end.seq == 6
    # acknowledged up to op 2 (within the first read's record): ops 2 … 5 again, from seq 2
    middle = records(log, skip=2)[0]
    assert isinstance(middle, Facts) and (middle.seq, middle.covers) == (2, 4)


def test_a_partial_last_line_is_not_shipped_but_named(tmp_path: Path) -> None:
    log = tmp_path / "node0-pid7.log"
    log.write_text(coll(0, sn=1) + "\n" + coll(0, sn=2)[:25])
    found = records(log)
    assert sum(isinstance(r, Facts) for r in found) == 1
    end = found[-1]
    assert isinstance(end, StreamEnd)
    assert end.stats.dropped == {"inspector line cut short (no newline at the end of the file)": 1}


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
