"""Report file names (pure): `<timestamp>_<model>_dp<R>x<S>_tp<T>_<devices>[_job<I>of<J>][-N]`.

Parts that are unknown (no config file, or degrees that do not match the traces) are left
out rather than guessed; without a model name the input's name stands in (a trace file's
without its `.pt.trace.json.gz` suffixes). `<devices>` counts what the traces show: `gpu8`
for 8 traced GPU ranks, `gpu2of128` for 2 traced ranks of a 128-rank job, `cpu2` for a run
with no GPU in its traces (gloo on CPU). `-N` (2, 3, ...) tells apart reports that would
take one name (the same second): the writer (`files.py`) takes the first free one. The time
arrives as a parameter.
"""

from __future__ import annotations

import re
from datetime import datetime

from commscope.exporters.text import on_gpu
from commscope.model.schema import Report

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
_TRACE_SUFFIX = re.compile(
    r"((\.pt)?(\.trace)?\.json|\.sqlite|\.jsonl|\.log)(\.gz)?$|\.gz$", re.IGNORECASE
)


def basename(report: Report, fallback_name: str, now: datetime) -> str:
    config = report.config
    model = "_".join(x for x in (config.model, config.flavor) if x) or clean_name(fallback_name)
    parts = [now.strftime("%Y%m%d_%H%M%S"), _safe(model)]
    degrees = config.parallelism
    if degrees and config.config_path:  # not the defaults assumed without a config file
        replicate = degrees.get("data_parallel_replicate_degree", 1)
        shard = degrees.get("data_parallel_shard_degree", 1)
        parts.append(f"dp{replicate}x{shard}")
        parts.append(f"tp{degrees.get('tensor_parallel_degree', 1)}")
    parts.append(devices(report))
    if report.inputs.job is not None:
        parts.append(f"job{report.inputs.job}of{len(report.inputs.jobs)}")
    return "_".join(parts)


def numbered(stem: str, n: int) -> str:
    """The `n`-th report of one name: `stem` itself, then `stem-2`, `stem-3`, ..."""
    return stem if n == 1 else f"{stem}-{n}"


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-") or "run"


def devices(report: Report) -> str:
    """`gpu8`, `gpu2of128` (2 ranks traced of 128), `cpu2` (no GPU in the traces)."""
    kind = "gpu" if on_gpu(report) else "cpu"
    traced, world = len(report.ranks), report.world_size
    return f"{kind}{traced}" if world is None or world == traced else f"{kind}{traced}of{world}"


def clean_name(name: str) -> str:
    """An input's name without a trace file's suffixes: `rank0.json.gz` → `rank0`, an Nsight
    Systems export's `run.sqlite` → `run`, an Inspector log's `host-pid7.log` → `host-pid7`."""
    return _TRACE_SUFFIX.sub("", name) or name
