"""Edge reduction (pure): one file's `Accumulator` as `Facts` records, and back.

A collector feeds a finished file's events to an `Accumulator` (a `Reduction`), the one
`commscope report` uses, and ships its state instead of the events: every interval union as its
disjoint runs (packed `RUN_BYTES` a run), per thread the cpu_op time and the time inside
collective calls (of a rank with GPU activity, only their bounds: `shipped`), the kept
ProfilerSteps, the collectives with each record's tallies of them by type (counted here, once,
as the records are cut: the aggregator adds tallies instead of counting calls, and refuses
tallies that are not the record's calls', `well_formed`), the GPU time per category and per
kernel name (capped: `pipeline.topkernels`), the kernel launches (counts and the queue-delay
sketch), the memory peaks and whether the rank used a GPU.

The state is cut into records of at most `MAX_FACT_ITEMS` items (a run, a thread's entry, a
step or a call each count one), so a record stays bounded however large the file. `absorb` adds
one record to an accumulator: absorbing every record of a file gives exactly the `result()` its
events give, in whatever split (`from_facts`).
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from commscope.model.schema import (
    GROUP_SOURCES,
    MAX_FACT_ITEMS,
    MAX_RANKS,
    RUN_BYTES,
    CommOp,
    Facts,
    OpTally,
    RankResult,
    RunsName,
    Sketch,
    Step,
)
from commscope.pipeline import graphs
from commscope.pipeline.accumulate import Accumulator, highest, tallies
from commscope.pipeline.intervals import IntervalSet, pack, unpack
from commscope.pipeline.stats import sample_values
from commscope.pipeline.topkernels import capped, merge_launches

_RUNS: Final[tuple[RunsName, ...]] = ("compute", "gpu_comm", "cpu_comm", "copies")
_MAX_BUCKET: Final = 2200  # log_γ 2^63 ≈ 2,183 (γ of `pipeline.sketch`)
_MAX_SUM_PARTS: Final = 64
_ON_GPU: Final = operator.attrgetter("on_gpu")
_KIND: Final = operator.attrgetter("collective")
_TALLY_SOURCES: Final = frozenset((*GROUP_SOURCES, "unknown"))  # `accumulate._count_ops`'s keys


class Reduction(Accumulator):
    """An accumulator that gives its state as `Facts` (what the collector's file streams use).
    It keeps its calls uncounted: each record's are counted as the records are cut (`facts`)."""

    def _count(self, on_gpu: bool, kind: str, ops: Sequence[CommOp]) -> None:
        pass

    def facts(self, stream: str, first_seq: int) -> Iterator[Facts]:
        return facts(self, stream, first_seq)

    def result(self, files: Iterable[str] = ()) -> RankResult:
        """The result its facts give (`from_facts`)."""
        return from_facts(self.facts("", 1)).result(files)


def facts(
    acc: Accumulator, stream: str, first_seq: int, limit: int = MAX_FACT_ITEMS
) -> Iterator[Facts]:
    """The accumulator's state as records numbered from `first_seq` (at least one), each of
    at most `limit` items (2 at least: a thread's entry and one of its runs)."""
    if limit < 2:
        raise ValueError(f"a record of facts holds 2 items at least, not {limit}")
    for seq, fields in enumerate(_parts(acc, limit), start=first_seq):
        if fields.get("calls"):
            fields["gpu_ops"], fields["cpu_ops"] = tallies(fields["calls"])
        yield Facts(stream=stream, seq=seq, **fields)


def _parts(acc: Accumulator, limit: int) -> Iterator[dict[str, Any]]:
    parts = _Parts(limit)
    parts.fields.update(
        kernel_ns=dict(acc.kernel_ns),
        has_gpu=acc.has_gpu,
        memory_peak_bytes=acc.memory_peak,
        memory_reserved_peak_bytes=acc.reserved_peak,
        launches=acc.launches,
        graphs=acc.graphs,
    )
    for name in _RUNS:
        yield from parts.runs("runs", name, _sets(acc)[name])
    for tid, busy in acc.busy.items():
        yield from parts.runs("busy", tid, shipped(busy, acc.has_gpu))
    for tid, calls in acc.calls.items():
        yield from parts.runs("call_time", tid, shipped(calls, acc.has_gpu))
    steps = [Step(step, start, duration, tid) for step, (duration, tid, start) in acc.steps.items()]
    yield from parts.items("steps", steps)
    yield from parts.items("calls", [*acc.gpu_calls, *acc.cpu_calls])
    yield from parts.items("kernel_names", capped(acc.kernel_names))
    if parts.used or not parts.flushed:
        yield parts.fields


class _Parts:
    """Fills records' fields up to `limit` items each; a full record is yielded."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.flushed = 0
        self.fields: dict[str, Any] = {}

    def _flush(self) -> dict[str, Any]:
        full, self.fields, self.used = self.fields, {}, 0
        self.flushed += 1
        return full

    def runs(self, key: str, name: object, runs: IntervalSet) -> Iterator[dict[str, Any]]:
        """An entry (the set's name or thread) and its runs, over as many records as needed."""
        starts, ends = runs.arrays()
        at = 0
        while True:
            if self.used + 1 >= self.limit:
                yield self._flush()
            take = min(len(starts) - at, self.limit - self.used - 1)
            self.fields.setdefault(key, {})[name] = pack(
                starts[at : at + take], ends[at : at + take]
            )
            self.used += 1 + take
            at += take
            if at >= len(starts):
                return

    def items(self, key: str, values: list[Any]) -> Iterator[dict[str, Any]]:
        at = 0
        while at < len(values):
            if self.used >= self.limit:
                yield self._flush()
            take = min(len(values) - at, self.limit - self.used)
            self.fields.setdefault(key, []).extend(values[at : at + take])
            self.used += take
            at += take


def shipped(runs: IntervalSet, has_gpu: bool) -> IntervalSet:
    """A thread's cpu_op or call runs as shipped. Of a rank with GPU activity they give only
    the rank's time range (compute is then GPU kernels, never cpu_op time), so they go as one
    run from their first start to their last end: a rank's CPU spans, most of a trace's
    events, cost the wire and the aggregator one run a thread, however many there are."""
    bounds = runs.bounds() if has_gpu else None
    return IntervalSet([bounds]) if bounds is not None else runs


def _sets(acc: Accumulator) -> dict[RunsName, IntervalSet]:
    return {
        "compute": acc.compute,
        "gpu_comm": acc.gpu_comm,
        "cpu_comm": acc.cpu_comm,
        "copies": acc.copies,
    }


def well_formed(part: Facts) -> bool:
    """Whether every packed field holds whole runs, the launches' sketch is one and the
    calls' tallies are theirs (what a peer sends is checked first)."""
    packed = [*part.runs.values(), *part.busy.values(), *part.call_time.values()]
    whole = all(len(data) % RUN_BYTES == 0 for data in packed)
    sketch = part.launches is None or _sketch_sane(part.launches.delay_ns)
    return whole and sketch and _tallies_sane(part)


def _tallies_sane(part: Facts) -> bool:
    """Tallies a peer may send: none (the calls are counted on arrival), or exactly one a
    type the record's calls have, counting them, each within bounds (`_tally_sane`)."""
    if not (part.gpu_ops or part.cpu_ops):
        return True
    found = Counter(zip(map(_ON_GPU, part.calls), map(_KIND, part.calls), strict=True))
    every = [*part.gpu_ops.values(), *part.cpu_ops.values()]
    return dict(found) == _claimed(part) and all(map(_tally_sane, every))


def _claimed(part: Facts) -> dict[tuple[bool, str], int]:
    """The calls by (on the GPU, type) that the record's tallies count."""
    gpu: dict[tuple[bool, str], int] = {(True, k): t.count for k, t in part.gpu_ops.items()}
    return gpu | {(False, kind): tally.count for kind, tally in part.cpu_ops.items()}


def _tally_sane(tally: OpTally) -> bool:
    """Sums no count exceeds, none negative; samples whole float64s, finite and not
    negative, no more than the ops that give them; group sources of the closed set counting
    every op; bus parts of group sizes a world can have."""
    algbw, busbw = len(tally.algbw_Bps), len(tally.busbw_Bps)
    sums = (tally.message_bytes, tally.time_ns, tally.sized_time_ns, tally.bus_time_ns)
    return (
        0 <= tally.bus_count <= tally.sized_count <= tally.count
        and min(sums) >= 0
        and algbw % 8 == 0 and busbw % 8 == 0 and busbw <= algbw <= 8 * tally.sized_count
        and _samples_sane(tally.algbw_Bps) and _samples_sane(tally.busbw_Bps)
        and set(tally.group_sources) <= _TALLY_SOURCES
        and all(n > 0 for n in tally.group_sources.values())
        and sum(tally.group_sources.values()) == tally.count
        and all(1 <= n <= MAX_RANKS and total >= 0 for n, total in tally.bus_parts.items())
    )  # fmt: skip


def _samples_sane(packed: bytearray) -> bool:
    values = sample_values(packed)
    return all(map(math.isfinite, values)) and (not values or min(values) >= 0)


def _sketch_sane(found: Sketch) -> bool:
    """A sketch a peer may send: buckets within the range of int64 nanoseconds (a bucket
    index beyond ±MAX_BUCKET is no time), positive counts adding up to `count`, a few sum
    parts, and min ≤ max when it holds values."""
    buckets = (found.positive, found.negative)
    counts = [n for side in buckets for n in side.values()]
    return (
        all(abs(index) <= _MAX_BUCKET for side in buckets for index in side)
        and all(0 < n <= found.count for n in counts)
        and found.zeros >= 0
        and found.count == found.zeros + sum(counts)
        and len(found.sum_parts) <= _MAX_SUM_PARTS
        and (found.count == 0 or (found.min is not None and found.max is not None
                                  and found.min <= found.max))
    )  # fmt: skip


def absorb(acc: Accumulator, part: Facts) -> None:
    """Add one record of a file's facts to `acc` (see the module docstring)."""
    acc.has_gpu = acc.has_gpu or part.has_gpu
    for key, ns in part.kernel_ns.items():
        acc.kernel_ns[key] = acc.kernel_ns.get(key, 0) + ns
    acc.memory_peak = highest((acc.memory_peak, part.memory_peak_bytes))
    acc.reserved_peak = highest((acc.reserved_peak, part.memory_reserved_peak_bytes))
    sets = _sets(acc)
    for name, data in part.runs.items():
        sets[name].add_runs(*unpack(data))
    for into, threads in ((acc.busy, part.busy), (acc.calls, part.call_time)):
        for tid, data in threads.items():
            into.setdefault(tid, IntervalSet()).add_runs(*unpack(data))
    for step in part.steps:
        acc.add(step)
    if part.gpu_ops or part.cpu_ops:
        acc.keep_counted(part.calls, part.gpu_ops, part.cpu_ops)
    else:
        acc.keep_calls(part.calls)
    acc.kernel_names.extend(part.kernel_names)
    acc.launches = merge_launches((acc.launches, part.launches))
    acc.graphs = graphs.merge((acc.graphs, part.graphs))


def from_facts(parts: Iterable[Facts]) -> Accumulator:
    """An accumulator holding every record of a file's facts."""
    acc = Accumulator()
    for part in parts:
        absorb(acc, part)
    return acc
