"""Clock offsets between ranks, from collectives that complete together (pure).

Ranks on different hosts read different clocks. A collective ends at nearly the same instant
on every member (whoever arrived first waits for the last, then all finish together), so the
ends of matched instances tell the offsets. Each rank's offset is found by alternating
medians: the centre of an instance is the median of its members' aligned ends, a rank's
offset moves by the median of its residuals, until nothing moves. Offsets are relative to the
lowest rank of each connected set of ranks (ranks linked by shared instances); ranks on one
host come out equal within their uncertainty, the standard error of a median,
1.2533 x 1.4826 x MAD / sqrt(n), of the rank's final residuals.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Final

from commscope.collector.schema import ClockOffset, Clocks
from commscope.pipeline.matching import Instance
from commscope.pipeline.stats import mad

MAX_ROUNDS: Final = 50
SETTLED_NS: Final = 0.5
METHOD: Final = "median alignment of matched collectives' end times; relative to the lowest rank"
NO_MATCH: Final = "no collective matched across ranks"
_MEDIAN_SE: Final = 1.2533 * 1.4826  # standard error of a median from the MAD (normal noise)

YEAR_2000_NS: Final = 946_684_800 * 10**9

Ends = dict[int, int]  # rank -> end time of one instance (ns)


def epoch_ns(base_time_ns: int | None, trace_ns: int | None) -> int | None:
    """A trace time in ns since the epoch, when the trace's time base says: Kineto writes
    either epoch timestamps, or ones relative to `baseTimeNanoseconds`; a sum before 2000
    is a clock without a time base (time since boot)."""
    if trace_ns is None:
        return None
    found = (base_time_ns or 0) + trace_ns
    return found if found >= YEAR_2000_NS else None


Found = dict[int, tuple[float, float | None, int]]  # rank -> (offset ns, uncertainty, samples)


def estimate(samples: Sequence[Ends]) -> tuple[dict[int, float], dict[int, list[float]]]:
    """(offset per rank, its residuals), offsets not yet referred to any rank."""
    offsets = {rank: 0.0 for ends in samples for rank in ends}
    for _ in range(MAX_ROUNDS):
        shifts = {r: statistics.median(v) for r, v in _residuals(samples, offsets).items()}
        for rank, shift in shifts.items():
            offsets[rank] += shift
        if all(abs(s) < SETTLED_NS for s in shifts.values()):
            break
    return offsets, _residuals(samples, offsets)


def _residuals(samples: Sequence[Ends], offsets: Mapping[int, float]) -> dict[int, list[float]]:
    residuals: dict[int, list[float]] = {}
    for ends in samples:
        aligned = {rank: end - offsets[rank] for rank, end in ends.items()}
        centre = statistics.median(aligned.values())
        for rank, value in aligned.items():
            residuals.setdefault(rank, []).append(value - centre)
    return residuals


def components(samples: Sequence[Ends]) -> dict[int, int]:
    """Each rank's connected set (ranks linked by a shared instance), by its lowest rank."""
    parent: dict[int, int] = {}

    def find(rank: int) -> int:
        while parent.setdefault(rank, rank) != rank:
            parent[rank] = parent[parent[rank]]
            rank = parent[rank]
        return rank

    for ends in samples:
        first, *rest = sorted(ends)
        for other in rest:
            low, high = sorted((find(first), find(other)))
            parent[high] = low
    return {rank: find(rank) for rank in parent}


def offsets(instances: Sequence[Instance]) -> Found:
    """Per rank with evidence: (offset ns to subtract from its times, uncertainty, samples)."""
    samples = [instance.ends() for instance in instances]
    found, residuals = estimate(samples)
    reference = components(samples)
    return {
        rank: (
            found[rank] - found[reference[rank]],
            uncertainty(residuals[rank]),
            len(residuals[rank]),
        )
        for rank in sorted(found)
    }


def uncertainty(residuals: Sequence[float]) -> float | None:
    if len(residuals) < 2:
        return None
    return _MEDIAN_SE * mad(residuals, statistics.median(residuals)) / math.sqrt(len(residuals))


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
