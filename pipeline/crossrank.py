"""Cross-rank analysis of a window, and of a run as its windows pooled (pure).

For one window: match the ranks' collectives (`matching`), estimate clock offsets from the
matched instances (`clocks`), then on aligned clocks the arrival skew of every instance
(`skew`). A run pools its windows' instances (clocks are estimated and applied per window:
they drift between windows). The α-β fit per (process group, collective type) takes each
instance's fastest member as its wait-free duration: T = α + S x F / β (`alphabeta`).
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from commscope.model.bus import bus_factor
from commscope.model.report import AllToAllCalls
from commscope.model.schema import (
    AlphaBeta,
    ClockOffset,
    Clocks,
    GroupMatch,
    Matching,
    RankResult,
)
from commscope.pipeline import alltoallv, alphabeta, p2p, p2pranks, skew, stages, straddle, waiting
from commscope.pipeline.clocks import NO_MATCH, Found, clocks, offsets
from commscope.pipeline.intervals import IntervalSet
from commscope.pipeline.matching import MAX_DESYNCS, Instance, Matched, group_order, match
from commscope.pipeline.stats import ratio, thin_indices
from msgspec import structs

_RUN_CLOCKS: Final = "median over windows of each window's offset (applied per window)"
# Bounds of what the whole run's report carries for the HTML report's plots: points per α-β fit
# and per collective type's skew series, and collective types whose largest fit has its points.
PLOT_POINTS: Final = 200
PLOT_FITS: Final = 6


@dataclass(frozen=True)
class RankInfo:
    """What cross-rank timing needs of a rank's trace besides its calls."""

    base_ns: int = 0
    pg_ranks: Mapping[str, Sequence[int]] = field(default_factory=dict)
    call_starts: bool = True  # False: its calls' starts are unknown (`TraceMeta.call_starts`)


# (group, type) -> the α-β points (S·F, T s) one after the other: 16 bytes an instance
_Points = dict[tuple[str, str], "array[float]"]


@dataclass(frozen=True)
class CrossRank:
    """One window's (or a run's pooled) cross-rank facts: nothing per member is kept."""

    matching: Matching
    clocks: Clocks
    arrivals: skew.Tally
    instances: Counter[tuple[str, str]]  # (group, type) -> matched instances
    points: _Points  # the α-β samples: each instance's fastest member
    # (group, type) -> F of every α-β point, NaN when they differ (S = S·F / F for the plot)
    factors: dict[tuple[str, str], float] = field(default_factory=dict)
    # an NCCL Inspector window's: the instances it took whole from the next (`straddle`)
    taken: frozenset[straddle.Key] = frozenset()
    # each rank's exposed communication split into transfer and waiting (`waiting`)
    split: dict[int, waiting.Split] = field(default_factory=dict)
    # all-to-all calls that recorded split sizes (`alltoallv`)
    alltoallv: alltoallv.Tally = field(default_factory=alltoallv.Tally)
    # each rank's all-to-all calls, as its facts carry them (a window's; empty once pooled)
    alltoall_calls: dict[int, AllToAllCalls] = field(default_factory=dict)
    pipeline: stages.Tally = field(default_factory=stages.Tally)  # P2P pairs' stage sums
    # process group -> its size n, as its instances give it (`hosts`: is its member list whole)
    sizes: dict[str, int] = field(default_factory=dict)


def aligned(
    results: Mapping[int, RankResult], infos: Mapping[int, RankInfo]
) -> tuple[Matched, Found, list[skew.Arrival]]:
    """The window's matched instances, clock offsets, and arrivals on aligned clocks."""
    calls = {rank: result.calls for rank, result in results.items()}
    matched = match(calls, _members(infos), {r: i.base_ns for r, i in infos.items()})
    untimed = _untimed(infos)
    found = offsets([i for i in matched.instances if untimed.isdisjoint(i.starts)])
    moved = shifts(found)  # once: a dict of every rank
    return matched, found, [_arrival(i, moved, untimed) for i in matched.instances]


def _paired(results: Mapping[int, RankResult], infos: Mapping[int, RankInfo]) -> p2p.Paired:
    """The window's P2P pairs over its calls, their peers made global (`p2pranks`); nothing
    to resolve when no rank ran a SendRecv (only SendRecv calls pair)."""
    calls = {rank: result.calls for rank, result in results.items()}
    if all(op.collective != p2p.P2P for ops in calls.values() for op in ops):
        return p2p.Paired()
    return p2p.pair(p2pranks.resolved(calls), {r: i.base_ns for r, i in infos.items()})


def _untimed(infos: Mapping[int, RankInfo]) -> set[int]:
    return {rank for rank, info in infos.items() if not info.call_starts}


def shifts(found: Found) -> dict[int, float]:
    """Each rank's clock offset (ns to subtract from its times)."""
    return {rank: offset for rank, (offset, _, _) in found.items()}


def _exposed(
    results: Mapping[int, RankResult], infos: Mapping[int, RankInfo]
) -> dict[int, waiting.Exposed]:
    """Each rank's exposed communication and steps, on its own clock."""
    return {
        rank: waiting.Exposed(
            result.exposed_runs, result.step_runs, infos[rank].base_ns if rank in infos else 0
        )
        for rank, result in results.items()
    }


def _arrival(instance: Instance, shifts: Mapping[int, float], untimed: set[int]) -> skew.Arrival:
    """The instance's arrival; one with a member whose start is unknown is kept only for its
    durations (the α-β fit), marked `timed=False`."""
    found = skew.arrival(instance, shifts)
    return found if untimed.isdisjoint(instance.starts) else structs.replace(found, timed=False)


def window(results: Mapping[int, RankResult], infos: Mapping[int, RankInfo]) -> CrossRank:
    matched, found, arrivals = aligned(results, infos)
    timed = [item for item in arrivals if item.timed]
    paired = _paired(results, infos)
    untimed = _untimed(infos)
    exposed = _exposed(results, infos)
    calls = _alltoall_calls(results, infos)
    pairs = [item for item in paired.pairs if untimed.isdisjoint(item.instance.starts)]
    summary = structs.replace(
        matched.summary,
        p2p_pairs=len(paired.pairs),
        p2p_unpaired=paired.unpaired,
        p2p_desyncs=paired.desyncs,
    )
    points, factors = _alpha_beta_points(arrivals)
    moved = _unions(matched.instances, arrivals, pairs, shifts(found), exposed)
    return CrossRank(
        matching=summary,
        clocks=clocks(found),
        arrivals=skew.tally(timed),
        instances=Counter((item.group, item.collective) for item in arrivals),
        points=points,
        factors=factors,
        # each rank's exposed transfer and waiting over the window's matched instances and pairs
        split=waiting.split_of(moved, exposed),
        alltoallv=alltoallv.tally(calls, results),
        alltoall_calls=calls,
        pipeline=_pipeline(results, exposed, pairs, moved, found),
        sizes=_group_sizes(arrivals),
    )


def _unions(
    instances: Sequence[Instance],
    arrivals: Sequence[skew.Arrival],
    pairs: Sequence[p2p.Pair],
    moved: Mapping[int, float],
    exposed: Mapping[int, waiting.Exposed],
) -> dict[int, tuple[IntervalSet, IntervalSet]]:
    """Each rank's (W, T) over the window's timed instances (`arrivals`: theirs, their last
    arrivals found once) and P2P pairs (`waiting.unions`)."""
    cuts = [waiting.cuts_at(i, moved, a.origin_ns, a.latest_ns)
            for i, a in zip(instances, arrivals, strict=True) if a.timed]  # fmt: skip
    cuts += [waiting.cuts(p.instance, moved) for p in pairs]
    return waiting.unions_of(cuts, exposed)


@dataclass(frozen=True)
class Drawn:
    """One instance as a timeline draws it: each member's (waiting, transfer) on its clock
    plus its base (`waiting.pieces`), and the last arriver (None: none arrived last)."""

    instance: Instance
    pieces: dict[int, tuple[tuple[int, int], tuple[int, int]]]
    last: int | None


def drawn(
    results: Mapping[int, RankResult], infos: Mapping[int, RankInfo]
) -> tuple[list[Drawn], Found]:
    """The instances a window's waiting and transfer split covers (matched collectives and
    P2P pairs whose members' starts are known, as `window` splits), drawn, and the window's
    clock offsets."""
    matched, found, arrivals = aligned(results, infos)
    untimed, moved = _untimed(infos), shifts(found)
    pairs = [p.instance for p in _paired(results, infos).pairs]
    kept = [(i, a) for i, a in zip(matched.instances, arrivals, strict=True) if a.timed]
    kept += [(i, skew.arrival(i, moved)) for i in pairs if untimed.isdisjoint(i.starts)]
    return [Drawn(i, waiting.pieces(i, moved), a.last) for i, a in kept], found


def _alltoall_calls(
    results: Mapping[int, RankResult], infos: Mapping[int, RankInfo]
) -> dict[int, AllToAllCalls]:
    """Each rank's all-to-all calls (`alltoallv.calls_of`), as its facts carry them."""
    found = {r: alltoallv.calls_of(x, infos[r].pg_ranks if r in infos else {})
             for r, x in results.items()}  # fmt: skip
    return {rank: calls for rank, calls in found.items() if calls is not None}


def _members(infos: Mapping[int, RankInfo]) -> dict[str, Sequence[int]]:
    """Each process group's ranks as the first trace that lists it gives them (pg_config)."""
    members: dict[str, Sequence[int]] = {}
    for info in infos.values():
        for group, ranks in info.pg_ranks.items():
            members.setdefault(group, ranks)
    return members


def _pipeline(
    results: Mapping[int, RankResult],
    exposed: dict[int, waiting.Exposed],
    pairs: Sequence[p2p.Pair],
    moved: Mapping[int, tuple[IntervalSet, IntervalSet]],
    found: Found,
) -> stages.Tally:
    """The window's P2P stage tally; `moved`: each rank's (W, T) (`waiting.unions`)."""
    window = stages.Window(
        exposed=exposed,
        in_steps={rank: result.in_steps for rank, result in results.items()},
        steps={rank: len(result.steps) for rank, result in results.items()},
    )
    transfer = {rank: both[1] for rank, both in moved.items()}
    return stages.window_tally(pairs, transfer, shifts(found), window)


def pooled(windows: Sequence[CrossRank], clocked: bool = True) -> CrossRank:
    """A run's facts: every window's instances, matching counters summed. A left fold but
    for the clocks (a median over windows): the pool of windows 1 … k pooled with window k+1
    is the pool of windows 1 … k+1, field for field, the clocks aside. Without `clocked` the
    clocks are left out (a single window is given back as it is, its clocks with it)."""
    if len(windows) == 1:
        return windows[0]
    return CrossRank(
        matching=_merge_matching([w.matching for w in windows]),
        clocks=merge_clocks([w.clocks for w in windows]) if clocked else Clocks(),
        arrivals=skew.pool([w.arrivals for w in windows]),
        instances=sum((w.instances for w in windows), Counter()),
        points={k: _joined(w.points.get(k) for w in windows) for k in _keys(windows)},
        factors=_common_factors([w.factors for w in windows]),
        split=waiting.pooled([w.split for w in windows]),
        alltoallv=alltoallv.pooled([w.alltoallv for w in windows]),
        pipeline=stages.pooled(w.pipeline for w in windows),
        sizes={g: n for w in windows for g, n in w.sizes.items()},
    )


def with_clocks(pool: CrossRank, windows: Sequence[CrossRank]) -> CrossRank:
    """`pooled(windows, clocked=False)` with the run's clocks: the median over windows (a single
    window is its own pool, its clocks with it)."""
    if len(windows) == 1:
        return pool
    return replace(pool, clocks=merge_clocks([w.clocks for w in windows]))


def _group_sizes(arrivals: Iterable[skew.Arrival]) -> dict[str, int]:
    """Each process group's size n, the largest its instances give (n known)."""
    sizes: dict[str, int] = {}
    for item in arrivals:
        if item.group_size is not None:
            sizes[item.group] = max(item.group_size, sizes.get(item.group, 0))
    return sizes


def _common_factors(
    parts: Iterable[Mapping[tuple[str, str], float]],
) -> dict[tuple[str, str], float]:
    found: dict[tuple[str, str], float] = {}
    for part in parts:
        for key, factor in part.items():
            found[key] = factor if found.get(key, factor) == factor else math.nan
    return found


def _joined(parts: Iterable[array[float] | None]) -> array[float]:
    joined = array("d")
    for part in parts:
        joined.extend(part or ())
    return joined


def _pairs(flat: array[float]) -> list[tuple[float, float]]:
    """The α-β points of a `_Points` entry as (S·F, T s) pairs."""
    return list(zip(flat[::2], flat[1::2], strict=True))


def _keys(windows: Sequence[CrossRank]) -> list[tuple[str, str]]:
    return sorted({k for w in windows for k in w.points})


def _merge_matching(parts: Sequence[Matching]) -> Matching:
    total = Matching()
    for part in parts:
        total.instances += part.instances
        total.by_seq += part.by_seq
        total.by_index += part.by_index
        total.unmatched += part.unmatched
        total.point_to_point += part.point_to_point
        total.desync_count += part.desync_count
        total.p2p_pairs += part.p2p_pairs
        total.p2p_unpaired += part.p2p_unpaired
        total.p2p_desyncs += part.p2p_desyncs
        total.desyncs.extend(part.desyncs[: MAX_DESYNCS - len(total.desyncs)])
        for name, group in part.groups.items():
            into = total.groups.setdefault(name, GroupMatch(members=group.members, key=group.key))
            into.ranks_with_traces = sorted(
                set(into.ranks_with_traces) | set(group.ranks_with_traces)
            )
            into.instances += group.instances
            into.desyncs += group.desyncs
            into.unmatched += group.unmatched
    total.groups = {name: total.groups[name] for name in sorted(total.groups, key=group_order)}
    return total


def merge_clocks(parts: Sequence[Clocks]) -> Clocks:
    ranks: dict[str, list[ClockOffset]] = {}
    for part in parts:
        for rank, offset in part.per_rank.items():
            ranks.setdefault(rank, []).append(offset)
    per_rank = {
        rank: ClockOffset(
            offset_s=statistics.median(o.offset_s for o in found),
            uncertainty_s=_median_known([o.uncertainty_s for o in found]),
            samples=sum(o.samples for o in found),
        )
        for rank, found in sorted(ranks.items(), key=lambda item: int(item[0]))
    }
    references = [p.reference_rank for p in parts if p.reference_rank is not None]
    return Clocks(
        reference_rank=min(references) if references else None,
        method=_RUN_CLOCKS if per_rank else NO_MATCH,
        per_rank=per_rank,
    )


def _median_known(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _alpha_beta_points(
    arrivals: Sequence[skew.Arrival],
) -> tuple[_Points, dict[tuple[str, str], float]]:
    """(S·F, wait-free seconds) per (group, type), for instances of known size and F; and F
    per (group, type) over those instances, NaN when they differ (`_common_factors`)."""
    points: _Points = {}
    factors: dict[tuple[str, str], float] = {}
    known: dict[tuple[str, int | None], float | None] = {}  # bus_factor's, once a pair
    for item in arrivals:
        kind = (item.collective, item.group_size)
        factor = known[kind] if kind in known else known.setdefault(kind, bus_factor(*kind))
        if item.message_bytes is not None and factor is not None and item.fastest_ns > 0:
            key = (item.group, item.collective)
            into = points.get(key)
            if into is None:
                into = points[key] = array("d")
            into.extend((item.message_bytes * factor, item.fastest_ns * 1e-9))
            factors[key] = factor if factors.get(key, factor) == factor else math.nan
    return points, factors


def with_points(
    table: dict[str, dict[str, AlphaBeta]], cross: CrossRank
) -> dict[str, dict[str, AlphaBeta]]:
    """`table` with points (PLOT_POINTS at most) on each collective type's fit of most bus
    bytes, for the PLOT_FITS types of most bus bytes: one plot per type, its main group."""
    fits = [(g, k, fit) for g, kinds in table.items() for k, fit in kinds.items()]
    fits.sort(key=lambda item: -(item[2].bus_bytes or 0.0))
    largest = list({kind: (group, fit) for group, kind, fit in reversed(fits)}.items())
    largest.sort(key=lambda item: -(item[1][1].bus_bytes or 0.0))
    for kind, (group, fit) in largest[:PLOT_FITS]:
        points = _pairs(cross.points.get((group, kind), array("d")))
        factor = cross.factors.get((group, kind), math.nan)
        fit.points = [points[i] for i in thin_indices(len(points), PLOT_POINTS)]
        fit.points_total = len(points)
        fit.bus_factor = None if math.isnan(factor) else factor
    return table


def alpha_beta(cross: CrossRank, peak_Bps: float | None) -> dict[str, dict[str, AlphaBeta]]:
    """Per (process group, collective type): the α-β fit over wait-free durations."""
    table: dict[str, dict[str, AlphaBeta]] = {}
    for group, kind in sorted(cross.instances, key=lambda k: (group_order(k[0]), k[1])):
        points = cross.points.get((group, kind), array("d"))
        table.setdefault(group, {})[kind] = fitted(cross.instances[(group, kind)], points, peak_Bps)
    return table


def fitted(instances: int, flat: array[float], peak_Bps: float | None) -> AlphaBeta:
    """The α-β fit of `instances` over their points (S·F, T s) one after the other."""
    points = _pairs(flat)
    line = alphabeta.fit(points)
    return AlphaBeta(
        instances=instances,
        sizes=line.sizes,
        alpha_s=line.alpha_s,
        beta_Bps=line.beta_Bps,
        r2=line.r2,
        peak_ratio=ratio(line.beta_Bps, peak_Bps),
        latency_bound=alphabeta.latency_bound(line, points),
        na_reason=line.reason,
        bus_bytes=math.fsum(size for size, _ in points) if points else None,
    )
