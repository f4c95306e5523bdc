"""TorchTitan configs (TOML and JSON) and the global-batch rule of the contract."""

from __future__ import annotations

import json

import pytest
from commscope.collector.errors import ConfigError
from commscope.pipeline.config import JobConfig, degrees, global_batch, parse_config, with_overrides

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


def test_toml_config() -> None:
    config = parse_config(LLAMA, "llama3_8b.toml")
    assert (config.model, config.flavor, config.local_batch_size, config.seq_len) == (
        "llama3",
        "8B",
        2,
        8192,
    )
    assert config.parallelism["data_parallel_shard_degree"] == -1


def test_shard_degree_minus_one_is_the_rest_of_the_world() -> None:
    config = parse_config(LLAMA, "llama3_8b.toml")
    # world 16 / (replicate 2 x tp 2 x pp 1 x cp 1) = 4; global batch = 2 x 2 x 4 = 16
    assert degrees(config, 16)["data_parallel_shard_degree"] == 4
    assert global_batch(config, 16) == (16, None)


def test_expert_parallelism_does_not_divide_the_world() -> None:
    config = JobConfig(
        local_batch_size=1,
        parallelism={"data_parallel_shard_degree": -1, "expert_parallel_degree": 4},
    )
    assert global_batch(config, 8) == (8, None)


def test_global_batch_size_wins_when_positive() -> None:
    assert global_batch(JobConfig(local_batch_size=2, global_batch_size=64), 8) == (64, None)
    assert global_batch(JobConfig(local_batch_size=2, global_batch_size=-1), 8) == (2, None)


def test_unresolvable_shard_degree_says_why() -> None:
    config = parse_config(LLAMA, "x.toml")
    batch, reason = global_batch(config, 6)  # 6 is not divisible by 2 x 2
    assert batch is None and "world size" in (reason or "")


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
    ],
)
def test_bad_configs_raise_one_clear_error(text: str, name: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
        parse_config(text, name)
