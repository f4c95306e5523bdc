"""What the live aggregator reads of a tailed NCCL Inspector log as it arrives (pure).

A tailed log's stream never ends while the job runs, so the report over finished files does
not see it until the end; its per-collective bandwidths go to the rolling statistics
(`commscope_collective_busbw_bytes_per_second`) as each record is applied instead, once (a
duplicate is never applied; a record replayed from the aggregator's own log at a restart is
not fed again), and a finished Inspector file is not fed a second time (`fed_live`).
"""

from __future__ import annotations

from commscope.collector.inspector import SOURCE
from commscope.collector.names import base_name, is_inspector_name
from commscope.collector.schema import Facts, RankResult, TraceMeta
from commscope.pipeline.edge import from_facts
from commscope.pipeline.stats import sample_values
from msgspec.structs import replace


def tailed(path: str) -> bool:
    """Whether the stream of `path` is a tailed Inspector log."""
    return is_inspector_name(base_name(path))


def busbw_samples(part: Facts) -> dict[str, list[float]]:
    """Each collective type's busbw (B/s) of the ops in one record, as a finished file's
    tallies give them (ops of unknown size or n give none)."""
    ops = from_facts([part]).gpu_ops
    return {kind: list(sample_values(tally.busbw_Bps)) for kind, tally in ops.items()}


def fed_live(meta: TraceMeta) -> bool:
    """A finished file whose bandwidths went to the rolling statistics as they arrived."""
    return meta.source == "inspector"


def finished(result: RankResult | None, meta: TraceMeta) -> RankResult | None:
    """A finished stream's result, marked as read from Inspector logs when it was."""
    return replace(result, source=SOURCE) if result is not None and fed_live(meta) else result
