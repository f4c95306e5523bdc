"""Golden encodings of every struct that crosses a process boundary or is persisted: the wire
messages both ways and the aggregator's state files. A change to a field's name, order, type
or tag changes these bytes: a protocol change (bump PROTOCOL_VERSION) or a state format
change (bump STATE_VERSION, add a migration). Regenerate on purpose with
COMMSCOPE_REGEN_GOLDEN=1 and review the diff (tests/collector/golden/encodings.json).
"""

from __future__ import annotations

import json
import os
from array import array
from pathlib import Path
from typing import Any, get_args, get_type_hints

import msgspec
import pytest
from commscope.model import schema
from commscope.model.int64s import pack as pack_delays
from commscope.model.schema import (
    PROTOCOL_VERSION,
    STATE_VERSION,
    Ack,
    Batch,
    CollectorStats,
    CommOp,
    CpuSpan,
    EndOfRun,
    Facts,
    FileStats,
    FinishedFile,
    GpuOp,
    Heartbeat,
    Hello,
    InSteps,
    KernelTime,
    LaunchDelays,
    LaunchTally,
    MemoryPeak,
    Nodes,
    OpTally,
    RankResult,
    Reject,
    Retired,
    RunAck,
    StateVersion,
    Step,
    StreamEnd,
    StreamStart,
    ToAggregator,
    ToCollector,
    TraceMeta,
    Welcome,
)
from commscope.pipeline.edge import pack
from commscope.pipeline.sketch import sketch_of

GOLDEN = Path(__file__).parent / "golden" / "encodings.json"
STREAM = "0123456789abcdef0123456789abcdef"
META = TraceMeta(
    rank=3,
    world_size=8,
    backend="nccl",
    gpu_name="NVIDIA H100 80GB HBM3",
    base_time_ns=1_700_000_000_000_000_000,
    pg_sizes={"0": 8},
    nccl_version="2.21.5",
    pg_ranks={"0": [0, 1, 2, 3, 4, 5, 6, 7]},
)
STATS = FileStats(
    bytes_read=4096,
    events=10,
    dropped={"args_not_object": 2},
    sizes_unknown=1,
    comm_kernels=4,
    no_launch=1,
)
CALL = CommOp("AllReduce", 100, 50, 4096, 8, True, "0", 7, "pg_config", "Float")
# an all-to-all-v: 512 + 1024 Floats sent to group ranks 0 and 1, 768 received from each
SPLIT_CALL = CommOp("AllToAll", 200, 50, 6144, 2, True, "1", 3, "pg_config", "Float",
                    (512, 1024), (768, 768))  # fmt: skip
EVENTS = [
    GpuOp("compute", 0, 100, "gemm"),
    GpuOp("memcpy", 10, 5),
    CALL,
    SPLIT_CALL,
    Step(12, 0, 1000, 42),
    CpuSpan(42, 0, 900, True),
    MemoryPeak(0, 2**30, 2**31),
    KernelTime("volta_sgemm_128x32_nt", 2, 100),
    LaunchDelays(2, 12_000, 2, 1, pack_delays(array("q", [7_000, 9_000]))),
]
KERNELS = [KernelTime("volta_sgemm_128x32_nt", 2, 100), KernelTime(None, 1, 50)]
LAUNCHES = LaunchTally(
    calls=2, call_ns=12_000, kernels=2, shorter=1, delay_ns=sketch_of([7_000.0, 9_000.0])
)
RESULT = RankResult(
    evidence_text="gpu kernels",
    comm_ns=50,
    overlap_ns=20,
    compute_ns=100,
    ops={
        "AllReduce": OpTally(
            count=1,
            sized_count=1,
            message_bytes=4096,
            bus_parts={8: 57344},
            bus_count=1,
            bus_time_ns=50,
            time_ns=50,
            sized_time_ns=50,
            algbw_Bps=bytearray(8),
            busbw_Bps=bytearray(8),
            group_sources={"pg_config": 1},
        )
    },
    steps={12: 1000},
    files=["/run/iteration_4/rank3_trace.json"],
    calls=[CALL],
    kernel_ns={"gemm": 100},
    gpu_busy_ns=150,
    gpu_span_ns=150,
    memory_peak_bytes=2**30,
    memory_reserved_peak_bytes=2**31,
    start_ns=0,
    end_ns=1000,
    in_steps=InSteps(span_ns=1000, comm_ns=50, overlap_ns=20, compute_ns=100, gpu_busy_ns=150),
    ungrouped_calls=0,
    kernel_names=KERNELS,
    launches=LAUNCHES,
)
START = StreamStart(
    stream=STREAM,
    node="node-1.example",
    path="/run/iteration_4/rank3_trace.json",
    folder="iteration_4",
    root_name="run",
    name_rank=3,
)

# name -> (example, the type it decodes as)
EXAMPLES: dict[str, tuple[Any, Any]] = {
    "Hello": (
        Hello(protocol=PROTOCOL_VERSION, node="node-1.example", instance="ab12"),
        ToAggregator,
    ),
    "StreamStart": (START, ToAggregator),
    "Batch": (Batch(stream=STREAM, seq=1, events=EVENTS), ToAggregator),
    "Facts": (
        Facts(
            stream=STREAM,
            seq=1,
            runs={"compute": pack(array("q", [0]), array("q", [100]))},
            busy={42: b""},
            call_time={42: pack(array("q", [0]), array("q", [900]))},
            steps=[Step(12, 0, 1000, 42)],
            calls=[CALL, SPLIT_CALL],
            kernel_ns={"gemm": 100, "memcpy": 5, "communication": 50},
            has_gpu=True,
            memory_peak_bytes=2**30,
            memory_reserved_peak_bytes=2**31,
            kernel_names=KERNELS,
            launches=LAUNCHES,
        ),
        ToAggregator,
    ),
    "StreamEnd": (
        StreamEnd(stream=STREAM, seq=2, meta=META, stats=STATS, size_bytes=8192, error=None),
        ToAggregator,
    ),
    "Heartbeat": (
        Heartbeat(
            node="node-1.example",
            stats=CollectorStats(
                files_seen=3,
                files_done=2,
                files_skipped=1,
                events_read=100,
                batches_sent=5,
                batches_resent=1,
                batches_acked=4,
                unacked=1,
                unacked_bytes=512,
                lag_s=0.25,
                dropped={"unreadable_file": 1},
            ),
        ),
        ToAggregator,
    ),
    "EndOfRun": (EndOfRun(node="node-1.example", reason="SIGTERM"), ToAggregator),
    "Welcome": (Welcome(protocol=PROTOCOL_VERSION, instance="cd34", credit=64), ToCollector),
    "Ack": (Ack(stream=STREAM, next_seq=3, done=True, credit=64), ToCollector),
    "RunAck": (RunAck(node="node-1.example"), ToCollector),
    "Reject": (Reject(reason="protocol 9 not supported"), ToCollector),
    # persisted: the aggregator's state folder (pipeline.store)
    "state/FinishedFile": (
        FinishedFile(
            stream=STREAM,
            node="node-1.example",
            path=START.path,
            folder="iteration_4",
            root_name="run",
            name_rank=3,
            next_seq=3,
            size_bytes=8192,
            meta=META,
            stats=STATS,
            result=RESULT,
            error=None,
        ),
        FinishedFile,
    ),
    "state/StateVersion": (StateVersion(version=STATE_VERSION), StateVersion),
    "state/Nodes": ({"node-1.example": True, "node-2": False}, Nodes),
    "state/Retired": ([STREAM], Retired),
}


def encodings() -> dict[str, str]:
    return {name: msgspec.msgpack.encode(value).hex() for name, (value, _) in EXAMPLES.items()}


def golden() -> dict[str, str]:
    if os.environ.get("COMMSCOPE_REGEN_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(encodings(), indent=1) + "\n", encoding="utf-8")
    loaded: dict[str, str] = json.loads(GOLDEN.read_text(encoding="utf-8"))
    return loaded


def test_every_wire_message_has_an_example() -> None:
    kinds = {kind.__name__ for kind in (*get_args(ToAggregator), *get_args(ToCollector))}
    assert kinds == {name for name in EXAMPLES if "/" not in name}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_encoding_is_the_golden_one(name: str) -> None:
    assert encodings()[name] == golden()[name]


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_golden_bytes_decode_to_the_example(name: str) -> None:
    value, kind = EXAMPLES[name]
    assert msgspec.msgpack.decode(bytes.fromhex(golden()[name]), type=kind) == value


def test_the_head_knows_every_message_kind_an_aggregator_receives() -> None:
    """The aggregator reads a message's kind from `Head.type` before the rest: its tag set is
    the wire's own, no more, no less."""
    tags = {kind.__struct_config__.tag for kind in get_args(schema.ToAggregator)}
    assert set(get_args(get_type_hints(schema.Head)["type"])) == tags


def test_a_call_stored_before_protocol_9_reads_with_its_dtype_and_splits_unknown() -> None:
    """The aggregator's state keeps calls: one written without the fields protocol 9 appended
    reads with their defaults, so STATE_VERSION stays."""
    old = msgspec.msgpack.encode(["comm", "AllReduce", 100, 50, 4096, 8, True, "0", 7, "pg_config"])
    call = msgspec.msgpack.decode(old, type=CommOp)
    assert call == CommOp("AllReduce", 100, 50, 4096, 8, True, "0", 7, "pg_config")
    assert (call.dtype, call.in_splits, call.out_splits) == (None, (), ())
