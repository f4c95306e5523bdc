"""NCCL all-to-all calls as PyTorch's profiler records them (`collector.ncclsplits`): the
record_param_comms op and the kernel it launched carry the same collective args, the split
sizes cut past 30 entries in the args but whole in the op's `Concrete Inputs` (shaped as in
the real B200 trace of ../shared/traces: ten entries, the splits at places 5 and 6), and the
list-form all_to_all's splits counting elements."""

from __future__ import annotations

from typing import Any

from commscope.collector.ncclsplits import list_form_bytes, whole
from commscope.model.schema import CommOp
from commscope.pipeline.alltoallv import row_bytes
from kineto_builder import collective_args, cpu_op, dist_head, kernel, launch, read, trace

LAUNCH_TID = 11
KERNEL = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"


def listed(values: list[int], cut: bool = False) -> str:
    """A split list as Kineto writes it (`format_list`: cut to 30 entries and `...`)."""
    shown = values[:30] if cut and len(values) > 30 else values
    return "[" + ", ".join(map(str, shown)) + (", ...]" if len(shown) < len(values) else "]")


def concrete(sent: list[int], received: list[int], n: int) -> list[str]:
    """record_param_comms' `Concrete Inputs`: input tensors, seq, process group, rank,
    collective name, in splits, out splits, global rank start, stride, world size."""
    return ["", "", "", "0", "", listed(sent), listed(received), "0", "1", str(n)]


def call(name: str, sent: list[int], received: list[int], nelems: tuple[int, int],
         shapes: bool = True) -> list[dict[str, Any]]:  # fmt: skip
    """One NCCL all-to-all: its record_param_comms and the kernel it launched, both with the
    collective args (the kernel's copy has no `Concrete Inputs`)."""
    n = len(sent)
    args = collective_args(name, *nelems, "Float", **{
        "In split size": listed(sent, cut=True), "Out split size": listed(received, cut=True),
        "Group size": n, "Process Group Name": "0"})  # fmt: skip
    op_args = {**args, "Concrete Inputs": concrete(sent, received, n)} if shapes else args
    return [
        cpu_op("record_param_comms", 10, 10, LAUNCH_TID, op_args),
        launch(3, 12, LAUNCH_TID),
        kernel(KERNEL, 30, 2, {"correlation": 3, **args}),
    ]


def comm(events: list[dict[str, Any]], world: int) -> CommOp:
    (op,) = read(trace(events, dist_head(world_size=world))).comm
    return op


def test_a_group_of_40_takes_its_whole_splits_from_the_concrete_inputs() -> None:
    # rank 0 of 40 sends k rows to group rank k and receives 1 row from each; a row = 2 Floats
    sent, received = list(range(40)), [1] * 40
    rows = sum(sent)  # 780 rows in, 40 out: S = 780 x 2 x 4 B
    op = comm(call("all_to_allv", sent, received, (2 * rows, 80)), 40)
    assert (op.in_splits, op.out_splits) == (tuple(sent), tuple(received))
    assert op.message_bytes == 780 * 8
    assert row_bytes(op) == 8  # every figure of the section follows


def test_without_record_shapes_the_cut_lists_leave_the_bytes_unknown() -> None:
    sent, received = list(range(40)), [1] * 40
    op = comm(call("all_to_allv", sent, received, (1560, 80), shapes=False), 40)
    assert op.in_splits == tuple(range(30))  # Kineto kept 30 of 40
    assert row_bytes(op) is None


def test_the_list_form_counts_elements_and_its_output_is_its_received_total() -> None:
    # all_to_all(outputs, inputs): 2 and 6 Floats sent, 4 and 8 received; PyTorch records In
    # and Out msg nelems both as the input's 8: S = max(8, 12) x 4 B = 48 B, a row 1 Float
    op = comm(call("all_to_all", [2, 6], [4, 8], (8, 8)), 2)
    assert (op.message_bytes, op.in_splits, op.out_splits) == (48, (2, 6), (4, 8))
    assert row_bytes(op) == 4


def test_the_rules_apply_to_their_calls_only() -> None:
    even = {"Concrete Inputs": ["", "", "", "0", "", "[]", "[]", "0", "1", "8"]}  # the B200 op
    assert whole("record_param_comms", even, ((), ())) == ((), ())
    assert whole("c10d::alltoall_base_", {"Concrete Inputs": concrete([1], [2], 1)}, ((), ())) == (
        (),
        (),
    )
    args = collective_args("all_to_allv", 8, 12, "Float")  # rows of one element: S = 48 B
    assert list_form_bytes(args, ((2, 6), (4, 8))) is None
    odd = collective_args("all_to_all", 16, 16, "Float")  # Σ sent is not the input's count
    assert list_form_bytes(odd, ((2, 6), (4, 8))) is None
