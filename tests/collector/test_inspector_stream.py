"""A tailed Inspector log as wire records (`InspectorStream`, in this process)."""

from __future__ import annotations

import queue
from pathlib import Path

from commscope.collector.inspector_stream import InspectorStream
from commscope.collector.schema import Facts, Record, StreamEnd, StreamStart
from commscope.collector.stream import Item, StreamSettings
from commscope.pipeline.edge import Reduction
from inspector_builder import coll


def records(path: Path, skip: int = 0) -> list[Record]:
    """Every record of one stream of `path`, read to its current end (as for --once)."""
    out: queue.Queue[Item] = queue.Queue()
    stream = InspectorStream(
        path=path, root=path.parent, node="n0", skip=skip, generation=1, out=out,
        settings=StreamSettings(poll_s=0.01), stopping=lambda: True, reducer=Reduction,
    )  # fmt: skip
    stream.run()
    return [out.get_nowait().record for _ in range(out.qsize())]


def test_one_record_per_op_then_the_end_with_the_rank(tmp_path: Path) -> None:
    log = tmp_path / "node0-pid7.log"
    log.write_text(coll(3, n_ranks=4, sn=1) + "\nnot json\n" + coll(3, n_ranks=4, sn=2) + "\n")
    found = records(log)
    assert [type(r) for r in found] == [StreamStart, Facts, Facts, StreamEnd]
    assert [r.seq for r in found] == [0, 1, 2, 3]
    facts = [r for r in found if isinstance(r, Facts)]
    assert [(c.seq, c.message_bytes) for f in facts for c in f.calls] == [(1, 10**6), (2, 10**6)]
    end = found[-1]
    assert isinstance(end, StreamEnd) and end.error is None
    assert (end.meta.rank, end.meta.world_size, end.meta.source) == (3, 4, "inspector")
    assert end.stats.dropped == {"inspector line that is not JSON": 1}


def test_read_again_from_its_start_it_gives_the_same_records(tmp_path: Path) -> None:
    # what a restarted collector relies on: the numbering is the file's, so skipping the
    # acknowledged records leaves exactly the rest
    log = tmp_path / "node0-pid7.log"
    log.write_text("".join(coll(0, sn=sn) + "\n" for sn in range(1, 6)))
    first = records(log)
    again = records(log, skip=3)
    assert again == first[3:]


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
