"""PyTorch 1.8-1.10 traces read whole (issue 24 item 5): string tids (`"tid": "4242"` for a
thread, `"stream 7"` for a GPU stream) read as the ids they are, string pids change nothing,
ProfilerStep#N as an `Operator` is a step, and an event still dropped says why. The layout is
Kineto's of those versions (pytorch/kineto tb_plugin/test/test_profiler.py and its
output_json.cpp). Kineto µs; commscope ns (x 1000)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from commscope.collector.normalize import NAMED_TIDS, string_tid
from commscope.model.schema import CommOp, GpuOp, Step
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import dist_head, read, span, trace

MAIN = 4242
NO_TID = "bad_tid"
BAD_SPAN = "bad_span"
NCCL = "ncclAllReduceRingLLKernel_sum_f32(CollectiveArgs)"
GEMM = "volta_sgemm_128x64_nn"


def pytorch_1_8(main: Any = "4242") -> list[dict[str, Any]]:
    """Two steps on the main thread; a gemm [200, 300) on stream 7 and the all-reduce (1024
    floats, from its nccl: op's `Input dims`) [250, 330) on stream 13, both launched from the
    main thread; a gemm [600, 700), a copy and a set; Kineto's own `Trace` span and window end
    (pids "Spans" and "")."""
    return [
        span("Operator", "ProfilerStep#3", 0, 500, main),
        span("Operator", "aten::mm", 10, 50, main),
        span("Runtime", "cudaLaunchKernel", 20, 5, main, args={"correlation": 6}),
        span(
            "Operator",
            "nccl:all_reduce",
            100,
            40,
            main,
            args={"Input dims": [[1024]], "Input type": ["float"]},
        ),
        span("Runtime", "cudaLaunchKernel", 110, 5, main, args={"correlation": 7}),
        span("Kernel", GEMM, 200, 100, "stream 7", args={"correlation": 6}),
        span("Kernel", NCCL, 250, 80, "stream 13", args={"correlation": 7}),
        span("Operator", "ProfilerStep#4", 500, 500, main),
        span("Operator", "aten::add", 600, 20, main),
        span("Kernel", GEMM, 600, 100, "stream 7"),
        span("Memcpy", "Memcpy HtoD (Pageable -> Device)", 720, 10, "stream 7"),
        span("Memset", "Memset (Device)", 740, 5, "stream 7"),
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",
         "tid": "PyTorch Profiler", "ts": 0, "dur": 1000, "args": {"Op count": 0}},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 1000},
    ]  # fmt: skip


def test_a_pytorch_1_8_trace_is_read_whole() -> None:
    parsed = read(trace(pytorch_1_8(), dist_head(world_size=2)))
    assert parsed.of(Step) == [Step(3, 0, 500_000, MAIN), Step(4, 500_000, 500_000, MAIN)]
    assert parsed.of(GpuOp) == [
        GpuOp("compute", 200_000, 100_000, "gemm"),
        GpuOp("compute", 600_000, 100_000, "gemm"),
        GpuOp("memcpy", 720_000, 10_000),
        GpuOp("memset", 740_000, 5_000),
    ]
    # 1024 floats = 4096 B, n = the world (2); launched on "4242" inside nccl:all_reduce
    assert parsed.comm == [
        CommOp("AllReduce", 250_000, 80_000, 4096, 2, True, None, None, "world size", "Float")
    ]
    # busy: aten::mm [10, 60), the nccl: op [100, 140), aten::add [600, 620); the call apart
    assert [(s.tid, s.start_ns, s.end_ns, s.comm_call) for s in parsed.cpu] == [
        (MAIN, 10_000, 60_000, False),
        (MAIN, 100_000, 140_000, False),
        (MAIN, 600_000, 620_000, False),
        (MAIN, 100_000, 140_000, True),
    ]
    assert (parsed.stats.dropped, parsed.stats.no_launch, parsed.stats.sizes_unknown) == ({}, 0, 0)


def test_it_reads_as_the_same_trace_with_numeric_tids() -> None:
    modern = [
        {**e, "tid": MAIN if e["tid"] == "4242" else int(e["tid"].split()[-1])}
        for e in pytorch_1_8()[:-2]
    ]
    head = dist_head(world_size=2)
    assert read(trace(pytorch_1_8(), head)).events == read(trace(modern, head)).events


def test_a_thread_named_not_numbered_is_one_thread_of_its_own() -> None:
    parsed = read(trace(pytorch_1_8("main thread"), dist_head(world_size=2)))
    main = string_tid("main thread")
    assert {s.tid for s in parsed.of(Step)} == {s.tid for s in parsed.cpu} == {main}
    assert [op.message_bytes for op in parsed.comm] == [4096]  # its launch found its call
    assert parsed.stats.dropped == {}


@pytest.mark.parametrize("pid", ["Spans", "", "gpu 0", "13721", None])
def test_a_string_pid_changes_nothing(pid: Any) -> None:
    events = [{**e, "pid": pid} for e in pytorch_1_8()]
    head = dist_head(world_size=2)
    assert read(trace(events, head)).events == read(trace(pytorch_1_8(), head)).events


# ------------------------------------------------------------------ what is still dropped


@pytest.mark.parametrize("tid", [None, 1.5, [4242], True], ids=["null", "float", "list", "bool"])
def test_each_cpu_event_with_no_usable_tid_is_dropped_and_says_why(tid: Any) -> None:
    # a step, an op, a comm call and a launch: four events dropped, for their tid
    events = [
        span("Operator", "ProfilerStep#3", 0, 500, tid),
        span("Operator", "aten::mm", 10, 50, tid),
        span("user_annotation", "nccl:all_reduce", 100, 40, tid),
        span("Runtime", "cudaLaunchKernel", 110, 5, tid, args={"correlation": 7}),
        span("Kernel", NCCL, 250, 80, "stream 13", args={"correlation": 7}),
    ]
    parsed = read(trace(events, dist_head(world_size=2)))
    assert (parsed.of(Step), parsed.cpu) == ([], [])
    assert parsed.stats.dropped == {NO_TID: 4}
    assert parsed.stats.no_launch == 1  # the kernel stays, its launch unknown


def test_an_event_with_a_bad_span_and_a_bad_tid_counts_once_for_its_span() -> None:
    parsed = read(trace([span("Operator", "aten::mm", "x", 50, None)]))
    assert parsed.stats.dropped == {BAD_SPAN: 1}


# ------------------------------------------------------------------ string_tid


@pytest.mark.parametrize(
    ("tid", "number"),
    [("4242", 4242), ("007", 7), ("-3", -3), ("0", 0), (str(2**63 - 1), 2**63 - 1)],
)
def test_a_decimal_string_is_its_number(tid: str, number: int) -> None:
    assert string_tid(tid) == number


@pytest.mark.parametrize(
    "tid", ["stream 7", "", " 7", "7 ", "+7", "٧", "1e3", str(2**63), str(NAMED_TIDS), "9" * 30]
)
def test_any_other_string_is_a_name_below_every_number(tid: str) -> None:
    # "٧" is an Arabic-Indic seven: a digit to str.isdigit, not a decimal string here
    assert -(2**63) < string_tid(tid) <= NAMED_TIDS


def test_names_are_told_apart_and_stable() -> None:
    names = ["stream 7", "stream 8", "stream 7 user", "PyTorch Profiler", "main", ""]
    ids = [string_tid(name) for name in names]
    assert len(set(ids)) == len(names)
    assert string_tid("stream 7") == ids[0]


@settings(deadline=None, max_examples=200, database=None)
@given(st.integers(NAMED_TIDS + 1, 2**63 - 1))
def test_every_number_above_the_named_ids_reads_back(number: int) -> None:
    assert string_tid(str(number)) == number


@settings(deadline=None, max_examples=200, database=None)
@given(st.text(max_size=20).filter(lambda text: re.fullmatch(r"-?[0-9]+", text) is None))
def test_every_name_falls_at_or_below_the_named_ids(name: str) -> None:
    assert -(2**63) < string_tid(name) <= NAMED_TIDS
