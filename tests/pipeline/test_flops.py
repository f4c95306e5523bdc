"""Peak FLOP/s, parameter counts, FLOPs per token and HFU factors, each worked out by hand."""

from __future__ import annotations

import pytest
from commscope.pipeline.flops import (
    LLAMA2,
    LLAMA3,
    Architecture,
    ModelShape,
    ffn_hidden_dim,
    flops_params,
    flops_per_token,
    hfu_factor,
    model_shape,
    peak_flops,
    total_params,
)
from hypothesis import given
from hypothesis import strategies as st

# ------------------------------------------------------------------ peak FLOP/s


@pytest.mark.parametrize(
    ("gpu", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", (989e12, "H100 table value (TorchTitan, dense BF16)")),
        ("NVIDIA H100 NVL", (835e12, "H100 NVL table value (TorchTitan, dense BF16)")),
        ("NVIDIA H100 PCIe", (756e12, "H100 PCIe table value (TorchTitan, dense BF16)")),
        ("NVIDIA A100-SXM4-80GB", (312e12, "A100 table value (TorchTitan, dense BF16)")),
        ("NVIDIA H200", (989e12, "H200 table value (TorchTitan, dense BF16)")),
        ("NVIDIA B200", (2.25e15, "B200 table value (TorchTitan, dense BF16)")),
        ("AMD Instinct MI300X", (1300e12, "MI300X table value (TorchTitan, dense BF16)")),
        ("AMD Instinct MI325X", (1300e12, "MI325X table value (TorchTitan, dense BF16)")),
        ("AMD Instinct MI250X", (191.5e12, "MI250X table value (TorchTitan, dense BF16)")),
        ("NVIDIA L40S", (362e12, "L40S table value (TorchTitan, dense BF16)")),
    ],
)
def test_peak_flops_reads_torchtitans_table_by_device_name(
    gpu: str, expected: tuple[float, str]
) -> None:
    assert peak_flops(gpu, None) == expected


def test_peak_flops_of_a_gpu_outside_the_table_is_unknown_not_an_a100() -> None:
    assert peak_flops("Tesla V100-SXM2-16GB", None) == (
        None,
        "no peak FLOPs for Tesla V100-SXM2-16GB in TorchTitan's table; give --peak-tflops",
    )


def test_peak_flops_of_intel_max_1550_is_unknown_because_torchtitan_reads_it_at_run_time() -> None:
    assert peak_flops("Intel(R) Data Center GPU Max 1550", None) == (
        None,
        "TorchTitan computes Intel(R) Data Center GPU Max 1550's peak from its compute units;"
        " give --peak-tflops",
    )


def test_peak_flops_without_device_properties_is_unknown() -> None:
    assert peak_flops(None, None) == (
        None,
        "GPU unknown (no deviceProperties); give --peak-tflops",
    )


def test_peak_flops_override_wins_over_the_table_and_over_an_unknown_gpu() -> None:
    assert peak_flops("NVIDIA H100 80GB HBM3", 500e12) == (500e12, "--peak-tflops")
    assert peak_flops(None, 123e12) == (123e12, "--peak-tflops")


def test_peak_flops_matches_names_case_insensitively() -> None:
    assert peak_flops("nvidia h100 pcie", None)[0] == 756e12


# ------------------------------------------------------------------ parameter counts


def test_ffn_hidden_dim_of_llama3_8b() -> None:
    # 4·4096 = 16384 → int(2·16384/3) = 10922 → int(1.3·10922) = int(14198.6) = 14198
    # → up to a multiple of 1024: 14·1024 = 14336
    assert ffn_hidden_dim(LLAMA3["8b"]) == 14336


def test_llama3_8b_parameter_count_layer_by_layer() -> None:
    # per layer: wq, wo 4096·4096 = 16,777,216 each; wk, wv 4096·(8·128) = 4,194,304 each
    #   → attention 41,943,040; w1, w2, w3 3·4096·14336 = 176,160,768; two norms 8,192
    #   → 218,112,000; ×32 layers = 6,979,584,000
    # final norm 4,096; output 4096·128256 = 525,336,576
    # N = 6,979,584,000 + 4,096 + 525,336,576 = 7,504,924,672
    # total = N + tok_embeddings 128256·4096 = 525,336,576 → 8,030,261,248 (Llama 3 8B: 8.03e9)
    assert flops_params(LLAMA3["8b"]) == 7_504_924_672
    assert total_params(LLAMA3["8b"]) == 8_030_261_248


def test_llama3_70b_parameter_count() -> None:
    # ffn: int(2·32768/3) = 21845 → int(1.3·21845) = 28398 → up to 4096: 28672
    # per layer: 2·8192² + 2·8192·1024 = 150,994,944; 3·8192·28672 = 704,643,072; norms 16,384
    #   → 855,654,400; ×80 = 68,452,352,000
    # N = 68,452,352,000 + 8,192 + 8192·128256 (1,050,673,152) = 69,503,033,344
    # total = N + 1,050,673,152 = 70,553,706,496 (Llama 3 70B: 70.55e9)
    assert flops_params(LLAMA3["70b"]) == 69_503_033_344
    assert total_params(LLAMA3["70b"]) == 70_553_706_496


def test_llama3_405b_parameter_count() -> None:
    # ffn: int(2·65536/3) = 43690 → int(1.2·43690) = 52427 or 52428 → up to 4096: 53248
    # per layer: 2·16384² + 2·16384·1024 = 570,425,344; 3·16384·53248 = 2,617,245,696;
    #   norms 32,768 → 3,187,703,808; ×126 = 401,650,679,808
    # N = 401,650,679,808 + 16,384 + 16384·128256 (2,101,346,304) = 403,752,042,496
    # total = N + 2,101,346,304 = 405,853,388,800 (Llama 3.1 405B: 405.85e9)
    assert flops_params(LLAMA3["405b"]) == 403_752_042_496
    assert total_params(LLAMA3["405b"]) == 405_853_388_800


def test_llama3_debugmodel_parameter_count() -> None:
    # ffn: int(2·1024/3) = 682 → up to 256: 768
    # per layer: 4·256² = 262,144 (16 kv heads = 16 heads); 3·256·768 = 589,824; norms 512
    #   → 852,480; ×6 = 5,114,880
    # N = 5,114,880 + 256 + 256·2048 (524,288) = 5,639,424
    assert flops_params(LLAMA3["debugmodel"]) == 5_639_424


def test_llama2_7b_and_13b_totals_are_the_published_sizes() -> None:
    # 7B: ffn int(2·16384/3) = 10922 → up to 256: 11008; per layer 4·4096² + 3·4096·11008 + 8192
    #   = 67,108,864 + 135,266,304 + 8,192 = 202,383,360; ×32 = 6,476,267,520
    #   + final norm 4,096 + output and embedding 2·32000·4096 = 262,144,000 → 6,738,415,616
    # 13B: ffn int(2·20480/3) = 13653 → 13824; per layer 4·5120² + 3·5120·13824 + 10240
    #   = 104,857,600 + 212,336,640 + 10,240 = 317,204,480; ×40 = 12,688,179,200
    #   + 5,120 + 2·32000·5120 = 327,680,000 → 13,015,864,320
    assert total_params(LLAMA2["7b"]) == 6_738_415_616
    assert total_params(LLAMA2["13b"]) == 13_015_864_320


def test_model_shape_of_llama3_8b() -> None:
    assert model_shape("llama3", "8B") == ModelShape(params=7_504_924_672, layers=32, dim=4096)


@pytest.mark.parametrize(
    ("model", "flavor"),
    [
        ("LLaMA3", "8b"),
        (" llama3 ", " 8B "),
        ("llama3_simple_fsdp", "8B"),
        ("simple_fsdp.llama3", "8B"),
        ("llama3", "8B_flex"),
        ("llama3", "8B_varlen"),
    ],
)
def test_model_shape_is_lenient_on_case_and_on_torchtitans_variants(
    model: str, flavor: str
) -> None:
    assert model_shape(model, flavor) == model_shape("llama3", "8B")


def test_model_shape_of_debugmodel_flex_attn_is_debugmodels() -> None:
    assert model_shape("llama3", "debugmodel_flex_attn") == ModelShape(5_639_424, 6, 256)


@pytest.mark.parametrize(
    ("model", "flavor"),
    [
        (None, "8B"),
        ("llama3", None),
        ("llama4", "17bx16e"),
        ("llama3", "3B"),
        ("llama2", "debugmodel"),
        ("deepseek_v3", "16B"),
    ],
)
def test_model_shape_outside_the_table_is_none(model: str | None, flavor: str | None) -> None:
    assert model_shape(model, flavor) is None


def test_llama2_and_llama3_70b_differ_only_in_the_vocabulary() -> None:
    # same layers; the output projection is 8192·(128256 − 32000) = 788,529,152 larger
    llama2 = model_shape("llama2", "70B")
    llama3 = model_shape("llama3", "70B")
    assert llama2 is not None
    assert llama3 is not None
    assert llama3.params - llama2.params == 788_529_152


def state_dict_numel(arch: Architecture) -> dict[str, int]:
    """An oracle: TorchTitan's state dict, one entry per parameter, numel by its shapes."""
    head = arch.dim // arch.n_heads
    kv = arch.n_heads if arch.n_kv_heads is None else arch.n_kv_heads
    hidden = ffn_hidden_dim(arch)
    layer = {
        "attention.wq.weight": (arch.n_heads * head, arch.dim),
        "attention.wk.weight": (kv * head, arch.dim),
        "attention.wv.weight": (kv * head, arch.dim),
        "attention.wo.weight": (arch.dim, arch.n_heads * head),
        "feed_forward.w1.weight": (hidden, arch.dim),
        "feed_forward.w2.weight": (arch.dim, hidden),
        "feed_forward.w3.weight": (hidden, arch.dim),
        "attention_norm.weight": (arch.dim, 1),
        "ffn_norm.weight": (arch.dim, 1),
    }
    numel = {
        f"layers.{i}.{name}": rows * cols
        for i in range(arch.n_layers)
        for name, (rows, cols) in layer.items()
    }
    numel["tok_embeddings.weight"] = arch.vocab_size * arch.dim
    numel["norm.weight"] = arch.dim
    numel["output.weight"] = arch.vocab_size * arch.dim
    return numel


architectures = st.builds(
    lambda heads, head_dim, kv_divisor, layers, vocab, multiple_of, multiplier: Architecture(
        dim=heads * head_dim,
        n_layers=layers,
        n_heads=heads,
        vocab_size=vocab,
        n_kv_heads=heads // kv_divisor if heads % kv_divisor == 0 else None,
        multiple_of=multiple_of,
        ffn_dim_multiplier=multiplier,
    ),
    heads=st.integers(1, 16),
    head_dim=st.integers(1, 64),
    kv_divisor=st.sampled_from([1, 2, 4, 8]),
    layers=st.integers(1, 8),
    vocab=st.integers(1, 5000),
    multiple_of=st.sampled_from([1, 32, 256, 1024]),
    multiplier=st.none() | st.sampled_from([1.0, 1.2, 1.3, 1.5]),
)


@given(architectures)
def test_parameter_count_agrees_with_a_state_dict_oracle(arch: Architecture) -> None:
    numel = state_dict_numel(arch)
    assert total_params(arch) == sum(numel.values())
    assert flops_params(arch) == sum(numel.values()) - numel["tok_embeddings.weight"]


# ------------------------------------------------------------------ FLOPs per token


def test_flops_per_token_of_llama3_8b_at_8192_tokens() -> None:
    # 6·7,504,924,672 = 45,029,548,032; 12·32·4096·8192 = 12,884,901,888
    # sum = 57,914,449,920
    assert flops_per_token(7_504_924_672, 32, 4096, 8192) == (
        57_914_449_920.0,
        "6·N + 12·L·H·Q·T (TorchTitan) with L=32, H·Q=4096, T=8192",
    )


def test_flops_per_token_without_seq_len_omits_the_attention_term() -> None:
    assert flops_per_token(1000, 32, 4096, None) == (
        6000.0,
        "6·N; attention term 12·L·H·Q·T omitted: T unknown",
    )


def test_flops_per_token_names_every_missing_input() -> None:
    assert flops_per_token(1000, None, None, None) == (
        6000.0,
        "6·N; attention term 12·L·H·Q·T omitted: L, H·Q, T unknown",
    )


sizes = st.integers(0, 10**12)
small = st.integers(1, 200_000)


@given(
    sizes,
    st.tuples(st.none() | small, st.none() | small, st.none() | small).filter(
        lambda inputs: None in inputs
    ),
)
def test_flops_per_token_is_6n_when_an_attention_input_is_missing(
    params: int, inputs: tuple[int | None, int | None, int | None]
) -> None:
    assert flops_per_token(params, *inputs)[0] == 6 * params


@given(sizes, small, small, small, small)
def test_flops_per_token_grows_with_seq_len(
    params: int, layers: int, dim: int, seq_len: int, more: int
) -> None:
    shorter, _ = flops_per_token(params, layers, dim, seq_len)
    longer, _ = flops_per_token(params, layers, dim, seq_len + more)
    assert longer > shorter


# ------------------------------------------------------------------ HFU factor


def test_hfu_factor_without_checkpointing_is_one() -> None:
    assert hfu_factor("none", None) == (1.0, "no activation checkpointing: nothing recomputed")


def test_hfu_factor_of_full_checkpointing_is_four_thirds() -> None:
    # (8N + 16·L·D·T)/(6N + 12·L·D·T) = 4/3 whatever N, L, D, T
    assert hfu_factor("full", None) == (
        4 / 3,
        "full activation checkpointing: (8N + 16·L·D·T)/(6N + 12·L·D·T) = 4/3",
    )


def test_hfu_factor_of_selective_every_second_layer() -> None:
    # half the layers rerun their forward, a third of their work: 1 + (1/2)·(1/3) = 7/6
    assert hfu_factor("selective", "2") == (
        7 / 6,
        "selective activation checkpointing of one layer in 2: 1 + (1/2)·(1/3)",
    )


def test_hfu_factor_of_selective_every_fourth_layer() -> None:
    # 1 + (1/4)·(1/3) = 13/12
    assert hfu_factor("Selective", " 4 ")[0] == 13 / 12


@pytest.mark.parametrize("option", ["0", "1"])
def test_hfu_factor_of_selective_every_layer_is_full(option: str) -> None:
    # TorchTitan: `if not ac_freq or count % ac_freq == 0` checkpoints every layer for 0 and 1
    assert hfu_factor("selective", option)[0] == 4 / 3


def test_hfu_factor_of_op_level_selective_is_unknown() -> None:
    assert hfu_factor("selective", "op") == (
        None,
        "op-level selective activation checkpointing: recomputed FLOPs not known",
    )


def test_hfu_factor_of_a_bad_selective_option_is_unknown() -> None:
    assert hfu_factor("selective", "every-other") == (
        None,
        "selective_ac_option 'every-other' is neither 'op' nor a layer interval",
    )


def test_hfu_factor_of_an_unknown_mode_is_unknown() -> None:
    assert hfu_factor("memory_budget", None) == (
        None,
        "activation checkpointing mode 'memory_budget': recomputed FLOPs unknown",
    )


def test_hfu_factor_without_the_section_is_torchtitans_default_selective_2() -> None:
    # TorchTitan's ActivationCheckpoint defaults: mode "selective", selective_ac_option "2"
    assert hfu_factor(None, None) == (
        7 / 6,
        "assumed: the config gives no [activation_checkpoint] mode, so TorchTitan's default:"
        " selective activation checkpointing (default) of one layer in 2: 1 + (1/2)·(1/3)",
    )


def test_hfu_factor_with_only_the_option_given_uses_the_default_mode() -> None:
    assert hfu_factor(None, "op")[0] is None
    assert hfu_factor(None, "3")[0] == 1 + 1 / 9
