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
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import combinations, pairwise
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
    finite = math.isfinite  # `_usable`, inline: one test a point
    usable = [(s, t) for s, t in points if finite(s) and s > 0 and finite(t) and t > 0]
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
    below = sum(1 for s, t in points if _usable(s, t) and s < knee)
    return below / line.points


def _usable(size: float, seconds: float) -> bool:
    return math.isfinite(size) and size > 0 and math.isfinite(seconds) and seconds > 0


def _by_size(points: Iterable[_Point]) -> dict[float, list[float]]:
    groups: dict[float, list[float]] = defaultdict(list)
    for size, seconds in points:
        groups[size].append(seconds)
    return groups


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
    mean = math.fsum(t for _, t in points) / len(points)
    total = math.fsum((t - mean) ** 2 for _, t in points)
    if total == 0:
        return None
    residual = math.fsum((t - alpha - slope * s) ** 2 for s, t in points)
    return 1.0 - residual / total
