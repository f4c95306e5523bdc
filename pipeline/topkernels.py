"""Top kernels by GPU time, and kernel launches: tallies and their report sections (pure).

A rank keeps its kernels by name (`KernelTime`: count, Σ duration, communication or not):
`capped` sums the rows of each name and keeps the NAMES names of most time, the rest summed
into one row without a name, so the rows always add up to every kernel exactly. Over windows
and ranks the rows are merged the same way (a name's figures then cover the windows and ranks
where it was kept: the rest is in the summed row). Launches (`LaunchTally`) sum their counts
and merge their queue-delay sketches (`pipeline.sketch`: the quantiles within 1%, labelled;
counts, sums, mean, min and max exact).

Shares: a kernel's Σ duration over the Σ duration of every kernel of the rank (pooled: of
every rank), communication kernels included, memcpy and memset not; streams may overlap, so
this is GPU time summed, not wall time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from commscope.model.int64s import unpack
from commscope.model.schema import (
    KernelRow,
    KernelTime,
    LaunchDelays,
    Launches,
    LaunchTally,
    RankLaunches,
    RankResult,
    Sketch,
    Summary,
    TopKernels,
)
from commscope.pipeline import sketch
from commscope.pipeline.stats import ratio

NAMES: Final = 200  # kernel names kept per rank (and pooled); the rest summed in one row
_NS: Final = 1e-9
NO_NAMES: Final = "no kernel names in the traces: no GPU kernels, or a source without them"
NO_LAUNCHES: Final = (
    "no kernel launch calls in the traces: CPU-side runtime events not recorded, or a source "
    "without them"
)


def _order(row: KernelTime) -> tuple[int, int, str]:
    return -row.time_ns, -row.count, row.name or ""


def capped(rows: Iterable[KernelTime], limit: int = NAMES) -> list[KernelTime]:
    """The rows of each name summed, by time (then count, then name), the first `limit`
    kept and the rest with every nameless row summed into a last row (name None), if any."""
    count: dict[str | None, int] = {}
    time_ns: dict[str | None, int] = {}
    comm: set[str | None] = set()
    for row in rows:
        count[row.name] = count.get(row.name, 0) + row.count
        time_ns[row.name] = time_ns.get(row.name, 0) + row.time_ns
        if row.communication:
            comm.add(row.name)
    named = sorted(
        (KernelTime(n, count[n], time_ns[n], n in comm) for n in count if n is not None),
        key=_order,
    )
    kept, beyond = named[:limit], named[limit:]
    if not beyond and None not in count:
        return kept
    other_count = count.get(None, 0) + sum(row.count for row in beyond)
    return [*kept, KernelTime(None, other_count, time_ns.get(None, 0) + total_ns(beyond))]


def merge_names(results: Iterable[RankResult]) -> list[KernelTime]:
    """Every result's kernel rows in one capped list."""
    return capped(row for result in results for row in result.kernel_names)


def ordered(found: Sketch) -> Sketch:
    """The sketch with its buckets in index order: the same bytes whatever order built it."""
    return Sketch(count=found.count, sum_parts=found.sum_parts, min=found.min, max=found.max,
                  zeros=found.zeros, positive=dict(sorted(found.positive.items())),
                  negative=dict(sorted(found.negative.items())))  # fmt: skip


def add_delays(tally: LaunchTally | None, part: LaunchDelays) -> LaunchTally:
    """A part of a file's launches added to a tally (begun when None)."""
    delays = sketch.sketch_of([float(v) for v in unpack(part.delays_ns)])
    found = LaunchTally(calls=part.calls, call_ns=part.call_ns, kernels=part.kernels,
                        shorter=part.shorter, delay_ns=delays)  # fmt: skip
    return _merged([found] if tally is None else [tally, found])


def merge_launches(tallies: Iterable[LaunchTally | None]) -> LaunchTally | None:
    """The tallies summed, their sketches merged; None when none is known."""
    known = [t for t in tallies if t is not None]
    return _merged(known) if known else None


def _merged(known: list[LaunchTally]) -> LaunchTally:
    return LaunchTally(
        calls=sum(t.calls for t in known),
        call_ns=sum(t.call_ns for t in known),
        kernels=sum(t.kernels for t in known),
        shorter=sum(t.shorter for t in known),
        delay_ns=ordered(sketch.merge_all(t.delay_ns for t in known)),
    )


# ---------------------------------------------------------------- report sections


def top_kernels(results: Mapping[int, RankResult]) -> TopKernels:
    """Per rank and pooled over the ranks (results in rank order)."""
    per_rank = {str(r): rows(res.kernel_names) for r, res in results.items() if res.kernel_names}
    pooled = merge_names(results.values())
    if not pooled:
        return TopKernels(na_reason=NO_NAMES)
    return TopKernels(
        count=sum(row.count for row in pooled),
        time_s=sum(row.time_ns for row in pooled) * _NS,
        names_kept=NAMES,
        all_ranks=rows(pooled),
        per_rank=per_rank,
    )


def rows(kernels: list[KernelTime]) -> list[KernelRow]:
    """The report's rows of a capped list, each with its share of the list's time."""
    total = total_ns(kernels)
    return [_row(row, total) for row in kernels]


def _row(row: KernelTime, total_ns: int) -> KernelRow:
    return KernelRow(
        name=row.name,
        count=row.count,
        time_s=row.time_ns * _NS,
        mean_s=row.time_ns / row.count * _NS if row.count else None,
        share=ratio(row.time_ns, total_ns),
        communication=row.communication if row.name is not None else None,
    )


def launches(results: Mapping[int, RankResult]) -> Launches:
    """Per rank and pooled over the ranks (results in rank order)."""
    per_rank = {str(r): rank_launches(res.launches) for r, res in results.items() if res.launches}
    pooled = merge_launches(res.launches for res in results.values())
    if pooled is None:
        return Launches(na_reason=NO_LAUNCHES)
    return Launches(all_ranks=rank_launches(pooled), per_rank=per_rank)


def rank_launches(tally: LaunchTally) -> RankLaunches:
    return RankLaunches(
        calls=tally.calls,
        call_time_s=tally.call_ns * _NS,
        kernels=tally.kernels,
        queue_delay_s=_seconds(sketch.summary(tally.delay_ns)),
        shorter=tally.shorter,
        shorter_share=ratio(tally.shorter, tally.kernels),
    )


def _seconds(found: Summary) -> Summary:
    """A summary of nanoseconds in seconds."""

    def scaled(value: float | None) -> float | None:
        return None if value is None else value * _NS

    return Summary(mean=scaled(found.mean), median=scaled(found.median), min=scaled(found.min),
                   max=scaled(found.max), p95=scaled(found.p95),
                   relative_error=found.relative_error)  # fmt: skip


def total_ns(kernels: Iterable[KernelTime]) -> int:
    return sum(row.time_ns for row in kernels)
