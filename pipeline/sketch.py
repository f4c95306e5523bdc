"""A mergeable log-bucket quantile sketch for whole-run bandwidths (pure).

DDSketch-style, with relative accuracy ALPHA = 1 %: a positive value x goes to bucket
i = ceil(log_γ x), γ = (1 + ALPHA) / (1 - ALPHA), which holds (γ^(i-1), γ^i]; the bucket stands
for 2γ^i / (γ + 1), within ALPHA of every value in it. Negative values are kept mirrored, zero
exactly. Count, min and max are exact, and so is the sum: it is kept as its canonical
expansion (non-overlapping floats whose exact sum is the sample's sum), so the mean is
`math.fsum` of the sample over its count, bit for bit.

Merging adds the bucket counts, the sums exactly, and takes min and max: the merge of two
sketches equals the sketch of the two samples together, in any order or grouping.

`quantile` estimates the quantile the report gives exact samples (`stats.quantile`: linear
interpolation between the ranks bracketing q(n-1)): each bracketing rank stands for its
bucket's value (rank 0 and rank n-1 for the exact min and max), interpolated and clamped to
[min, max]. For a sample without negative values the estimate lies within ALPHA (relative) of
the exact quantile, up to float rounding: each stand-in is within ALPHA of the value of its
rank, and a convex combination of non-negative values keeps that bound. Memory is one counter
per distinct bucket: at most log_γ(max / min) + 1 ≈ 50 per factor of 2.7 of the values' range
(about 1,500 for bandwidths from 1 B/s to 1 TB/s), whatever the number of values; `pack`
keeps a sketch in a few bytes a bucket.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from itertools import accumulate, chain
from typing import Final

import msgspec
from commscope.model.schema import Sketch, Summary

ALPHA: Final = 0.01
GAMMA: Final = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA: Final = math.log(GAMMA)
FEW: Final = 64  # up to this many values, `_buckets` takes each value's bucket in turn
_ENCODE: Final = msgspec.msgpack.Encoder().encode
_DECODE: Final = msgspec.msgpack.Decoder(Sketch).decode


def bucket(magnitude: float) -> int:
    """The bucket of a positive value: ceil(log_γ x), holding (γ^(i-1), γ^i]."""
    return math.ceil(math.log(magnitude) / _LOG_GAMMA)


def representative(index: int) -> float:
    """The value a bucket stands for: 2γ^i / (γ + 1), within ALPHA of all it holds."""
    return 2 * math.pow(GAMMA, index) / (GAMMA + 1)


def _exact_sum(parts: Iterable[float]) -> list[float]:
    """The canonical expansion of the exact sum of `parts`: s0 = the sum correctly rounded,
    s1 = the rest correctly rounded, ... until nothing is left (empty for a zero sum)."""
    terms = parts if isinstance(parts, list) else list(parts)
    expansion: list[float] = []
    while (rest := math.fsum(chain(terms, (-s for s in expansion)))) != 0.0:
        expansion.append(rest)
    return expansion


def sketch_of(values: Iterable[float]) -> Sketch:
    """The sketch of a sample of finite values."""
    ordered = sorted(values)
    found = Sketch(count=len(ordered), sum_parts=_exact_sum(ordered))
    if ordered:
        found.min, found.max = ordered[0], ordered[-1]
    first_zero, first_positive = bisect_left(ordered, 0.0), bisect_right(ordered, 0.0)
    found.zeros = first_positive - first_zero
    found.positive = _buckets(ordered[first_positive:])
    found.negative = _buckets([-v for v in reversed(ordered[:first_zero])])
    return found


def _buckets(ordered: list[float]) -> dict[int, int]:
    """Bucket counts of ascending positive values: as bucket() is monotonic, each bucket is
    one run, found by bisecting at its upper bound γ^i (then checked against bucket()); a
    few values (`FEW`: a window's calls of one type often are) are each put in their bucket,
    the same counts in the same order for less work."""
    counts: dict[int, int] = {}
    if len(ordered) <= FEW:
        for value in ordered:
            index = bucket(value)
            counts[index] = counts.get(index, 0) + 1
        return counts
    start, end = 0, len(ordered)
    while start < end:
        index = bucket(ordered[start])
        stop = max(bisect_right(ordered, math.pow(GAMMA, index), start), start + 1)
        while stop < end and bucket(ordered[stop]) == index:
            stop += 1
        while bucket(ordered[stop - 1]) != index:
            stop -= 1
        counts[index] = stop - start
        start = stop
    return counts


def merge(a: Sketch, b: Sketch) -> Sketch:
    """The sketch of both samples together (neither argument changes)."""
    return merge_all((a, b))


def merge_all(sketches: Iterable[Sketch]) -> Sketch:
    """The sketch of every sample together: `merge` folded over them from an empty sketch,
    field for field (buckets in the order they first appear), in one pass."""
    found = Sketch(count=0, sum_parts=[])
    parts: list[float] = []
    positive, negative = found.positive, found.negative
    for sketch in sketches:
        found.count += sketch.count
        found.zeros += sketch.zeros
        parts += sketch.sum_parts
        for index, n in sketch.positive.items():
            positive[index] = positive.get(index, 0) + n
        for index, n in sketch.negative.items():
            negative[index] = negative.get(index, 0) + n
        found.min = min(_known(found.min, sketch.min), default=None)
        found.max = max(_known(found.max, sketch.max), default=None)
    found.sum_parts = _exact_sum(parts)
    return found


def quantile(
    sketch: Sketch, q: float, ladder: tuple[list[float], list[int]] | None = None
) -> float:
    """Estimated q-quantile (0 <= q <= 1) of a non-empty sketch; see the module docstring.
    `ladder`: the sketch's `_ladder`, when known."""
    low, high = sketch.min, sketch.max
    if low is None or high is None or sketch.count == 0:
        raise ValueError("the quantile of an empty sketch")
    values, cumulative = ladder or _ladder(sketch)
    last = sketch.count - 1

    def at(rank: int) -> float:
        return (
            low if rank == 0 else high if rank == last else values[bisect_right(cumulative, rank)]
        )

    position = q * last
    low_rank = math.floor(position)
    below, above = at(low_rank), at(min(low_rank + 1, last))
    return min(max(below + (above - below) * (position - low_rank), low), high)


def summary(sketch: Sketch) -> Summary:
    """mean/median/min/max/p95 with exact mean, min and max; median and p95 from the buckets,
    labelled with their relative error. No values: every field None."""
    if sketch.count == 0:
        return Summary()
    ladder = _ladder(sketch)  # the same for both quantiles
    return Summary(
        mean=math.fsum(sketch.sum_parts) / sketch.count,
        median=quantile(sketch, 0.5, ladder),
        min=sketch.min,
        max=sketch.max,
        p95=quantile(sketch, 0.95, ladder),
        relative_error=ALPHA,
    )


def pack(sketch: Sketch) -> bytes:
    """The sketch as msgpack (a few bytes a bucket): how a finished window keeps it."""
    return _ENCODE(sketch)


def unpack(packed: bytes) -> Sketch:
    """A packed sketch as it was (an empty one for no bytes)."""
    return _DECODE(packed) if packed else Sketch()


def footprint_bytes(sketch: Sketch) -> int:
    """What the sketch keeps, counted as 16 bytes a bucket (index, count) and 8 a scalar."""
    return 16 * (len(sketch.positive) + len(sketch.negative)) + 8 * (len(sketch.sum_parts) + 4)


def _ladder(sketch: Sketch) -> tuple[list[float], list[int]]:
    """Stand-in values in ascending order, and the cumulative counts up to each."""
    steps: list[tuple[float, int]] = [
        (-representative(i), sketch.negative[i]) for i in sorted(sketch.negative, reverse=True)
    ]
    if sketch.zeros:
        steps.append((0.0, sketch.zeros))
    steps += [(representative(i), sketch.positive[i]) for i in sorted(sketch.positive)]
    return [v for v, _ in steps], list(accumulate(n for _, n in steps))


def _known(*values: float | None) -> list[float]:
    return [v for v in values if v is not None]
