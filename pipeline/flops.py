"""What MFU and HFU need: peak GPU FLOP/s, model FLOPs per token, the recomputation factor (pure).

Every number is TorchTitan's: the dense BF16 peak table of `get_peak_flops`
(torchtitan/tools/utils.py), the FLOPs formula 6·N + 12·L·H·Q·T of
`get_dense_model_nparams_and_flops` (torchtitan/models/utils.py), and the parameter count N of
its Llama flavors, computed from their architecture arguments exactly as its Transformer builds
its layers. Where TorchTitan would guess (an unknown GPU counts as an A100) this module says
None and why, so the report can name what is missing instead of printing a wrong figure.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final, NamedTuple

from commscope.model.fields import where

_PEAK_SOURCE: Final = "table value (TorchTitan, dense BF16)"
_ASK_PEAK: Final = "give --peak-tflops"

# Dense BF16 peak FLOP/s per GPU, TorchTitan's get_peak_flops in its order: the first row whose
# every part is a substring of the upper-cased GPU name wins (so H100 NVL and PCIe before H100).
_PEAK_FLOPS: Final = (
    (("A100",), "A100", 312e12),
    (("H100", "NVL"), "H100 NVL", 835e12),
    (("H100", "PCIE"), "H100 PCIe", 756e12),
    (("H100",), "H100", 989e12),
    (("H200",), "H200", 989e12),
    (("B200",), "B200", 2.25e15),
    (("MI300X",), "MI300X", 1300e12),
    (("MI325X",), "MI325X", 1300e12),
    (("MI250X",), "MI250X", 191.5e12),
    (("L40S",), "L40S", 362e12),
)
# TorchTitan reads this GPU's peak from its compute-unit count at run time: no name gives it.
_INTEL_MAX_1550: Final = "DATA CENTER GPU MAX 1550"


class Architecture(NamedTuple):
    """A Llama flavor's arguments as TorchTitan's ModelArgs / TransformerModelArgs hold them."""

    dim: int
    n_layers: int
    n_heads: int
    vocab_size: int
    n_kv_heads: int | None = None
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None


class ModelShape(NamedTuple):
    """What the FLOPs formula needs: N (every parameter but the token embedding), L, H·Q."""

    params: int
    layers: int
    dim: int


_LLAMA3_VOCAB: Final = 128256  # llama3's tiktoken tokenizer; TransformerModelArgs' default
_LLAMA2_VOCAB: Final = 32000  # Llama 2's SentencePiece tokenizer

# torchtitan/models/llama3/__init__.py (and torchtitan/models/llama/__init__.py before it).
# debugmodel as upstream defines it now; older TorchTitan versions used 2 or 8 layers and the
# test tokenizer's vocabulary.
LLAMA3: Final[Mapping[str, Architecture]] = {
    "debugmodel": Architecture(dim=256, n_layers=6, n_heads=16, vocab_size=2048),
    "8b": Architecture(4096, 32, 32, _LLAMA3_VOCAB, 8, multiple_of=1024, ffn_dim_multiplier=1.3),
    "70b": Architecture(8192, 80, 64, _LLAMA3_VOCAB, 8, multiple_of=4096, ffn_dim_multiplier=1.3),
    "405b": Architecture(
        16384, 126, 128, _LLAMA3_VOCAB, 8, multiple_of=4096, ffn_dim_multiplier=1.2
    ),
}
# llama2_configs of early TorchTitan (torchtitan/models/llama/__init__.py); its debugmodel
# changed between versions and is left out.
LLAMA2: Final[Mapping[str, Architecture]] = {
    "271m": Architecture(dim=1024, n_layers=16, n_heads=8, vocab_size=_LLAMA2_VOCAB),
    "1b": Architecture(dim=2048, n_layers=18, n_heads=16, vocab_size=_LLAMA2_VOCAB),
    "7b": Architecture(dim=4096, n_layers=32, n_heads=32, vocab_size=_LLAMA2_VOCAB),
    "13b": Architecture(dim=5120, n_layers=40, n_heads=40, vocab_size=_LLAMA2_VOCAB),
    "26b": Architecture(dim=5120, n_layers=80, n_heads=40, vocab_size=_LLAMA2_VOCAB),
    "70b": Architecture(8192, 80, 64, _LLAMA2_VOCAB, 8, multiple_of=4096, ffn_dim_multiplier=1.3),
}
# `[model] name` as TorchTitan configs and experiments write it, lower-cased.
_MODELS: Final[Mapping[str, Mapping[str, Architecture]]] = {
    "llama3": LLAMA3,
    "llama3_simple_fsdp": LLAMA3,
    "simple_fsdp.llama3": LLAMA3,
    "llama2": LLAMA2,
}
# Flavors that differ only in the attention kernel (8B_flex, debugmodel_varlen_attn, ...).
_ATTENTION_SUFFIXES: Final = ("_flex_attn", "_varlen_attn", "_flex", "_varlen")

_DEFAULT_AC_MODE: Final = "selective"  # TorchTitan's [activation_checkpoint] defaults
_DEFAULT_AC_OPTION: Final = "2"
_FULL_RECOMPUTE: Final = "(8N + 16·L·D·T)/(6N + 12·L·D·T) = 4/3"


def peak_flops(
    gpu_name: str | None, override: float | None, sources: Collection[str] = ()
) -> tuple[float | None, str]:
    """(dense BF16 peak FLOP/s of one GPU, where it came from or why it is unknown);
    `sources`: the input formats, whose field for the GPU name a missing one names."""
    if override is not None:
        return override, "--peak-tflops"
    if gpu_name is None:
        return None, f"GPU unknown ({where('gpu_name', sources)}); {_ASK_PEAK}"
    upper = gpu_name.upper()
    for parts, label, peak in _PEAK_FLOPS:
        if all(part in upper for part in parts):
            return peak, f"{label} {_PEAK_SOURCE}"
    if _INTEL_MAX_1550 in upper:
        return None, f"TorchTitan computes {gpu_name}'s peak from its compute units; {_ASK_PEAK}"
    return None, f"no peak FLOPs for {gpu_name} in TorchTitan's table; {_ASK_PEAK}"


def ffn_hidden_dim(arch: Architecture) -> int:
    """FeedForward's hidden size: 4·dim → ⌊2/3⌋ → ⌊× multiplier⌋ → up to a multiple_of."""
    hidden = int(2 * (4 * arch.dim) / 3)
    if arch.ffn_dim_multiplier is not None:
        hidden = int(arch.ffn_dim_multiplier * hidden)
    return arch.multiple_of * ((hidden + arch.multiple_of - 1) // arch.multiple_of)


def _layer_params(arch: Architecture) -> int:
    """One TransformerBlock: wq, wk, wv, wo; w1, w2, w3; attention_norm and ffn_norm."""
    head_dim = arch.dim // arch.n_heads
    kv_heads = arch.n_heads if arch.n_kv_heads is None else arch.n_kv_heads
    attention = 2 * arch.dim * arch.n_heads * head_dim + 2 * arch.dim * kv_heads * head_dim
    return attention + 3 * arch.dim * ffn_hidden_dim(arch) + 2 * arch.dim


def flops_params(arch: Architecture) -> int:
    """N: every parameter but tok_embeddings; the output projection counts."""
    return arch.n_layers * _layer_params(arch) + arch.dim + arch.dim * arch.vocab_size


def total_params(arch: Architecture) -> int:
    """Every parameter, the token embedding included."""
    return flops_params(arch) + arch.vocab_size * arch.dim


def _architecture(model: str | None, flavor: str | None) -> Architecture | None:
    """The arguments of a TorchTitan model flavor (case-insensitive), None when not in the table."""
    if model is None or flavor is None:
        return None
    flavors = _MODELS.get(model.strip().lower())
    return None if flavors is None else flavors.get(_base_flavor(flavor))


def _base_flavor(flavor: str) -> str:
    """The flavor lower-cased, without an attention-kernel suffix."""
    name = flavor.strip().lower()
    for suffix in _ATTENTION_SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def model_shape(model: str | None, flavor: str | None) -> ModelShape | None:
    """N, L and dim of a TorchTitan model flavor, None when the table does not hold it."""
    arch = _architecture(model, flavor)
    if arch is None:
        return None
    return ModelShape(params=flops_params(arch), layers=arch.n_layers, dim=arch.dim)


def flops_per_token(
    params: int, layers: int | None, dim: int | None, seq_len: int | None
) -> tuple[float, str]:
    """(training FLOPs per token, the formula used): TorchTitan's 6·N + 12·L·H·Q·T, H·Q = dim."""
    if layers is None or dim is None or seq_len is None:
        unknown = [name for name, v in (("L", layers), ("H·Q", dim), ("T", seq_len)) if v is None]
        return 6.0 * params, f"6·N; attention term 12·L·H·Q·T omitted: {', '.join(unknown)} unknown"
    flops = 6.0 * params + 12.0 * layers * dim * seq_len
    return flops, f"6·N + 12·L·H·Q·T (TorchTitan) with L={layers}, H·Q={dim}, T={seq_len}"


def hfu_factor(mode: str | None, selective_option: str | None) -> tuple[float | None, str]:
    """(hardware FLOPs / model FLOPs under TorchTitan's activation checkpointing, why).

    Recomputing a layer's forward costs a third of its forward+backward (2 of 6 per parameter,
    4 of 12 for attention), so checkpointing every layer gives 4/3. This counts the output
    projection as recomputed, which it is not: the true factor is slightly lower.
    """
    if mode is None:
        factor, why = hfu_factor(_DEFAULT_AC_MODE, selective_option)
        return factor, (
            f"assumed: the config gives no [activation_checkpoint] mode, so TorchTitan's "
            f"default: {why}"
        )
    kind = mode.strip().lower()
    if kind == "none":
        return 1.0, "no activation checkpointing: nothing recomputed"
    if kind == "full":
        return _every_kth_layer(1), f"full activation checkpointing: {_FULL_RECOMPUTE}"
    if kind == "selective":
        return _selective_factor(selective_option)
    return None, f"activation checkpointing mode {mode!r}: recomputed FLOPs unknown"


def _selective_factor(option: str | None) -> tuple[float | None, str]:
    """TorchTitan's selective_ac_option: "op", or k to checkpoint every k-th layer (0: all)."""
    text = _DEFAULT_AC_OPTION if option is None else option.strip().lower()
    default = " (default)" if option is None else ""
    if text == "op":
        return None, "op-level selective activation checkpointing: recomputed FLOPs not known"
    if not (text.isascii() and text.isdigit()):
        return None, f"selective_ac_option {option!r} is neither 'op' nor a layer interval"
    every = max(int(text), 1)
    return _every_kth_layer(every), (
        f"selective activation checkpointing{default} of one layer in {every}:"
        f" 1 + (1/{every})·(1/3)"
    )


def _every_kth_layer(every: int) -> float:
    """HFU factor when the forward of one layer in `every` is run twice."""
    return 1 + 1 / (3 * every)
