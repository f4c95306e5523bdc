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

import itertools
import math
import operator
import statistics
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress
from typing import Final, TypeVar, cast

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


def arrivals(
    instances: Iterable[Instance],
    offsets: Mapping[int, float],
    untimed: set[int] | frozenset[int] = frozenset(),
) -> list[Arrival]:
    """`arrival` of each instance, the same floats, worked a run of instances with the same
    members at a time (a group's, in matching's order) as columns, one per member (`_block`);
    one with a member in `untimed` (its start unknown) marked `timed=False`."""
    listed = list(instances)
    keys = map(tuple, map(_STARTS, listed))
    found: list[Arrival] = []
    for members, block in itertools.groupby(zip(keys, listed, strict=True), _FIRST):
        timed = not untimed or untimed.isdisjoint(members)
        found += _block(members, list(map(_SECOND, block)), offsets, timed)
    return found


def _block(
    members: tuple[int, ...], block: list[Instance], offsets: Mapping[int, float], timed: bool
) -> list[Arrival]:
    """The arrivals of instances whose members are `members` (in that order), each step one
    pass in C over a member's column (its starts, durations, aligned starts, waits)."""
    sub, get = operator.sub, offsets.get
    starts = [list(map(operator.itemgetter(m), map(_STARTS, block))) for m in members]
    lengths = [list(map(operator.itemgetter(m), map(_DURATIONS, block))) for m in members]
    origins = _across(min, starts)  # below: (s - origin) - shift, as `arrival` takes it
    aligned = [list(map(sub, map(sub, column, origins), itertools.repeat(get(m, 0.0))))
               for m, column in zip(members, starts, strict=True)]  # fmt: skip
    latest = _across(max, aligned)
    gaps = [list(map(sub, latest, column)) for column in aligned]
    skews = list(map(sub, latest, _across(min, aligned)))
    at_latest = list(zip(*[map(operator.eq, column, latest) for column in aligned], strict=True))
    lasts = [members[operator.indexOf(row, True)] if skew > 0 and sum(row) == 1 else None
             for skew, row in zip(skews, at_latest, strict=True)]  # fmt: skip
    rows = zip(*gaps, strict=True)
    waits = list(map(dict, map(zip, itertools.repeat(members), rows)))
    within = zip(*[map(min, g, d) for g, d in zip(gaps, lengths, strict=True)], strict=True)
    return list(map(Arrival, map(_GROUP, block), map(_KIND, block), skews, lasts, waits,
                    _across(min, lengths), map(_SIZE, block), map(_N, block),
                    map(math.fsum, within), map(math.fsum, zip(*lengths, strict=True)),
                    itertools.repeat(timed), origins, latest))  # fmt: skip


def _across(pick: Callable[..., _T], columns: Sequence[Sequence[_T]]) -> list[_T]:
    """`pick` (min or max) of each row across the columns (one column: itself)."""
    return list(columns[0]) if len(columns) == 1 else list(map(pick, *columns))


_T = TypeVar("_T")
_STARTS: Final = operator.attrgetter("starts")
_DURATIONS: Final = operator.attrgetter("durations")
_GROUP: Final = operator.attrgetter("group")
_KIND: Final = operator.attrgetter("collective")
_SIZE: Final = operator.attrgetter("message_bytes")
_N: Final = operator.attrgetter("group_size")
_FIRST: Final = operator.itemgetter(0)
_SECOND: Final = operator.itemgetter(1)
_ZEROS: Final = itertools.repeat(0.0)  # a rank without an offset: 0.0

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

    def extend_rows(
        self, waits: Iterable[float], members: Iterable[frozenset[int]], last: Iterable[int]
    ) -> None:
        """`append` of each (wait, members, last) given as columns."""
        self._waits.extend(waits)
        self._members.extend(map(self._set, members))
        self._last.extend(last)

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
    """The arrivals' tally, each sum taken in the arrivals' order: per collective type, and
    per rank (`_per_rank`), each a pass in C over the arrivals' columns."""
    found = Tally()
    waits = list(map(_WAITS, arrivals))
    totals = list(map(math.fsum, map(dict.values, waits)))
    lasts = list(map(_LAST, arrivals))
    kinds = list(map(_KIND, arrivals))
    for kind in dict.fromkeys(kinds):
        mine = list(map(kind.__eq__, kinds))
        found.skews[kind] = array("d", compress(map(_SKEW, arrivals), mine))
        found.lasts[kind] = array(
            "i", map(_NONE_AS_MINUS_ONE.get, compress(lasts, mine), compress(lasts, mine))
        )
        found.waits[kind] = _running(compress(totals, mine))
        found.in_call[kind] = _running(compress(map(_IN_CALL, arrivals), mine))
        found.call[kind] = _running(compress(map(_CALL, arrivals), mine))
    found.per_rank = _per_rank(waits, lasts, totals)
    with_last = list(map(operator.is_not, lasts, itertools.repeat(None)))
    found.draws.extend_rows(compress(totals, with_last), map(frozenset, compress(waits, with_last)),
                            compress(lasts, with_last))  # fmt: skip
    return found


def _per_rank(
    waits: Sequence[dict[int, float]], lasts: Sequence[int | None], totals: Sequence[float]
) -> dict[int, RankArrival]:
    """Each rank's sums (ranks as they first appear), each of its terms added in turn in the
    arrivals' order: the terms of every rank in one list, sorted by rank (a stable sort keeps
    each rank's in order) and summed rank by rank."""
    with_last = list(map(operator.is_not, lasts, itertools.repeat(None)))
    shares = map(operator.truediv, itertools.repeat(1), map(len, waits))
    waited = _by_rank(itertools.chain.from_iterable(map(dict.items, waits)))
    shared = _by_rank(
        itertools.chain.from_iterable(
            map(zip, compress(waits, with_last), map(itertools.repeat, compress(shares, with_last)))
        )
    )
    named = cast("Iterable[int]", compress(lasts, with_last))  # a last arriver: not None
    caused = _by_rank(zip(named, compress(totals, with_last), strict=True))
    return {
        rank: RankArrival(
            instances=len(terms),
            waited_s=_running(map(operator.mul, terms, _NSS)),
            expected_last=_running(shared.get(rank, ())),
            last=len(caused.get(rank, ())),
            caused_wait_s=_running(map(operator.mul, caused.get(rank, ()), _NSS)),
        )
        for rank, terms in waited.items()
    }


def _by_rank(terms: Iterable[tuple[int, float]]) -> dict[int, list[float]]:
    """Each rank's terms in their order (ranks as they first appear)."""
    listed = list(terms)
    order = dict.fromkeys(map(_FIRST, listed))
    listed.sort(key=_FIRST)
    owners = list(map(_FIRST, listed))
    values = list(map(_SECOND, listed))
    return {rank: values[bisect_left(owners, rank) : bisect_right(owners, rank)] for rank in order}


_NSS: Final = itertools.repeat(_NS)
_NONE_AS_MINUS_ONE: Final = {None: -1}
_WAITS: Final = operator.attrgetter("waits")
_LAST: Final = operator.attrgetter("last")
_SKEW: Final = operator.attrgetter("skew_ns")
_IN_CALL: Final = operator.attrgetter("in_call_ns")
_CALL: Final = operator.attrgetter("call_ns")


def _running(terms: Iterable[float]) -> float:
    """0.0 plus each term in turn (not `sum`, whose float summation varies by version)."""
    *_, total = itertools.accumulate(terms, operator.add, initial=0.0)
    return total


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
    times = [(wait, 1 / len(members)) for wait, members, _ in draws if rank in members]
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
