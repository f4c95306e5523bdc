"""kernels.py: what a GPU compute kernel does, judged from its name.

Two tables state the rules: families of real kernel names from the traces in
../shared/traces/kineto (V100, A100, B200, MI300X), each a name prefix with the category a
performance engineer gives it, and well-known names from other public profiles (H100, B200,
ROCm, TorchInductor, FlashAttention, vLLM). The golden counts at the end were computed on the
real traces with the stdlib `json` module and reviewed by eye, name by name.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from functools import cache
from typing import NamedTuple

import pytest
from commscope.collector.classify import is_comm_kernel
from commscope.collector.kernels import kernel_category
from commscope.model.schema import KERNEL_CATEGORIES
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tools import require_shared, shared_traces

KINETO = shared_traces("kineto")
SETS = {
    "dlrm_8rank_v100": "dlrm_8rank_v100/*.pt.trace.json",
    "sampled_2rank": "sampled_2rank/*.json.gz",
    "a100": "single_rank/a100_nccl_args_rank0.json.gz",
    "b200": "single_rank/b200_allgather_args_rank0.json.gz",
    "mi300": "single_rank/mi300_rccl_generic_rank0.json.gz",
    "v100_216k": "single_rank/v100_allreduce_216k_events_rank1.json.gz",
}
# The 53.7 MB V100 file is a large input: its tests carry the `slow` mark.
SET_PARAMS = [
    pytest.param(key, marks=pytest.mark.slow) if key == "v100_216k" else key for key in SETS
]
PROPERTY = settings(deadline=None, max_examples=300, database=None)

# ------------------------------------------------------------------ real names, by family

# Every distinct compute (non-NCCL) kernel name in the real traces starts with one of these
# prefixes; the longest prefix a name starts with is its family.
REAL_FAMILIES = (
    # gemm: cuBLAS, cuBLASLt and the helpers they launch (gemv, dot, split-K, epilogue)
    ("volta_sgemm_", "gemm"),
    ("ampere_sgemm_", "gemm"),
    ("void gemmSN_", "gemm"),
    ("void gemmk1_kernel<", "gemm"),
    ("void gemvNSP_kernel<", "gemm"),
    ("std::enable_if<!(false), void>::type internal::gemvx::kernel<", "gemm"),
    ("void sgemm_largek_lds64<", "gemm"),
    ("void dot_kernel<float, 128, 0, cublasDotParams<", "gemm"),
    ("void reduce_1Block_kernel<float, 128, 7, cublasGemv", "gemm"),
    ("void scal_kernel<float, float, 1, false, 6, 5, 5, 3>(cublasTransposeParams", "gemm"),
    ("void splitKreduce_kernel<", "gemm"),
    ("void cublasLt::splitKreduce_kernel<", "gemm"),
    ("void epilogue::impl::globalKernel<", "gemm"),
    ("void magma_sgemmEx_kernel<", "gemm"),
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_", "gemm"),
    ("void cutlass::Kernel<cutlass_80_simt_sgemm_", "gemm"),
    ("nvjet_tst_", "gemm"),
    ("bmm_", "gemm"),
    # gemm: cuDNN convolutions and their helpers
    ("sm80_xmma_fprop_implicit_gemm_", "gemm"),
    ("sm80_xmma_dgrad_implicit_gemm_", "gemm"),
    ("sm80_xmma_wgrad_implicit_gemm_", "gemm"),
    ("void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688fprop_", "gemm"),
    ("void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_", "gemm"),
    ("void cutlass_cudnn_train::Kernel<cutlass_tensorop_s1688wgrad_", "gemm"),
    (
        "void cutlass_cudnn_train::Kernel<cutlass_cudnn_train::reduction::kernel::ReduceSplitK<",
        "gemm",
    ),
    ("_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolution", "gemm"),
    ("cudnn_infer_ampere_scudnn_", "gemm"),
    ("void cask_cudnn_infer::computeOffsetsKernel<", "gemm"),
    ("void cudnn::cnn::reduce_wgrad_nchw_helper<", "gemm"),
    # gemm: ROCm (Tensile, MIOpen implicit GEMM, Composable Kernel)
    ("Cijk_", "gemm"),
    ("igemm_fwd_gtcx3_", "gemm"),
    ("igemm_bwd_gtcx3_", "gemm"),
    ("igemm_wrw_gtcx3_", "gemm"),
    ("_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weight", "gemm"),
    ("_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_", "gemm"),
    ("_ZN2ck16tensor_operation6device12_GLOBAL__N_149kernel_grouped_conv_fwd_multiple", "gemm"),
    # attention
    ("fmhaSm100aKernel_", "attention"),
    # reduction: reductions, norms, softmax, pooling, cub scans
    ("void at::native::reduce_kernel<", "reduction"),
    ("void (anonymous namespace)::softmax_warp_forward<", "reduction"),
    ("void (anonymous namespace)::softmax_warp_backward<", "reduction"),
    ("void at::native::(anonymous namespace)::LayerNormForwardCUDAKernel<", "reduction"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<", "reduction"),
    ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<", "reduction"),
    ("void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel", "reduction"),
    ("void at::native::(anonymous namespace)::RowwiseMomentsCUDAKernel<", "reduction"),
    (
        "std::enable_if<(((8)>(0)))&&vllm::_typeConvert<c10::BFloat16>::exists, void>::type",
        "reduction",
    ),
    ("void vllm::rms_norm_kernel<", "reduction"),
    ("void at::native::batch_norm_backward_kernel<", "reduction"),
    ("void at::native::batch_norm_collect_statistics_kernel<", "reduction"),
    ("void at::native::batch_norm_transform_input_kernel<", "reduction"),
    ("void cudnn::bn_fw_tr_1C11_", "reduction"),
    ("void cudnn::bn_bw_1C11_", "reduction"),
    ("void at::native::(anonymous namespace)::max_pool_forward_nchw<", "reduction"),
    ("void at::native::(anonymous namespace)::max_pool_backward_nchw<", "reduction"),
    ("void cub::DeviceScanKernel<", "reduction"),
    ("void cub::DeviceScanInitKernel<", "reduction"),
    ("void at_cuda_detail::cub::DeviceScanKernel<", "reduction"),
    ("void at_cuda_detail::cub::DeviceScanInitKernel<", "reduction"),
    ("void cub::DeviceReduceByKeyKernel<", "reduction"),
    ("void cub::DeviceCompactInitKernel<", "reduction"),
    # elementwise: at::native maps, optimizer steps, copies, concatenation, indexing
    ("void at::native::vectorized_elementwise_kernel<", "elementwise"),
    ("void at::native::unrolled_elementwise_kernel<", "elementwise"),
    ("void at::native::elementwise_kernel<", "elementwise"),
    ("void at::native::elementwise_kernel_manual_unroll<", "elementwise"),
    (
        "void at::native::(anonymous namespace)::unrolled_elementwise_kernel_for_multi",
        "elementwise",
    ),
    ("void (anonymous namespace)::elementwise_kernel_with_index<", "elementwise"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<", "elementwise"),
    ("void at::native::(anonymous namespace)::CatArrayBatchedCopy", "elementwise"),
    ("void at::native::index_elementwise_kernel<", "elementwise"),
    ("void at::native::(anonymous namespace)::indexSelectLargeIndex<", "elementwise"),
    ("void (anonymous namespace)::indexing_backward_kernel<", "elementwise"),
    ("void at::native::_scatter_gather_elementwise_kernel<", "elementwise"),
    ("void at::native::vectorized_gather_kernel<", "elementwise"),
    ("_copy_page_indices_kernel", "elementwise"),
    ("triton_poi_fused_", "elementwise"),
    # elementwise: layout changes, permutes, quantisation, rotary embedding, KV-cache writes
    ("void cudnn::ops::nchwToNhwcKernel<", "elementwise"),
    ("void cudnn::ops::nhwcToNchwKernel<", "elementwise"),
    ("batched_transpose_", "elementwise"),
    ("transpose_CNHW2NCHW_", "elementwise"),
    ("transpose_NCHW2CNHW_", "elementwise"),
    ("SubTensorOpWith", "elementwise"),
    ("void fbgemm_gpu::permute_", "elementwise"),
    ("void permute_pooled_embs_kernel<", "elementwise"),
    ("void linearize_index_kernel<", "elementwise"),
    ("void bounds_check_indices_kernel<", "elementwise"),
    ("void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<", "elementwise"),
    ("void tensorrt_llm::kernels::quantize_with_block_size<", "elementwise"),
    ("void vllm::scaled_fp8_quant_kernel_strided<", "elementwise"),
    ("void vllm::reshape_and_cache_flash_kernel<", "elementwise"),
    ("void vllm::rotary_embedding_kernel<", "elementwise"),
    # other: embedding lookups and updates, sorting, MoE routing, custom
    ("split_embedding_backward_codegen_", "other"),
    ("void split_embedding_backward_codegen_", "other"),
    ("void split_embedding_codegen_", "other"),
    ("void dense_embedding_codegen_forward_", "other"),
    ("void cub::DeviceRadixSort", "other"),
    ("void at_cuda_detail::cub::DeviceRadixSort", "other"),
    ("void moe::dev::routing::", "other"),
    ("void moe::dev::finalize::", "other"),
    ("void fbgemm_gpu::(anonymous namespace)::_FP8rowwise_to_float_cuda_kernel<", "other"),
    ("void fbgemm_gpu::(anonymous namespace)::_get_FP8_qparam_cuda_kernel<", "other"),
    ("void fbgemm_gpu::_offsets_range_cuda_kernel<", "other"),
    ("void compute_cuda_kernel<", "other"),
)


FAMILY: dict[str, str] = dict(REAL_FAMILIES)


class Kernels(NamedTuple):
    """The kernel events of one trace set: launches and summed duration (µs) per name."""

    count: Counter[str]
    time_us: dict[str, float]


@cache
def kernels(key: str) -> Kernels:
    require_shared("kineto")
    count: Counter[str] = Counter()
    time_us: dict[str, float] = {}
    for path in sorted(KINETO.glob(SETS[key])):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as stream:
            events = json.load(stream)["traceEvents"]
        for event in events:
            if event.get("cat") == "kernel":
                count[event["name"]] += 1
                time_us[event["name"]] = time_us.get(event["name"], 0) + event["dur"]
    return Kernels(count, time_us)


def compute_names(key: str) -> list[str]:
    return sorted(name for name in kernels(key).count if not is_comm_kernel(name))


def family(name: str) -> str | None:
    """The longest prefix in REAL_FAMILIES that `name` starts with."""
    prefixes = [prefix for prefix in FAMILY if name.startswith(prefix)]
    return max(prefixes, key=len, default=None)


@pytest.mark.parametrize("key", SET_PARAMS)
def test_every_real_compute_kernel_is_in_a_family_and_sorted_as_it(key: str) -> None:
    names = compute_names(key)
    assert [name for name in names if family(name) is None] == []
    assert [
        (name, kernel_category(name))
        for name in names
        if kernel_category(name) != FAMILY.get(family(name) or "")
    ] == []


@pytest.mark.slow
def test_every_family_occurs_in_the_real_traces() -> None:
    seen = {family(name) for key in SETS for name in compute_names(key)}
    assert [prefix for prefix in FAMILY if prefix not in seen] == []


@pytest.mark.parametrize("key", SET_PARAMS)
def test_every_real_kernel_name_gets_a_category_silently(
    key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert {kernel_category(name) for name in kernels(key).count} <= set(KERNEL_CATEGORIES)
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("key", SET_PARAMS)
def test_the_real_nccl_and_rccl_kernels_are_not_compute(key: str) -> None:
    comm = {name for name in kernels(key).count if is_comm_kernel(name)}
    assert comm
    assert {kernel_category(name) for name in comm} == {"other"}


# ------------------------------------------------------------------ golden counts

# Compute kernel launches (no communicating family: `collector.families`), then distinct names,
# per category in each set: computed once with the stdlib `json` module, every name's category
# reviewed by eye (see REAL_FAMILIES).
GOLDEN = {
    "dlrm_8rank_v100": (
        {"elementwise": 1478, "gemm": 224, "other": 98, "reduction": 240},
        {"elementwise": 39, "gemm": 13, "other": 13, "reduction": 9},
    ),
    "sampled_2rank": (
        {"elementwise": 1038, "gemm": 772, "other": 82, "reduction": 346},
        {"elementwise": 85, "gemm": 66, "other": 19, "reduction": 23},
    ),
    "a100": (
        {"elementwise": 1725, "gemm": 615, "reduction": 339},
        {"elementwise": 17, "gemm": 36, "reduction": 15},
    ),
    "b200": (
        {"attention": 36, "elementwise": 260, "gemm": 181, "other": 144, "reduction": 73},
        {"attention": 2, "elementwise": 13, "gemm": 6, "other": 4, "reduction": 2},
    ),
    "mi300": (
        {"elementwise": 2241, "gemm": 325, "reduction": 412},
        {"elementwise": 23, "gemm": 24, "reduction": 7},
    ),
    "v100_216k": (
        {"elementwise": 11945, "gemm": 3535, "reduction": 1870},
        {"elementwise": 19, "gemm": 25, "reduction": 4},
    ),
}


@pytest.mark.parametrize("key", SET_PARAMS)
def test_per_category_kernel_counts_on_the_real_traces(key: str) -> None:
    launches: Counter[str] = Counter()
    names: Counter[str] = Counter()
    for name in compute_names(key):
        launches[kernel_category(name)] += kernels(key).count[name]
        names[kernel_category(name)] += 1
    assert (dict(launches), dict(names)) == GOLDEN[key]


@pytest.mark.slow
def test_v100_compute_time_is_all_classified_and_mostly_gemm() -> None:
    trace = kernels("v100_216k")
    time_us: Counter[str] = Counter()
    for name, total in trace.time_us.items():
        time_us["nccl" if is_comm_kernel(name) else kernel_category(name)] += int(total)
    # Integer µs durations in this file: exact sums. No compute time is left in "other",
    # and the classified compute time is even a majority of all kernel time, NCCL included.
    assert time_us == {
        "gemm": 414005,
        "elementwise": 169455,
        "reduction": 37056,
        "nccl": 357343,
    }
    compute_us = time_us.total() - time_us["nccl"]
    assert time_us["gemm"] > compute_us / 2
    assert compute_us > time_us["nccl"]


# ------------------------------------------------------------------ well-known names

# Names from other public profiles (Kineto, Nsight) and from the libraries' sources.
KNOWN = (
    # gemm: cuBLAS(Lt) from Volta to Hopper, CUTLASS 3, Tensile, cuDNN and MIOpen convolutions,
    # Triton templates
    ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "gemm"),
    ("nvjet_tst_64x8_64x16_4x1_v_bz_splitK_TNT", "gemm"),
    ("nvjet_sm90_tss_64x32_64x16_1x2_h_bz_splitK_TNT", "gemm"),
    (
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execu"
        "te_segment_k_off_kernel__5x_cublas",
        "gemm",
    ),
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", "gemm"),
    ("ampere_fp16_s16816gemm_fp16_256x128_ldg8_relu_f2f_stages_64x3_nn", "gemm"),
    ("volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", "gemm"),
    ("volta_h884gemm_64x128_ldg8_nn", "gemm"),
    ("turing_fp16_s1688gemm_fp16_128x128_ldg8_f2f_tn", "gemm"),
    (
        "cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_void_bf16_128x128x64_1x1x1_0_tn"
        "n_align8_warpspecialized_pingpong_epi_tma",
        "gemm",
    ),
    (
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, "
        "int, int, int>, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90"
        "TmaGmmaWarpSpecializedCooperative<4, cute::tuple<cute::C<2>, cute::C<1>, cute::C<1> "
        ">, cutlass::gemm::KernelTmaWarpSpecializedCooperative>, cute::tuple<cute::C<128>, "
        "cute::C<128>, cute::C<64> >, cutlass::bfloat16_t> > "
        ">(cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int> >::Params)",
        "gemm",
    ),
    ("Cijk_Alik_Bljk_SB_MT64x64x16_MI32x32x2x1_SN_K1", "gemm"),
    (
        "void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, "
        "false, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
        "float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, "
        "cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, "
        "float>, float, float)",
        "gemm",
    ),
    (
        "void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, "
        "false, false, true>(int, int, int, float const*, int, float*, float const*, "
        "kernel_conv_params, unsigned long long, int, float, float, int, float const*, float "
        "const*, bool, int, int)",
        "gemm",
    ),
    ("volta_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", "gemm"),
    (
        "void cudnn::cnn::conv2d_grouped_direct_kernel<false, true, false, false, 0, 0, int, "
        "float, float, float, float, float, float>(cudnn::cnn::GroupedDirectFpropParams, "
        "float const*, float const*, float*, float, float*, float const*, float const*, "
        "float)",
        "gemm",
    ),
    ("miopenSp3AsmConv_v21_1_3_gfx9_fp32_stride1", "gemm"),
    ("naive_conv_nonpacked_fwd_nchw_float_double_float", "gemm"),
    ("triton_tem_fused_addmm_0", "gemm"),
    ("matmul_kernel", "gemm"),
    # attention: FlashAttention 2 and 3, PyTorch's memory-efficient and cuDNN SDPA, vLLM,
    # FlashInfer, TensorRT, the Triton tutorial
    (
        "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, "
        "cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, "
        "false, true, false, false, true, true, false, false>(Flash_fwd_params)",
        "attention",
    ),
    (
        "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, "
        "128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 64, "
        "128, 8, cutlass::bfloat16_t> >, true, false, false, false, false, true, "
        "false>(Flash_bwd_params)",
        "attention",
    ),
    (
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, "
        "128, 128, 4, false, false, cutlass::half_t, pytorch_flash::Flash_kernel_traits<64, "
        "128, 128, 4, cutlass::half_t> >, false, false, false, false, false, false, false, "
        "false>(pytorch_flash::Flash_fwd_params)",
        "attention",
    ),
    (
        "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flas"
        "h::CollectiveMainloopFwdSm90<2, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
        "cute::tuple<cute::C<128>, cute::C<128>, cute::C<128> >, 128, cutlass::bfloat16_t, "
        "float, cutlass::arch::Sm90, false, false, false, false, false, false, false, false, "
        "true, true, false, false>, flash::CollectiveEpilogueFwd<cute::tuple<cute::C<128>, "
        "cute::C<128>, cute::C<128> >, cute::tuple<cute::C<1>, cute::C<1>, cute::C<1> >, "
        "cutlass::bfloat16_t, cutlass::arch::Sm90, 256, false, false, false, false>, "
        "flash::StaticPersistentTileScheduler<false> > > "
        ">(flash::FlashAttnFwdSm90<flash::CollectiveMainloopFwdSm90<2> >::Params)",
        "attention",
    ),
    (
        "fmha_cutlassF_bf16_aligned_64x128_rf_sm80(PyTorchMemEffAttention::AttentionKernel<cu"
        "tlass::bfloat16_t, cutlass::arch::Sm80, true, 64, 128, 128, true, true>::Params)",
        "attention",
    ),
    (
        "fmha_cutlassB_bf16_aligned_128x64_k128_sm80(PyTorchMemEffAttention::AttentionBackwar"
        "dKernel<cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, true, 128, 64, 128, "
        "false>::Params)",
        "attention",
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_6_128x64x64_4x1x1_cg"
        "a1x1x1_kernel0_0",
        "attention",
    ),
    (
        "cudnn_generated_fort_native_sdpa_sm80_flash_bprop_wmma_f16_knob_2_64x128x64_1x4x1_cg"
        "a1x1x1_kernel0_0",
        "attention",
    ),
    (
        "void vllm::paged_attention_v2_kernel<c10::BFloat16, c10::BFloat16, 128, 16, 128, "
        "(vllm::Fp8KVCacheDataType)0, false, 512>(float*, float*, c10::BFloat16*, "
        "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, int, float, int "
        "const*, int const*, int, float const*, int, int, int, float const*, float const*, "
        "int, int, int)",
        "attention",
    ),
    (
        "void flashinfer::BatchPrefillWithPagedKVCacheKernel<flashinfer::KernelTraits<(flashi"
        "nfer::MaskMode)1, 128, 1, 4, 8, 8, 1, 4, (flashinfer::PosEncodingMode)0, "
        "__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, int, "
        "flashinfer::DefaultAttention<false, false, false, false> >, "
        "flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, "
        "int> >(flashinfer::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, "
        "__nv_bfloat16, int>)",
        "attention",
    ),
    ("fused_multihead_attention_v2_fp16_128_64_kernel_sm80", "attention"),
    ("_attn_fwd", "attention"),
    # reduction: softmax (Kineto and Nsight spellings), norms, argmax, losses, scans, pooling
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
        "at::native::(anonymous namespace)::SoftMaxForwardEpilogue>(float*, float const*, "
        "int)",
        "reduction",
    ),
    (
        "void at::native::<unnamed>::cunn_SoftMaxForward<(int)4, float, float, float, "
        "at::native::<unnamed>::SoftMaxForwardEpilogue>(T4 *, const T2 *, int)",
        "reduction",
    ),
    (
        "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float, float, "
        "float, at::native::(anonymous namespace)::SoftMaxBackwardEpilogue>(float*, float "
        "const*, float const*, long)",
        "reduction",
    ),
    (
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, "
        "float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 "
        "const*, float*, float*, c10::BFloat16*)",
        "reduction",
    ),
    (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, "
        "at::native::ArgMaxOps<float>, unsigned int, long, 4> >(at::native::ReduceOp<float, "
        "at::native::ArgMaxOps<float>, unsigned int, long, 4>)",
        "reduction",
    ),
    (
        "void at::native::(anonymous "
        "namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, float, long>(float*, "
        "float*, float const*, long const*, float const*, bool, long, long, long, long)",
        "reduction",
    ),
    (
        "void at::native::tensor_kernel_scan_innermost_dim<float, std::plus<float> >(float*, "
        "float const*, unsigned int, unsigned int, unsigned int, float, std::plus<float>)",
        "reduction",
    ),
    (
        "void at::native::(anonymous namespace)::avg_pool2d_out_cuda_frame<float, "
        "float>(int, float const*, long, long, long, long, long, long, int, int, int, int, "
        "int, int, float*, int, bool, bool)",
        "reduction",
    ),
    (
        "void cub::DeviceReduceSingleTileKernel<cub::DeviceReducePolicy<float, float, int, "
        "cub::Sum>::Policy600, float*, float*, int, cub::Sum, float>(float*, float*, int, "
        "cub::Sum, float)",
        "reduction",
    ),
    (
        "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(__nv_bfloat16*, "
        "__nv_bfloat16*, __nv_bfloat16*, unsigned int, unsigned int, unsigned int, float, "
        "float)",
        "reduction",
    ),
    ("MIOpenBatchNormFwdTrainSpatial", "reduction"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0", "reduction"),
    ("triton_per_fused__softmax_0", "reduction"),
    ("triton_per_fused_native_layer_norm_0", "reduction"),
    # elementwise: maps, optimizer steps, dropout, activations, KV-cache writes, ROCm fills
    (
        "void at::native::vectorized_elementwise_kernel<4, "
        "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
        "const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, "
        "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, "
        "at::native::GeluType)::{lambda()#2}::operator()() const::{lambda()#2}::operator()() "
        "const::{lambda(float)#1}, at::detail::Array<char*, 2>)",
        "elementwise",
    ),
    (
        "void at::native::(anonymous "
        "namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
        "namespace)::TensorListMetadata<4>, at::native::(anonymous "
        "namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>, "
        "float*, float, float, float, float, float, bool, float*, "
        "float*>(at::native::(anonymous namespace)::TensorListMetadata<4>, "
        "at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
        "(at::native::ADAM_MODE)1, false>, float*, float, float, float, float, float, bool, "
        "float*, float*)",
        "elementwise",
    ),
    (
        "void multi_tensor_apply_kernel<TensorListMetadata<4>, AdamFunctor<float, float, "
        "float>, float, float, float, float, float, float, adamMode_t, float>(long, int "
        "volatile*, TensorListMetadata<4>&, AdamFunctor<float, float, float>, float, float, "
        "float, float, float, float, adamMode_t, float)",
        "elementwise",
    ),
    (
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<c10::BFloat16, "
        "float, unsigned int, 1, 4, bool>(at::cuda::detail::TensorInfo<c10::BFloat16 const, "
        "unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, "
        "at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, "
        "at::PhiloxCudaState)",
        "elementwise",
    ),
    (
        "void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, "
        "(bool)1>(T1 *, const T1 *, int)",
        "elementwise",
    ),
    (
        "void vllm::reshape_and_cache_kernel<__nv_bfloat16, __nv_bfloat16, "
        "(vllm::Fp8KVCacheDataType)0>(__nv_bfloat16 const*, __nv_bfloat16 const*, "
        "__nv_bfloat16*, __nv_bfloat16*, long const*, int, int, int, int, int, int, float "
        "const*, float const*)",
        "elementwise",
    ),
    (
        "void at::native::(anonymous namespace)::indexSelectSmallIndex<float, long, unsigned "
        "int, 2, 2, -2>(at::cuda::detail::TensorInfo<float, unsigned int>, "
        "at::cuda::detail::TensorInfo<float const, unsigned int>, "
        "at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, "
        "long)",
        "elementwise",
    ),
    ("__amd_rocclr_fillBufferAligned", "elementwise"),
    ("__amd_rocclr_copyBuffer", "elementwise"),
    ("triton_poi_fused_add_mul_0", "elementwise"),
    # other: random numbers, top-k and sorting, embeddings, sampling, communication
    (
        "void at::native::(anonymous "
        "namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
        "at::native::templates::cuda::uniform_and_transform<...>::{lambda(int, "
        "float)#1}>(long, at::PhiloxCudaState, ...)",
        "other",
    ),
    (
        "void at::native::(anonymous namespace)::gatherTopK<float, unsigned int, 2, "
        "false>(at::cuda::detail::TensorInfo<float const, unsigned int>, unsigned int, "
        "unsigned int, bool, unsigned int, unsigned int, at::cuda::detail::TensorInfo<float, "
        "unsigned int>, unsigned int, at::cuda::detail::TensorInfo<long, unsigned int>, "
        "unsigned int, float*)",
        "other",
    ),
    (
        "void at::native::bitonicSortKVInPlace<2, -1, 16, 16, float, long, "
        "at::native::LTOp<float, true>, unsigned int>(at::cuda::detail::TensorInfo<float, "
        "unsigned int>, unsigned int, unsigned int, unsigned int, unsigned int, "
        "at::cuda::detail::TensorInfo<long, unsigned int>, unsigned int, "
        "at::native::LTOp<float, true>)",
        "other",
    ),
    (
        "void at::native::(anonymous namespace)::embedding_backward_feature_kernel<float, "
        "float, long>(long const*, float const*, float*, int, long, int)",
        "other",
    ),
    (
        "void at::native::(anonymous "
        "namespace)::EmbeddingBag_updateOutputKernel_sum_mean<float, long>(long const*, long "
        "const*, float const*, float*, long*, long, long, long, long, long, long, long, "
        "float const*, long, long)",
        "other",
    ),
    (
        "void flashinfer::sampling::TopKTopPSamplingFromProbKernel<1024u, "
        "(cub::BlockScanAlgorithm)0, (cub::BlockReduceAlgorithm)2, 4u, false, float, "
        "int>(float*, int*, int*, float*, int*, float*, unsigned int, unsigned int, unsigned "
        "long, unsigned long)",
        "other",
    ),
    (
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, "
        "vllm::RankSignals, vllm::Signal*, __nv_bfloat16*, int, int)",
        "other",
    ),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "other"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "other"),
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "other"),
)


@pytest.mark.parametrize(("name", "expected"), KNOWN, ids=[name[:48] for name, _ in KNOWN])
def test_well_known_kernel_names(name: str, expected: str) -> None:
    assert kernel_category(name) == expected


# ------------------------------------------------------------------ how names are read


def test_a_generic_launcher_is_judged_by_what_it_runs() -> None:
    flash3 = "void cutlass::device_kernel<flash::FlashAttnFwdSm90<2> >(flash::Params)"
    assert kernel_category(flash3) == "attention"
    gemm = (
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x1_tn>(int)"
    )
    assert kernel_category(gemm) == "gemm"
    # A CUTLASS launcher runs a matrix multiply's parts, its split-K reduction included.
    split_k = "void cutlass::Kernel<cutlass::reduction::kernel::ReduceSplitK<4> >(int)"
    assert kernel_category(split_k) == "gemm"


def test_template_arguments_of_a_named_kernel_are_not_read() -> None:
    reduce = "void at::native::reduce_kernel<4, at::native::flash_attention_gemm_copy<float> >(int)"
    assert kernel_category(reduce) == "reduction"
    copy = "void at::native::(anonymous namespace)::CatArrayBatchedCopy<cutlass::gemm<4> >(int)"
    assert kernel_category(copy) == "elementwise"


def test_blas_parameter_types_make_a_helper_part_of_its_matrix_multiply() -> None:
    assert kernel_category("void reduce_1Block_kernel<float, cublasGemvParams<float> >(int)") == (
        "gemm"
    )
    assert kernel_category("void reduce_1Block_kernel<float, Params<float> >(int)") == "reduction"


def test_the_return_type_is_not_the_name() -> None:
    assert kernel_category("std::enable_if<(8)>(0), void>::type vllm::rms_norm_kernel<8>(int)") == (
        "reduction"
    )
    assert kernel_category("std::enable_if<true, void>::type vllm::silu_kernel<8>(int)") == (
        "elementwise"
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("void ohmhash_kernel<int>(int*)", "other"),  # not multi-head attention
        ("void convert_fp16_to_fp32_kernel(int)", "elementwise"),  # not a convolution
        ("void fbgemm_gpu::jagged_dense_elementwise_add_kernel<float>(int)", "elementwise"),
        ("void permute_pooled_embs_kernel<float>(float const*)", "elementwise"),  # not pooling
        ("void at::native::normal_kernel<float>(int)", "other"),  # random numbers, not a norm
        ("void flashinfer::activation::act_and_mul_kernel<float>(int)", "elementwise"),
    ],
)
def test_short_words_count_only_as_words_of_their_own(name: str, expected: str) -> None:
    assert kernel_category(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("triton_poi_fused__scaled_dot_product_flash_attention_clone_0", "elementwise"),
        ("triton_red_fused_addmm_sum_0", "reduction"),
        ("triton_per_fused__scaled_dot_product_efficient_attention_0", "reduction"),
        ("triton_tem_fused_addmm_relu_0", "gemm"),
        ("triton_tem_fused_flex_attention_0", "attention"),
    ],
)
def test_a_triton_name_states_its_kind_whatever_ops_it_fuses(name: str, expected: str) -> None:
    assert kernel_category(name) == expected


def test_the_cute_dsl_prefix_is_not_a_cutlass_gemm() -> None:
    assert kernel_category("kernel_cutlass_kernel_flashinfernormkernelsfused_add_rmsnorm") == (
        "reduction"
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("volta_sgemm_128x64_nn", "gemm"),
        ("flash_fwd_kernel", "attention"),
        ("triton_red_fused_sum_0", "reduction"),
        ("layer_norm_kernel", "reduction"),
        ("vectorized_elementwise_kernel", "elementwise"),
        ("batched_transpose_16x32_half", "elementwise"),
        ("radix_sort_kernel", "other"),
    ],
)
def test_letter_case_does_not_matter(name: str, expected: str) -> None:
    assert {
        kernel_category(name),
        kernel_category(name.upper()),
        kernel_category(name.title()),
    } == {expected}


# ------------------------------------------------------------------ properties

CPP = st.text(alphabet=st.sampled_from("<>():,*&_ ~#{}[]aAbcdgkmnrstxZ019"), max_size=80)
PLAIN_NAMES = (
    "volta_sgemm_128x64_nn",
    "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext",
    "batched_transpose_16x32_half",
    "triton_red_fused_sum_0",
    "SubTensorOpWithScalar1d",
    "cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1",
    "_copy_page_indices_kernel",
    "compute_cuda_kernel",
    "at::native::reduce_kernel",
)


@PROPERTY
@given(st.text() | CPP)
def test_any_text_gets_a_category(name: str) -> None:
    assert kernel_category(name) in KERNEL_CATEGORIES


@PROPERTY
@given(st.sampled_from(PLAIN_NAMES), st.text() | CPP)
def test_a_named_kernel_keeps_its_category_whatever_its_template_arguments(
    name: str, arguments: str
) -> None:
    assume("blas" not in arguments.lower())
    signature = f"void {name}<{arguments}>(int)"
    assert kernel_category(signature) == kernel_category(name)
