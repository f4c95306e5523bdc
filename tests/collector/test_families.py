"""The table of communicating kernel families: every entry sourced, and hand-made names per
family (real names, from the sources the table cites) sorted as the table says."""

from __future__ import annotations

import re

import pytest
from commscope.collector.classify import is_comm_kernel, kernel_collective
from commscope.collector.families import (
    ACTIVITY_CATEGORIES,
    FAMILIES,
    family_of,
    looks_like_comm,
    role,
    shown_name,
)
from commscope.model.schema import COLLECTIVE_TYPES, MAX_LABEL
from hypothesis import given
from hypothesis import strategies as st

# (kernel name as a trace writes it, family, collective type of the kernel)
CASES = [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "NCCL/RCCL",
     "AllReduce"),
    ("ncclAllReduceRingLLKernel_sum_f32", "NCCL/RCCL", "AllReduce"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     "NCCL/RCCL", "SendRecv"),
    ("rcclKernel_AllGather", "NCCL/RCCL", "AllGather"),
    ("hccl::all_gather", "HCCL (Ascend, MTIA)", "AllGather"),
    ("hcclKernel_ReduceScatter", "HCCL (Ascend, MTIA)", "ReduceScatter"),
    ("xcclAllGather", "XCCL (oneCCL)", "AllGather"),
    ("mscclKernel_Sum_bf16_LL128_0(ncclDevComm*, mscclAlgo*, mscclWork*)", "MSCCL", "Other"),
    ("void allreduce7<__nv_bfloat16>(__nv_bfloat16*, mscclpp::DeviceHandle<mscclpp::Mem>*)",
     "MSCCL++", "AllReduce"),
    ("void allgather6<true>(void*, mscclpp::DeviceHandle<mscclpp::MemoryChannel>*)", "MSCCL++",
     "AllGather"),
    ("void mscclpp::executionKernel<__half>(int, __half*, __half*)", "MSCCL++", "Other"),
    ("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)", "DeepEP",
     "AllToAll"),
    ("void deep_ep::intranode::combine<__nv_bfloat16, 8, 768, 4096>(T1*, float*)", "DeepEP",
     "AllToAll"),
    ("void deep_ep::intranode::notify_dispatch<8>(int const*, int*, int)", "DeepEP", "AllToAll"),
    ("void deep_ep::intranode::cached_notify_combine<8>(void**, int*, int)", "DeepEP",
     "AllToAll"),
    ("void deep_ep::internode::dispatch<false, 4, 8, 3>(int4*, float*)", "DeepEP", "AllToAll"),
    ("void deep_ep::internode::combine<4, true>(int4*, float*)", "DeepEP", "AllToAll"),
    ("void deep_ep::internode_ll::dispatch<true, 3, 10, 7168>(void*, float*, int*)", "DeepEP",
     "AllToAll"),
    ("void deep_ep::internode_ll::combine<3, 10, 7168>(void*, void*, int*)", "DeepEP",
     "AllToAll"),
    ("void deep_ep::internode_ll::dispatch_opt1_hidden6144<1, false>(void*, void*)", "DeepEP",
     "AllToAll"),
    ("void primus_turbo::deep_ep::intranode::notify_dispatch<8>(int const*)", "DeepEP",
     "AllToAll"),
    ("void deep_ep::intranode::barrier<8>(int**, int)", "DeepEP", "Barrier"),
    ("void tensorrt_llm::kernels::moeA2ADispatchKernel<8>(float*)",
     "TensorRT-LLM MoE all-to-all", "AllToAll"),
    ("barrier_on_stream_kernel_threadgroup(int, int, int, long*, long*)", "NVSHMEM", "Barrier"),
    ("void rdxn_on_stream_kernel<float, (rdxn_ops)0>(int, float*, float const*)", "NVSHMEM",
     "AllReduce"),
    ("void alltoall_on_stream_kernel<float>(int, float*, float const*, unsigned long)",
     "NVSHMEM", "AllToAll"),
    ("void fcollect_on_stream_kernel<float>(int, float*, float const*)", "NVSHMEM", "AllGather"),
    ("nvshmemi_proxy_progress_kernel", "NVSHMEM", "Other"),
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(x)",
     "PyTorch symmetric memory", "AllReduce"),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 16>(float**)",
     "PyTorch symmetric memory", "AllReduce"),
    ("void c10d::symmetric_memory::multimem_all_gather_kernel<16>(char*, char*)",
     "PyTorch symmetric memory", "AllGather"),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals)",
     "vLLM custom all-reduce", "AllReduce"),
    ("void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*, vllm::RankSignals)",
     "vLLM custom all-reduce", "AllReduce"),
    ("void sglang::cross_device_reduce_1stage<__half, 8>(sglang::RankData*)",
     "vLLM custom all-reduce", "AllReduce"),
    ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<"
     "(AllReduceFusionPattern)1, __nv_bfloat16, 8, true>(AllReduceFusionParams)",
     "TensorRT-LLM/FlashInfer custom all-reduce", "AllReduce"),
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_twoshot_sync<half, 4>"
     "(AllReduceFusionParams<half>)", "TensorRT-LLM/FlashInfer custom all-reduce", "AllReduce"),
    ("void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8>(AllReduceParams)",
     "TensorRT-LLM/FlashInfer custom all-reduce", "AllReduce"),
    ("void tensorrt_llm::kernels::twoShotAllReduceKernel<float, 4>(AllReduceParams)",
     "TensorRT-LLM/FlashInfer custom all-reduce", "AllReduce"),
    ("void twoshot_allreduce_kernel<8, __nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*)",
     "TensorRT-LLM/FlashInfer custom all-reduce", "AllReduce"),
    ("kuserbuffers_pushsendrecv(int*, int*, int4*, int4*, int, int, int)",
     "TransformerEngine userbuffers", "Other"),
    ("void userbuffers_fp16_sum_inplace_gpu_rr_rs<8>(int, int, int, int, int, void**, int)",
     "TransformerEngine userbuffers", "Other"),
    ("void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*)",
     "DeepEP layout", "Other"),
    ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128>, 4>(Params)",
     "FlashAttention split-KV combine", "Other"),
    ("flash_fwd_mla_combine_kernel", "FlashAttention split-KV combine", "Other"),
]  # fmt: skip
BY_NAME = {family.name: family for family in FAMILIES}


def test_every_family_says_where_its_names_come_from() -> None:
    for family in FAMILIES:
        assert family.role in ("comm", "fused", "local")
        assert family.names
        assert re.search(r"\w+/[\w.-]+|#\d+", family.reference), family.name  # a repo (path)
        for pattern, kind in family.names:
            re.compile(pattern)
            assert kind is None or kind in COLLECTIVE_TYPES


def test_family_names_are_unique() -> None:
    assert len(BY_NAME) == len(FAMILIES)


def test_every_family_has_a_hand_made_case() -> None:
    assert {family for _, family, _ in CASES} == set(BY_NAME)


@pytest.mark.parametrize(("name", "family", "collective"), CASES)
def test_a_real_name_is_sorted_into_its_family(name: str, family: str, collective: str) -> None:
    found = family_of(name)
    assert found is not None
    assert found.family.name == family
    assert role(name) == BY_NAME[family].role
    assert is_comm_kernel(name) == (BY_NAME[family].role == "comm")
    assert kernel_collective(name) == collective
    assert not looks_like_comm(name)


@pytest.mark.parametrize(
    "name",
    [
        "ampere_sgemm_128x64_nn",
        "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)",
        "my_ncclKernel_wrapper",
        "void at::native::index_elementwise_kernel<128, 4>(long, at::native::gpu_index_kernel)",
        "triton_poi_fused_all_gather_into_tensor_0",  # no family, but named like one
        "",
    ],
)
def test_other_kernels_have_no_family(name: str) -> None:
    assert family_of(name) is None
    assert role(name) is None


@pytest.mark.parametrize(
    "name",
    [
        "void my_moe::alltoall_dispatch_kernel<4>(float*)",
        "custom_allgather_v2",
        "myReduceScatterKernel",
        "void ep::combine_tokens<8>(float*)",
        "pplx::dispatchKernel<8>",
        "sendrecv_pipeline_kernel",
        "p2p_copy",
        "void ep::nvshmem_put_tokens<8>(float*)",
        "all2all_v",
        "triton_poi_fused_all_gather_into_tensor_0",
    ],
)
def test_names_that_sound_like_communication_are_look_alikes(name: str) -> None:
    assert looks_like_comm(name)


@pytest.mark.parametrize(
    "name",
    [
        "ampere_sgemm_128x64_nn",
        "void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
        "gemv2T_kernel_val<int, int, float, float, float, 128, 16, 4, 4, false, false>",
        "void deep_ep::layout::get_dispatch_layout<256, 32, 8>(long const*)",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    ],
)
def test_compute_kernels_and_family_kernels_are_no_look_alikes(name: str) -> None:
    assert not looks_like_comm(name)


def test_every_activity_category_says_where_it_comes_from() -> None:
    for category, (kind, source) in ACTIVITY_CATEGORIES.items():
        assert category == category.lower()
        assert kind in ("kernel", "call")
        assert re.search(r"\w+/[\w.-]+", source)


def test_a_shown_name_is_the_own_name_printable_and_bounded() -> None:
    assert shown_name("void my_moe::alltoall<4>(float*)") == "my_moe::alltoall"
    assert shown_name("bad\x00name\x7fx") == "bad?name?x"
    long = shown_name("x" * 5000)
    assert long is not None and len(long) == MAX_LABEL
    assert shown_name("   ") is None


WORDS = ["nccl", "deep_ep", "intranode", "dispatch", "combine", "all", "reduce", "gather",
         "kernel", "void ", "::", "_", "<8>", "(int*)", "gemm", "userbuffers", "cross_device",
         "1stage", "multimem", "xccl", "hccl", "layout", "flash_fwd", "send", "recv"]  # fmt: skip


@given(st.lists(st.sampled_from(WORDS), max_size=8).map("".join))
def test_family_and_look_alike_never_both(name: str) -> None:
    found = family_of(name)
    assert not (found is not None and looks_like_comm(name))
    assert is_comm_kernel(name) == (found is not None and found.family.role == "comm")
    if found is not None and found.collective is not None:
        assert kernel_collective(name) == found.collective
