"""What the live aggregator reads of a tailed NCCL Inspector log as it arrives (pure).

A tailed log's stream never ends while the job runs, so the report over finished files does
not see it until the end; its per-collective bandwidths go to the rolling statistics
(`commscope_collective_busbw_bytes_per_second`) as each record is applied instead, once (a
duplicate is never applied; a record replayed from the aggregator's own log at a restart is
not fed again), read from what the record added to its stream's tallies (`absorbed`), and
the file is not fed a second time when it finishes (the stream was marked `tailed` when it
started, from its name).

Arrival skew live (`LiveSkew`): a collective instance is (process group, Seq, type); once as
many tailed logs as its group size have sent it, its skew is the latest minus the earliest
start, on the hosts' own clocks (Inspector's `coll_start_ts`, gettimeofday: no alignment, so
across hosts it holds their clock difference too; the final report aligns clocks). Calls
without a start (logs not verbose), without a Seq or group, and point-to-point calls give none;
nor does an instance whose members disagree (`matching.disagree`: a desync, counted).
At most `max_pending` instances wait for their last member (the oldest is dropped: a member
whose log is not tailed would keep its instances waiting forever). `RecentSkews` keeps the
skews of the last `horizon_s` seconds (at most `max_values` each type) for p50, p95 and max.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Final

from commscope.model.inspector import as_result
from commscope.model.names import base_name, is_inspector_name
from commscope.model.schema import CommOp, Facts, RankResult, TraceMeta
from commscope.pipeline import straddle
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.edge import absorb
from commscope.pipeline.matching import disagree
from commscope.pipeline.stats import quantile, sample_values


def tailed(path: str) -> bool:
    """Whether the stream of `path` is a tailed Inspector log (asked once, at its start)."""
    return is_inspector_name(base_name(path))


def absorbed(acc: Accumulator, part: Facts) -> dict[str, list[float]]:
    """Absorb one record into its stream's accumulator; each collective type's busbw samples
    (B/s) it added to the tallies, as the finished file's tallies hold them (ops of unknown
    size or n give none)."""
    before = {kind: len(tally.busbw_Bps) for kind, tally in acc.gpu_ops.items()}
    absorb(acc, part)
    added = {
        kind: list(sample_values(tally.busbw_Bps[before.get(kind, 0) :]))
        for kind, tally in acc.gpu_ops.items()
    }
    return {kind: values for kind, values in added.items() if values}


def finished(result: RankResult | None, meta: TraceMeta) -> RankResult | None:
    """A finished stream's result, marked as read from Inspector logs when it was."""
    return as_result(result) if result is not None and meta.source == "inspector" else result


Key = straddle.Key  # (process group, Seq, collective type)
_SKEW_STATS: Final = (("p50", 0.5), ("p95", 0.95), ("max", 1.0))


class LiveSkew:
    """Instances waiting for their members' starts; see the module docstring."""

    def __init__(self, max_pending: int = 1 << 16) -> None:
        self.max_pending = max_pending
        self.pending: OrderedDict[Key, dict[str, CommOp]] = OrderedDict()
        self.dropped = 0  # instances given up waiting for
        self.desynced = 0  # instances whose members disagree: never a skew

    def add(self, stream: str, part: Facts) -> list[tuple[str, float]]:
        """The instances `part` completes, as (collective type, skew seconds)."""
        if not part.call_starts:
            return []
        done: list[tuple[str, float]] = []
        for call in part.calls:
            key, n = straddle.key(call), call.group_size
            if key is None or n is None:
                continue
            calls = self.pending.setdefault(key, {})
            calls[stream] = call
            if len(calls) >= n:
                del self.pending[key]
                done.extend(self._skew(list(calls.values())))
        while len(self.pending) > self.max_pending:
            self.pending.popitem(last=False)
            self.dropped += 1
        return done

    def _skew(self, calls: list[CommOp]) -> list[tuple[str, float]]:
        """The instance's skew; none when its members disagree (counted)."""
        if disagree(dict(enumerate(calls)), {}).differs:
            self.desynced += 1
            return []
        starts = [call.start_ns for call in calls]
        return [(calls[0].collective, (max(starts) - min(starts)) / 1e9)]


class RecentSkews:
    """Skews of the last `horizon_s` seconds per collective type (bounded)."""

    def __init__(self, horizon_s: float, max_values: int = 10_000) -> None:
        self.horizon_s = horizon_s
        self.max_values = max_values
        self.values: dict[str, deque[tuple[float, float]]] = {}
        self.sorts = 0  # how many times a type's values were sorted (each change: once)
        self._stats: dict[str, dict[str, float]] = {}  # per type, as of its last change

    def add(self, kind: str, skew_s: float, now: float) -> None:
        self.values.setdefault(kind, deque(maxlen=self.max_values)).append((now, skew_s))
        self._stats.pop(kind, None)

    def stats(self, now: float) -> dict[str, dict[str, float]]:
        """p50, p95 (numpy's default interpolation) and max per type over the horizon; a
        type's values are sorted again only when some arrived or left since."""
        found = {}
        for kind, recent in self.values.items():
            while recent and recent[0][0] < now - self.horizon_s:
                recent.popleft()
                self._stats.pop(kind, None)
            if recent:
                found[kind] = self._stats.get(kind) or self._sorted(kind, recent)
        return found

    def _sorted(self, kind: str, recent: deque[tuple[float, float]]) -> dict[str, float]:
        self.sorts += 1
        ordered = sorted(value for _, value in recent)
        stats = self._stats[kind] = {name: quantile(ordered, q) for name, q in _SKEW_STATS}
        return stats
