"""NCCL Inspector lines → operations and ranks (pure reader)."""

from __future__ import annotations

import json

from commscope.collector.inspector import (
    MAX_LINE_BYTES,
    MISSING_KEYS,
    NOT_JSON,
    TOO_LONG,
    UNKNOWN_VERSION,
    Bad,
    Ignored,
    LineReader,
    Op,
    cut_lines,
    place,
    split_lines,
)
from commscope.collector.inspector_file import meta, parse
from commscope.model.inspector import inspected
from commscope.model.schema import (
    EVIDENCE,
    CommOp,
    Evidence,
    FileStats,
    evidence_in,
    evidence_label,
)
from hypothesis import given
from hypothesis import strategies as st
from inspector_builder import DUMP_US, coll


def read(line: str) -> Op:
    found = LineReader().line(line)
    assert isinstance(found, Op), found
    return found


def test_an_allreduce_record_becomes_a_comm_op_with_its_verbose_start() -> None:
    op = read(coll(0, sn=7, size=1_000_000, exec_us=100, start_us=DUMP_US))
    assert op.comm_op() == CommOp(
        collective="AllReduce",
        start_ns=DUMP_US * 1000,
        dur_ns=100_000,
        message_bytes=1_000_000,
        group_size=2,
        on_gpu=True,
        process_group="world 0xabc",
        seq=7,
        group_source="Inspector n_ranks",
    )


def test_the_host_is_the_metadata_hostname() -> None:
    op = read(coll(0))
    assert op.header.host == "node0"  # the builder's metadata.hostname
    assert meta(0, 2, [op]).host == "node0"


def test_a_hostname_that_is_not_a_label_is_unknown() -> None:
    record = json.loads(coll(0))
    record["metadata"]["hostname"] = "a\u0007b"
    assert read(json.dumps(record)).header.host is None
    del record["metadata"]["hostname"]
    assert meta(0, 2, [read(json.dumps(record))]).host is None


def test_allgather_size_is_the_gathered_output() -> None:
    # NCCL's count is the per-rank part: S = 500000 x 4 ranks (nccl-tests convention)
    op = read(coll(1, n_ranks=4, name="AllGather", size=500_000))
    assert (op.collective, op.message_bytes) == ("AllGather", 2_000_000)


def test_without_start_times_the_op_ends_at_its_dump_time() -> None:
    op = read(coll(0, sn=3, exec_us=100))
    assert op.start_us is None
    assert op.comm_op().start_ns == (DUMP_US + 3000) * 1000 - 100_000


def test_a_p2p_record_is_a_sendrecv() -> None:
    record = json.loads(coll(0))
    del record["coll_perf"]
    record["p2p_perf"] = {"p2p": "Send", "p2p_sn": 8, "p2p_peer": 1, "p2p_msg_size_bytes": 64,
                          "p2p_exec_time_us": 2, "p2p_timing_source": "kernel_gpu"}  # fmt: skip
    op = read(json.dumps(record))
    assert (op.collective, op.seq, op.message_bytes, op.exec_us) == ("SendRecv", 8, 64, 2)


def test_bad_lines_are_named_not_raised() -> None:
    reader = LineReader()
    missing = json.loads(coll(0))
    del missing["coll_perf"]["coll_sn"]
    assert reader.line('{"header": {"id": "0x1", "ra') == Bad(NOT_JSON)
    assert reader.line("not json at all") == Bad(NOT_JSON)
    assert reader.line("[1, 2]") == Bad(NOT_JSON)
    assert reader.line(coll(0, version="v9.0")) == Bad(UNKNOWN_VERSION)
    assert reader.line(json.dumps(missing)) == Bad(MISSING_KEYS)
    assert reader.line(coll(5, n_ranks=2)) == Bad(MISSING_KEYS)  # rank beyond n_ranks


def test_bare_records_after_a_dump_stats_marker_inherit_its_header() -> None:
    marker = json.loads(coll(1))
    del marker["coll_perf"]
    marker["dump_stats"] = {"coll_records": 1, "p2p_records": 0}
    bare = {"coll_perf": json.loads(coll(1, sn=9))["coll_perf"]}
    reader = LineReader()
    assert reader.line(json.dumps(bare)) == Bad(MISSING_KEYS)  # no marker yet
    assert isinstance(reader.line(json.dumps(marker)), Ignored)
    op = reader.line(json.dumps(bare))
    assert isinstance(op, Op) and (op.header.rank, op.seq) == (1, 9)


def test_a_partial_last_line_is_held() -> None:
    assert split_lines(b'{"a": 1}\n\n{"b"') == ([b'{"a": 1}'], b'{"b"')


def test_a_line_growing_past_the_bound_is_left_out_whole_and_the_next_is_read() -> None:
    # chunk 1: a line of MAX_LINE_BYTES + 1 with no newline yet: given up, nothing held;
    # chunk 2: more of it, then its newline, then a good line and the start of the next
    long = b"x" * (MAX_LINE_BYTES + 1)
    assert cut_lines(b"", long, False) == ([], b"", True, True)
    assert cut_lines(b"", b"more", True) == ([], b"", True, False)
    assert cut_lines(b"", b'tail\n{"a": 1}\n{"b', True) == ([b'{"a": 1}'], b'{"b', False, False)
    assert cut_lines(b'{"a', b'": 1}\n', False) == ([b'{"a": 1}'], b"", False, False)


def test_a_log_with_an_endless_line_counts_it_and_reads_the_ops_after_it() -> None:
    good = coll(0, sn=7, size=1_000_000, exec_us=100, start_us=DUMP_US).encode() + b"\n"
    endless = [b"y" * (MAX_LINE_BYTES // 2)] * 5 + [b"\n"]  # 2.5 MiB before its newline
    stats = FileStats()
    ops = list(parse([good, *endless, good], stats))
    assert len(ops) == 2 and stats.events == 2
    assert stats.dropped == {TOO_LONG: 1}


def test_the_largest_communicator_gives_the_global_rank() -> None:
    # rank 3 of an 8-rank world; rank 1 of a 2-rank TP group: every op is global rank 3's
    ops = [read(coll(3, comm="0xw", n_ranks=8)), read(coll(1, comm="0xtp", n_ranks=2))]
    placed = place(ops)
    assert (list(placed.by_rank), placed.world_size, placed.left_out) == ([3], 8, 0)


def test_a_multi_gpu_process_keeps_only_the_world_ops() -> None:
    ops = [read(coll(r, comm="0xw", n_ranks=4)) for r in (0, 1)]
    ops.append(read(coll(0, comm="0xsub", n_ranks=2)))
    placed = place(ops)
    assert sorted(placed.by_rank) == [0, 1] and placed.left_out == 1


def test_a_rank_read_from_inspector_logs_is_told_by_its_evidence_alone() -> None:
    assert inspected(evidence_in("nccl inspector"))
    assert inspected(evidence_in("gpu kernels + nccl inspector"))  # merged: one was Inspector's
    assert not any(inspected(evidence_in(t)) for t in ("gpu kernels", "cpu (gloo)", "none"))


@given(st.sets(st.sampled_from(EVIDENCE)))
def test_evidence_is_printed_in_name_order_and_read_back(found: set[Evidence]) -> None:
    text = evidence_label(found)
    assert evidence_in(text) == found
    assert text == (" + ".join(sorted(found)) or "none")  # as reports have always printed it
