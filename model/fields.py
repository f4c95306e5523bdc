"""Where each input format keeps what a report may find missing, in one table (pure).

A reason or a trace-health line names the input's own field: a Kineto trace's key
(`deviceProperties`), an Nsight Systems export's table (`TARGET_INFO_GPU`). `where` gives the
words of the formats among the inputs (Kineto's when none of them is listed).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

KINETO: Final = "kineto"
NSYS: Final = "nsys"
# Why an export's capture span, taken as its one step, gives no iteration time
CAPTURE_ONLY: Final = (
    "no step range in the Nsight Systems exports' NVTX_EVENTS: their capture span is one "
    "step for the diagnosis, not an iteration"
)

# what -> input format -> where that format keeps it (or why it never has it)
FIELDS: Final[dict[str, dict[str, str]]] = {
    "gpu_name": {
        KINETO: "no deviceProperties",
        NSYS: "no TARGET_INFO_GPU table in the Nsight Systems export",
    },
    "gpu_name_health": {
        KINETO: "Kineto's deviceProperties",
        NSYS: "an Nsight Systems export's TARGET_INFO_GPU",
    },
    "process_group": {
        KINETO: "a Process Group Name",
        NSYS: "an NCCL communicator (the 'NCCL communicator ID' of NCCL's NVTX payloads in "
        "NVTX_EVENTS)",
    },
    "pg_config": {
        KINETO: "pg_config (their groups' members)",
        NSYS: "their groups' members (an Nsight Systems export lists none)",
    },
    "seq": {
        KINETO: "Seq (matched by running index)",
        NSYS: "a sequence number (matched by running index: NCCL's NVTX payloads carry none)",
    },
    "launch": {
        KINETO: "the call that launched them",
        NSYS: "the call that launched them (no CUPTI_ACTIVITY_KIND_RUNTIME launch of their "
        "correlationId, or no NVTX_EVENTS range around it)",
    },
    "size": {
        KINETO: "args, record_param_comms or Input Dims",
        NSYS: "NCCL's NVTX payloads in NVTX_EVENTS: binaryData with `nsys export "
        "--include-blobs=true`, or jsonText",
    },
    "group_size": {
        KINETO: "no Group size, pg_config, shapes or world size",
        NSYS: "no communicator-init payload of NCCL in NVTX_EVENTS, no world size",
    },
    "base_time": {
        KINETO: "baseTimeNanoseconds, or epoch timestamps",
        NSYS: "TARGET_INFO_SESSION_START_TIME",
    },
    "steps": {KINETO: "ProfilerStep", NSYS: "NVTX step range"},
    "size_none": {
        KINETO: "neither args, record_param_comms nor Input Dims gave one",
        NSYS: "no NCCL NVTX payload in NVTX_EVENTS gave one",
    },
    "matching_key": {
        KINETO: "by Process Group Name + Seq when every call has them, else by running index",
        NSYS: "by NCCL communicator and running index: an Nsight Systems export has no Seq",
    },
    "graph_replay": {
        KINETO: "the PyTorch profiler did not record the graph's replay",
        NSYS: "Nsight Systems records a replay whole (CUPTI_ACTIVITY_KIND_GRAPH_TRACE) unless run "
        "with --cuda-graph-trace=node",
    },
    "memory": {
        KINETO: "[memory]",
        NSYS: "an Nsight Systems export's memory tables are not read",
    },
}


def where(what: str, sources: Collection[str], joiner: str = "; ") -> str:
    """The words for `what` of each format in `sources`, in the table's order, joined by
    `joiner` (Kineto's alone when `sources` holds none of the table's formats)."""
    words = FIELDS[what]
    found = [said for source, said in words.items() if source in sources]
    return joiner.join(found) or words[KINETO]
