"""The one table of GPU kernel and device event families that communicate (pure).

Each family names its kernels by patterns, says where the names come from (a public repository
path or document), and gives the collective type where the name says it (None: the name is
read as NCCL names its kernels, `classify.collective_type`). A family's role is `comm` (the
kernel communicates: in the communication union), `fused` (it computes and communicates, as
comm-GEMM overlap does: in neither union, reported apart) or `local` (named like communication
but local work: a compute kernel that trace health does not list). A pattern is searched, in
any case, in the kernel's own name (`kernels.own_name`: `void deep_ep::intranode::dispatch<8>(…)`
is read as `deep_ep::intranode::dispatch`); the first family that matches wins.
"""

from __future__ import annotations

import functools
import re
from typing import Final, Literal, NamedTuple

from commscope.collector.kernels import own_name, words
from commscope.model.schema import MAX_LABEL, CollectiveType

_Role = Literal["comm", "fused", "local"]


class Family(NamedTuple):
    name: str
    role: _Role
    names: tuple[tuple[str, CollectiveType | None], ...]  # (pattern, collective type)
    reference: str  # the public source of its names (a repository and path)


# The collective libraries whose kernels (and CPU-side calls, `nccl:…`) carry their name first.
LIBRARIES: Final = ("nccl", "rccl", "hccl", "xccl")

FAMILIES: Final[tuple[Family, ...]] = (
    Family(
        "DeepEP layout",
        "local",
        ((r"(?:^|::)deep_ep::layout::", None),),
        "deepseek-ai/DeepEP csrc/kernels/api.cuh (namespace layout: get_dispatch_layout)",
    ),
    Family(
        "FlashAttention split-KV combine",
        "local",
        ((r"(?:^|::)flash_fwd_\w*combine_kernel$", None),),
        "Dao-AILab/flash-attention csrc/flash_attn/src/flash_fwd_kernel.h "
        "(flash_fwd_splitkv_combine_kernel); deepseek-ai/FlashMLA (flash_fwd_mla_combine_kernel)",
    ),
    Family(
        "NCCL/RCCL",
        "comm",
        ((r"^(?:nccl|rccl)", None),),
        "NVIDIA/nccl src/device/generate.py (ncclDevKernel_<Coll>_<Op>_<Type>_<Algo>_<Proto>; "
        "before 2.5 nccl<Coll><Algo><Proto>Kernel_<op>_<type>); ROCm/rccl (the same names)",
    ),
    Family(
        "HCCL (Ascend, MTIA)",
        "comm",
        ((r"^hccl", None),),
        "Ascend/pytorch torch_npu ProcessGroupHCCL (hccl:<op> calls); MTIA device rows "
        "`hccl::<op>` (pytorch/kineto#1440, #1444)",
    ),
    Family(
        "XCCL (oneCCL)",
        "comm",
        ((r"^xccl", None),),
        "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupXCCL.cpp (xccl:<op> calls)",
    ),
    Family(
        "MSCCL",
        "comm",
        ((r"^mscclKernel_", None),),
        "Azure/msccl and ROCm/rccl src/include/msccl/msccl_kernel.h "
        "(mscclKernel_<redop>_<type>_<proto>_<fullOps>)",
    ),
    Family(
        "MSCCL++",
        "comm",
        (
            (r"(?:^|::)allreduce(?:\d+|AllPairs\w*)$", "AllReduce"),
            (r"(?:^|::)allgather\d+$", "AllGather"),
            (r"(?:^|::)broadcast\d+$", "Broadcast"),
            (r"(?:^|::)mscclpp::\w*executionKernel$|^executionKernel$", None),
        ),
        "microsoft/mscclpp apps/nccl/src/allreduce.hpp, allgather.hpp, broadcast.hpp "
        "(allreduce7, allgather6, ...); src/executor (executionKernel)",
    ),
    Family(
        "DeepEP",
        "comm",
        (
            (r"(?:^|::)deep_ep::\w+::barrier$", "Barrier"),
            (r"(?:^|::)deep_ep::\w+::\w*(?:dispatch|combine|notify)\w*$", "AllToAll"),
        ),
        "deepseek-ai/DeepEP csrc/kernels/api.cuh, intranode.cu, internode.cu, internode_ll.cu "
        "(intranode/internode/internode_ll ::notify_dispatch, dispatch, cached_notify_combine, "
        "combine; low-latency dispatch and combine)",
    ),
    Family(
        "TensorRT-LLM MoE all-to-all",
        "comm",
        ((r"(?:^|::)moeA2A\w*Kernel$", "AllToAll"),),
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/communicationKernels/moeAlltoAllKernels.cu",
    ),
    Family(
        "NVSHMEM",
        "comm",
        (
            (r"(?:^|::)(?:barrier|sync)(?:_all)?_on_stream_kernel\w*$", "Barrier"),
            (r"(?:^|::)(?:rdxn|reduce)_on_stream_kernel\w*$", "AllReduce"),
            (r"(?:^|::)(?:broadcast|bcast)_on_stream_kernel\w*$", "Broadcast"),
            (r"(?:^|::)alltoall_on_stream_kernel\w*$", "AllToAll"),
            (r"(?:^|::)fcollect_on_stream_kernel\w*$", "AllGather"),
            (r"^nvshmemi?x?_", None),
        ),
        "NVIDIA NVSHMEM src/host/coll/ (nvshmemi_call_<coll>_on_stream_kernel launching "
        "<coll>_on_stream_kernel), src/include/non_abi/device/coll/ (barrier_on_stream_kernel)",
    ),
    Family(
        "PyTorch symmetric memory",
        "comm",
        (
            (r"(?:^|::)multimem_all_gather\w*_kernel$", "AllGather"),
            (
                r"(?:^|::)(?:multimem_(?:one_shot_)?|one_shot_|two_shot_)all_reduce\w*_kernel$",
                "AllReduce",
            ),
        ),
        "pytorch/pytorch torch/csrc/distributed/c10d/symm_mem/CUDASymmetricMemoryOps.cu",
    ),
    Family(
        "vLLM custom all-reduce",
        "comm",
        ((r"(?:^|::)cross_device_reduce_[12]stage\w*$", "AllReduce"),),
        "vllm-project/vllm csrc/custom_all_reduce.cuh (cross_device_reduce_1stage, _2stage; "
        "also in sglang and flashinfer include/flashinfer/comm/vllm_custom_all_reduce.cuh)",
    ),
    Family(
        "TensorRT-LLM/FlashInfer custom all-reduce",
        "comm",
        (
            (r"(?:^|::)allreduce_fusion_kernel\w*$", "AllReduce"),
            (r"(?:^|::)(?:one|two)ShotAllReduceKernel$", "AllReduce"),
            (r"(?:^|::)(?:one|two)shot_allreduce_kernel$", "AllReduce"),
        ),
        "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/customAllReduceKernels.cu "
        "(oneShotAllReduceKernel, twoShotAllReduceKernel), communicationKernels/"
        "allReduceFusionKernels.cu (allreduce_fusion_kernel_oneshot_lamport, _twoshot_sync), "
        "mnnvlTwoShotAllreduceKernels.cu (twoshot_allreduce_kernel); flashinfer-ai/flashinfer "
        "include/flashinfer/comm/trtllm_allreduce_fusion.cuh, trtllm_mnnvl_allreduce.cuh",
    ),
    Family(
        "TransformerEngine userbuffers",
        "fused",
        ((r"^k?userbuffers_\w+$", None),),
        "NVIDIA/TransformerEngine transformer_engine/common/comm_gemm_overlap/userbuffers/"
        "userbuffers.cu (kuserbuffers_pushsend, userbuffers_fp16_sum_inplace_gpu_rr_rs, ...)",
    ),
)

# Trace categories of other accelerators' activity, and what their events are: `kernel` (device
# work: a kernel that communicates or computes by its name, as Kineto's `kernel`) or `call`
# (a host-side collective call: `xccl::…`, `hccl::…` name the collective of the kernels
# launched inside it, as PyTorch's `nccl:…` annotations do; they are not device time).
ACTIVITY_CATEGORIES: Final[dict[str, tuple[Literal["kernel", "call"], str]]] = {
    "mtia_ccp_events": (
        "kernel",
        "pytorch/kineto libkineto/include/ActivityType.h (MTIA_CCP_EVENTS: MTIA on-device "
        "events, later an alias of CONCURRENT_KERNEL); MTIA device rows `hccl::<op>` "
        "(pytorch/kineto#1440)",
    ),
    "collective_comm": (
        "call",
        "pytorch/kineto libkineto/include/ActivityType.h (COLLECTIVE_COMM); pytorch/kineto#1396 "
        "(oneCCL host-side collectives as COLLECTIVE_COMM named `xccl::…`), "
        "pytorch/pytorch#144490 (HCCL traces use it)",
    ),
}

# Words of a kernel's own name that sound like communication (`kernels.words`): a kernel so
# named that matches no family is listed in trace health.
_CONTROL: Final = re.compile(r"[\x00-\x1f\x7f]")
_LOOKALIKE: Final = re.compile(
    r"\b(?:all ?reduce|all ?gather\w*|reduce ?scatter|all ?to ?all\w*|all ?2 ?all|a ?2 ?a"
    r"|dispatch|combine|send ?recv|i?send|i?recv|p ?2 ?p|nvshmem\w*|multimem|broadcast|bcast"
    r"|collective|ccl|peer)\b"
)


class Found(NamedTuple):
    family: Family
    collective: CollectiveType | None


_COMPILED: Final = tuple(
    (family, re.compile(pattern, re.IGNORECASE), kind)
    for family in FAMILIES
    for pattern, kind in family.names
)


def family_of(name: str) -> Found | None:
    """The family of the kernel (or device event) called `name`, None when it has none."""
    return _family(own_name(name)[:_MAX_OWN])


_MAX_OWN: Final = 512  # an own name is short (a signature's head); a longer one is cut


@functools.lru_cache(maxsize=4096)  # a trace repeats its few kernel names
def _family(own: str) -> Found | None:
    for family, pattern, kind in _COMPILED:
        if pattern.search(own):
            return Found(family, kind)
    return None


def role(name: str) -> _Role | None:
    """`comm`, `fused`, `local`, or None for a kernel of no family (compute)."""
    found = family_of(name)
    return None if found is None else found.family.role


def looks_like_comm(name: str) -> bool:
    """Whether a kernel's own name sounds like communication (and it matches no family)."""
    return family_of(name) is None and bool(_LOOKALIKE.search(words(own_name(name))))


def shown_name(name: str) -> str | None:
    """A kernel's own name as a report shows it: printable, at most MAX_LABEL characters (None
    when nothing printable is left)."""
    text = _CONTROL.sub("?", own_name(name).strip() or name.strip())[:MAX_LABEL].strip()
    return text or None
