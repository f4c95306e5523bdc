"""What a GPU compute kernel does, judged from its name alone (pure).

Sorts the kernels that do not communicate (`families`) into a "share of GPU time" breakdown:
matrix multiplies and convolutions, attention, elementwise work (maps, and data movement such
as copies and transposes), reductions and normalisations, and everything else. A Kineto kernel
name is often a long C++ signature, so the rules read the kernel's own name: what stands before
its first `<` or `(`, without the return type, split into lower-case words at `_`, `::`, digits
and camelCase humps, so that a short word such as `mha`, `conv` or `mm` counts only when it is
a word of its own. Template arguments are read in two cases only: when the own name is a generic
launcher (`cutlass::Kernel<...>`, `cutlass::device_kernel<...>`), and for the BLAS libraries'
parameter types, which mark a matrix multiply's helper kernels (`dot_kernel<cublasDotParams>`).
"""

from __future__ import annotations

import re
from typing import Final

from commscope.model.schema import KernelCategory

# A demangled kernel returns void, or a SFINAE `std::enable_if<..., void>::type`.
_RETURN_TYPE = re.compile(r"\s*(?:void\s+|std::enable_if<.*?>::type\s+)")
# Anonymous namespaces as Kineto (`(anonymous namespace)`) and Nsight (`<unnamed>`) write them.
_ANONYMOUS = re.compile(r"\(anonymous namespace\)|<unnamed>")
# CuTe DSL names every kernel `kernel_cutlass_kernel_<module><function>...`: not a CUTLASS GEMM.
_CUTE_DSL = "kernel_cutlass_kernel_"
_HEAD_END = re.compile(r"[<(]")
# An own name that says only "a kernel": its template arguments say what it runs.
_LAUNCHER = re.compile(r"(?:^|::|\s)(?:device_)?kernel\d*\s*$", re.IGNORECASE)
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
# Anywhere in the signature: cuBLAS(Lt), rocBLAS or hipBLAS(Lt) parameter types.
_BLAS_ARGS = re.compile(r"(?:cu|roc|hip)blas", re.IGNORECASE)

# Searched in the own name's words (lower case, one space between). First match wins.
_BEFORE_BLAS: Final[tuple[tuple[KernelCategory, str], ...]] = (
    # Communication, should the caller pass it: NCCL/RCCL, and collectives that are not
    # NCCL-named (PyTorch symmetric memory's `multimem_all_reduce_kernel`, vLLM's and
    # TensorRT-LLM's custom all-reduce).
    (
        "other",
        r"\b[nr]ccl\b|\ball ?(?:reduce|gather|to ?all)\b|\breduce ?scatter\b|\bmultimem\b"
        r"|\bcross device reduce\b",
    ),
    # TorchInductor's Triton names state the kernel's kind whatever fused ops they list
    # (`triton_poi_fused__scaled_dot_product_flash_attention_0` is a pointwise kernel).
    ("elementwise", r"^triton (?:poi|for)\b"),
    ("reduction", r"^triton (?:red|per)\b"),
    # Pointwise although named after attention: rotary embeddings, and vLLM's KV-cache write
    # (`reshape_and_cache_flash_kernel`), a copy into the layout flash attention reads.
    ("elementwise", r"\b(?:rotary|rope|reshape and cache)\b"),
    # Before gemm: fused attention is built from GEMMs (FMHA on CUTLASS, FlashAttention-3 in
    # `cutlass::device_kernel<flash::...>`, cuDNN SDPA) and is not counted as one. FlashInfer
    # is a whole library (norms, sampling...): its attention kernels say prefill or decode.
    (
        "attention",
        r"\b(?:flash|flash ?attn|flash ?attention|fmha\w*|mha|attn|attention|sdpa)\b"
        r"|\b(?:prefill|decode) with (?:paged |ragged )?kv\b",
    ),
    # Matrix multiplies, epilogues and split-K reductions included: cuBLAS(Lt) (`*gemm*`,
    # `*gemv*`, `nvjet_*`, `splitKreduce`), CUTLASS, Tensile `Cijk_*`, hipBLASLt, MAGMA,
    # TensorRT-LLM `bmm_*`, Triton templates; convolutions (implicit GEMM): cuDNN (`xmma`,
    # `scudnn`, fprop/dgrad/wgrad, winograd, its `cask` helpers), MIOpen, CK. FBGEMM is a
    # library of embedding kernels, not a GEMM.
    (
        "gemm",
        r"(?<!fb)gemm|gemv|\b(?:mm|bmm|addmm|baddbmm|mat ?mul|cutlass\w*|xmma|nvjet|cijk"
        r"|hip ?blas ?lt|magma\w*|triton tem|split k ?reduce|cask|[shdi]cudnn|winograd\w*"
        r"|conv|convolution|convolve|fprop|[dw]grad\w*)\b",
    ),
)
_AFTER_BLAS: Final[tuple[tuple[KernelCategory, str], ...]] = (
    # Neither a map nor a reduction: sorting and top-k (with their scan and histogram
    # passes), embedding lookups and their fused backward-and-update (FBGEMM's
    # `split_embedding_*`), MoE routing, random number generation.
    (
        "other",
        r"\b(?:\w*sort|top ?k|embedding|routing|distribution|philox|curand|bernoulli"
        r"|multinomial|rand\w*|normal|uniform)\b",
    ),
    # Reductions and normalisations: at::native `reduce_kernel`, norms (layer, RMS, group,
    # batch including cuDNN's `bn_fw`/`bn_bw`), softmax, losses, cub's device-wide
    # reductions and scans (a scan is a running reduction), pooling (a windowed reduction).
    (
        "reduction",
        r"reduc|norm\b|\bbn (?:fw|bw)\b|\bsoft ?max\b|\bmoments\b|\bgamma beta\b|\bwelford"
        r"|\b(?:sum|mean|argmax|argmin|amax|amin|nll|scan|cumsum|cumprod)\b|\bcross entropy\b"
        r"|\bdevice (?:compact|select)\b|\bpool(?:ing)?\b",
    ),
    # Maps and data movement: at::native's elementwise kernels, fills, copies, concatenation,
    # indexing, gather/scatter, transposes and layout changes (cuDNN `nchwToNhwc`, MIOpen),
    # permutes, casts, conversions and quantisation, dropout, activations, and optimizer steps
    # (`multi_tensor_apply_kernel` is a foreach map over the parameters).
    (
        "elementwise",
        r"element ?wise|\b(?:fill|(?:mem)?copy|memset|(?:con)?cat|index\w*|indices|gather"
        r"|scatter|transpose|permute|\w*dropout|\w*quant\w*|cast|convert\w*|gelu|silu|relu"
        r"|swiglu|geglu|sigmoid|tanh|activation|act and mul|adam\w*|sgd|lamb|adagrad"
        r"|multi tensor apply|foreach|nchw to nhwc|nhwc to nchw|tensor op|op (?:\d d )?tensor)\b",
    ),
)
_FIRST: Final = tuple((category, re.compile(pattern)) for category, pattern in _BEFORE_BLAS)
_THEN: Final = tuple((category, re.compile(pattern)) for category, pattern in _AFTER_BLAS)


def kernel_category(name: str) -> KernelCategory:
    """The family (one of `schema.KERNEL_CATEGORIES`) of the GPU kernel called `name`; `other`
    if none fits."""
    spoken = words(own_name(name))
    for category, pattern in _FIRST:
        if pattern.search(spoken):
            return category
    if _BLAS_ARGS.search(name):
        return "gemm"
    for category, pattern in _THEN:
        if pattern.search(spoken):
            return category
    return "other"


def own_name(name: str) -> str:
    """Before the first `<` or `(`, without the return type; a launcher keeps its arguments."""
    text = _ANONYMOUS.sub("anonymous", name)
    returns = _RETURN_TYPE.match(text)
    if returns:
        text = text[returns.end() :]
    text = text.removeprefix(_CUTE_DSL)
    own = _HEAD_END.split(text, maxsplit=1)[0]
    return text.split("(", 1)[0] if _LAUNCHER.search(own) else own


def words(text: str) -> str:
    """Lower-case words, one space between: `cunn_SoftMaxForward` -> `cunn soft max forward`."""
    return " ".join(_WORD.findall(text)).lower()
