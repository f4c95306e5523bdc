"""Report file names (pure): `<timestamp>_<model>_dp<R>x<S>_tp<T>_gpu<N>[_job<I>of<J>]`.

Parts that are unknown (no config file, or degrees that do not match the traces) are left
out rather than guessed; without a model name the input folder's name stands in. The time
arrives as a parameter.
"""

from __future__ import annotations

import re
from datetime import datetime

from commscope.collector.schema import Report

_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")


def basename(report: Report, fallback_name: str, now: datetime) -> str:
    config = report.config
    model = "_".join(x for x in (config.model, config.flavor) if x) or fallback_name
    parts = [now.strftime("%Y%m%d_%H%M%S"), _safe(model)]
    degrees = config.parallelism
    if degrees and config.config_path:  # not the defaults assumed without a config file
        replicate = degrees.get("data_parallel_replicate_degree", 1)
        shard = degrees.get("data_parallel_shard_degree", 1)
        parts.append(f"dp{replicate}x{shard}")
        parts.append(f"tp{degrees.get('tensor_parallel_degree', 1)}")
    if report.world_size is not None:
        parts.append(f"gpu{report.world_size}")
    if report.inputs.job is not None:
        parts.append(f"job{report.inputs.job}of{len(report.inputs.jobs)}")
    return "_".join(parts)


def _safe(text: str) -> str:
    return _UNSAFE.sub("-", text).strip("-") or "run"
