"""What a report keeps of each rank's window so that shard reports merge exactly (pure).

`of(meta, stats, result)` is the `RankFacts` a window of the JSON report carries per rank:
the result's integer sums without its call list, files and bandwidth samples (a window's
samples grow with its calls; their sketches do not), the samples as sketches per collective
type, and what trace health reads of the file. `result(facts)` gives back a `RankResult`
whose tallies are `RunTally`s: `sections` over such results gives every figure the report
gives, bit for bit, except the bandwidth quantiles, which then come from the sketches
(within 1%, labelled); counts, sums, means, min and max stay exact.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

from commscope.model.report import AllToAllCalls
from commscope.model.schema import (
    ExposedSplit,
    FileStats,
    OpTally,
    RankFacts,
    RankResult,
    RunTally,
    TraceMeta,
)
from commscope.pipeline.accumulate import Sketcher, bandwidth_sketch
from msgspec.structs import asdict, replace

K = TypeVar("K", int, str)

# A placeholder pg_config: trace health asks only whether a file had one.
_SOME_PG_CONFIG = {"pg_config": [0]}


def of(
    meta: TraceMeta,
    stats: FileStats,
    result: RankResult,
    sketcher: Sketcher | None = None,
    split: ExposedSplit | None = None,
    *,
    alltoall: AllToAllCalls | None = None,
) -> RankFacts:
    """The facts of one rank's window (its result's samples sketched, by `sketcher`: default
    `bandwidth_sketch`; `split`: its exposed split, and `alltoall`: its all-to-all calls
    (`alltoallv.calls_of`), when its cross-rank facts are in)."""
    sketch = sketcher or bandwidth_sketch
    ops = {kind: _bare(result.ops[kind]) for kind in sorted(result.ops)}
    plain = replace(
        result, ops=ops, calls=[], files=[], exposed_runs=b"", step_runs=b"", step_starts={}
    )
    plain = replace(plain, steps=_by_key(result.steps), kernel_ns=_by_key(result.kernel_ns))
    return RankFacts(
        result=plain,
        algbw={kind: sketch(result.ops[kind], "algbw") for kind in ops},
        busbw={kind: sketch(result.ops[kind], "busbw") for kind in ops},
        meta=replace(meta, pg_ranks={}, pg_sizes={}),
        pg_config=bool(meta.pg_ranks),
        stats=stats,
        split=split,
        alltoallv=alltoall,
    )


def _bare(tally: OpTally) -> OpTally:
    """The tally without its samples (as an `OpTally`, whatever it was)."""
    fields = asdict(tally)
    fields.update(algbw_Bps=bytearray(), busbw_Bps=bytearray())
    fields.pop("algbw_sketch", None)
    fields.pop("busbw_sketch", None)
    fields.update(bus_parts=_by_key(tally.bus_parts), group_sources=_by_key(tally.group_sources))
    return OpTally(**fields)


def _by_key(found: Mapping[K, int]) -> dict[K, int]:
    """A dict in key order: the facts are written whatever order the events came in."""
    return dict(sorted(found.items()))


def result(facts: RankFacts) -> RankResult:
    """The rank's result again, its tallies `RunTally`s holding the sketches."""
    ops: dict[str, OpTally] = {
        kind: RunTally(
            **asdict(tally),
            algbw_sketch=facts.algbw.get(kind, RunTally().algbw_sketch),
            busbw_sketch=facts.busbw.get(kind, RunTally().busbw_sketch),
        )
        for kind, tally in facts.result.ops.items()
    }
    return replace(facts.result, ops=ops)


@dataclass(frozen=True)
class File:
    """A rank's window as trace health reads it (`health.TraceFile`), rebuilt from facts."""

    meta: TraceMeta
    stats: FileStats
    result: RankResult


def file(facts: RankFacts) -> File:
    meta = replace(facts.meta, pg_ranks=_SOME_PG_CONFIG) if facts.pg_config else facts.meta
    return File(meta=meta, stats=facts.stats, result=result(facts))
