"""TorchTitan job configs: TOML or the JSON newer TorchTitan dumps (pure: parses text).

Reads `[model] name, flavor`, the batch, `seq_len`, `steps`, the parallel degrees and
`[activation_checkpoint] mode, selective_ac_option` (for HFU), in every layout TorchTitan has
used (read from pytorch/torchtitan's `torchtitan/config_manager.py`, `train_configs/*.toml`,
`torchtitan/config/job_config.py` and the pull requests that changed them):

- 2024, early (PR #27, Jan): `[training] data_parallel_degree` (-1 = the rest of the world),
  `sequence_parallel_degree` (soon renamed `tensor_parallel_degree`), `pipeline_parallel_degree`;
  `batch_size`, `seq_len`, `steps`.
- 2024, mid (PR #318, May): `pipeline_parallel_degree` moves to `[experimental]`.
- 2024, Sep (PR #518, HSDP): `data_parallel_degree` splits into `[training]
  data_parallel_replicate_degree` (default 1) and `data_parallel_shard_degree` (default -1).
- 2024, Oct (PR #592): `[experimental] context_parallel_degree`.
- 2025, Mar (PR #980): a `[parallelism]` section holds every degree (`expert_parallel_degree`
  joins it later); `[training]` and `[experimental]` lose theirs.
- 2025, Jun (PR #1238): `[training] batch_size` becomes `local_batch_size`, and
  `global_batch_size` (-1 = local x data-parallel degree; larger = gradient accumulation).
- 2025, Oct (PR #1904): the config can be saved as JSON, with the same sections.
- 2026, Aug (PR #4121): a token budget replaces the batch (`num_tokens_per_microbatch_per_dp_rank`,
  `num_tokens_per_train_step`, `max_context_length`): recognised and named, not read.

A degree missing from the file takes TorchTitan's default (1; `data_parallel_shard_degree` -1)
and is marked as such. When one file gives a degree (or the batch) in two layouts, the newer
place wins and a different value there is warned about. Keys of the sections read that
commscope does not know are warned about, one line per section. `resolve` checks the degrees
against the world size of the traces: the global batch is known only when they agree.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

import msgspec
from commscope.model.errors import ConfigError

_DEGREES: Final = (
    "data_parallel_replicate_degree",
    "data_parallel_shard_degree",
    "tensor_parallel_degree",
    "pipeline_parallel_degree",
    "context_parallel_degree",
    "expert_parallel_degree",
)
SHARD: Final = "data_parallel_shard_degree"
DEFAULT_SOURCE: Final = "TorchTitan default"
# Expert parallelism borrows ranks from the others: it does not divide the world.
_WORLD_FACTORS: Final = _DEGREES[:5]
_SHORT: Final = dict(
    zip(_WORLD_FACTORS, ("dp_replicate", "dp_shard", "tp", "pp", "cp"), strict=True)
)

_Place = tuple[str, str]  # (section, key)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Where each degree has lived, newest first: the newest place present wins.
_PLACES: Final[dict[str, tuple[_Place, ...]]] = {
    "data_parallel_replicate_degree": (
        ("parallelism", "data_parallel_replicate_degree"),
        ("training", "data_parallel_replicate_degree"),
    ),
    SHARD: (
        ("parallelism", SHARD),
        ("training", SHARD),
        ("training", "data_parallel_degree"),
    ),
    "tensor_parallel_degree": (
        ("parallelism", "tensor_parallel_degree"),
        ("training", "tensor_parallel_degree"),
        ("training", "sequence_parallel_degree"),
    ),
    "pipeline_parallel_degree": (
        ("parallelism", "pipeline_parallel_degree"),
        ("experimental", "pipeline_parallel_degree"),
        ("training", "pipeline_parallel_degree"),
    ),
    "context_parallel_degree": (
        ("parallelism", "context_parallel_degree"),
        ("experimental", "context_parallel_degree"),
    ),
    "expert_parallel_degree": (("parallelism", "expert_parallel_degree"),),
}
_LOCAL_BATCH: Final[tuple[_Place, ...]] = (
    ("training", "local_batch_size"),
    ("training", "batch_size"),
)
_TOKEN_BUDGET: Final[tuple[_Place, ...]] = (
    ("training", "num_tokens_per_microbatch_per_dp_rank"),
    ("training", "num_tokens_per_train_step"),
    ("training", "max_context_length"),
    ("parallelism", "num_pp_microbatches"),
)

# Every key TorchTitan has had in the sections read (those commscope reads and those that do
# not change its figures); anything else there is named in a warning.
_KNOWN: Final[dict[str, frozenset[str]]] = {
    "model": _words(
        """name flavor norm_type tokenizer_path hf_assets_path converters
        print_after_conversion use_flex_attn attn_mask_type"""
    ),
    "training": _words(
        """dataset dataset_path batch_size local_batch_size global_batch_size seq_len
        warmup_steps max_norm steps data_parallel_degree data_parallel_replicate_degree
        data_parallel_shard_degree tensor_parallel_degree sequence_parallel_degree
        pipeline_parallel_degree enable_loss_parallel mixed_precision_param
        mixed_precision_reduce compile compiled_autograd gc_freq gc_debug seed deterministic
        enable_cpu_offload dtype fp8_linear enable_fp8_linear checkpoint_interval
        checkpoint_folder num_tokens_per_microbatch_per_dp_rank num_tokens_per_train_step
        max_context_length"""
    ),
    "parallelism": _words(
        """data_parallel_replicate_degree data_parallel_shard_degree tensor_parallel_degree
        pipeline_parallel_degree context_parallel_degree expert_parallel_degree
        expert_tensor_parallel_degree enable_compiled_autograd fsdp_reshard_after_forward
        enable_fsdp_symm_mem disable_loss_parallel enable_async_tensor_parallel
        enable_sequence_parallel full_dtensor pipeline_parallel_split_points
        module_fqns_per_model_part pipeline_parallel_first_stage_less_layers
        pipeline_parallel_last_stage_less_layers pipeline_parallel_layers_per_stage
        pipeline_parallel_schedule pipeline_parallel_schedule_csv
        pipeline_parallel_microbatch_size pipeline_parallel_microbatches num_pp_microbatches
        context_parallel_rotate_method context_parallel_load_balancer"""
    ),
    "experimental": _words(
        """pipeline_parallel_degree pipeline_parallel_split_points pipeline_parallel_schedule
        pipeline_parallel_schedule_csv pipeline_parallel_microbatches context_parallel_degree
        context_parallel_rotate_method enable_async_tensor_parallel enable_compiled_autograd
        custom_import custom_args_module custom_model_path"""
    ),
    "activation_checkpoint": _words(
        """mode selective_ac_option per_op_sac_force_recompute_mm_shapes_by_fqns early_stop
        memory_budget visualize_memory_budget_pareto preserve_rng_state determinism_check
        debug"""
    ),
}
_UNKNOWN_SHOWN: Final = 8
_FLAGS_ONLY: Final = (
    "no --config: TorchTitan's default parallelism assumed (every rank data-parallel, "
    "global batch = batch size x world size)"
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
    sources: dict[str, str] = {}  # degree → where in the file it was found
    warnings: list[str] = []  # what the file holds that commscope cannot use or doubts
    pp_schedule: str | None = None  # pipeline_parallel_schedule ([parallelism] or older)


class _Resolved(NamedTuple):
    """The degrees checked against the world: `degrees` is empty when they cannot be this
    run's, and `issue` says why; `sources` says where each value came from."""

    degrees: dict[str, int]
    sources: dict[str, str]
    issue: str | None


def parse_config(text: str, name: str) -> JobConfig:
    """A JobConfig from the text of `name` (TOML unless it ends in .json)."""
    data = _load(text, name)
    sections = {key: _section(data, key, name) for key in _KNOWN}
    warnings = [*_unknown_keys(sections), *_token_budget(sections)]
    parallelism, sources = {}, {}
    for degree, places in _PLACES.items():
        found = _first(sections, places, name, warnings)
        if found is not None:
            parallelism[degree], sources[degree] = found
    local = _first(sections, _LOCAL_BATCH, name, warnings)
    model, training = sections["model"], sections["training"]
    checkpoint = sections["activation_checkpoint"]
    return JobConfig(
        model=_text(model, "name"),
        flavor=_text(model, "flavor"),
        local_batch_size=local[0] if local is not None else None,
        global_batch_size=_number(training, "global_batch_size", name),
        seq_len=_number(training, "seq_len", name),
        steps=_number(training, "steps", name),
        parallelism=parallelism,
        activation_checkpoint=_text(checkpoint, "mode"),
        selective_ac_option=_text(checkpoint, "selective_ac_option"),
        sources=sources,
        warnings=warnings,
        pp_schedule=_text(sections["parallelism"], "pipeline_parallel_schedule")
        or _text(sections["experimental"], "pipeline_parallel_schedule"),
    )


def flags_only() -> JobConfig:
    """The config when only --batch-size / --seq-len are given: the parallelism is assumed."""
    return JobConfig(warnings=[_FLAGS_ONLY])


def with_overrides(config: JobConfig, batch_size: int | None, seq_len: int | None) -> JobConfig:
    """Command-line batch size and sequence length win over the file."""
    changes: dict[str, Any] = {}
    if batch_size is not None:
        changes["local_batch_size"] = batch_size
    if seq_len is not None:
        changes["seq_len"] = seq_len
    return msgspec.structs.replace(config, **changes)


def resolve(config: JobConfig, world_size: int | None) -> _Resolved:
    """The degrees, -1 resolved from the world size, checked against it."""
    given = {k: config.parallelism.get(k, -1 if k == SHARD else 1) for k in _DEGREES}
    sources = {k: config.sources.get(k, "config") for k in config.parallelism}
    sources = {k: sources.get(k, DEFAULT_SOURCE) for k in _DEGREES}
    invalid = [f"{k} = {v}" for k, v in given.items() if v < 1 and not (k == SHARD and v == -1)]
    if invalid:
        return _Resolved({}, sources, f"invalid parallel degree: {', '.join(invalid)}")
    if given[SHARD] == -1:
        others = math.prod(given[k] for k in _WORLD_FACTORS if k != SHARD)
        if world_size is None or world_size % others:
            why = "the world size is unknown"
            if world_size is not None:
                why = f"world size {world_size} is not a multiple of {_formula(given, others)}"
            return _Resolved({}, sources, f"data_parallel_shard_degree = -1 is unresolved: {why}")
        given[SHARD] = world_size // others
        sources[SHARD] = f"{sources[SHARD]} -1: world {world_size} / {others}"
    product = math.prod(given[k] for k in _WORLD_FACTORS)
    if world_size is not None and product != world_size:
        issue = (
            f"the config's parallel degrees do not match the traces: {_formula(given, product)}, "
            f"but the traces show a world size of {world_size}"
        )
        return _Resolved({}, sources, issue)
    return _Resolved(given, sources, None)


def global_batch(config: JobConfig, world_size: int | None) -> tuple[int | None, str | None]:
    """(global batch in samples, None) or (None, why it is unknown)."""
    local, explicit = config.local_batch_size, config.global_batch_size
    explicit = explicit if explicit is not None and explicit > 0 else None
    if local is None and explicit is None:
        return None, "no batch size (give --config or --batch-size)"
    found = resolve(config, world_size)
    if found.issue is not None:
        return None, found.issue
    replicas = found.degrees["data_parallel_replicate_degree"] * found.degrees[SHARD]
    if explicit is None:
        return local * replicas if local is not None else None, None
    if local is not None and explicit % (local * replicas):
        return None, (
            f"global_batch_size {explicit} is not a multiple of the local batch {local} x "
            f"data-parallel degree {replicas}, as TorchTitan requires"
        )
    return explicit, None


def _formula(degrees: Mapping[str, int], total: int) -> str:
    factors = " x ".join(f"{_SHORT[k]} {degrees[k]}" for k in _WORLD_FACTORS if degrees[k] != -1)
    return f"{factors} = {total}"


def _load(text: str, name: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text) if name.endswith(".json") else tomllib.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"{name}: not valid {'JSON' if name.endswith('.json') else 'TOML'}: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{name}: expected a table of sections at the top level")
    return data


def _first(
    sections: Mapping[str, Mapping[str, Any]],
    places: Sequence[_Place],
    name: str,
    warnings: list[str],
) -> tuple[int, str] | None:
    """(value, where) from the newest place present; a different older value is warned about."""
    found = [
        (value, _label(place))
        for place in places
        if (value := _number(sections[place[0]], place[1], name)) is not None
    ]
    if not found:
        return None
    value, where = found[0]
    for other, there in found[1:]:
        if other != value:
            warnings.append(
                f"config: {where} = {value} and {there} = {other} disagree; "
                f"{where} (the newer layout) is used"
            )
    return value, where


def _label(place: _Place) -> str:
    return f"[{place[0]}] {place[1]}"


def _unknown_keys(sections: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = []
    for section, keys in sections.items():
        unknown = sorted(str(k) for k in keys if k not in _KNOWN[section])
        if unknown:
            shown = ", ".join(unknown[:_UNKNOWN_SHOWN])
            more = len(unknown) - _UNKNOWN_SHOWN
            shown += f" and {more} more" if more > 0 else ""
            lines.append(f"config: [{section}] keys commscope does not know, ignored: {shown}")
    return lines


def _token_budget(sections: Mapping[str, Mapping[str, Any]]) -> list[str]:
    found = [_label(place) for place in _TOKEN_BUDGET if place[1] in sections[place[0]]]
    if not found:
        return []
    return [
        f"config: {', '.join(found)}: TorchTitan's token budget (2026) is not read; "
        "give --batch-size and --seq-len for tokens/s"
    ]


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
