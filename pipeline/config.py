"""TorchTitan job configs: TOML or the JSON newer TorchTitan dumps (pure: parses text).

Reads `[model] name, flavor`, `[training] local_batch_size` (older `batch_size`),
`global_batch_size`, `seq_len`, `steps`, `[parallelism]` degrees and `[activation_checkpoint]
mode, selective_ac_option` (for HFU); resolves the global batch as the contract says
(`data_parallel_shard_degree = -1` is the rest of the world).
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Mapping
from typing import Any, Final

import msgspec
from commscope.collector.errors import ConfigError

DEGREES: Final = (
    "data_parallel_replicate_degree",
    "data_parallel_shard_degree",
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "context_parallel_degree",
    "expert_parallel_degree",
)


class JobConfig(msgspec.Struct, frozen=True, kw_only=True):
    model: str | None = None
    flavor: str | None = None
    local_batch_size: int | None = None
    global_batch_size: int | None = None
    seq_len: int | None = None
    steps: int | None = None
    parallelism: dict[str, int] = {}
    activation_checkpoint: str | None = None  # "none" | "selective" | "full"
    selective_ac_option: str | None = None  # "op", or k: every k-th layer


def parse_config(text: str, name: str) -> JobConfig:
    """A JobConfig from the text of `name` (TOML unless it ends in .json)."""
    try:
        data = json.loads(text) if name.endswith(".json") else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"{name}: not valid {'JSON' if name.endswith('.json') else 'TOML'}: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: expected a table of sections at the top level")
    model, training = _section(data, "model", name), _section(data, "training", name)
    parallel = _section(data, "parallelism", name)
    checkpoint = _section(data, "activation_checkpoint", name)
    local = _number(training, "local_batch_size", name)
    if local is None:
        local = _number(training, "batch_size", name)
    return JobConfig(
        model=_text(model, "name"),
        flavor=_text(model, "flavor"),
        local_batch_size=local,
        global_batch_size=_number(training, "global_batch_size", name),
        seq_len=_number(training, "seq_len", name),
        steps=_number(training, "steps", name),
        parallelism={k: v for k in DEGREES if (v := _number(parallel, k, name)) is not None},
        activation_checkpoint=_text(checkpoint, "mode"),
        selective_ac_option=_text(checkpoint, "selective_ac_option"),
    )


def with_overrides(config: JobConfig, batch_size: int | None, seq_len: int | None) -> JobConfig:
    """Command-line batch size and sequence length win over the file."""
    changes: dict[str, Any] = {}
    if batch_size is not None:
        changes["local_batch_size"] = batch_size
    if seq_len is not None:
        changes["seq_len"] = seq_len
    return msgspec.structs.replace(config, **changes)


def degrees(config: JobConfig, world_size: int | None) -> dict[str, int] | None:
    """Parallel degrees with -1 resolved from the world size; None if that is impossible."""
    found = {k: config.parallelism.get(k, 1) for k in DEGREES}
    if found["data_parallel_shard_degree"] != -1:
        return found
    others = (
        found["data_parallel_replicate_degree"]
        * found["tensor_parallel_degree"]
        * found["pipeline_parallel_degree"]
        * found["context_parallel_degree"]
    )
    if world_size is None or others <= 0 or world_size % others:
        return None
    found["data_parallel_shard_degree"] = world_size // others
    return found


def global_batch(config: JobConfig, world_size: int | None) -> tuple[int | None, str | None]:
    """(global batch in samples, None) or (None, why it is unknown)."""
    if config.global_batch_size is not None and config.global_batch_size > 0:
        return config.global_batch_size, None
    if config.local_batch_size is None:
        return None, "no batch size (give --config or --batch-size)"
    found = degrees(config, world_size)
    if found is None:
        return None, "data_parallel_shard_degree = -1 but the world size does not resolve it"
    replicas = found["data_parallel_replicate_degree"] * found["data_parallel_shard_degree"]
    return config.local_batch_size * replicas, None


def _section(data: Mapping[str, Any], key: str, name: str) -> Mapping[str, Any]:
    section = data.get(key, {})
    if not isinstance(section, dict):
        raise ConfigError(f"{name}: [{key}] must be a table")
    return section


def _number(section: Mapping[str, Any], key: str, name: str) -> int | None:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{name}: {key} must be an integer, got {value!r}")
    return value


def _text(section: Mapping[str, Any], key: str) -> str | None:
    value = section.get(key)
    return str(value) if value is not None else None
