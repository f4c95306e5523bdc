"""gloo all-to-all spans take their split sizes from the c10d::alltoall_base_ that issued them
(`collector.gloosplits`), as torch 2.13's gloo backend records them (no record_param_comms)."""

from __future__ import annotations

from typing import Any

from commscope.collector.gloosplits import call_splits
from commscope.model.schema import CommOp
from kineto_builder import annotation, cpu_op, dims_args, dist_head, read, trace

MAIN, WORKER = 1, 2


def issue(ts: float, sent: str, received: str, rows_in: int, rows_out: int) -> dict[str, Any]:
    """`all_to_all_single(out, in, out_splits, in_splits)` as the profiler records its op."""
    args = {
        "Concrete Inputs": ["", "", "", received, sent, "False", "-1"],
        "Input type": ["float", "float", "", "ScalarList", "ScalarList", "Scalar", "Scalar"],
        "Input Dims": [[rows_out, 5], [rows_in, 5], [], [], [], [], []],
    }
    return cpu_op("c10d::alltoall_base_", ts, 10, MAIN, args)


def run(ts: float, rows_in: int) -> dict[str, Any]:
    """The gloo worker's span: its input only."""
    return annotation("gloo:all_to_all", ts, 5, WORKER, dims_args([[rows_in, 5]], ["float"]))


def comm(events: list[dict[str, Any]]) -> list[CommOp]:
    head = dist_head(rank=1, world_size=2, backend="gloo", pg_sizes={"0": 2})
    return read(trace(events, head)).comm


def test_a_gloo_span_takes_its_calls_split_sizes_and_the_larger_side_as_its_size() -> None:
    # rank 1 sends 2 rows to rank 0 and 6 to itself, receives 3 and 6: a row is 5 floats =
    # 20 B; the span's input is 8 rows (160 B), S = 20 B x max(8, 9) rows = 180 B
    found = comm([issue(100, "[2, 6]", "[3, 6]", 8, 9), run(104, 8)])
    expected = CommOp("AllToAll", 104_000, 5_000, 180, 2, False, None, None, "pg_config",
                      "Float", (2, 6), (3, 6))  # fmt: skip
    assert found == [expected]


def test_spans_pair_with_calls_in_start_order_whatever_the_file_order() -> None:
    events = [run(304, 4), run(104, 8), issue(300, "[1, 3]", "[2, 2]", 4, 4),
              issue(100, "[2, 6]", "[3, 6]", 8, 9)]  # fmt: skip
    found = comm(events)
    assert [(op.start_ns, op.in_splits, op.out_splits) for op in found] == [
        (104_000, (2, 6), (3, 6)),
        (304_000, (1, 3), (2, 2)),
    ]


def test_no_pairing_when_the_counts_differ_or_a_span_precedes_its_call() -> None:
    fewer = comm([run(104, 8), run(204, 8), issue(100, "[2, 6]", "[3, 6]", 8, 9)])
    early = comm([run(90, 8), issue(100, "[2, 6]", "[3, 6]", 8, 9)])
    for found in (fewer, early):
        assert all(op.in_splits == () and op.out_splits == () for op in found)
        assert all(op.message_bytes == 160 for op in found)  # the input, as before


def test_the_list_form_issues_a_span_too_and_keeps_the_pairing_in_step() -> None:
    # torch 2.13: dist.all_to_all (c10d::alltoall_) also runs as a gloo:all_to_all span
    listed = cpu_op("c10d::alltoall_", 50, 10, MAIN, {"Concrete Inputs": ["", "", "", "False"]})
    found = comm([listed, run(55, 4), issue(100, "[2, 6]", "[3, 6]", 8, 9), run(104, 8)])
    assert [(op.in_splits, op.out_splits) for op in found] == [((), ()), ((2, 6), (3, 6))]


def test_an_even_all_to_all_single_records_no_split_sizes() -> None:
    (found,) = comm([issue(100, "[]", "[]", 8, 8), run(104, 8)])
    assert (found.in_splits, found.out_splits, found.message_bytes) == ((), (), 160)


def test_recorded_split_sizes_win_over_concrete_inputs() -> None:
    args = {"In split size": "[1, 1]", "Out split size": "[2, 0]",
            "Concrete Inputs": ["", "", "", "[9, 9]", "[9, 9]"]}  # fmt: skip
    assert call_splits("c10d::alltoall_base_", args) == ((1, 1), (2, 0))
    assert call_splits("c10d::alltoall_base_", {"Concrete Inputs": ["", ""]}) == ((), ())
    assert call_splits("c10d::allreduce_", {"Concrete Inputs": ["", "", "", "[1]", "[2]"]}) == (
        (),
        (),
    )
