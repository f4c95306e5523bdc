"""TraceReader + Normalizer on small hand-built traces: each number below is worked by hand.

Kineto times are µs; commscope's are integer ns (x 1000).
"""

from __future__ import annotations

import io
from array import array

import pytest
from commscope.collector.kineto import TraceReader
from commscope.collector.normalize import CallIndex, CommCall, start_order
from commscope.model.schema import CommOp, CpuSpan, GpuOp, MemoryPeak, Step, TraceMeta
from kineto_builder import (
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

ALLREDUCE_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
ALLGATHER_KERNEL = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SENDRECV_KERNEL = (
    "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
)
GEMM = "ampere_sgemm_128x64_nn"
LAUNCH_TID = 11
OTHER_TID = 12
BAD_SPAN = "bad_span"


# ------------------------------------------------------------------ GPU activity


def test_compute_kernel_is_a_compute_gpu_op_in_integer_ns() -> None:
    # ts 1.5 µs -> 1500 ns; dur 2 µs -> 2000 ns
    parsed = read(trace([kernel(GEMM, 1.5, 2.0)]))
    assert parsed.events == [GpuOp("compute", 1500, 2000, "gemm")]


def test_times_are_integers() -> None:
    # 1234.567 µs -> 1234567 ns; 0.125 µs -> 125 ns
    (op,) = read(trace([kernel(GEMM, 1234.567, 0.125)])).events
    assert (op.start_ns, op.dur_ns) == (1234567, 125)
    assert type(op.start_ns) is int
    assert type(op.dur_ns) is int


def test_integer_times_scale_exactly_and_mixed_ones_round() -> None:
    # Kineto's integer µs: 1669783687493385 x 1000 is beyond a double's exact integers, so
    # only integer arithmetic gives 1669783687493385000 (as round(int * 1000) always did);
    # ts 2 (int) with dur 0.0016 (float) -> 2000 ns and round(1.6) = 2 ns (not truncated to 1).
    events = [kernel(GEMM, 1669783687493385, 7), kernel(GEMM, 2, 0.0016)]
    first, second = read(trace(events)).events
    assert (first.start_ns, first.dur_ns) == (1669783687493385000, 7000)
    assert (second.start_ns, second.dur_ns) == (2000, 2)


def test_cpu_runs_of_integer_times_scale_exactly() -> None:
    # two disjoint integer-µs ops on thread 1: each closed run is its own span, x 1000 exactly
    events = [
        cpu_op("aten::mm", 1669783687493385, 3, 1),
        cpu_op("aten::mm", 1669783687493390, 1, 1),
    ]
    assert read(trace(events)).cpu == [
        CpuSpan(1, 1669783687493385000, 1669783687493388000, False),
        CpuSpan(1, 1669783687493390000, 1669783687493391000, False),
    ]


@pytest.mark.parametrize(
    ("edge", "start_ns"),
    # an int scales exactly; the float product 4.611686018427388e18 is the double
    # 4611686018427387904, which round() returns
    [(4611686018427388, 4611686018427388000), (4611686018427388.0, 4611686018427387904)],
)
def test_times_up_to_2_62_ns_are_kept_one_more_us_is_dropped(edge: float, start_ns: int) -> None:
    # the bound is 2**62 ns = 4611686018427387.904 µs, which as a double is 4611686018427388.0:
    # ts at the bound (int or float) is kept; one µs more (the next double too) is dropped as
    # out of range, whatever type carries it
    events = [kernel(GEMM, edge, 1), kernel(GEMM, edge + 1, 1)]
    parsed = read(trace(events))
    assert [op.start_ns for op in parsed.events] == [start_ns]
    assert parsed.stats.dropped == {BAD_SPAN: 1}


def test_memcpy_is_a_memcpy_gpu_op() -> None:
    # 10 µs, 0.25 µs -> 10000 ns, 250 ns
    event = span("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 10, 0.25, 7)
    assert read(trace([event])).events == [GpuOp("memcpy", 10000, 250)]


def test_memset_is_a_memset_gpu_op() -> None:
    # 20 µs, 0.125 µs -> 20000 ns, 125 ns
    event = span("gpu_memset", "Memset (Device)", 20, 0.125, 7)
    assert read(trace([event])).events == [GpuOp("memset", 20000, 125)]


def test_a_kernel_makes_the_trace_a_gpu_trace() -> None:
    assert read(trace([kernel(GEMM, 1, 1)])).has_gpu


def test_cpu_only_trace_is_not_a_gpu_trace() -> None:
    assert not read(trace([cpu_op("aten::mm", 1, 1)])).has_gpu


# ------------------------------------------------------------------ NCCL kernels with args


def test_nccl_kernel_with_full_args_is_a_sized_comm_op() -> None:
    # S = max(In 1000, Out 8000) x 2 B (BFloat16) = 16000 B; n from `Group size`
    args = collective_args(
        "_allgather_base",
        1000,
        8000,
        "BFloat16",
        **{"Group size": 8, "Process Group Name": "3", "Seq": 7, "correlation": 5},
    )
    parsed = read(trace([kernel(ALLGATHER_KERNEL, 100.0, 12.5, args)], dist_head(world_size=8)))
    assert parsed.events == [
        CommOp("AllGather", 100000, 12500, 16000, 8, True, "3", 7, "Group size arg", "BFloat16")
    ]
    assert parsed.stats.sizes_unknown == 0


# ------------------------------------------------------------------ resolution through the launch


def _recorded_allreduce() -> tuple[list[dict], list[dict], dict]:
    """CPU events, the launch, and a kernel whose size only the innermost record knows."""
    cpu = [
        # an earlier, finished collective on the launching thread: must not be used
        cpu_op("record_param_comms", 1, 2, LAUNCH_TID, collective_args("allreduce", 5, 5, "Float")),
        cpu_op("c10d::allreduce_", 10, 20, LAUNCH_TID, dims_args([[]], ["TensorList"])),
        cpu_op(
            "record_param_comms",
            11,
            18,
            LAUNCH_TID,
            collective_args("allreduce", 999, 999, "Float"),
        ),
        cpu_op(
            "record_param_comms",
            12,
            10,
            LAUNCH_TID,
            collective_args("allreduce", 1024, 1024, "Float"),
        ),
        # another thread's record encloses the launch time too: must not be used
        cpu_op("record_param_comms", 14, 5, OTHER_TID, collective_args("broadcast", 7, 7, "Float")),
    ]
    return cpu, [launch(77, 15, LAUNCH_TID)], kernel(ALLREDUCE_KERNEL, 40, 3, {"correlation": 77})


# innermost record on the launching thread: 1024 x 4 B (Float) = 4096 B; n = world_size 8
RECORDED_ALLREDUCE = CommOp(
    "AllReduce", 40000, 3000, 4096, 8, True, None, None, "world size", "Float"
)


@pytest.mark.parametrize(
    "order",
    [
        "cpu, launch, kernel",
        "kernel, cpu, launch",
        "launch, kernel, cpu",
        "kernel, launch, cpu",
    ],
    ids=[
        "kineto order",
        "kernel before its launch",
        "cpu ops after the device section",
        "kernel first, cpu ops last",
    ],
)
def test_kernel_without_args_takes_the_innermost_record_on_its_launching_thread(order: str) -> None:
    cpu, launches, nccl = _recorded_allreduce()
    parts = {"cpu": cpu, "launch": launches, "kernel": [nccl]}
    events = [event for part in order.split(", ") for event in parts[part]]
    parsed = read(trace(events, dist_head(world_size=8)))
    assert parsed.comm == [RECORDED_ALLREDUCE]
    assert parsed.stats.sizes_unknown == 0


def test_collective_name_of_the_record_wins_over_the_kernel_name() -> None:
    # DLRM's all_to_all runs as a SendRecv kernel: 6144 x 4 B (Float) = 24576 B
    events = [
        cpu_op(
            "record_param_comms",
            10,
            10,
            LAUNCH_TID,
            collective_args("all_to_all", 6144, 6144, "Float"),
        ),
        launch(3, 12, LAUNCH_TID),
        kernel(SENDRECV_KERNEL, 30, 2, {"correlation": 3}),
    ]
    parsed = read(trace(events, dist_head(world_size=8)))
    assert parsed.comm == [
        CommOp("AllToAll", 30000, 2000, 24576, 8, True, None, None, "world size", "Float")
    ]


def all_to_all_v() -> list[dict]:
    """An all_to_allv recorded as PyTorch records it: 8 Floats sent (2 to group rank 0, 6 to
    group rank 1), 8 received (4 from each), run by a SendRecv kernel launched inside."""
    splits = {"In split size": "[2, 6]", "Out split size": "[4, 4]", "Group size": 2}
    args = collective_args("all_to_allv", 8, 8, "Float", **splits)
    return [
        cpu_op("c10d::alltoall_base_", 9, 14, LAUNCH_TID, dims_args([[8], [8]], ["float"] * 2)),
        cpu_op("record_param_comms", 10, 10, LAUNCH_TID, args),
        launch(3, 12, LAUNCH_TID),
        kernel(SENDRECV_KERNEL, 30, 2, {"correlation": 3}),
    ]


def test_an_all_to_all_v_keeps_its_dtype_and_split_sizes() -> None:
    # S = max(8, 8) x 4 B = 32 B; splits as recorded, in group-rank order
    parsed = read(trace(all_to_all_v(), dist_head(world_size=8)))
    expected = CommOp("AllToAll", 30000, 2000, 32, 2, True, None, None, "Group size arg",
                      "Float", (2, 6), (4, 4))  # fmt: skip
    assert parsed.comm == [expected]


def test_the_dtype_of_a_first_input_that_gives_no_size_is_not_taken() -> None:
    # a TensorList (or a scalar's tag) as the first input: neither a size nor a dtype
    events = [
        cpu_op("record_param_comms", 10, 10, LAUNCH_TID, dims_args([[]], ["TensorList"])),
        launch(3, 12, LAUNCH_TID),
        kernel(ALLREDUCE_KERNEL, 30, 2, {"correlation": 3}),
    ]
    (op,) = read(trace(events, dist_head(world_size=8))).comm
    assert (op.message_bytes, op.dtype) == (None, None)


def test_input_dims_of_the_innermost_comm_op_when_no_record_has_counts() -> None:
    # the DLRM layout: c10d::allreduce_ > record_param_comms (TensorList, no dims) >
    # nccl:all_reduce annotation with Input Dims [[394241]] float: 394241 x 4 B = 1576964 B
    list_args = dims_args([[], [], [], [], [], [], []], ["TensorList", "Scalar", "Scalar"])
    events = [
        cpu_op(
            "c10d::allreduce_", 100, 86, LAUNCH_TID, dims_args([[], [], [], []], ["TensorList"])
        ),
        cpu_op("record_param_comms", 106, 79, LAUNCH_TID, list_args),
        annotation("nccl:all_reduce", 122, 59, LAUNCH_TID, dims_args([[394241]], ["float"])),
        launch(41, 145, LAUNCH_TID),
        kernel(ALLREDUCE_KERNEL, 155, 246, {"correlation": 41}),
    ]
    parsed = read(trace(events, dist_head(world_size=8)))
    assert parsed.comm == [
        CommOp("AllReduce", 155000, 246000, 1576964, 8, True, None, None, "world size", "Float")
    ]


def test_all_gather_from_a_backend_annotation_is_shard_times_group() -> None:
    # nccl:_all_gather_base records the input shard: 25136 x 2 B (c10::BFloat16) x 8 = 402176 B
    events = [
        cpu_op("record_param_comms", 10, 30, LAUNCH_TID),
        annotation(
            "nccl:_all_gather_base", 12, 20, LAUNCH_TID, dims_args([[25136]], ["c10::BFloat16"])
        ),
        launch(9, 20, LAUNCH_TID),
        kernel(ALLGATHER_KERNEL, 50, 4, {"correlation": 9}),
    ]
    parsed = read(trace(events, dist_head(world_size=8)))
    assert parsed.comm == [
        CommOp("AllGather", 50000, 4000, 402176, 8, True, None, None, "world size", "BFloat16")
    ]


def test_reduce_scatter_from_a_c10d_op_is_output_shard_times_group() -> None:
    # c10d ops list the output first: 100 x 4 B (float) shard x 8 = 3200 B
    op_args = dims_args([[100], [800]], ["float", "float"])
    events = [
        cpu_op("c10d::_reduce_scatter_base_", 10, 30, LAUNCH_TID, op_args),
        launch(4, 20, LAUNCH_TID),
        kernel("ncclKernel_ReduceScatter_RING_LL_Sum_float(x)", 50, 4, {"correlation": 4}),
    ]
    parsed = read(trace(events, dist_head(world_size=8)))
    assert parsed.comm == [
        CommOp("ReduceScatter", 50000, 4000, 3200, 8, True, None, None, "tensor shapes", "Float")
    ]


@pytest.mark.parametrize(
    "events",
    [
        [kernel(ALLREDUCE_KERNEL, 50, 4)],
        [kernel(ALLREDUCE_KERNEL, 50, 4, {"correlation": 4})],
        [
            cpu_op("aten::add_", 10, 30, LAUNCH_TID),
            launch(4, 20, LAUNCH_TID),
            kernel(ALLREDUCE_KERNEL, 50, 4, {"correlation": 4}),
        ],
    ],
    ids=["no args", "launch not in the file", "launch outside any comm op"],
)
def test_size_is_unknown_when_nothing_tells_it(events: list[dict]) -> None:
    parsed = read(trace(events, dist_head(world_size=8)))
    assert parsed.comm == [
        CommOp("AllReduce", 50000, 4000, None, 8, True, None, None, "world size")
    ]
    assert parsed.stats.sizes_unknown == 1


def test_every_kernel_of_one_graph_launch_is_a_comm_op() -> None:
    events = [
        launch(9, 1, LAUNCH_TID, name="cudaGraphLaunch"),
        kernel(ALLREDUCE_KERNEL, 10, 2, {"correlation": 9}),
        kernel(ALLREDUCE_KERNEL, 20, 2, {"correlation": 9}),
    ]
    parsed = read(trace(events, dist_head(world_size=2)))
    assert sorted(op.start_ns for op in parsed.comm) == [10000, 20000]


# ------------------------------------------------------------------ group size


def _group_of(args: dict, head: dict) -> int | None:
    full = {**collective_args("allreduce", 10, 10, "Float"), **args}
    (op,) = read(trace([kernel(ALLREDUCE_KERNEL, 1, 1, full)], head)).comm
    return op.group_size


def test_group_size_arg_wins() -> None:
    head = dist_head(world_size=8, pg_sizes={"0": 8, "1": 2})
    assert _group_of({"Group size": 4, "Process Group Name": "1"}, head) == 4


def test_group_size_from_pg_config_by_process_group_name() -> None:
    head = dist_head(world_size=8, pg_sizes={"0": 8, "1": 4})
    assert _group_of({"Process Group Name": "1"}, head) == 4


def test_group_size_falls_back_to_world_size_for_an_unknown_group() -> None:
    head = dist_head(world_size=8, pg_sizes={"0": 8, "1": 4})
    assert _group_of({"Process Group Name": "9"}, head) == 8


def test_group_size_of_the_only_process_group() -> None:
    head = dist_head(world_size=8, pg_sizes={"0": 2})
    assert _group_of({}, head) == 2


def test_group_size_is_unknown_without_any_metadata() -> None:
    assert _group_of({}, {}) is None


# ------------------------------------------------------------------ steps


def test_profiler_step_is_a_step_on_its_thread() -> None:
    # 1000.5 µs -> 1000500 ns; 250.25 µs -> 250250 ns
    parsed = read(trace([annotation("ProfilerStep#12", 1000.5, 250.25, 59811)]))
    assert parsed.events == [Step(12, 1000500, 250250, 59811)]


def test_profiler_step_without_a_number_is_dropped_and_counted() -> None:
    parsed = read(trace([annotation("ProfilerStep#abc", 1, 1, 1)]))
    assert parsed.events == []
    assert parsed.stats.dropped == {"step_without_number": 1}


# ------------------------------------------------------------------ gloo


def test_gloo_all_reduce_is_a_cpu_comm_op_sized_from_input_dims() -> None:
    # 256 x 4 elements x 4 B (float) = 4096 B; n = world_size 2
    event = annotation("gloo:all_reduce", 50, 10, 33, dims_args([[256, 4]], ["float"]))
    parsed = read(trace([event], dist_head(world_size=2, backend="gloo")))
    assert parsed.events == [
        CommOp("AllReduce", 50000, 10000, 4096, 2, False, None, None, "world size", "Float")
    ]
    assert not parsed.has_gpu


def test_gloo_all_gather_is_shard_times_the_pg_config_group() -> None:
    # shard 100 x 4 B (float) x group 4 (the only process group; world is 8) = 1600 B
    event = annotation("gloo:all_gather", 50, 10, 33, dims_args([[100]], ["float"]))
    parsed = read(trace([event], dist_head(world_size=8, backend="gloo", pg_sizes={"0": 4})))
    assert parsed.events == [
        CommOp("AllGather", 50000, 10000, 1600, 4, False, None, None, "pg_config", "Float")
    ]


def test_gloo_all_reduce_without_metadata_keeps_its_size() -> None:
    # 256 x 4 B = 1024 B needs no group size
    event = annotation("gloo:all_reduce", 50, 10, 33, dims_args([[256]], ["float"]))
    parsed = read(trace([event]))
    assert parsed.events == [
        CommOp("AllReduce", 50000, 10000, 1024, None, False, None, None, None, "Float")
    ]


def test_gloo_all_gather_without_a_group_size_has_unknown_size() -> None:
    event = annotation("gloo:all_gather", 50, 10, 33, dims_args([[100]], ["float"]))
    parsed = read(trace([event]))
    assert parsed.events == [
        CommOp("AllGather", 50000, 10000, None, None, False, None, None, None, "Float")
    ]
    assert parsed.stats.sizes_unknown == 1


# ------------------------------------------------------------------ CPU spans


def test_nested_cpu_ops_merge_into_one_span() -> None:
    events = [cpu_op("aten::linear", 0, 10), cpu_op("aten::matmul", 1, 7), cpu_op("aten::mm", 2, 3)]
    assert read(trace(events)).cpu == [CpuSpan(1, 0, 10000, False)]


def test_overlapping_cpu_ops_merge_into_one_span() -> None:
    # [0, 5] u [3, 9] = [0, 9] µs
    events = [cpu_op("aten::a", 0, 5), cpu_op("aten::b", 3, 6)]
    assert read(trace(events)).cpu == [CpuSpan(1, 0, 9000, False)]


def test_touching_cpu_ops_merge_into_one_span() -> None:
    # [0, 2] u [2, 3] = [0, 3] µs
    events = [cpu_op("aten::a", 0, 2), cpu_op("aten::b", 2, 1)]
    assert read(trace(events)).cpu == [CpuSpan(1, 0, 3000, False)]


def test_disjoint_cpu_ops_give_two_spans() -> None:
    events = [cpu_op("aten::a", 0, 2), cpu_op("aten::b", 3, 1)]
    assert read(trace(events)).cpu == [CpuSpan(1, 0, 2000, False), CpuSpan(1, 3000, 4000, False)]


def test_cpu_spans_are_merged_per_thread() -> None:
    # tid 1: [0, 5] u [4, 8] = [0, 8]; tid 2: [1, 3], interleaved in the file
    events = [cpu_op("aten::a", 0, 5, 1), cpu_op("aten::b", 1, 2, 2), cpu_op("aten::c", 4, 4, 1)]
    assert read(trace(events)).cpu == [CpuSpan(1, 0, 8000, False), CpuSpan(2, 1000, 3000, False)]


def test_collective_calls_also_give_comm_call_spans() -> None:
    # busy: [0, 10]; calls: c10d [2, 5] > record [2.5, 4.5], then a wait [6, 7]
    events = [
        cpu_op("aten::step", 0, 10),
        cpu_op("c10d::allreduce_", 2, 3),
        cpu_op("record_param_comms", 2.5, 2),
        cpu_op("_c10d_functional::wait_tensor", 6, 1),
    ]
    assert read(trace(events)).cpu == [
        CpuSpan(1, 0, 10000, False),
        CpuSpan(1, 2000, 5000, True),
        CpuSpan(1, 6000, 7000, True),
    ]


def test_a_child_listed_before_its_parent_still_merges_into_one_span() -> None:
    events = [cpu_op("aten::mm", 10, 2), cpu_op("aten::linear", 5, 15)]
    assert read(trace(events)).cpu == [CpuSpan(1, 5000, 20000, False)]


# ------------------------------------------------------------------ metadata and stats


def test_metadata_from_the_head_and_base_time_from_the_tail() -> None:
    head = dist_head(rank=3, world_size=16, pg_sizes={"0": 16, "5": 4}, gpu="NVIDIA H100 80GB HBM3")
    head["distributedInfo"]["nccl_version"] = "2.21.5"
    tail = {
        "traceName": "t.json",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1711964646000000000,
    }
    parsed = read(trace([kernel(GEMM, 1, 1)], head, tail))
    assert parsed.meta == TraceMeta(
        rank=3,
        world_size=16,
        backend="nccl",
        gpu_name="NVIDIA H100 80GB HBM3",
        base_time_ns=1711964646000000000,
        pg_sizes={"0": 16, "5": 4},
        nccl_version="2.21.5",
    )


def test_metadata_of_a_trace_without_events() -> None:
    parsed = read(trace([], dist_head(rank=1, world_size=2)))
    assert (parsed.meta.rank, parsed.meta.world_size) == (1, 2)


def test_header_value_wins_over_the_trailer() -> None:
    doc = b'{"baseTimeNanoseconds": 1, "traceEvents": [], "baseTimeNanoseconds": 2}'
    parsed = read(doc)
    assert parsed.meta.base_time_ns == 1


def test_trace_without_metadata_has_empty_meta() -> None:
    assert read(trace([kernel(GEMM, 1, 1)])).meta == TraceMeta()


def test_events_without_numeric_ts_or_dur_are_dropped_and_counted() -> None:
    no_dur = kernel(GEMM, 1, 1)
    del no_dur["dur"]
    no_ts = cpu_op("aten::mm", 1, 1)
    del no_ts["ts"]
    events = [
        no_dur,
        no_ts,
        span("gpu_memcpy", "Memcpy DtoD", None, 1, 7),  # type: ignore[arg-type]
        kernel(GEMM, 1, -1),
        annotation("ProfilerStep#3", "1", 1, 1),  # type: ignore[arg-type]
        kernel(GEMM, 5, 1),
    ]
    parsed = read(trace(events))
    assert parsed.events == [GpuOp("compute", 5000, 1000, "gemm")]
    assert parsed.stats.dropped == {BAD_SPAN: 5}
    assert parsed.stats.events == 6


def test_stats_count_every_item_and_every_byte() -> None:
    doc = trace([kernel(GEMM, 1, 1), {"ph": "i", "name": "x"}, cpu_op("aten::mm", 1, 1)])
    parsed = read(doc)
    assert (parsed.stats.events, parsed.stats.bytes_read) == (3, len(doc))


def test_batches_split_the_same_events() -> None:
    doc = trace([kernel(GEMM, i, 1) for i in range(3000)])
    reader = TraceReader(io.BytesIO(doc), "x.json")
    batches = list(reader.batches(1000))
    # one GpuOp per kernel, then the file's one KernelTime (one kernel name)
    assert [len(b) for b in batches] == [1000, 1000, 1000, 1]
    parsed = read(doc)
    assert [e for b in batches for e in b] == [*parsed.events, *parsed.tallies]


def test_batches_hold_n_events_even_what_the_end_of_the_file_resolves() -> None:
    """Five NCCL kernels whose launch is not in the file wait for the end of the file (their
    launch could come later): the five CommOps come out at once, still in batches of 2."""
    kernels = [kernel("ncclKernel_AllReduce", 10 * i, 1, {"correlation": i}) for i in range(5)]
    reader = TraceReader(io.BytesIO(trace(kernels)), "x.json")
    batches = list(reader.batches(2))
    assert [len(b) for b in batches] == [2, 2, 2]  # the fifth with the file's KernelTime
    events = [e for b in batches for e in b]
    assert all(isinstance(e, CommOp) for e in events[:5])


def test_batches_of_one_are_single_events() -> None:
    doc = trace([kernel(GEMM, i, 1) for i in range(3)])
    batches = list(TraceReader(io.BytesIO(doc), "x.json").batches(1))
    assert [len(b) for b in batches] == [1, 1, 1, 1]  # three GpuOps, one KernelTime


def memory(device_type: int, device: int, allocated: object, reserved: object = None) -> dict:
    """A Kineto `[memory]` instant event (profile_memory=True)."""
    args: dict[str, object] = {"Device Type": device_type, "Device Id": device, "Bytes": 4}
    if allocated is not None:
        args["Total Allocated"] = allocated
    if reserved is not None:
        args["Total Reserved"] = reserved
    return {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 0, "tid": 1,
            "ts": 1, "s": "t", "args": args}  # fmt: skip


def test_memory_events_give_each_gpus_peak_at_the_end() -> None:
    events = [
        memory(1, 0, 100, 500),
        memory(1, 0, 300, 400),
        memory(1, 0, 200),
        memory(1, 1, 50, 60),
        memory(0, 0, 10**12, 10**12),  # the CPU allocator: not GPU memory
    ]
    parsed = read(trace(events))
    assert parsed.of(MemoryPeak) == [MemoryPeak(0, 300, 500), MemoryPeak(1, 50, 60)]


def test_a_memory_event_without_its_totals_is_dropped_and_counted() -> None:
    parsed = read(trace([memory(1, 0, None), memory(1, 0, "many"), memory(1, 0, 7)]))
    assert parsed.of(MemoryPeak) == [MemoryPeak(0, 7, None)]
    assert parsed.stats.dropped == {"memory_event_incomplete": 2}


def test_other_instant_events_are_ignored() -> None:
    event = {**memory(1, 0, 5), "name": "[OutOfMemory]"}
    parsed = read(trace([event]))
    assert (parsed.events, parsed.stats.dropped) == ([], {})


def test_pg_config_gives_each_groups_members() -> None:
    head = dist_head(world_size=4)
    head["distributedInfo"]["pg_config"] = [
        {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 4, "ranks": [3, 2, 1, 0]},
        {"pg_name": "1", "pg_desc": "tp", "pg_size": 2, "ranks": [0, 1]},
        {"pg_name": "2", "pg_desc": "odd", "pg_size": 2, "ranks": [0, "x"]},
    ]
    meta = read(trace([], head)).meta
    assert meta.pg_ranks == {"0": [0, 1, 2, 3], "1": [0, 1]}
    assert meta.pg_sizes == {"0": 4, "1": 2, "2": 2}


def test_compute_kernels_carry_their_category() -> None:
    kernels = [kernel("flash_fwd_kernel", 0, 1), kernel("triton_poi_fused_add_0", 2, 1)]
    parsed = read(trace(kernels))
    assert [e.category for e in parsed.of(GpuOp)] == ["attention", "elementwise"]


def test_calls_listed_by_start_are_looked_up_without_a_sorted_copy() -> None:
    """Starts 1, 1, 5 with ends 9, 4, 6: by start, the longer first on a tie, as added."""
    starts, ends = array("q", [1, 1, 5]), array("q", [9, 4, 6])
    order, by_start = start_order(starts, ends)
    assert (order, by_start) == (range(3), starts)
    assert by_start is starts


def test_calls_out_of_order_are_sorted_by_start_then_longest() -> None:
    """Added as (5, 6), (1, 4), (1, 9): the (1, 9) call encloses (1, 4), so it comes first."""
    order, by_start = start_order(array("q", [5, 1, 1]), array("q", [6, 4, 9]))
    assert (list(order), list(by_start)) == ([2, 1, 0], [1, 1, 5])


def test_a_lookup_reaches_back_to_a_long_call_that_encloses_the_instant() -> None:
    """Calls (0, 100), (10, 20), (30, 40) on one thread: at 35 the innermost (30, 40) then
    (0, 100), passing over (10, 20); at 25 only (0, 100); at 150 none (no call lasts)."""
    calls = CallIndex()
    for start, end in [(0, 100), (10, 20), (30, 40)]:
        calls.add(7, CommCall("nccl:all_reduce", start, end))
    spans = {ts: [(c.start_ns, c.end_ns) for c in calls.enclosing(7, ts)] for ts in (35, 25, 150)}
    assert spans == {35: [(30, 40), (0, 100)], 25: [(0, 100)], 150: []}


# ------------------------------------------------------------------ kernel families


def test_a_deepep_kernel_is_an_alltoall_of_unknown_size() -> None:
    name = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*)"
    parsed = read(trace([kernel(name, 10, 5), kernel(GEMM, 10, 5)], dist_head(world_size=4)))
    assert parsed.comm == [CommOp("AllToAll", 10_000, 5_000, None, 4, True, None, None,
                                  "world size")]  # fmt: skip
    assert (parsed.stats.comm_kernels, parsed.stats.sizes_unknown) == (1, 1)


def test_a_fused_kernel_is_neither_compute_nor_communication() -> None:
    name = "void userbuffers_fp16_sum_inplace_gpu_rr_rs<8>(int, int, int, void**)"
    parsed = read(trace([kernel(name, 10, 5)], dist_head()))
    assert parsed.events == [GpuOp("fused", 10_000, 5_000)]
    assert parsed.stats.comm_kernels == 0


def test_mtia_device_rows_are_kernels() -> None:
    events = [
        span("mtia_ccp_events", "mm_kernel", 0, 10, 7),
        span("mtia_ccp_events", "hccl::all_gather", 10, 5, 7),
    ]
    parsed = read(trace(events, dist_head(world_size=2)))
    assert parsed.of(GpuOp) == [GpuOp("compute", 0, 10_000, "gemm")]
    assert [(op.collective, op.start_ns) for op in parsed.comm] == [("AllGather", 10_000)]
    assert parsed.has_gpu and parsed.stats.comm_kernels == 1


def test_a_collective_comm_row_is_a_host_call_naming_the_kernel_inside() -> None:
    # XPU: oneCCL's host-side collective (`xccl::allreduce`) around the launch of a kernel of
    # no collective type of its own: the call names it; the call itself is no device time
    events = [
        span("collective_comm", "xccl::all_to_all", 0, 20, LAUNCH_TID),
        launch(5, 10, LAUNCH_TID),
        kernel("xcclKernel_Generic", 30, 5, {"correlation": 5}),
    ]
    parsed = read(trace(events, dist_head(world_size=2)))
    assert [(op.collective, op.start_ns, op.dur_ns) for op in parsed.comm] == [
        ("AllToAll", 30_000, 5_000)
    ]


def test_look_alike_kernels_count_as_compute_and_are_named_in_the_stats() -> None:
    events = [
        kernel("void my_moe::alltoall_dispatch<4>(float*)", 0, 3),
        kernel("void my_moe::alltoall_dispatch<8>(float*)", 5, 4),  # the same shown name
        kernel("custom_allgather_v2", 10, 2),
        kernel(GEMM, 20, 50),
    ]
    parsed = read(trace(events, dist_head()))
    assert [op.kind for op in parsed.of(GpuOp)] == ["compute"] * 4
    assert parsed.stats.lookalike_ns == 9_000
    assert parsed.stats.lookalikes == {
        "my_moe::alltoall_dispatch": 7_000,
        "custom_allgather_v2": 2_000,
    }


def test_a_file_names_its_longest_look_alikes_only() -> None:
    # 40 names, the k-th running k µs: the 32 longest are kept (40 … 9 µs), all 820 µs counted
    events = [kernel(f"alltoall_{k}_kernel", 100 * k, k) for k in range(1, 41)]
    stats = read(trace(events, dist_head())).stats
    assert stats.lookalike_ns == sum(range(1, 41)) * 1000
    assert list(stats.lookalikes) == [f"alltoall_{k}_kernel" for k in range(40, 8, -1)]
