"""Small hand-made Kineto traces of communication that is not named `nccl*` (`collector.families`).

Each builder gives one rank's events (µs, as Kineto writes them), every rank alike; the
figures the tests expect are worked out by hand beside each trace:

- `moe`: a DeepEP-style MoE step: dispatch and combine kernels overlapping GEMMs.
- `mtia`: an MTIA-style step: `hccl:all_gather` calls whose device work is in
  `mtia_ccp_events`, not `kernel`.
- `fused`: a TransformerEngine userbuffers kernel (computes and communicates) beside an NCCL
  all-reduce and GEMMs.
- `lookalike`: kernels named like communication that match no family.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kineto_builder import (
    COMPUTE_TID,
    GPU_STREAM,
    annotation,
    collective_args,
    cpu_op,
    dist_head,
    kernel,
    launch,
    span,
    trace,
)

RANKS = 2
GPU = "NVIDIA H100 80GB HBM3"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
DISPATCH = "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*)"
COMBINE = "void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(T1*, float*, T1 const*)"
LAYOUT = "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*)"
USERBUFFERS = "userbuffers_fp16_sum_inplace_gpu_rr_rs<8>(int, int, int, int, int, void**, int)"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
LOOKALIKE_A2A = "void my_moe::alltoall_dispatch_kernel<4>(float*, float const*)"
LOOKALIKE_AG = "custom_allgather_v2"


def step(length_us: float = 1000) -> dict[str, Any]:
    return annotation("ProfilerStep#1", 0, length_us)


def launched(name: str, ts: float, dur: float, correlation: int) -> list[dict[str, Any]]:
    """A kernel and its launch on the training thread, 5 µs before it."""
    return [
        launch(correlation, ts - 5, COMPUTE_TID),
        kernel(name, ts, dur, {"correlation": correlation}),
    ]


def moe(rank: int) -> list[dict[str, Any]]:
    """C = [100, 300] ∪ [700, 900] = 400 µs; P = [0, 400] ∪ [500, 800] ∪ [950, 960] = 710 µs
    (the layout kernel is local work); C ∩ P = 200 + 100 = 300 µs: overlap 75%, exposed
    100 µs. Two AllToAll calls (DeepEP's dispatch and combine), of unknown size."""
    return [
        step(),
        kernel(GEMM, 0, 400),
        *launched(DISPATCH, 100, 200, 1),
        kernel(GEMM, 500, 300),
        *launched(COMBINE, 700, 200, 2),
        kernel(LAYOUT, 950, 10),
    ]


def mtia(rank: int) -> list[dict[str, Any]]:
    """Three all-gathers, each an `hccl:all_gather` call around a `record_param_comms` (1024
    floats in, 2048 out: S = 8192 B) and its launch, the device row in `mtia_ccp_events`.
    Device compute [0, 300] and [400, 700]; the all-gathers [250, 350], [650, 750] and
    [800, 900]: C = 300 µs, C ∩ P = 50 + 50 = 100 µs, exposed 200 µs."""
    events: list[dict[str, Any]] = [
        step(),
        device("mm_kernel", 0, 300),
        device("mm_kernel", 400, 300),
    ]
    args = collective_args("allgather", 1024, 2048, "Float", **{"Group size": RANKS})
    for correlation, start in enumerate((250, 650, 800), start=1):
        linked = {"correlation": correlation}
        events += [
            annotation("hccl:all_gather", start - 20, 15),
            cpu_op("record_param_comms", start - 18, 10, args=args),
            span("mtia_runtime", "mtiaLaunchKernel", start - 15, 1, COMPUTE_TID, args=linked),
            device("hccl::all_gather", start, 100, {"correlation": correlation}),
        ]
    return events


def device(name: str, ts: float, dur: float, args: Any = None) -> dict[str, Any]:
    """A device row as MTIA traces write it (category `mtia_ccp_events`)."""
    return span("mtia_ccp_events", name, ts, dur, GPU_STREAM, args=args)


def fused(rank: int) -> list[dict[str, Any]]:
    """GEMM [0, 400] with a userbuffers reduce-scatter [100, 300] inside it (fused: in neither
    union, 200 µs of `fused` GPU time); an NCCL all-reduce [500, 600] (8 MiB in args) and a
    GEMM [550, 650]: C = 100 µs, P = 500 µs, C ∩ P = 50 µs (overlap 50%)."""
    args = collective_args("allreduce", 2**22, 2**22, "BFloat16", **{"Group size": RANKS})
    return [
        step(),
        kernel(GEMM, 0, 400),
        kernel(USERBUFFERS, 100, 200),
        kernel(ALLREDUCE, 500, 100, args),
        kernel(GEMM, 550, 100),
    ]


def lookalike(rank: int) -> list[dict[str, Any]]:
    """Two kernels named like communication of no family (100 + 50 µs, counted as compute)
    beside a 300 µs GEMM: 150 of 450 µs of kernel time per rank."""
    return [
        step(),
        kernel(GEMM, 0, 300),
        kernel(LOOKALIKE_A2A, 400, 100),
        kernel(LOOKALIKE_AG, 600, 50),
    ]


BUILDERS: dict[str, Callable[[int], list[dict[str, Any]]]] = {
    "moe": moe,
    "mtia": mtia,
    "fused": fused,
    "lookalike": lookalike,
}


def write_job(folder: Path, build: Callable[[int], list[dict[str, Any]]]) -> Path:
    """One window of RANKS rank files built by `build`, in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(RANKS):
        head = dist_head(rank=rank, world_size=RANKS, gpu=GPU)
        (folder / f"rank{rank}_trace.json").write_bytes(trace(build(rank), head))
    return folder
