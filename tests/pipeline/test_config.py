"""TorchTitan configs in every layout TorchTitan has used, and the global-batch rule.

The layouts, as read from pytorch/torchtitan (see pipeline/config.py for the history):
2024 `[training] data_parallel_degree / tensor_parallel_degree` with `[experimental]
pipeline_parallel_degree` (train_configs/llama2_7b.toml of mid 2024); the HSDP split into
`[training] data_parallel_replicate_degree / data_parallel_shard_degree` (PR #518, Sep 2024) with
`[experimental] context_parallel_degree` (PR #592); `[parallelism]` (PR #980, Mar 2025) with
`local_batch_size`/`global_batch_size` (PR #1238, Jun 2025); the JSON dump of PR #1904.
"""

from __future__ import annotations

import json

import pytest
from commscope.exporters import text
from commscope.model.errors import ConfigError
from commscope.model.schema import FileStats, Step, TraceMeta
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.config import (
    DEFAULT_SOURCE,
    JobConfig,
    global_batch,
    parse_config,
    resolve,
    with_overrides,
)
from commscope.pipeline.report import Options, ParsedFile, build_report

LLAMA = """
[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 2
seq_len = 8192
steps = 1000

[parallelism]
data_parallel_replicate_degree = 2
data_parallel_shard_degree = -1
tensor_parallel_degree = 2
"""

# The layout of train_configs/llama2_7b.toml in mid 2024: FSDP degree as data_parallel_degree.
LAYOUT_2024 = """
[model]
name = "llama2"
flavor = "7B"

[training]
batch_size = 8
seq_len = 2048
steps = 1000
data_parallel_degree = -1
tensor_parallel_degree = 2
compile = false
dataset = "c4"

[experimental]
pipeline_parallel_degree = 2
"""

# The layout of train_configs/llama3_8b_cp_exp.toml (late 2024): HSDP split, CP experimental.
LAYOUT_HSDP_2024 = """
[training]
batch_size = 2
seq_len = 8192
data_parallel_replicate_degree = 2
data_parallel_shard_degree = 4
tensor_parallel_degree = 1

[experimental]
context_parallel_degree = 2
pipeline_parallel_degree = 1
"""


def json_dump() -> str:
    """What TorchTitan's saved config (PR #1904) looks like: every key, defaults included."""
    return json.dumps(
        {
            "job": {"config_file": "debug_model.toml", "dump_folder": "./outputs"},
            "model": {"name": "llama3", "flavor": "debugmodel", "hf_assets_path": "./assets",
                      "tokenizer_path": None, "converters": [], "print_after_conversion": False},
            "training": {"dataset": "c4_test", "dataset_path": None, "local_batch_size": 4,
                         "global_batch_size": -1, "seq_len": 2048, "max_norm": 1.0,
                         "steps": 10, "enable_cpu_offload": False,
                         "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32",
                         "gc_freq": 50, "gc_debug": False, "seed": None, "deterministic": False},
            "parallelism": {"data_parallel_replicate_degree": 1,
                            "data_parallel_shard_degree": -1, "fsdp_reshard_after_forward":
                            "default", "tensor_parallel_degree": 2,
                            "disable_loss_parallel": False, "enable_async_tensor_parallel": False,
                            "pipeline_parallel_degree": 1, "pipeline_parallel_split_points": [],
                            "module_fqns_per_model_part": None,
                            "pipeline_parallel_layers_per_stage": None,
                            "pipeline_parallel_schedule": "1F1B",
                            "pipeline_parallel_schedule_csv": "",
                            "pipeline_parallel_microbatch_size": 1, "context_parallel_degree": 1,
                            "context_parallel_rotate_method": "allgather",
                            "expert_parallel_degree": 1},
            "activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"},
            "experimental": {"custom_import": "", "custom_args_module": ""},
        }
    )  # fmt: skip


def test_toml_config() -> None:
    config = parse_config(LLAMA, "llama3_8b.toml")
    assert (config.model, config.flavor, config.local_batch_size, config.seq_len) == (
        "llama3",
        "8B",
        2,
        8192,
    )
    assert config.parallelism["data_parallel_shard_degree"] == -1
    assert config.warnings == []


def test_shard_degree_minus_one_is_the_rest_of_the_world() -> None:
    config = parse_config(LLAMA, "llama3_8b.toml")
    # world 16 / (replicate 2 x tp 2 x pp 1 x cp 1) = 4; global batch = 2 x 2 x 4 = 16
    assert resolve(config, 16).degrees["data_parallel_shard_degree"] == 4
    assert global_batch(config, 16) == (16, None)


def test_the_2024_layout_is_read() -> None:
    config = parse_config(LAYOUT_2024, "llama2_7b.toml")
    assert (config.local_batch_size, config.seq_len) == (8, 2048)
    found = resolve(config, 16)
    # data_parallel_degree -1 = 16 / (tp 2 x pp 2) = 4; replicate and cp take their defaults
    assert found.degrees == {
        "data_parallel_replicate_degree": 1,
        "data_parallel_shard_degree": 4,
        "tensor_parallel_degree": 2,
        "pipeline_parallel_degree": 2,
        "context_parallel_degree": 1,
        "expert_parallel_degree": 1,
    }
    assert found.sources["data_parallel_shard_degree"] == (
        "[training] data_parallel_degree -1: world 16 / 4"
    )
    assert found.sources["pipeline_parallel_degree"] == "[experimental] pipeline_parallel_degree"
    assert found.sources["data_parallel_replicate_degree"] == DEFAULT_SOURCE
    # global batch = 8 x replicate 1 x shard 4 = 32
    assert global_batch(config, 16) == (32, None)
    assert config.warnings == []


def test_the_late_2024_layout_with_hsdp_and_context_parallelism_is_read() -> None:
    config = parse_config(LAYOUT_HSDP_2024, "llama3_8b_cp.toml")
    found = resolve(config, 16)
    # replicate 2 x shard 4 x tp 1 x pp 1 x cp 2 = 16: the world; global = 2 x 2 x 4 = 16
    assert found.issue is None
    assert found.degrees["context_parallel_degree"] == 2
    assert global_batch(config, 16) == (16, None)


def test_a_shard_degree_in_training_is_no_longer_ignored() -> None:
    # The issue's case: [training] data_parallel_shard_degree = 2 on 2 ranks was read as 1, so
    # the global batch (and tokens/s) came out half: it is 4 x 1 x 2 = 8.
    config = parse_config("[training]\nbatch_size = 4\ndata_parallel_shard_degree = 2\n", "a.toml")
    assert global_batch(config, 2) == (8, None)


def test_the_json_dump_is_read_without_warnings() -> None:
    config = parse_config(json_dump(), "job_config.json")
    assert config.warnings == []
    # shard -1 = 8 / tp 2 = 4; global_batch_size -1 means local x dp = 4 x 1 x 4 = 16
    assert resolve(config, 8).degrees["data_parallel_shard_degree"] == 4
    assert global_batch(config, 8) == (16, None)
    assert (config.model, config.activation_checkpoint, config.selective_ac_option) == (
        "llama3",
        "selective",
        "op",
    )


def test_the_newer_layout_wins_and_a_disagreement_is_warned_about() -> None:
    both = "[training]\ntensor_parallel_degree = 2\n[parallelism]\ntensor_parallel_degree = 4\n"
    config = parse_config(both, "x.toml")
    assert config.parallelism["tensor_parallel_degree"] == 4
    assert config.warnings == [
        "config: [parallelism] tensor_parallel_degree = 4 and [training] tensor_parallel_degree"
        " = 2 disagree; [parallelism] tensor_parallel_degree (the newer layout) is used"
    ]
    same = "[training]\nbatch_size = 2\nlocal_batch_size = 2\n"
    assert parse_config(same, "y.toml").warnings == []


def test_unknown_keys_of_the_sections_read_are_named() -> None:
    typo = "[training]\nbatch_size = 2\ndata_paralel_shard_degree = 2\n[metrics]\nanything = 1\n"
    config = parse_config(typo, "x.toml")
    # [metrics] is not read: its keys are not warned about
    assert config.warnings == [
        "config: [training] keys commscope does not know, ignored: data_paralel_shard_degree"
    ]
    many = "[parallelism]\n" + "".join(f"k{i} = 1\n" for i in range(10))
    assert parse_config(many, "y.toml").warnings == [
        "config: [parallelism] keys commscope does not know, ignored: "
        "k0, k1, k2, k3, k4, k5, k6, k7 and 2 more"
    ]


def test_the_2026_token_budget_is_named_not_read() -> None:
    budget = (
        "[training]\nnum_tokens_per_microbatch_per_dp_rank = 16384\nmax_context_length = 8192\n"
    )
    config = parse_config(budget, "x.toml")
    assert config.local_batch_size is None
    assert config.warnings == [
        "config: [training] num_tokens_per_microbatch_per_dp_rank, [training] max_context_length:"
        " TorchTitan's token budget (2026) is not read; give --batch-size and --seq-len for"
        " tokens/s"
    ]


def test_degrees_that_do_not_multiply_to_the_world_are_refused() -> None:
    config = parse_config(LAYOUT_HSDP_2024, "x.toml")
    found = resolve(config, 8)  # the degrees make 16
    assert found.degrees == {}
    assert found.issue == (
        "the config's parallel degrees do not match the traces: dp_replicate 2 x dp_shard 4 x "
        "tp 1 x pp 1 x cp 2 = 16, but the traces show a world size of 8"
    )
    assert global_batch(config, 8) == (None, found.issue)


def test_an_unresolvable_shard_degree_says_why() -> None:
    config = parse_config(LLAMA, "x.toml")
    batch, reason = global_batch(config, 6)  # 6 is not divisible by 2 x 2
    assert batch is None
    assert reason == (
        "data_parallel_shard_degree = -1 is unresolved: world size 6 is not a multiple of "
        "dp_replicate 2 x tp 2 x pp 1 x cp 1 = 4"
    )


def test_a_degree_below_one_is_invalid() -> None:
    found = resolve(JobConfig(parallelism={"tensor_parallel_degree": 0}), 8)
    assert (found.degrees, found.issue) == (
        {},
        "invalid parallel degree: tensor_parallel_degree = 0",
    )


def test_expert_parallelism_does_not_divide_the_world() -> None:
    config = JobConfig(
        local_batch_size=1,
        parallelism={"data_parallel_shard_degree": -1, "expert_parallel_degree": 4},
    )
    assert global_batch(config, 8) == (8, None)


def test_global_batch_size_wins_when_positive() -> None:
    assert global_batch(JobConfig(local_batch_size=2, global_batch_size=64), 8) == (64, None)
    assert global_batch(JobConfig(local_batch_size=2, global_batch_size=-1), 8) == (16, None)


def test_a_global_batch_torchtitan_would_refuse_is_not_used() -> None:
    # local 3 x dp 8 = 24 does not divide 64: TorchTitan asserts it does
    batch, reason = global_batch(JobConfig(local_batch_size=3, global_batch_size=64), 8)
    assert batch is None and reason is not None and "not a multiple" in reason


def test_older_batch_size_key_and_json_dump() -> None:
    data = {"model": {"name": "llama3"}, "training": {"batch_size": 8, "seq_len": 2048}}
    config = parse_config(json.dumps(data), "config.json")
    assert (config.local_batch_size, config.seq_len) == (8, 2048)


def test_flags_override_the_file() -> None:
    config = with_overrides(parse_config(LLAMA, "x.toml"), batch_size=4, seq_len=None)
    assert (config.local_batch_size, config.seq_len) == (4, 8192)


@pytest.mark.parametrize(
    ("text", "name", "words"),
    [
        ("[training\nx=1", "bad.toml", "not valid TOML"),
        ("{", "bad.json", "not valid JSON"),
        ("[training]\nseq_len = 'long'", "x.toml", "seq_len must be an integer"),
        ("training = 3", "x.toml", "[training] must be a table"),
        ("[experimental]\npipeline_parallel_degree = 1.5", "x.toml", "must be an integer"),
    ],
)
def test_bad_configs_raise_one_clear_error(text: str, name: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_config(text, name)


def two_ranks() -> list[ParsedFile]:
    """Two ranks of a world of 2, one 1 ms step each."""
    files = []
    for rank in (0, 1):
        accumulator = Accumulator()
        accumulator.add_all([Step(1, 0, 1_000_000, 1)])
        meta = TraceMeta(rank=rank, world_size=2, gpu_name="NVIDIA H100 80GB HBM3")
        files.append(ParsedFile("w", f"rank{rank}.json", rank, meta, accumulator.result(),
                                FileStats()))  # fmt: skip
    return files


def test_a_mismatch_with_the_world_prints_no_tokens_per_second() -> None:
    config = parse_config(LAYOUT_HSDP_2024, "x.toml")  # degrees make 16; the traces show 2
    report = build_report(["w"], two_ranks(), Options(config=config, config_path="x.toml"))
    issue = resolve(config, 2).issue
    assert issue is not None
    assert report.throughput.tokens_per_second is None
    assert report.throughput.na_reason == issue
    assert report.config.parallelism == {} and report.config.parallelism_issue == issue
    assert report.config.warnings == [issue]
    lines = text.render(report).splitlines()
    assert f"Parallelism: n/a ({issue})" in lines
    assert "Warnings: 1" in lines and f"  ! {issue}" in lines
    assert f"Tokens per Second: n/a ({issue})" in lines


def test_defaults_are_marked_in_the_header() -> None:
    config = parse_config("[training]\nlocal_batch_size = 4\nseq_len = 10\n", "x.toml")
    report = build_report(["w"], two_ranks(), Options(config=config, config_path="x.toml"))
    # shard -1 (default) = 2 / 1 = 2: global batch 4 x 2 = 8, 8 x 10 tokens per 1 ms
    assert report.throughput.tokens_per_second == pytest.approx(80 / 1e-3)
    lines = text.render(report).splitlines()
    assert "  data_parallel_shard_degree: 2  (TorchTitan default -1: world 2 / 1)" in lines
    assert "  tensor_parallel_degree: 1  (TorchTitan default)" in lines


def test_the_pipeline_schedule_is_read_where_torchtitan_put_it() -> None:
    assert parse_config(json_dump(), "config.json").pp_schedule == "1F1B"
    older = '[experimental]\npipeline_parallel_schedule = "Interleaved1F1B"\n'
    assert parse_config(older, "old.toml").pp_schedule == "Interleaved1F1B"
    assert parse_config(LAYOUT_HSDP_2024, "hsdp.toml").pp_schedule is None
