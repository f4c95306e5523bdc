"""A hand-made trace of CUDA graph launches and the kernels they replay, its figures worked
by hand (`collector.graphs`, `pipeline.graphs`): Kineto µs in, ns out."""

from __future__ import annotations

from pathlib import Path

from builders import write
from commscope.model.wire import GraphRow, GraphTally
from kineto_builder import dist_head, kernel, span, trace

GEMM = "ampere_sgemm_128x64_nn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
HOST = 11


def call(name: str, correlation: int, ts: float, dur: float) -> dict:
    return span("cuda_runtime", name, ts, dur, HOST, args={"correlation": correlation})


def graphed(name: str, ts: float, dur: float, correlation: int, graph: int | None) -> dict:
    args: dict[str, int] = {"correlation": correlation}
    if graph is not None:
        args["graph id"] = graph
        args["graph node id"] = 1000 + correlation
    return kernel(name, ts, dur, args)


# The worked trace (µs):
#   corr 1: cudaLaunchKernel at 10 for 3, GEMM at 15 for 4: a kernel launch, no graph's
#   corr 2: cudaGraphLaunch at 20 for 6 replays graph 7: GEMM 5, NCCL 10, elementwise 2
#   corr 3: the same graph's replay with its kernels first in the file, then
#           cudaGraphLaunch_v10000 at 60 for 4
#   corr 4: cudaGraphLaunch at 100 for 5 with no kernel in the trace: empty
#   corr 5: a GEMM of graph 9 at 120 for 8 whose launch is not in the trace: unlaunched
#   corr 6: cuGraphLaunch (driver) at 130 for 2, its kernel at 140 for 3 without a graph id
WORKED = [
    call("cudaLaunchKernel", 1, 10, 3),
    kernel(GEMM, 15, 4, {"correlation": 1, "graph id": 0, "graph node id": 0}),
    call("cudaGraphLaunch", 2, 20, 6),
    graphed(GEMM, 30, 5, 2, 7),
    graphed(NCCL, 36, 10, 2, 7),
    graphed(ELEMENTWISE, 47, 2, 2, 7),
    graphed(GEMM, 70, 5, 3, 7),
    graphed(NCCL, 76, 10, 3, 7),
    graphed(ELEMENTWISE, 87, 2, 3, 7),
    call("cudaGraphLaunch_v10000", 3, 60, 4),
    call("cudaGraphLaunch", 4, 100, 5),
    graphed(GEMM, 120, 8, 5, 9),
    span("cuda_driver", "cuGraphLaunch", 130, 2, HOST, args={"correlation": 6}),
    graphed(GEMM, 140, 3, 6, None),
]
WORKED_TALLY = GraphTally(
    launches=4,  # corr 2, 3, 4, 6
    call_ns=17_000,  # 6 + 4 + 5 + 2 µs
    empty=1,  # corr 4
    unlaunched=1,  # corr 5
    rows=[
        # graph 7: two replays of 3 kernels, (5 + 10 + 2) µs each; one NCCL kernel each
        GraphRow(7, launches=2, kernels=6, kernel_ns=34_000, comm_kernels=2, comm_ns=20_000),
        GraphRow(9, launches=0, kernels=1, kernel_ns=8_000),  # by its graph id alone
        GraphRow(None, launches=2, kernels=1, kernel_ns=3_000),  # corr 4 (empty) and corr 6
    ],
)

# Rank 1 of the worked job (µs): two graph launches whose replays the profiler did not record,
# and one kernel of a kernel launch.
SKIPPED = [
    call("cudaGraphLaunch", 2, 20, 6),
    call("cudaGraphLaunch", 3, 60, 4),
    call("cudaLaunchKernel", 1, 10, 3),
    kernel(GEMM, 15, 4, {"correlation": 1}),
]
SKIPPED_TALLY = GraphTally(launches=2, call_ns=10_000, empty=2, rows=[GraphRow(None, 2)])


def write_job(folder: Path) -> Path:
    """The worked two-rank job: rank 0 `WORKED`, rank 1 `SKIPPED` (its kernels unrecorded)."""
    write(folder / "rank0_trace.json", trace(WORKED, dist_head(0, 2)))
    write(folder / "rank1_trace.json", trace(SKIPPED, dist_head(1, 2)))
    return folder
