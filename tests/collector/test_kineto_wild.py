"""Traces in the wild, each a small hand-made input (issue 9): PyTorch 1.8-1.10 layouts, other
collective libraries, kernels whose call is not in the trace, coalesced records, group sizes
the shapes tell, and values no trace should hold. Kineto µs; commscope ns (x 1000)."""

from __future__ import annotations

from typing import Any

import pytest
from commscope.model.schema import CommOp, GpuOp, Step
from kineto_builder import (
    COMPUTE_TID,
    annotation,
    collective_args,
    cpu_op,
    dims_args,
    dist_head,
    kernel,
    launch,
    read,
    span,
    trace,
)

LAUNCH_TID = 11
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
ALLGATHER = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BAD_SPAN = "bad_span"
NO_TID = "bad_tid"


# ------------------------------------------------------------------ PyTorch 1.8-1.10 layout


def old_layout() -> list[dict[str, Any]]:
    """Categories `Operator`, `Runtime`, `Kernel`, `Memcpy`, `Memset`; ProfilerStep#5 is an
    operator; the all-reduce's size is in `Input dims` (lower case) of its nccl: op."""
    return [
        span("Operator", "ProfilerStep#5", 0, 1000, COMPUTE_TID),
        span("Operator", "aten::mm", 10, 50, COMPUTE_TID),
        span(
            "Operator",
            "nccl:all_reduce",
            100,
            40,
            COMPUTE_TID,
            args={"Input dims": [[1024]], "Input type": ["float"]},
        ),
        span("Runtime", "cudaLaunchKernel", 110, 5, COMPUTE_TID, args={"correlation": 7}),
        span("Kernel", "volta_sgemm_128x64_nn", 20, 30, 7),
        span(
            "Kernel",
            "ncclAllReduceRingLLKernel_sum_f32(CollectiveArgs)",
            200,
            60,
            7,
            args={"correlation": 7},
        ),
        span("Memcpy", "Memcpy HtoD (Pageable -> Device)", 300, 2, 7),
        span("Memset", "Memset (Device)", 310, 1, 7),
    ]


def test_pytorch_1_8_categories_are_read() -> None:
    # the all-reduce: 1024 floats = 4096 B; n = world 8
    parsed = read(trace(old_layout(), dist_head(world_size=8)))
    assert parsed.has_gpu
    assert parsed.of(Step) == [Step(5, 0, 1_000_000, COMPUTE_TID)]
    assert parsed.of(GpuOp) == [
        GpuOp("compute", 20_000, 30_000, "gemm"),
        GpuOp("memcpy", 300_000, 2_000),
        GpuOp("memset", 310_000, 1_000),
    ]
    assert parsed.comm == [
        CommOp("AllReduce", 200_000, 60_000, 4096, 8, True, None, None, "world size", "Float")
    ]


def test_a_profiler_step_operator_is_not_busy_cpu_time() -> None:
    # only aten::mm [10, 60) and the nccl: call [100, 140) are cpu time, not the step
    spans = read(trace(old_layout(), dist_head(world_size=8))).cpu
    busy = [(s.start_ns, s.end_ns) for s in spans if not s.comm_call]
    assert busy == [(10_000, 60_000), (100_000, 140_000)]


@pytest.mark.parametrize("cat", ["KERNEL", "Kernel", "kernel"])
def test_category_names_are_read_in_any_case(cat: str) -> None:
    assert read(trace([span(cat, "volta_sgemm", 1, 2, 7)])).has_gpu


# ------------------------------------------------------------------ other libraries, devices


@pytest.mark.parametrize("library", ["hccl", "xccl", "nccl"])
def test_a_library_call_names_the_collective_of_its_kernel(library: str) -> None:
    # a SendRecv kernel launched inside `<library>:all_to_all` is that all-to-all
    events = [
        annotation(f"{library}:all_to_all", 10, 30, LAUNCH_TID, dims_args([[256]], ["float"])),
        launch(3, 12, LAUNCH_TID),
        kernel(SENDRECV, 50, 5, {"correlation": 3}),
    ]
    (op,) = read(trace(events, dist_head(world_size=4))).comm
    assert (op.collective, op.message_bytes) == ("AllToAll", 1024)


def test_an_hccl_kernel_is_communication_and_its_call_not_compute() -> None:
    events = [
        cpu_op("hccl:all_reduce", 10, 30, LAUNCH_TID),
        launch(3, 12, LAUNCH_TID),
        kernel("hcclKernel_AllReduce_sum_f32", 50, 5, {"correlation": 3}),
    ]
    parsed = read(trace(events, dist_head(world_size=4)))
    assert [op.collective for op in parsed.comm] == ["AllReduce"]
    assert [s.comm_call for s in parsed.cpu] == [False, True]  # busy, and inside a call


@pytest.mark.parametrize("name", ["", "   "])
def test_a_device_with_an_empty_name_has_no_gpu_name_but_is_a_gpu(name: str) -> None:
    head = {"deviceProperties": [{"id": 0, "name": name}], **dist_head()}
    parsed = read(trace([kernel("gemm", 1, 1)], head))
    assert (parsed.meta.gpu_name, parsed.has_gpu) == (None, True)


# ------------------------------------------------------------------ calls not in the trace


def test_a_sendrecv_kernel_whose_launch_is_not_in_the_trace_is_of_unknown_type() -> None:
    # made before the window: its correlation finds no launch
    parsed = read(trace([kernel(SENDRECV, 50, 5, {"correlation": 99})], dist_head()))
    assert [op.collective for op in parsed.comm] == ["Other"]
    assert (parsed.stats.comm_kernels, parsed.stats.no_launch) == (1, 1)


def test_a_sendrecv_kernel_without_a_correlation_is_of_unknown_type() -> None:
    parsed = read(trace([kernel(SENDRECV, 50, 5)], dist_head()))
    assert [op.collective for op in parsed.comm] == ["Other"]
    assert parsed.stats.no_launch == 1


def test_an_allreduce_kernel_without_its_call_keeps_its_name() -> None:
    # an all-reduce kernel runs nothing but all-reduces
    parsed = read(trace([kernel(ALLREDUCE, 50, 5, {"correlation": 99})], dist_head()))
    assert [op.collective for op in parsed.comm] == ["AllReduce"]


def test_a_sendrecv_kernel_launched_by_a_c10d_send_is_point_to_point() -> None:
    events = [
        cpu_op("c10d::send", 10, 30, LAUNCH_TID),
        launch(3, 12, LAUNCH_TID),
        kernel(SENDRECV, 50, 5, {"correlation": 3}),
    ]
    parsed = read(trace(events, dist_head()))
    assert [op.collective for op in parsed.comm] == ["SendRecv"]
    assert parsed.stats.no_launch == 0


# ------------------------------------------------------------------ the innermost record


def coalesced(inner_args: dict[str, Any] | None) -> list[dict[str, Any]]:
    """An outer (coalesced) record of 3 all-reduces, 3,000 floats in all, around the inner
    record of one call, whose nccl: op has Input Dims [[250]] floats (1,000 B)."""
    outer = collective_args("allreduce_coalesced", 3000, 3000, "Float", **{"Group size": 2})
    return [
        cpu_op("record_param_comms", 0, 100, LAUNCH_TID, outer),
        cpu_op("record_param_comms", 10, 40, LAUNCH_TID, inner_args),
        annotation("nccl:all_reduce", 12, 30, LAUNCH_TID, dims_args([[250]], ["float"])),
        launch(3, 15, LAUNCH_TID),
        kernel(ALLREDUCE, 60, 5, {"correlation": 3}),
    ]


def test_an_inner_record_without_dtype_takes_its_size_from_input_dims() -> None:
    # never the outer record's 3000 x 4 = 12,000 B: the inner call's 250 x 4 = 1,000 B
    inner = {"Collective name": "allreduce", "In msg nelems": 250, "Out msg nelems": 250}
    (op,) = read(trace(coalesced(inner), dist_head(world_size=4))).comm
    assert op.message_bytes == 1000


def test_an_outer_record_never_gives_an_inner_call_its_group_size() -> None:
    # the outer record's Group size 2 belongs to the coalesced call: n = world 4
    inner = {"Collective name": "allreduce", "In msg nelems": 250, "Out msg nelems": 250}
    (op,) = read(trace(coalesced(inner), dist_head(world_size=4))).comm
    assert (op.group_size, op.group_source) == (4, "world size")


def test_an_inner_record_with_nothing_and_no_dims_leaves_the_size_unknown() -> None:
    events = coalesced({"Collective name": "allreduce"})
    events[2] = annotation("nccl:all_reduce", 12, 30, LAUNCH_TID)  # no Input Dims
    parsed = read(trace(events, dist_head(world_size=4)))
    assert [op.message_bytes for op in parsed.comm] == [None]
    assert parsed.stats.sizes_unknown == 1


# ------------------------------------------------------------------ group size from shapes


def gathered(extra: dict[str, Any], head: dict[str, Any]) -> CommOp:
    """An all-gather kernel whose args say In 1000, Out 8000 BFloat16 (S = 16,000 B)."""
    args = collective_args("_allgather_base", 1000, 8000, "BFloat16", **extra)
    (op,) = read(trace([kernel(ALLGATHER, 50, 5, args)], head)).comm
    return op


def test_the_shapes_give_the_group_before_the_world() -> None:
    # 8000 / 1000 = 8 in a world of 16 (the world would overstate busbw by 7%)
    op = gathered({}, dist_head(world_size=16))
    assert (op.group_size, op.group_source) == (8, "tensor shapes")


def test_pg_config_gives_the_group_before_the_shapes() -> None:
    head = dist_head(world_size=16, pg_sizes={"5": 8, "0": 16})
    op = gathered({"Process Group Name": "5"}, head)
    assert (op.group_size, op.group_source) == (8, "pg_config")


def test_the_group_size_arg_comes_first() -> None:
    op = gathered({"Group size": 8}, dist_head(world_size=16))
    assert (op.group_size, op.group_source) == (8, "Group size arg")


def test_without_any_source_the_group_is_unknown() -> None:
    op = gathered({}, {})
    assert (op.group_size, op.group_source) == (8, "tensor shapes")
    args = collective_args("allreduce", 10, 10, "Float")
    (plain,) = read(trace([kernel(ALLREDUCE, 50, 5, args)])).comm
    assert (plain.group_size, plain.group_source) == (None, None)


# ------------------------------------------------------------------ values no trace should hold


@pytest.mark.parametrize(
    ("ts", "dur"),
    [(1, 1e300), (-1e300, 1), (1e300, 1), (1, -1), (True, "x")],
    ids=["huge dur", "huge negative ts", "huge ts", "negative dur", "wrong types"],
)
def test_out_of_range_spans_are_dropped_and_counted(ts: Any, dur: Any) -> None:
    events = [kernel("gemm", ts, dur), cpu_op("aten::mm", ts, dur), kernel("gemm", 5, 1)]
    parsed = read(trace(events))
    assert parsed.of(GpuOp) == [GpuOp("compute", 5000, 1000, "gemm")]
    assert parsed.stats.dropped == {BAD_SPAN: 2}


@pytest.mark.parametrize("tid", [None, 1.5, [1], True], ids=["null", "float", "list", "bool"])
def test_a_cpu_op_whose_tid_is_neither_a_number_nor_a_name_is_dropped(tid: Any) -> None:
    parsed = read(trace([span("cpu_op", "aten::mm", 1, 1, tid)]))
    assert (parsed.cpu, parsed.stats.dropped) == ([], {NO_TID: 1})


@pytest.mark.parametrize("number", ["²", "1" * 30, "x"])
def test_a_step_whose_number_is_not_one_is_dropped(number: str) -> None:
    parsed = read(trace([annotation(f"ProfilerStep#{number}", 0, 10)]))
    assert parsed.of(Step) == []
    assert parsed.stats.dropped == {"step_without_number": 1}


def test_metadata_beyond_bounds_is_unknown() -> None:
    head = {
        "deviceProperties": [{"name": "G" * 5000}],
        "distributedInfo": {"rank": 10**12, "world_size": 10**12, "backend": "nccl",
                            "pg_config": [{"pg_name": "0", "pg_size": 10**12,
                                           "ranks": [0, 10**12]}]},
        "baseTimeNanoseconds": 10**30,
    }  # fmt: skip
    meta = read(trace([], head)).meta
    assert (meta.rank, meta.world_size, meta.gpu_name, meta.base_time_ns) == (None,) * 4
    assert (meta.pg_sizes, meta.pg_ranks, meta.backend) == ({}, {}, "nccl")


def test_a_process_group_name_beyond_256_characters_is_none() -> None:
    args = collective_args("allreduce", 10, 10, "Float", **{"Process Group Name": "p" * 300})
    (op,) = read(trace([kernel(ALLREDUCE, 50, 5, args)], dist_head())).comm
    assert op.process_group is None


def test_a_memory_total_beyond_2_to_the_62_is_dropped() -> None:
    event = {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 1,
             "args": {"Device Id": 0, "Device Type": 1, "Total Allocated": 2**63 - 1}}  # fmt: skip
    parsed = read(trace([event]))
    assert parsed.stats.dropped == {"memory_event_incomplete": 1}


def test_a_huge_kernel_name_is_sorted_by_its_head() -> None:
    name = "ampere_sgemm_" + "x" * 1_000_000
    assert read(trace([kernel(name, 1, 1)])).events == [GpuOp("compute", 1000, 1000, "gemm")]
