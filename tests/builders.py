"""Hand-made Kineto traces for tests: small documents whose numbers can be worked out by hand.

Times are in µs as in Kineto. `trace()` returns the document as a dict; `write()` saves it as
TorchTitan does (`iteration_N/rankK_trace.json[.gz]`).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

GPU = "NVIDIA H100 80GB HBM3"


def kernel(name: str, ts: float, dur: float, **args: Any) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": 0,
        "tid": 7,
        "ts": ts,
        "dur": dur,
        "args": {"stream": 7, "device": 0, **args},
    }


def compute(ts: float, dur: float) -> dict[str, Any]:
    return kernel("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_64x3_tn", ts, dur)


def allreduce(ts: float, dur: float, nelems: int, group: int = 2) -> dict[str, Any]:
    return kernel(
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        ts,
        dur,
        **{
            "Collective name": "allreduce",
            "In msg nelems": nelems,
            "Out msg nelems": nelems,
            "Group size": group,
            "dtype": "Float",
            "Process Group Name": "0",
        },
    )


def step(number: int, ts: float, dur: float, tid: int = 1) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "user_annotation",
        "name": f"ProfilerStep#{number}",
        "pid": 1,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {},
    }


def trace(rank: int, world: int, events: list[dict[str, Any]], gpu: str = GPU) -> dict[str, Any]:
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": gpu}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "traceEvents": events,
        "traceName": f"rank{rank}_trace.json",
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }


def rank_events(rank: int) -> list[dict[str, Any]]:
    """One step: compute [0,100) and [150,300), an AllReduce [50,200) of 1e6 floats."""
    return [
        step(10 + 0, 0, 1000 + 500 * rank),
        compute(0, 100),
        compute(150, 150),
        allreduce(50, 150, 250_000),
    ]


def write(path: Path, document: dict[str, Any], gz: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(document).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path
