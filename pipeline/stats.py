"""Sample statistics for the report (pure).

Quantiles interpolate linearly between closest ranks (numpy's default, "type 7"). An empty
sample has no statistics: every field is None, never 0.
"""

from __future__ import annotations

import math
import statistics
import struct
from array import array
from collections.abc import Iterable, Sequence
from typing import Final

from commscope.model.schema import Summary

_PACK: Final = struct.Struct("<d").pack
_LITTLE: Final = array("H", [1]).tobytes() == b"\x01\x00"  # this machine's byte order


def add_sample(packed: bytearray, value: float) -> None:
    """Append `value` to a packed sample (little-endian float64)."""
    packed += _PACK(value)


def add_samples(packed: bytearray, values: Sequence[float]) -> None:
    """Append `values` to a packed sample, in order (as `add_sample` of each)."""
    if values:
        packed += struct.pack(f"<{len(values)}d", *values)


def sample_values(packed: bytes | bytearray) -> array[float]:
    """The values of a packed sample (a copy: the buffer stays free to grow)."""
    values = array("d")
    values.frombytes(packed)
    if not _LITTLE:
        values.byteswap()
    return values


def quantile(ordered: Sequence[float], q: float) -> float:
    """The q-quantile of a non-empty ascending sample, by linear interpolation."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(sample: Sequence[float]) -> Summary:
    """mean/median/min/max/p95 of `sample` (all None when it is empty)."""
    if not sample:
        return Summary()
    ordered = sorted(sample)
    return Summary(
        mean=math.fsum(ordered) / len(ordered),
        median=quantile(ordered, 0.5),
        min=ordered[0],
        max=ordered[-1],
        p95=quantile(ordered, 0.95),
    )


def mad(values: Iterable[float], centre: float) -> float:
    """The median absolute deviation of `values` from `centre`."""
    return statistics.median(abs(v - centre) for v in values)


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    """numerator / denominator, or None when either is unknown or the denominator is 0."""
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def mean(values: Sequence[float | None]) -> float | None:
    """Mean of the known values (None when none is known)."""
    known = [v for v in values if v is not None]
    return math.fsum(known) / len(known) if known else None


def thin_indices(count: int, cap: int) -> range | list[int]:
    """At most `cap` indices of `count` items, evenly spaced, in order, the first included:
    i·count // cap for i < cap (strictly increasing as count > cap); all when count ≤ cap."""
    if count <= cap:
        return range(count)
    return [i * count // cap for i in range(cap)]
