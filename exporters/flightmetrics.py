"""The Prometheus samples of a report's Flight Recorder section (pure): the ranks stuck before
a collective of their process group that others entered, and each group's last completed
collective per rank. Bounded as every family: at most `MAX_GROUPS` groups (those with a stuck
rank first, then by name) and `cap` ranks (`--max-rank-series`: the lowest-numbered, the
stuck ones in place of the last; 0: no cap)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from commscope.exporters.metricnames import MAX_GROUPS, capped_ranks
from commscope.model.schema import FlightRecorder

_STUCK: Final = "commscope_flight_stuck"
_COMPLETED: Final = "commscope_flight_last_completed_sequence"
FAMILY_NAMES: Final = frozenset({_STUCK, _COMPLETED})  # capped here, not by the trace's ranks
_UNKNOWN: Final = "Other"  # a collective no dump's buffer holds

Sample = tuple[str, tuple[str, ...], float]


def samples(job: str, found: FlightRecorder | None, cap: int) -> Iterator[Sample]:
    """Per dumped rank of each group kept: 1 in `_STUCK` with the collective it never joined,
    0 with its last enqueued one otherwise; its last completed sequence in `_COMPLETED`."""
    if found is None:
        return
    groups, ranks = _kept_groups(found), _kept_ranks(found, cap)
    missed = {(s.group, s.rank): s.missed_op or _UNKNOWN for s in found.stuck}
    for row in found.progress:
        if row.group not in groups or row.rank not in ranks:
            continue
        rank, stuck = str(row.rank), missed.get((row.group, row.rank))
        collective = stuck or row.last_op or _UNKNOWN
        yield _STUCK, (job, row.group, rank, collective), float(stuck is not None)
        if row.completed is not None:
            yield _COMPLETED, (job, row.group, rank), float(row.completed)


def _kept_groups(found: FlightRecorder) -> frozenset[str]:
    """The `MAX_GROUPS` groups with series: those with a stuck rank first, then by name."""
    stuck = {s.group for s in found.stuck}
    return frozenset(
        sorted({p.group for p in found.progress}, key=lambda g: (g not in stuck, g))[:MAX_GROUPS]
    )


def _kept_ranks(found: FlightRecorder, cap: int) -> frozenset[int]:
    """The ranks with series: all of them within `cap`, else the lowest-numbered with every
    stuck rank in place of the last ones (`metricnames.capped_ranks`)."""
    ranks = {p.rank for p in found.progress}
    kept = capped_ranks(ranks, cap, {s.rank for s in found.stuck})
    return frozenset(ranks) if kept is None else kept
