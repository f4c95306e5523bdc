"""Clock offsets between ranks, from collectives that complete together (pure).

Ranks on different hosts read different clocks. A collective ends at nearly the same instant
on every member (whoever arrived first waits for the last, then all finish together), so the
ends of matched instances tell the offsets: end(rank, instance) = centre(instance) +
offset(rank) + noise. Two stages.

(1) Per member set (the instances whose traced members are the same ranks, in practice one
process group), a median polish: the centre of an instance is the median of its members'
aligned ends, a member's offset moves by the median of its residuals, until nothing moves. This
gives the members' offsets relative to each other, robust to ends delayed for reasons other
than the clock. The set's noise scale (one end's sigma) is 0.7413 x the median |double
difference| of neighbouring members at neighbouring instances (free of offsets and centres),
floored at `_SCALE_FLOOR_NS`; a set of one instance takes the median scale of the others.

(2) One weighted least-squares fit of every rank's offset to all sets' relative offsets, each
weighted by its precision, instances / (pi/2 x scale^2) (the variance of a median), so a set of
many same-clock instances says only what it knows (its members' differences) and never outvotes
the few instances that link two hosts. Solved by conjugate gradients preconditioned by the
diagonal, on the normal equations (a weighted graph Laplacian, one pass over the memberships
per iteration), reweighted by Huber's rule against sets that disagree with the rest (IRLS).

Offsets are relative to the lowest rank of each connected set of ranks (ranks linked by shared
instances). A rank's uncertainty is the standard error of its offset minus its reference's
under the fit's weights (independent noise per end, normal in its core, the Huber weights taken
as fixed), times the fit's Birge ratio when the sets disagree more than their scales say: exact
for at most `_DRAWS` ranks, else the spread of re-fits under `_DRAWS` seeded random draws
(relative error about 11%). None when no residual says how noisy the ends are. Ranks on one
host come out equal within it.
"""

from __future__ import annotations

import itertools
import math
import operator
import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from commscope.model.schema import ClockOffset, Clocks
from commscope.pipeline.matching import Instance
from commscope.pipeline.stats import mad

_MAX_ROUNDS: Final = 50
_SETTLED_NS: Final = 0.5
_SCALE_FLOOR_NS: Final = 100.0  # noise scale of one end: below this, timestamps are not believed
_HUBER_K: Final = 1.345
_MAX_REWEIGHTS: Final = 20
_DRAWS: Final = 40  # noise draws for the standard errors: relative error 1/sqrt(2 x DRAWS)
METHOD: Final = (
    "per process group median polish of matched collectives' end times, combined by "
    "precision-weighted least squares (Huber); relative to the lowest rank"
)
NO_MATCH: Final = "no collective matched across ranks"
_MEDIAN_VAR: Final = math.pi / 2  # a median's variance over a mean's (normal noise)
_NORMAL_MAD: Final = 1.4826
_HALF_IQR: Final = 1 / (2 * 0.6745)  # sigma from the median |N(0, 4 sigma^2)|

_YEAR_2000_NS: Final = 946_684_800 * 10**9

_Ends = dict[int, int]  # rank -> end time of one instance (ns)


def epoch_ns(base_time_ns: int | None, trace_ns: int | None) -> int | None:
    """A trace time in ns since the epoch, when the trace's time base says: Kineto writes
    either epoch timestamps, or ones relative to `baseTimeNanoseconds`; a sum before 2000
    is a clock without a time base (time since boot)."""
    if trace_ns is None:
        return None
    found = (base_time_ns or 0) + trace_ns
    return found if found >= _YEAR_2000_NS else None


Found = dict[int, tuple[float, float | None, int]]  # rank -> (offset ns, uncertainty, samples)


@dataclass
class Link:
    """One member set's evidence: its members' offsets relative to each other (`shifts`),
    over `instances` instances, the noise scale of one end, and `dof` the double differences
    that scale rests on (0: none, the scale is borrowed)."""

    members: tuple[int, ...]  # indices into the ranks
    shifts: list[float]
    instances: int
    scale: float
    dof: int


# ---------------------------------------------------------------- stage 1: per member set


def _polish(rows: Sequence[Sequence[int]]) -> list[float]:
    """Median polish of instances (rows) x members (columns): the members' offsets, centred
    on their mean. Worked column by column (a member's values in one list)."""
    columns = list(zip(*rows, strict=True))
    shifts = [0.0] * len(columns)
    for _ in range(_MAX_ROUNDS):
        aligned = [[v - s for v in column] for column, s in zip(columns, shifts, strict=True)]
        centres = _row_medians(aligned)
        moves = [_median(list(map(operator.sub, column, centres))) for column in aligned]
        shifts = [s + m for s, m in zip(shifts, moves, strict=True)]
        if all(abs(m) < _SETTLED_NS for m in moves):
            break
    mean = math.fsum(shifts) / len(shifts)
    return [s - mean for s in shifts]


def _row_medians(columns: Sequence[Sequence[float]]) -> list[float]:
    """Each row's `_median` over the columns; two columns: (a + b) / 2, `_median`'s sum of
    the two in either order (a float sum commutes)."""
    if len(columns) == 2:
        return [(a + b) / 2 for a, b in zip(*columns, strict=True)]
    return [_median(row) for row in zip(*columns, strict=True)]


def _median(values: Sequence[float]) -> float:
    """`statistics.median` (the same arithmetic, value for value) without its overheads:
    called once per instance and round of the polish."""
    ordered = sorted(values)
    half = len(ordered) // 2
    return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2


# member set (sorted ranks) -> its instances' ends less each instance's earliest, in the
# set's order (exact integers: epoch ns lose ns as floats)
_Sets = dict[tuple[int, ...], list[list[int]]]


def _sets(samples: Iterable[_Ends]) -> _Sets:
    """The samples by member set, each set where it is first seen."""
    by_set: _Sets = {}
    for ends in samples:
        key = tuple(sorted(ends))
        _into(by_set, key, [ends[r] for r in key])
    return by_set


def _instance_sets(instances: Iterable[Instance]) -> _Sets:
    """`_sets` of the instances' ends, read from their starts and durations (each distinct
    member order sorted once)."""
    by_set: _Sets = {}
    keys: dict[tuple[int, ...], tuple[int, ...]] = {}  # members as given -> sorted
    for item in instances:
        starts, durations = item.starts, item.durations
        members = tuple(starts)
        key = keys.get(members)
        if key is None:
            key = keys[members] = tuple(sorted(members))
        _into(by_set, key, [starts[r] + durations[r] for r in key])
    return by_set


def _into(by_set: _Sets, key: tuple[int, ...], ends: list[int]) -> None:
    first = min(ends)
    row = [end - first for end in ends]
    found = by_set.get(key)
    if found is None:
        by_set[key] = [row]
    else:
        found.append(row)


def links(samples: Sequence[_Ends], index: dict[int, int]) -> list[Link]:
    """One link per member set of two or more ranks."""
    return _links(_sets(samples), index)


def _links(by_set: _Sets, index: dict[int, int]) -> list[Link]:
    found = []
    for ranks, rows in by_set.items():
        if len(ranks) < 2:
            continue
        scale, dof = noise(rows)
        shifts = _polish(rows)
        found.append(Link(tuple(index[r] for r in ranks), shifts, len(rows), scale, dof))
    _pool_scales(found)
    return found


def noise(rows: Sequence[Sequence[int]]) -> tuple[float, int]:
    """(The noise scale of one end, the number of values it rests on): each double difference
    of neighbouring members at neighbouring instances, (a_i - b_i) - (a_i+1 - b_i+1), is free
    of both offsets and centres, with 4x one end's variance; 0.7413 x their median absolute
    value estimates a normal sigma (robust: a delayed end spoils at most 4 of them)."""
    values: list[int] = []
    for left, right in itertools.pairwise(zip(*rows, strict=True)):
        apart = list(map(operator.sub, left, right))  # a_i - b_i down the instances
        values += map(abs, map(operator.sub, apart, apart[1:]))
    return (_HALF_IQR * statistics.median(values), len(values)) if values else (0.0, 0)


def _pool_scales(found: Sequence[Link]) -> None:
    """Floor every scale; a set with no residual freedom takes the median of the others'
    (the floor when no set has any: the fit's weights then rest on the instance counts)."""
    known = [link.scale for link in found if link.dof]
    pooled = max(statistics.median(known), _SCALE_FLOOR_NS) if known else _SCALE_FLOOR_NS
    for link in found:
        link.scale = max(link.scale, _SCALE_FLOOR_NS) if link.dof else pooled


# ---------------------------------------------------------------- stage 2: the joint fit


_Weights = list[list[float]]  # per link, per member


def _precision(link: Link) -> float:
    """The inverse variance of a member's shift in `link` (a median over its instances)."""
    return link.instances / (_MEDIAN_VAR * link.scale**2)


def _laplacian(
    found: Sequence[Link], weights: _Weights, x: Sequence[float], totals: Sequence[float] = ()
) -> list[float]:
    """L x: per link, each member's weight times its distance from the link's weighted mean
    (`totals`: each link's sum of weights, when known)."""
    out = [0.0] * len(x)
    totals = totals or [sum(w) for w in weights]
    for link, w, total in zip(found, weights, totals, strict=True):
        _centred(out, link.members, w, [x[i] for i in link.members], total)
    return out


def right_side(found: Sequence[Link], weights: _Weights, size: int) -> list[float]:
    """The normal equations' right side: L applied to each link's own shifts."""
    out = [0.0] * size
    for link, w in zip(found, weights, strict=True):
        _centred(out, link.members, w, link.shifts, sum(w))
    return out


def _centred(
    out: list[float],
    members: Sequence[int],
    w: Sequence[float],
    values: Sequence[float],
    total: float,
) -> None:
    """out[member] += its weight x (its value - the weighted mean of the values; `total`:
    the sum of the weights)."""
    centre = sum(map(operator.mul, w, values)) / total
    for i, wi, v in zip(members, w, values, strict=True):
        out[i] += wi * (v - centre)


def _diagonal(found: Sequence[Link], weights: _Weights, size: int) -> list[float]:
    out = [0.0] * size
    for link, w in zip(found, weights, strict=True):
        total = math.fsum(w)
        for i, wi in zip(link.members, w, strict=True):
            out[i] += wi * (1 - wi / total)
    return out


Prepared = tuple[list[float], list[float]]  # L's inverse diagonal, each link's weight sum


def prepare(found: Sequence[Link], weights: _Weights, size: int) -> Prepared:
    """What every solve under these memberships and weights shares (`solve`'s `ready`)."""
    inverse = [1 / d if d > 0 else 0.0 for d in _diagonal(found, weights, size)]
    return inverse, [sum(w) for w in weights]


def solve(
    found: Sequence[Link], weights: _Weights, b: Sequence[float], ready: Prepared | None = None
) -> list[float]:
    """x with L x = b (b sums to 0 over each connected set), by conjugate gradients
    preconditioned by L's diagonal; x is defined up to a constant per connected set.
    `ready`: `prepare` of the same memberships and weights (found anew when not given)."""
    inverse, totals = ready or prepare(found, weights, len(b))
    x = [0.0] * len(b)
    r = list(b)
    z = [a * c for a, c in zip(inverse, r, strict=True)]
    p, rz = list(z), _dot(r, z)
    limit = 1e-24 * _dot(b, b)
    for _ in range(10 * len(b) + 100):
        if _dot(r, r) <= limit or rz == 0:
            break
        q = _laplacian(found, weights, p, totals)
        step = rz / _dot(p, q)
        x = [a + step * c for a, c in zip(x, p, strict=True)]
        r = [a - step * c for a, c in zip(r, q, strict=True)]
        z = [a * c for a, c in zip(inverse, r, strict=True)]
        rz, previous = _dot(r, z), rz
        p = [a + rz / previous * c for a, c in zip(z, p, strict=True)]
    return x


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return float(sum(map(operator.mul, a, b)))


def _misfits(found: Sequence[Link], weights: _Weights, x: Sequence[float]) -> list[list[float]]:
    """Each member's shift minus its fitted one, in units of its standard error."""
    out = []
    for link, w in zip(found, weights, strict=True):
        errors = [d - x[i] for i, d in zip(link.members, link.shifts, strict=True)]
        centre = math.fsum(a * b for a, b in zip(w, errors, strict=True)) / math.fsum(w)
        root = math.sqrt(_precision(link))
        out.append([(e - centre) * root for e in errors])
    return out


def fit(found: Sequence[Link], size: int) -> tuple[list[float], _Weights]:
    """Offsets by IRLS: least squares reweighted by Huber's rule on standardized misfits
    (their robust spread, at least 1, as the unit) until the weights settle."""
    base = [[_precision(link)] * len(link.members) for link in found]
    weights = base
    if not found:
        return [0.0] * size, weights
    x = solve(found, weights, right_side(found, weights, size))
    for _ in range(_MAX_REWEIGHTS):
        errors = _misfits(found, weights, x)
        unit = max(1.0, _NORMAL_MAD * mad((abs(e) for row in errors for e in row), 0.0))
        new = [
            [
                w * min(1.0, _HUBER_K * unit / abs(e)) if e else w
                for w, e in zip(ws, es, strict=True)
            ]
            for ws, es in zip(base, errors, strict=True)
        ]
        settled = _settled(new, weights)
        weights = new
        x = solve(found, weights, right_side(found, weights, size))
        if settled:
            break
    return x, weights


def _settled(new: _Weights, old: _Weights) -> bool:
    return all(
        abs(a - b) <= 1e-3 * b
        for u, v in zip(new, old, strict=True)
        for a, b in zip(u, v, strict=True)
    )


# ---------------------------------------------------------------- uncertainty


def _birge(
    found: Sequence[Link], weights: _Weights, x: Sequence[float], groups: int
) -> float | None:
    """sqrt(chi^2 / dof) of the final fit, at least 1; when the fit has nothing left over,
    1 if some set measured its own noise, else None (no residual says how noisy the ends are)."""
    errors = _misfits(found, weights, x)
    chi2 = math.fsum(
        e * e * w / _precision(link)
        for link, ws, es in zip(found, weights, errors, strict=True)
        for w, e in zip(ws, es, strict=True)
    )
    dof = sum(len(link.members) - 1 for link in found) - (len(x) - groups)
    if dof > 0:
        return math.sqrt(max(1.0, chi2 / dof))
    return 1.0 if any(link.dof for link in found) else None


def _spreads(found: Sequence[Link], weights: _Weights, reference: Sequence[int]) -> list[float]:
    """Each index's standard error against its reference under the fit's weights:
    sqrt(u' L+ u), u = e_rank - e_reference, exactly (a solve per rank) for at most `_DRAWS`
    ranks, else estimated by re-fits under random shifts."""
    ready = prepare(found, weights, len(reference))  # shared by every solve: the same weights
    if len(reference) <= _DRAWS:
        return [_exact(found, weights, ready, i, ref) for i, ref in enumerate(reference)]
    return _drawn(found, weights, reference, ready)


def _exact(
    found: Sequence[Link], weights: _Weights, ready: Prepared, index: int, reference: int
) -> float:
    if index == reference:
        return 0.0
    u = [0.0] * len(ready[0])
    u[index], u[reference] = 1.0, -1.0
    y = solve(found, weights, u, ready)
    return math.sqrt(max(0.0, y[index] - y[reference]))


def _drawn(
    found: Sequence[Link], weights: _Weights, reference: Sequence[int], ready: Prepared
) -> list[float]:
    """The spread of re-fitted offsets when each shift is redrawn with its fitted variance
    (seeded: the same input, the same figures; relative error 1/sqrt(2 x DRAWS))."""
    total = [0.0] * len(reference)
    sigmas = [[1 / math.sqrt(w) for w in ws] for ws in weights]
    width = sum(map(len, sigmas))
    draws = normals(random.Random(len(reference)), _DRAWS * width)
    for first in range(0, _DRAWS * width, width):
        noisy, at = [], first
        for link, ss in zip(found, sigmas, strict=True):
            shifts = [0.0 + z * s for z, s in zip(draws[at : at + len(ss)], ss, strict=True)]
            noisy.append(Link(link.members, shifts, link.instances, 1, 0))
            at += len(ss)
        x = solve(noisy, weights, right_side(noisy, weights, len(reference)), ready)
        for i, ref in enumerate(reference):
            total[i] += (x[i] - x[ref]) ** 2
    return [math.sqrt(t / _DRAWS) for t in total]


def normals(draw: random.Random, count: int) -> list[float]:
    """The next `count` of `draw.gauss()` (a fresh generator's: none held back), bit for bit:
    Box-Muller on pairs of uniforms, the cosine then the sine, the pairs' uniforms drawn at
    once and each step taken over the lot."""
    uniforms = [draw.random() for _ in range(count + count % 2)]
    angles = [u * math.tau for u in uniforms[0::2]]
    radii = [math.sqrt(-2.0 * math.log(1.0 - u)) for u in uniforms[1::2]]
    found = [0.0] * len(uniforms)
    found[0::2] = map(operator.mul, map(math.cos, angles), radii)
    found[1::2] = map(operator.mul, map(math.sin, angles), radii)
    return found[:count]


# ---------------------------------------------------------------- the whole


def components(samples: Sequence[_Ends]) -> dict[int, int]:
    """Each rank's connected set (ranks linked by a shared instance), by its lowest rank
    (each distinct member set joined once: a group's instances mostly repeat theirs)."""
    return _components(_sets(samples))


def _components(by_set: _Sets) -> dict[int, int]:
    parent: dict[int, int] = {}

    def find(rank: int) -> int:
        while parent.setdefault(rank, rank) != rank:
            parent[rank] = parent[parent[rank]]
            rank = parent[rank]
        return rank

    for members in by_set:
        first, *rest = members
        find(first)
        for other in rest:
            low, high = sorted((find(first), find(other)))
            parent[high] = low
    return {rank: find(rank) for rank in parent}


def offsets(instances: Sequence[Instance]) -> Found:
    """Per rank with evidence: (offset ns to subtract from its times, uncertainty, samples)."""
    by_set = _instance_sets(instances)
    ranks = sorted({rank for members in by_set for rank in members})
    index = {rank: i for i, rank in enumerate(ranks)}
    reference = _components(by_set)
    refs = [index[reference[rank]] for rank in ranks]
    counts = [0] * len(ranks)
    for members, group in by_set.items():
        for rank in members:
            counts[index[rank]] += len(group)
    found = _links(by_set, index)
    x, weights = fit(found, len(ranks))
    factor = _birge(found, weights, x, len(set(refs)))
    errors = _spreads(found, weights, refs)
    linked = {i for link in found for i in link.members}
    return {
        rank: (
            x[i] - x[refs[i]],
            errors[i] * factor if i in linked and factor is not None else None,
            counts[i],
        )
        for i, rank in enumerate(ranks)
    }


def clocks(found: Found) -> Clocks:
    """The report's clock section from `offsets()`."""
    return Clocks(
        reference_rank=min(found) if found else None,
        method=METHOD if found else NO_MATCH,
        per_rank={
            str(rank): ClockOffset(
                offset_s=offset * 1e-9,
                uncertainty_s=spread * 1e-9 if spread is not None else None,
                samples=samples,
            )
            for rank, (offset, spread, samples) in found.items()
        },
    )
