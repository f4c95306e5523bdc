"""Arrival skew at collectives, the ranks that make the others wait, step-time stragglers (pure).

For each matched instance, on clocks aligned by `clocks`: skew = latest start - earliest
start; the last arriver is the member with the latest start (none when all start together);
each other member waited (last start - its start) for it. Per rank: how often it arrived last
against how often it would by chance (1/members per instance), the wait it caused and the wait
it suffered. A wait counted within the call (`wait_in_call_s`) is at most the member's own
call duration, so its share of the members' call time can never exceed 1.

The rank the others wait for (never "slowest": its own step can be the shortest) is named only
when the evidence is clear: it caused at least half of all waiting, arrived last at least
`_MIN_LAST` times, and collecting that much of the waiting by chance (each instance's last
arriver drawn at random among its members, the instance's wait going to it) or arriving last
that often by chance has probability at most `_CLEAR_P`, Bonferroni-corrected over the two tests
and the ranks.

Step-time stragglers: z over ranks of each rank's mean step time, flagged by the robust
(median/MAD) z ≥ 3.5 and at least 5% above the median.
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec
from commscope.model.schema import (
    CollectiveSkew,
    RankArrival,
    Skew,
    SkewInstances,
    Stragglers,
)
from commscope.model.units import duration, p_value
from commscope.pipeline.matching import Instance
from commscope.pipeline.stats import mad, summarize, thin_indices

_CLEAR_P: Final = 0.05
_RESOLUTION: Final = 1000
_EXACT_LIMIT: Final = 500
_CLEAR_SHARE: Final = 0.5
_MIN_LAST: Final = 3
_ROBUST_Z: Final = 3.5
_MIN_EXCESS: Final = 0.05
_MIN_RANKS: Final = 3
_NS: Final = 1e-9


class Arrival(msgspec.Struct, frozen=True, gc=False):
    """One instance after alignment: who came last and who waited how long (ns). A Struct
    as `matching.Instance` is, for the same reason (one an instance)."""

    group: str
    collective: str
    skew_ns: float
    last: int | None
    waits: dict[int, float]  # every member -> its wait for the last arriver (0 for the last)
    fastest_ns: int  # the shortest member duration: the one that did not wait
    message_bytes: int | None
    group_size: int | None
    in_call_ns: float = 0.0  # Σ over members of min(wait, own duration)
    call_ns: float = 0.0  # Σ over members of their durations
    timed: bool = True  # False: a member's start is unknown (skew and waits are not read)
    origin_ns: int = 0  # the earliest start (ns, the members' own clocks plus their bases)
    latest_ns: float = 0.0  # the last arrival on aligned clocks, from `origin_ns` (`waiting`)


def arrival(instance: Instance, offsets: Mapping[int, float]) -> Arrival:
    """Each member's wait for the last arriver, latest - s_m, found once: the skew is the
    largest (latest - min s: rounding keeps the order), the last arriver's is exactly 0 (a
    wait is 0 exactly when the start is the latest)."""
    starts, durations = instance.starts, instance.durations
    origin = min(starts.values())  # floats near 0: a 1.7e18 ns start is 256 ns coarse
    get = offsets.get
    aligned = [(s - origin) - get(r, 0.0) for r, s in starts.items()]
    latest = max(aligned)
    waits = dict(zip(starts, [latest - s for s in aligned], strict=True))
    skew = latest - min(aligned)
    alone = skew > 0 and aligned.count(latest) == 1
    return Arrival(
        group=instance.group,
        collective=instance.collective,
        skew_ns=skew,
        last=list(starts)[aligned.index(latest)] if alone else None,
        waits=waits,
        fastest_ns=min(durations.values()),
        message_bytes=instance.message_bytes,
        group_size=instance.group_size,
        in_call_ns=math.fsum([min(wait, durations[r]) for r, wait in waits.items()]),
        call_ns=math.fsum(durations.values()),
        origin_ns=origin,
        latest_ns=latest,
    )


_Draw = tuple[float, frozenset[int], int]  # (Σ wait ns, the members, the last arriver)


class Draws:
    """The instances with a last arriver, as `_Draw`s, packed: 16 bytes each (a float64 and
    two int32), each distinct member set kept once. A window's cross-rank facts are cached
    for the whole run, so they are kept as small as they can be exactly."""

    def __init__(self) -> None:
        self._waits = array("d")
        self._members = array("i")  # index into _sets
        self._last = array("i")
        self._sets: list[frozenset[int]] = []
        self._index: dict[frozenset[int], int] = {}

    def append(self, wait: float, members: frozenset[int], last: int) -> None:
        self._waits.append(wait)
        self._members.append(self._set(members))
        self._last.append(last)

    def extend(self, other: Draws) -> None:
        renumbered = [self._set(members) for members in other._sets]
        self._waits.extend(other._waits)
        self._members.extend(renumbered[index] for index in other._members)
        self._last.extend(other._last)

    def _set(self, members: frozenset[int]) -> int:
        index = self._index.setdefault(members, len(self._sets))
        if index == len(self._sets):
            self._sets.append(members)
        return index

    def __len__(self) -> int:
        return len(self._waits)

    def chances(self, rank: int) -> list[tuple[float, float]]:
        """(Σ wait, 1 / members) of each draw `rank` is a member of, in order: each member
        set's test and share found once, not once a draw."""
        inside = [rank in members for members in self._sets]
        shares = [1 / len(members) for members in self._sets]
        pairs = zip(self._waits, self._members, strict=True)
        return [(wait, shares[index]) for wait, index in pairs if inside[index]]

    def __iter__(self) -> Iterator[_Draw]:
        sets = self._sets
        for wait, index, last in zip(self._waits, self._members, self._last, strict=True):
            yield wait, sets[index], last


@dataclass
class Tally:
    """What the skew section needs of a set of arrivals, poolable across windows: per-rank
    sums, per-collective skews (float64 arrays: 8 bytes an instance), and per instance with a
    last arriver a `_Draw` for the chance tests. No per-member times are kept."""

    per_rank: dict[int, RankArrival] = field(default_factory=dict)
    skews: dict[str, array[float]] = field(default_factory=dict)
    waits: dict[str, float] = field(default_factory=dict)
    in_call: dict[str, float] = field(default_factory=dict)  # Σ waits within the calls
    call: dict[str, float] = field(default_factory=dict)  # Σ member call durations
    draws: Draws = field(default_factory=Draws)
    lasts: dict[str, array[int]] = field(default_factory=dict)  # beside `skews`: -1 for none


def tally(arrivals: Sequence[Arrival]) -> Tally:
    """The arrivals' tally, each sum taken in the arrivals' order."""
    found = Tally()
    per_rank, draws, skews, lasts = found.per_rank, found.draws, found.skews, found.lasts
    sums = (waited, in_call, call) = (found.waits, found.in_call, found.call)
    for item in arrivals:
        kind, waits, last = item.collective, item.waits, item.last
        total = math.fsum(waits.values())
        if kind not in skews:
            skews[kind], lasts[kind] = array("d"), array("i")
            for into in sums:
                into[kind] = 0.0
        skews[kind].append(item.skew_ns)
        lasts[kind].append(-1 if last is None else last)
        waited[kind] += total
        in_call[kind] += item.in_call_ns
        call[kind] += item.call_ns
        share = 0.0 if last is None else 1 / len(waits)
        for rank, wait in waits.items():
            entry = per_rank.get(rank)
            if entry is None:
                entry = per_rank[rank] = RankArrival()
            entry.instances += 1
            entry.waited_s += wait * _NS
            if last is not None:
                entry.expected_last += share
        if last is not None:
            entry = per_rank[last]
            entry.last += 1
            entry.caused_wait_s += total * _NS
            draws.append(total, frozenset(waits), last)
    return found


def pool(parts: Sequence[Tally]) -> Tally:
    """Several windows' tallies as one (the parts are left as they were)."""
    found = Tally()
    for part in parts:
        for rank, entry in part.per_rank.items():
            into = found.per_rank.setdefault(rank, RankArrival())
            into.instances += entry.instances
            into.last += entry.last
            into.expected_last += entry.expected_last
            into.caused_wait_s += entry.caused_wait_s
            into.waited_s += entry.waited_s
        for kind, skews in part.skews.items():
            found.skews.setdefault(kind, array("d")).extend(skews)
            found.lasts.setdefault(kind, array("i")).extend(part.lasts.get(kind, ()))
            found.waits[kind] = found.waits.get(kind, 0.0) + part.waits[kind]
            found.in_call[kind] = found.in_call.get(kind, 0.0) + part.in_call.get(kind, 0.0)
            found.call[kind] = found.call.get(kind, 0.0) + part.call.get(kind, 0.0)
        found.draws.extend(part.draws)
    return found


def skew(arrivals: Sequence[Arrival]) -> Skew:
    return section(tally(arrivals))


def section(found: Tally, plot_points: int = 0) -> Skew:
    """The skew section; with `plot_points`, each collective's instances (at most that many)."""
    per_rank = {
        rank: msgspec.structs.replace(
            entry, last_share=entry.last / entry.instances if entry.instances else None
        )
        for rank, entry in sorted(found.per_rank.items())
    }
    awaited, evidence = _waited_for(found.draws, per_rank)
    return Skew(
        per_collective={
            kind: CollectiveSkew(
                instances=len(skews),
                skew_s=summarize([x * _NS for x in skews]),
                wait_s=found.waits[kind] * _NS,
                wait_in_call_s=found.in_call.get(kind, 0.0) * _NS,
                call_time_s=found.call.get(kind, 0.0) * _NS,
            )
            for kind, skews in sorted(found.skews.items())
        },
        per_rank={str(r): a for r, a in per_rank.items()},
        waited_for_rank=awaited,
        evidence=evidence,
        instances=instances(found, plot_points) if plot_points else {},
    )


def instances(found: Tally, cap: int) -> dict[str, SkewInstances]:
    """Per collective type, at most `cap` of its instances (evenly thinned, in order)."""
    series = {}
    for kind, skews in sorted(found.skews.items()):
        lasts = found.lasts.get(kind, array("i"))
        kept = thin_indices(len(skews), cap)
        series[kind] = SkewInstances(
            skew_s=[skews[i] * _NS for i in kept],
            last=[lasts[i] if i < len(lasts) and lasts[i] >= 0 else None for i in kept],
            total=len(skews),
        )
    return series


def _waited_for(draws: Draws, ranks: Mapping[int, RankArrival]) -> tuple[int | None, str]:
    """(the rank, why) when the evidence is clear; (None, why not) otherwise."""
    total = math.fsum(r.caused_wait_s for r in ranks.values())
    if not draws or total <= 0:
        return None, "no collective matched across ranks with a last arriver"
    rank = max(sorted(ranks), key=lambda r: ranks[r].caused_wait_s)
    entry = ranks[rank]
    share = entry.caused_wait_s / total
    p, clear = verdict(draws, rank, entry, len(ranks), share)
    facts = (
        f"rank {rank} arrived last at {entry.last} of {entry.instances} matched collectives "
        f"({entry.expected_last:.1f} expected by chance) and caused {share:.0%} of all "
        f"waiting ({duration(entry.caused_wait_s)} of {duration(total)}); "
        f"{p_value(p)} that chance does this to one of {len(ranks)} ranks"
    )
    if clear:
        return rank, facts
    return None, f"no rank clearly the one the others wait for: {facts}"


def verdict(
    draws: Draws, rank: int, entry: RankArrival, ranks: int, share: float
) -> tuple[float, bool]:
    """(p, whether `rank` is clearly the one the others wait for): p = the chance, over
    `ranks` ranks (Bonferroni), that one of them arrives last that often or collects that much
    of the waiting by chance; clear: p ≤ `_CLEAR_P`, last at least `_MIN_LAST` times and
    `share` (of all waiting it caused) at least `_CLEAR_SHARE`."""
    p = _chance_of(draws, rank, entry) * ranks
    return p, share >= _CLEAR_SHARE and entry.last >= _MIN_LAST and p <= _CLEAR_P


def _chance_of(draws: Draws, rank: int, entry: RankArrival) -> float:
    """The smaller of two chances, doubled (Bonferroni): arriving last that often, and
    collecting that much of the waiting, if each instance's last arriver were random."""
    times = draws.chances(rank)
    counts = [(1.0, chance) for _, chance in times]
    by_count = wait_tail(counts, entry.last, resolution=len(counts)) if counts else 1.0
    return 2 * min(by_count, wait_tail(times, entry.caused_wait_s / _NS))


def wait_tail(
    instances: Sequence[tuple[float, float]], observed: float, resolution: int = _RESOLUTION
) -> float:
    """P(Σ w_i B_i ≥ observed), B_i ~ Bernoulli(chance_i) independent, over (w_i, chance_i):
    the chance that a rank arriving last at random collects `observed` of wait. Up to
    `_EXACT_LIMIT` instances: weights rounded up to units of Σw / `resolution` (the p-value
    errs high, never low), a sum that reaches the target absorbed there, so the work is
    instances x resolution. Beyond: the normal approximation (Lyapunov's central limit)."""
    total = math.fsum(w for w, _ in instances)
    if observed <= 0 or total <= 0:
        return 1.0
    if len(instances) > _EXACT_LIMIT:
        return _normal_tail(instances, observed)
    unit = total / resolution
    target = max(1, math.ceil(observed / unit - 1e-9))
    dist = [1.0] + [0.0] * target  # dist[s]: P(sum = s) below the target; dist[target]: ≥
    for weight, chance in instances:
        step = math.ceil(weight / unit - 1e-9)
        if step <= 0:
            continue
        reached = chance * math.fsum(dist[max(0, target - step) : target])
        stay = 1 - chance
        moved = [0.0] * step + dist[: max(0, target - step)]
        dist = [x * stay + y * chance for x, y in zip(dist[:target], moved, strict=False)] + [
            dist[target] + reached
        ]
    return min(1.0, dist[target])


def _normal_tail(instances: Sequence[tuple[float, float]], observed: float) -> float:
    centre = math.fsum(w * p for w, p in instances)
    spread = math.sqrt(math.fsum(w * w * p * (1 - p) for w, p in instances))
    if spread == 0:
        return 1.0 if observed <= centre else 0.0
    return 0.5 * math.erfc((observed - centre) / (spread * math.sqrt(2)))


def stragglers(mean_step_s: Mapping[int, float]) -> Stragglers:
    """Ranks whose mean step time stands out (needs `_MIN_RANKS` ranks with steps)."""
    if len(mean_step_s) < _MIN_RANKS:
        return Stragglers(evidence=f"needs step times of {_MIN_RANKS} ranks or more")
    values = list(mean_step_s.values())
    centre, spread = statistics.fmean(values), statistics.pstdev(values)
    median = statistics.median(values)
    scale = _robust_scale(values, median)
    z = {str(r): (v - centre) / spread if spread else 0.0 for r, v in mean_step_s.items()}
    robust = {str(r): (v - median) / scale if scale else 0.0 for r, v in mean_step_s.items()}
    flagged = [
        r
        for r, v in sorted(mean_step_s.items())
        if robust[str(r)] >= _ROBUST_Z and v >= median * (1 + _MIN_EXCESS)
    ]
    return Stragglers(z=z, robust_z=robust, flagged=flagged, evidence=_straggler_text(
        flagged, mean_step_s, median, robust), robust_z_threshold=_ROBUST_Z)  # fmt: skip


def _robust_scale(values: Sequence[float], median: float) -> float:
    """1.4826 x MAD, or 1.2533 x the mean absolute deviation when the MAD is 0."""
    spread = mad(values, median)
    return 1.4826 * spread if spread else 1.2533 * statistics.fmean(abs(v - median) for v in values)


def _straggler_text(
    flagged: list[int], steps: Mapping[int, float], median: float, robust: Mapping[str, float]
) -> str:
    if not flagged:
        worst = max(sorted(steps), key=lambda r: steps[r])
        return (
            f"no step-time straggler: the slowest, rank {worst}, takes "
            f"{duration(steps[worst])} against a median of {duration(median)} "
            f"(robust z {robust[str(worst)]:.1f})"
        )
    return "; ".join(
        f"rank {r}: {duration(steps[r])} per step against a median of {duration(median)} "
        f"(+{steps[r] / median - 1:.0%}, robust z {robust[str(r)]:.1f})"
        for r in flagged
    )
