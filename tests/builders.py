"""A two-rank step for CLI tests, built from `kineto_builder`, and TorchTitan-style writing.

One step per rank: compute [0,100) and [150,300) µs, an AllReduce [50,200) of 250,000 floats
(1e6 B) in a group of 2, and ProfilerStep#10 lasting 1000 + 500 x rank µs.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

from kineto_builder import annotation, collective_args, cpu_op, dist_head, kernel, trace

GPU = "NVIDIA H100 80GB HBM3"
GEMM = "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def rank_events(rank: int) -> list[dict[str, Any]]:
    args = collective_args("allreduce", 250_000, 250_000, "Float", **{"Group size": 2})
    return [
        annotation("ProfilerStep#10", 0, 1000 + 500 * rank),
        kernel(GEMM, 0, 100),
        kernel(GEMM, 150, 150),
        kernel(ALLREDUCE, 50, 150, args),
    ]


def rank_trace(rank: int, world: int) -> bytes:
    """The whole document of one rank, with Kineto's header and trailer keys."""
    tail = {"traceName": f"rank{rank}_trace.json", "baseTimeNanoseconds": 1_700_000_000 * 10**9}
    return trace(rank_events(rank), head=dist_head(rank, world, gpu=GPU), tail=tail)


def write(path: Path, document: bytes, gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(document) if gz else document)
    return path


# ---------------------------------------------------------------- several jobs, ranks by name

A100 = "NVIDIA A100-SXM4-80GB"
B200 = "NVIDIA B200"
DAY_NS = 86_400 * 10**9
JAN_NS = 1_704_067_200 * 10**9  # 2024-01-01 00:00 UTC
MAR_NS = 1_709_251_200 * 10**9  # 2024-03-01 00:00 UTC
JUN_NS = 1_717_200_000 * 10**9  # 2024-06-01 00:00 UTC


def job_events(world: int) -> list[dict[str, Any]]:
    """One step of 1000 µs: compute [0,100) and [150,300) µs, an AllReduce [50,200) µs of
    1e6 B in a group of `world` (every rank's ends at 200 µs: clock offsets come out 0)."""
    args = collective_args("allreduce", 250_000, 250_000, "Float", **{"Group size": world})
    return [
        annotation("ProfilerStep#10", 0, 1000),
        kernel(GEMM, 0, 100),
        kernel(GEMM, 150, 150),
        kernel(ALLREDUCE, 50, 150, args),
    ]


def job_trace(
    rank: int | None,
    world: int,
    gpu: str | None = GPU,
    base_ns: int | None = JAN_NS,
    backend: str = "nccl",
) -> bytes:
    """A rank of a job whose trace says `world`, `backend`, `gpu` (None: no deviceProperties)
    and its time base (None: none, and the events' times are not dates); `rank` None: a
    distributedInfo without a rank."""
    head = dist_head(rank or 0, world, backend, gpu=gpu)
    if rank is None:
        del head["distributedInfo"]["rank"]
    tail = {"baseTimeNanoseconds": base_ns} if base_ns is not None else {}
    return trace(job_events(world), head=head, tail=tail)


def gloo_trace(rank: int, world: int = 2, base_ns: int = JAN_NS) -> bytes:
    """A CPU-only rank (gloo, no deviceProperties): one step of CPU work."""
    events = [annotation("ProfilerStep#10", 0, 1000), cpu_op("aten::mm", 0, 100)]
    head = dist_head(rank, world, "gloo")
    return trace(events, head=head, tail={"baseTimeNanoseconds": base_ns})


def single_gpu_trace(gpu: str = GPU, base_ns: int = JAN_NS) -> bytes:
    """A single-GPU job's trace: no distributedInfo at all (no rank, world or backend)."""
    head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": gpu}]}
    events = [annotation("ProfilerStep#1", 0, 1000), kernel(GEMM, 0, 100)]
    return trace(events, head=head, tail={"baseTimeNanoseconds": base_ns})
