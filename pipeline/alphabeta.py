"""Robust α-β (latency-bandwidth) fit of a collective's durations against its bus bytes (pure).

The model is T = α + S_bus / β: α the fixed latency of one op in seconds, β the bus bandwidth in
bytes per second. The fit resists outliers (instances that waited on something else): durations
are reduced to one median per distinct size (or per bin of consecutive sizes when there are more
than MAX_BINS), the slope is the Theil–Sen median of pairwise slopes over those medians, and α is
the median of their residual intercepts. R² is then measured over every usable point. The fit
declines, with a reason, when the sizes cannot identify both α and β. A negative α is reported
as it comes, never clamped: it means the smallest sizes run faster than the line through the
larger ones predicts (NCCL switching protocol or algorithm with size does that), which is worth
seeing. Points with a size ≤ 0 or a duration that is not a finite positive number are skipped
and left out of the `points` count. No clocks, files or threads: points in, a LineFit out.
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations, compress, pairwise, repeat
from operator import itemgetter
from statistics import median
from typing import Final

MIN_SIZES: Final = 3  # two sizes always fit a line exactly: nothing left to be robust with
MIN_SPAN: Final = 4.0  # largest / smallest size; below it α and β trade off against each other
MAX_BINS: Final = 256  # Theil–Sen is quadratic in the medians: 256 medians are 32,640 pairs

NO_POINTS: Final = "no usable points"
FEW_SIZES: Final = f"fewer than {MIN_SIZES} distinct sizes"
NARROW_SPAN: Final = f"largest size is less than {MIN_SPAN:g}× the smallest"
NO_GROWTH: Final = "duration does not grow with size"


@dataclass(frozen=True)
class LineFit:
    alpha_s: float | None  # None when declined
    beta_Bps: float | None  # bytes per second
    r2: float | None
    sizes: int  # distinct sizes seen
    points: int  # usable points
    reason: str | None  # why declined (None when fitted)


_Point = tuple[float, float]


def fit(points: Iterable[tuple[float, float]]) -> LineFit:
    """The α-β line through `points` (bus bytes, seconds), or a LineFit saying why not."""
    usable = _usable_points(points)
    groups = _by_size(usable)
    reason = _decline(sorted(groups))
    if reason is not None:
        return LineFit(None, None, None, len(groups), len(usable), reason)
    medians = _pool([(s, median(ts)) for s, ts in sorted(groups.items())])
    slope = _theil_sen(medians)
    if slope <= 0 or math.isinf(1.0 / slope):  # a subnormal slope has no finite β
        return LineFit(None, None, None, len(groups), len(usable), NO_GROWTH)
    alpha = median(t - slope * s for s, t in medians)
    return LineFit(alpha, 1.0 / slope, _r2(usable, alpha, slope), len(groups), len(usable), None)


def latency_bound(line: LineFit, points: Iterable[tuple[float, float]]) -> float | None:
    """The share of the usable points below the knee S_bus = α·β, where α is more than half
    of T (None without a fit, or with α ≤ 0: no size is then latency-bound by the line)."""
    if line.alpha_s is None or line.beta_Bps is None or line.alpha_s <= 0 or not line.points:
        return None
    knee = line.alpha_s * line.beta_Bps
    sizes = [s for s, _ in _usable_points(points)]
    below: int = sum(map(operator.lt, sizes, repeat(knee)))
    return below / line.points


def _usable_points(points: Iterable[_Point]) -> list[_Point]:
    """The points of a finite positive size and duration, in their order (each test a pass
    in C over the two columns)."""
    listed = list(points)
    if not listed:
        return []
    sizes, seconds = zip(*listed, strict=True)
    finite = map(operator.and_, map(math.isfinite, sizes), map(math.isfinite, seconds))
    positive = map(
        operator.and_, map(operator.gt, sizes, _ZEROS), map(operator.gt, seconds, _ZEROS)
    )
    return list(compress(listed, map(operator.and_, finite, positive)))


_ZEROS: Final = repeat(0)


def _by_size(points: Iterable[_Point]) -> dict[float, list[float]]:
    """Each size's durations (sizes as they first come, durations in their order)."""
    listed = list(points)
    order = dict.fromkeys(map(itemgetter(0), listed))
    listed.sort(key=itemgetter(0))  # stable: each size's durations stay in their order
    sizes = list(map(itemgetter(0), listed))
    seconds = list(map(itemgetter(1), listed))
    return {s: seconds[bisect_left(sizes, s) : bisect_right(sizes, s)] for s in order}


def _decline(sizes: Sequence[float]) -> str | None:
    """Why ascending distinct `sizes` cannot identify α and β (None when they can)."""
    if not sizes:
        return NO_POINTS
    if len(sizes) < MIN_SIZES:
        return FEW_SIZES
    if sizes[-1] < MIN_SPAN * sizes[0]:
        return NARROW_SPAN
    return None


def _pool(medians: Sequence[_Point]) -> list[_Point]:
    """At most MAX_BINS (median size, median T) over equal runs of the size-ordered medians."""
    if len(medians) <= MAX_BINS:
        return list(medians)
    bounds = [len(medians) * i // MAX_BINS for i in range(MAX_BINS + 1)]
    runs = [medians[lo:hi] for lo, hi in pairwise(bounds)]
    return [(median(s for s, _ in run), median(t for _, t in run)) for run in runs]


def _theil_sen(medians: Sequence[_Point]) -> float:
    """Median pairwise slope; the sizes are distinct (one median per size, bins disjoint)."""
    return median((tj - ti) / (sj - si) for (si, ti), (sj, tj) in combinations(medians, 2))


def _r2(points: Sequence[_Point], alpha: float, slope: float) -> float | None:
    """1 − SS_res / SS_tot over every point (None when every duration is the same)."""
    sizes, seconds = zip(*points, strict=True)
    mean = math.fsum(seconds) / len(points)
    total = math.fsum(map(pow, map(operator.sub, seconds, repeat(mean)), _TWOS))
    if total == 0:
        return None
    misses = map(operator.sub, map(operator.sub, seconds, repeat(alpha)),
                 map(operator.mul, repeat(slope), sizes))  # fmt: skip
    residual = math.fsum(map(pow, misses, _TWOS))
    return 1.0 - residual / total


_TWOS: Final = repeat(2)
