"""A two-rank step for CLI tests, built from `kineto_builder`, and TorchTitan-style writing.

One step per rank: compute [0,100) and [150,300) µs, an AllReduce [50,200) of 250,000 floats
(1e6 B) in a group of 2, and ProfilerStep#10 lasting 1000 + 500 x rank µs.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

from kineto_builder import annotation, collective_args, dist_head, kernel, trace

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
