"""Per (window, rank) accumulation of events, and merging of per-rank results (pure).

An `Accumulator` takes one rank's events for one window in any order and keeps only what the
metrics need: unions of intervals (GPU compute, GPU communication, gloo communication, and
per thread the cpu_op time and the time inside collective calls), per-type tallies with
per-op bandwidth samples, and step durations. `result()` applies the contract:

- GPU traces: C = union of communication kernels (`collector.families`), P = union of compute
  kernels (all streams); fused kernels (compute and communicate) are in neither.
- CPU-only traces (no GPU activity): C = union of gloo spans; P = cpu_op time on the training
  thread (the one carrying ProfilerStep) minus its time inside collective calls.

It also keeps the window's collectives themselves (for matching across ranks), the GPU time
per kernel category, the union and span of all GPU activity (idle time) and the memory peak.
Ratios against step time need their numerators on the steps' span: `result()` also clips C,
C ∩ P, P and all GPU activity to S, the union of the profiled steps' spans (`InSteps`).

A finished window's tally may give up its samples for their sketches (`shed_samples`, a
`ShedTally`): merged over windows it counts as its samples would, while a window's own exact
figures need the samples back.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from itertools import compress
from typing import Any, Final, Literal

from commscope.model.bus import bus_fraction
from commscope.model.schema import (
    CollectiveType,
    CommOp,
    CpuSpan,
    Event,
    Evidence,
    GpuOp,
    InSteps,
    KernelTime,
    LaunchDelays,
    LaunchTally,
    MemoryPeak,
    OpTally,
    RankResult,
    RunTally,
    ShedTally,
    Sketch,
    Step,
    evidence_label,
)
from commscope.model.wire import GraphTally
from commscope.pipeline import graphs, tail
from commscope.pipeline.intervals import (
    IntervalSet,
    difference,
    intersection_measure,
    packed,
)
from commscope.pipeline.sketch import merge_all, pack, sketch_of, unpack
from commscope.pipeline.stats import add_samples, sample_values
from commscope.pipeline.topkernels import add_delays, capped, merge_launches, merge_names

GPU: Final[Evidence] = "gpu kernels"
CPU: Final[Evidence] = "cpu (gloo)"
SKETCHED: Final = (RunTally, ShedTally)  # tallies that keep sketches instead of samples
# `sketcher(tally, which)`: a tally's algbw or busbw sketch (`bandwidth_sketch`, or one that
# remembers what it found: `pipeline.reuse.WindowCache.sketch`)
Sketcher = Callable[[OpTally, Literal["algbw", "busbw"]], Sketch]
_ON_GPU: Final = operator.attrgetter("on_gpu")
_START: Final = operator.attrgetter("start_ns")
_GROUP: Final = operator.attrgetter("process_group")
_SUMS: Final = tuple(f for f in OpTally.__struct_fields__ if f not in ("algbw_Bps", "busbw_Bps"))


class Accumulator:
    """One rank's events of one window; see the module docstring."""

    def __init__(self) -> None:
        self.compute = IntervalSet()
        self.gpu_comm = IntervalSet()
        self.cpu_comm = IntervalSet()
        self.busy: dict[int, IntervalSet] = {}
        self.calls: dict[int, IntervalSet] = {}
        self.gpu_ops: dict[str, OpTally] = {}
        self.cpu_ops: dict[str, OpTally] = {}
        self.steps: dict[int, tuple[int, int, int]] = {}  # step -> (duration ns, tid, start ns)
        self.has_gpu = False
        self.gpu_calls: list[CommOp] = []
        self.cpu_calls: list[CommOp] = []
        # memcpy, memset and fused kernels: GPU activity in neither the compute nor the
        # communication union
        self.copies = IntervalSet()
        self.kernel_ns: dict[str, int] = {}
        self.memory_peak: int | None = None
        self.reserved_peak: int | None = None
        self.kernel_names: list[KernelTime] = []  # as read: `topkernels.capped` sums them
        self.launches: LaunchTally | None = None
        self.graphs: GraphTally | None = None  # CUDA graph launches (`pipeline.graphs`)

    def add_all(self, events: Iterable[Event]) -> None:
        """`add` of each event in turn; the collectives kept at once (`keep_calls`: what
        `keep_call` of each in turn gives)."""
        calls: list[CommOp] = []
        for event in events:
            if type(event) is GpuOp:  # most events: `add`'s first case, without its call
                self._gpu(event)
            elif type(event) is CommOp:
                self._union(event)
                calls.append(event)
            else:
                self.add(event)
        if calls:
            self.keep_calls(calls)

    def add(self, event: Event) -> None:
        if type(event) is GpuOp:
            self._gpu(event)
        elif type(event) is CommOp:
            self._comm(event)
        elif type(event) is CpuSpan:
            sets = self.calls if event.comm_call else self.busy
            found = sets.get(event.tid)
            if found is None:  # not `setdefault`, which would build a set each time
                found = sets[event.tid] = IntervalSet()
            found.add(event.start_ns, event.end_ns)
        elif type(event) is Step:
            self._step(event)
        elif type(event) is MemoryPeak:
            self._memory(event)
        elif type(event) is KernelTime:
            self.kernel_names.append(event)
        elif type(event) is LaunchDelays:
            self.launches = add_delays(self.launches, event)
        elif type(event) is GraphTally:
            self.graphs = graphs.merge((self.graphs, event))

    def _gpu(self, op: GpuOp) -> None:
        self.has_gpu = True
        end = op.start_ns + op.dur_ns
        if op.kind == "compute":
            self.compute.add(op.start_ns, end)
            category: str = op.category or "other"
        else:
            self.copies.add(op.start_ns, end)
            category = op.kind
        self.kernel_ns[category] = self.kernel_ns.get(category, 0) + op.dur_ns

    def _memory(self, peak: MemoryPeak) -> None:
        """The highest over the rank's GPUs (a rank normally drives one)."""
        self.memory_peak = max(self.memory_peak or 0, peak.allocated_bytes)
        if peak.reserved_bytes is not None:
            self.reserved_peak = max(self.reserved_peak or 0, peak.reserved_bytes)

    def _step(self, step: Step) -> None:
        """A step number seen twice keeps its longest span (ties: lowest tid, then earliest
        start): order-free."""
        seen = self.steps.get(step.step)
        if seen is None or (step.dur_ns, -step.tid, -step.start_ns) > (seen[0], -seen[1], -seen[2]):
            self.steps[step.step] = (step.dur_ns, step.tid, step.start_ns)

    def _comm(self, op: CommOp) -> None:
        self._union(op)
        self.keep_call(op)

    def _union(self, op: CommOp) -> None:
        """A collective's time in its union (and the GPU's communication time)."""
        end = op.start_ns + op.dur_ns
        if op.on_gpu:
            self.gpu_comm.add(op.start_ns, end)
            self.kernel_ns["communication"] = self.kernel_ns.get("communication", 0) + op.dur_ns
        else:
            self.cpu_comm.add(op.start_ns, end)

    def keep_calls(self, ops: Sequence[CommOp]) -> None:
        """`keep_call` of each op in turn (a record of edge facts), each type's tally counted
        once (`_count`)."""
        kinds: dict[tuple[bool, str], list[CommOp]] = {}
        for op in ops:
            kinds.setdefault((op.on_gpu, op.collective), []).append(op)
        for (on_gpu, kind), same in kinds.items():
            self._count(on_gpu, kind, same)
        self.gpu_calls.extend(op for op in ops if op.on_gpu)
        self.cpu_calls.extend(op for op in ops if not op.on_gpu)
        self.has_gpu = self.has_gpu or any(on_gpu for on_gpu, _ in kinds)

    def keep_call(self, op: CommOp) -> None:
        """Keep one collective and count it in its type's tally (not in the unions or the
        GPU time: `_comm` adds those; edge facts carry them apart, `pipeline.edge`)."""
        self.has_gpu = self.has_gpu or op.on_gpu
        (self.gpu_calls if op.on_gpu else self.cpu_calls).append(op)
        self._count(op.on_gpu, op.collective, (op,))

    def _count(self, on_gpu: bool, kind: str, ops: Sequence[CommOp]) -> None:
        """Count collectives of one type in its tally (`_count_ops`)."""
        _count_ops(self._tally(on_gpu, kind), ops)

    def keep_counted(
        self,
        ops: Sequence[CommOp],
        gpu_ops: Mapping[CollectiveType, OpTally],
        cpu_ops: Mapping[CollectiveType, OpTally],
    ) -> None:
        """Keep collectives that come with their tallies (`tallies` of them: a record of edge
        facts, `pipeline.edge`): the tallies added to this accumulator's as `keep_calls` would
        have counted the calls, no call counted again."""
        for on_gpu, tallies in ((True, gpu_ops), (False, cpu_ops)):
            for kind, tally in tallies.items():
                _add_tally(self._tally(on_gpu, kind), tally)
        flags: list[bool] = list(map(_ON_GPU, ops))
        self.gpu_calls.extend(compress(ops, flags))
        self.cpu_calls.extend(compress(ops, map(operator.not_, flags)))
        self.has_gpu = self.has_gpu or bool(gpu_ops)

    def _tally(self, on_gpu: bool, kind: str) -> OpTally:
        """The tally of a collective type on the GPU or the CPU, begun when first asked for."""
        tallies = self.gpu_ops if on_gpu else self.cpu_ops
        tally = tallies.get(kind)
        if tally is None:
            tally = tallies[kind] = OpTally()
        return tally

    def result(self, files: Iterable[str] = ()) -> RankResult:
        """The rank's figures for this window, per the contract."""
        calls: list[CommOp] = []
        evidence: tuple[Evidence, ...] = ()
        if self.has_gpu:
            evidence, comm, compute, ops = (GPU,), self.gpu_comm, self.compute, self.gpu_ops
            calls = self.gpu_calls
        elif self.cpu_ops or self.busy:
            evidence, comm, ops = (CPU,), self.cpu_comm, self.cpu_ops
            compute, calls = self._cpu_compute(), self.cpu_calls
        else:
            comm, compute, ops = IntervalSet(), IntervalSet(), {}
        start, end = self.time_range()
        steps = self.step_union()
        exposed = difference(comm, compute)  # C \ P: |C ∩ P| = |C| - |E|
        busy = self.gpu_busy_parts(exposed if self.has_gpu else None)
        calls = _in_call_order(calls)
        return RankResult(
            evidence_text=evidence_label(evidence),
            comm_ns=comm.measure(),
            overlap_ns=comm.measure() - exposed.measure(),
            compute_ns=compute.measure(),
            ops=dict(sorted(ops.items())),
            steps={step: duration for step, (duration, _, _) in sorted(self.steps.items())},
            files=sorted(files),
            calls=calls,
            kernel_ns=dict(sorted(self.kernel_ns.items())),
            gpu_busy_ns=sum(part.measure() for part in busy),
            gpu_span_ns=_span(busy),
            memory_peak_bytes=self.memory_peak,
            memory_reserved_peak_bytes=self.reserved_peak,
            start_ns=start,
            end_ns=end,
            in_steps=self.in_steps(comm, exposed, compute, busy, steps),
            ungrouped_calls=list(map(_GROUP, calls)).count(None),
            exposed_runs=packed(exposed),
            step_runs=packed(steps),
            kernel_names=capped(self.kernel_names),
            launches=self.launches,
            step_starts={step: start for step, (_, _, start) in sorted(self.steps.items())},
            graphs=self.graphs,
            tail=tail.of(calls, self.step_spans(), compute, exposed),
        )

    def step_spans(self) -> tail.StepSpans:
        return {step: (start, duration) for step, (duration, _, start) in self.steps.items()}

    def step_union(self) -> IntervalSet:
        """S, the union of the profiled steps' spans."""
        return IntervalSet((start, start + dur) for dur, _, start in self.steps.values())

    def in_steps(
        self,
        comm: IntervalSet,
        exposed: IntervalSet,
        compute: IntervalSet,
        busy: Sequence[IntervalSet],
        steps: IntervalSet,
    ) -> InSteps:
        """C, C ∩ P, P and GPU busy time within S, the union of the profiled steps' spans.
        Each is measured against S alone (a few runs): |C ∩ P ∩ S| = |C ∩ S| - |E ∩ S| with E
        = C \\ P, and the busy time is the sum over its disjoint parts (`gpu_busy_parts`)."""
        comm_in = intersection_measure(comm, steps)
        return InSteps(
            span_ns=steps.measure(),
            comm_ns=comm_in,
            overlap_ns=comm_in - intersection_measure(exposed, steps),
            compute_ns=intersection_measure(compute, steps),
            gpu_busy_ns=sum(intersection_measure(part, steps) for part in busy),
        )

    def time_range(self) -> tuple[int | None, int | None]:
        """The earliest start and latest end over everything kept (steps included)."""
        sets = [self.compute, self.gpu_comm, self.cpu_comm, self.copies,
                *self.busy.values(), *self.calls.values()]  # fmt: skip
        found = [b for s in sets if (b := s.bounds()) is not None]
        found += [(start, start + duration) for duration, _, start in self.steps.values()]
        if not found:
            return None, None
        return min(b[0] for b in found), max(b[1] for b in found)

    def gpu_busy_parts(self, exposed: IntervalSet | None = None) -> tuple[IntervalSet, ...]:
        """All GPU activity (compute, communication, memcpy and memset) as three disjoint
        sets: P, C \\ P and the copies outside both, so its measures are their sums, with no
        union built. `exposed`: C \\ P of the GPU sets when known."""
        compute, comm = self.compute, self.gpu_comm
        exposed = difference(comm, compute) if exposed is None else exposed
        copies = self.copies
        if len(copies):
            copies = difference(difference(copies, compute), comm)
        return compute, exposed, copies

    def _cpu_compute(self) -> IntervalSet:
        tid = self.training_thread()
        if tid is None:
            return IntervalSet()
        return difference(self.busy.get(tid, IntervalSet()), self.calls.get(tid, IntervalSet()))

    def training_thread(self) -> int | None:
        """The thread carrying most ProfilerSteps, else the one with most cpu_op time."""
        if self.steps:
            counts: dict[int, int] = {}
            for _, tid, _ in self.steps.values():
                counts[tid] = counts.get(tid, 0) + 1
            return max(sorted(counts), key=counts.__getitem__)
        if not self.busy:
            return None
        return max(sorted(self.busy), key=lambda tid: self.busy[tid].measure())


def tallies(ops: Sequence[CommOp]) -> tuple[dict[str, OpTally], dict[str, OpTally]]:
    """The tallies of these collectives by type, on the GPU and on the CPU, as an
    accumulator keeping them counts them."""
    counted = Accumulator()
    counted.keep_calls(ops)
    return counted.gpu_ops, counted.cpu_ops


def _span(parts: Sequence[IntervalSet]) -> int:
    """From the first start to the last end over the sets (0 when all are empty)."""
    found = [b for part in parts if (b := part.bounds()) is not None]
    return max(b[1] for b in found) - min(b[0] for b in found) if found else 0


def _in_call_order(calls: Iterable[CommOp]) -> list[CommOp]:
    """The calls sorted by `_call_order`: by their starts alone (a key read in C) when no two
    start together, as they then sort the same."""
    by_start = sorted(calls, key=_START)
    starts = list(map(_START, by_start))
    if all(map(operator.lt, starts, starts[1:])):
        return by_start
    return sorted(by_start, key=_call_order)


def _call_order(op: CommOp) -> tuple[Any, ...]:
    """Start order, ties broken by the other fields: the same calls sort the same way."""
    size = -1 if op.message_bytes is None else op.message_bytes  # None before 0
    return (op.start_ns, op.dur_ns, op.collective, size,
            op.process_group or "", op.seq if op.seq is not None else -1, op.dtype or "",
            op.in_splits, op.out_splits)  # fmt: skip


def count_op(tally: OpTally, op: CommOp) -> None:
    """Add one collective to its type's tally (sizes and bandwidths only when S is known)."""
    _count_ops(tally, (op,))


def _count_ops(tally: OpTally, ops: Sequence[CommOp]) -> None:
    """Add collectives of one type to its tally in turn (`count_op` of each): their samples
    packed at once, each group size's bus fraction found once."""
    sources, parts = tally.group_sources, tally.bus_parts
    fractions: dict[int | None, tuple[int, int] | None] = {}
    algbw: list[float] = []
    busbw: list[float] = []
    sized = message = sized_time = bus_count = bus_time = 0
    for op in ops:
        source = op.group_source or "unknown"
        sources[source] = sources.get(source, 0) + 1
        size, dur = op.message_bytes, op.dur_ns
        if size is None:
            continue
        sized, message, sized_time = sized + 1, message + size, sized_time + dur
        if op.group_size in fractions:
            fraction = fractions[op.group_size]
        else:
            fraction = fractions[op.group_size] = bus_fraction(op.collective, op.group_size)
        if fraction is not None:
            parts[fraction[1]] = parts.get(fraction[1], 0) + size * fraction[0]
            bus_count, bus_time = bus_count + 1, bus_time + dur
        if dur > 0:
            algbw.append(value := size / (dur * 1e-9))
            if fraction is not None:
                busbw.append(value * fraction[0] / fraction[1])
    tally.count += len(ops)
    tally.time_ns += sum(op.dur_ns for op in ops)
    tally.sized_count += sized
    tally.message_bytes += message
    tally.sized_time_ns += sized_time
    tally.bus_count += bus_count
    tally.bus_time_ns += bus_time
    add_samples(tally.algbw_Bps, algbw)
    add_samples(tally.busbw_Bps, busbw)


def bus_bytes(tally: OpTally) -> float:
    """Σ S x F over the tally's ops of known size and group size (see `bus_total`)."""
    return bus_total((tally,))


def bus_total(tallies: Iterable[OpTally]) -> float:
    """Σ S x F over the ops of all `tallies`: exact (each n's Σ S x F x n is an integer, so
    the sum is a fraction with no error), then rounded once to the nearest float: never to
    whole bytes (AllGather of 16 B over 3 ranks: 10.666… B)."""
    parts: Counter[int] = Counter()
    for tally in tallies:
        parts.update(tally.bus_parts)
    return float(sum((Fraction(total, n) for n, total in parts.items()), Fraction(0)))


def merge_results(
    results: Iterable[RankResult], sketcher: Sketcher | None = None, samples: bool = True
) -> RankResult:
    """One rank over several windows: every numerator and denominator summed. Over more than
    one window the bandwidth samples are not concatenated but sketched (`pipeline.sketch`):
    the run keeps one bounded sketch per type where the windows keep their exact samples.
    Merging is a left fold: the merge of windows 1 … k (k ≥ 2) merged with window k+1 is the
    merge of windows 1 … k+1, field for field (sketches merge exactly, its evidence is the
    union of theirs). `sketcher` gives each window's sketches (`pooled_ops`);
    without `samples`, the tallies keep their counts and sums alone (no sample is read, no
    sketch made), and the fold holds from k ≥ 1."""
    results = list(results)
    steps: dict[int, int] = {}
    kernel_ns: Counter[str] = Counter()
    for result in results:
        steps.update(result.steps)
        kernel_ns.update(result.kernel_ns)
    return RankResult(
        evidence_text=evidence_label(e for r in results for e in r.evidence),
        comm_ns=sum(r.comm_ns for r in results),
        overlap_ns=sum(r.overlap_ns for r in results),
        compute_ns=sum(r.compute_ns for r in results),
        ops=pooled_ops(results, sketched=len(results) > 1, samples=samples, sketcher=sketcher),
        steps=dict(sorted(steps.items())),
        files=[f for r in results for f in r.files],
        kernel_ns=dict(sorted(kernel_ns.items())),
        gpu_busy_ns=sum(r.gpu_busy_ns for r in results),
        gpu_span_ns=sum(r.gpu_span_ns for r in results),
        memory_peak_bytes=highest(r.memory_peak_bytes for r in results),
        memory_reserved_peak_bytes=highest(r.memory_reserved_peak_bytes for r in results),
        in_steps=_merge_in_steps([r.in_steps for r in results]),
        ungrouped_calls=sum(r.ungrouped_calls for r in results),
        capture_ns=sum(r.capture_ns for r in results),
        kernel_names=merge_names(results),
        launches=merge_launches(r.launches for r in results),
        graphs=graphs.merge(r.graphs for r in results),
        tail=tail.merge(r.tail for r in results),
    )


def _merge_in_steps(parts: Iterable[InSteps | None]) -> InSteps | None:
    """The windows' in-step measures summed; None when one window lacks them."""
    total = InSteps()
    for part in parts:
        if part is None:
            return None
        total.span_ns += part.span_ns
        total.comm_ns += part.comm_ns
        total.overlap_ns += part.overlap_ns
        total.compute_ns += part.compute_ns
        total.gpu_busy_ns += part.gpu_busy_ns
    return total


def highest(values: Iterable[int | None]) -> int | None:
    return max((v for v in values if v is not None), default=None)


def pooled_ops(
    results: Iterable[RankResult],
    sketched: bool = False,
    samples: bool = True,
    sketcher: Sketcher | None = None,
) -> dict[str, OpTally]:
    """The tallies of every result, type by type, in one: samples pooled, or sketches merged
    (a `RunTally`) when asked or when one of the tallies keeps sketches (`SKETCHED`), each
    tally's sketch from `sketcher` (default `bandwidth_sketch`); or, without `samples`, the
    counts and sums alone (an `OpTally` without samples)."""
    results = list(results)
    if any(isinstance(t, SKETCHED) for r in results for t in r.ops.values()):
        sketched = True
    pooled: dict[str, OpTally] = {}
    parts: dict[str, list[OpTally]] = {}
    for result in results:
        for kind, tally in result.ops.items():
            into = pooled.setdefault(kind, RunTally() if sketched and samples else OpTally())
            if samples and not sketched:
                _add_tally(into, tally)
            else:
                _add_sums(into, tally)
            if samples and sketched:
                parts.setdefault(kind, []).append(tally)
    for kind, tallies in parts.items():
        _merge_sketches(pooled[kind], tallies, sketcher or bandwidth_sketch)
    return dict(sorted(pooled.items()))


def _merge_sketches(into: OpTally, tallies: list[OpTally], sketcher: Sketcher) -> None:
    """Into a `RunTally`, the sketches of these tallies merged in one pass."""
    if not isinstance(into, RunTally):
        raise TypeError("sketches merge only into a RunTally")
    into.algbw_sketch = merge_all(sketcher(t, "algbw") for t in tallies)
    into.busbw_sketch = merge_all(sketcher(t, "busbw") for t in tallies)


def _add_tally(into: OpTally, other: OpTally) -> None:
    """Add `other`'s counts, sums and bandwidth samples to `into`'s."""
    _add_sums(into, other)
    into.algbw_Bps += other.algbw_Bps
    into.busbw_Bps += other.busbw_Bps


def _add_sums(into: OpTally, other: OpTally) -> None:
    """Add `other`'s counts and sums to `into`'s (the samples and sketches aside)."""
    into.count += other.count
    into.sized_count += other.sized_count
    into.message_bytes += other.message_bytes
    for n, total in other.bus_parts.items():
        into.bus_parts[n] = into.bus_parts.get(n, 0) + total
    into.bus_count += other.bus_count
    into.bus_time_ns += other.bus_time_ns
    into.time_ns += other.time_ns
    into.sized_time_ns += other.sized_time_ns
    for source, count in other.group_sources.items():
        into.group_sources[source] = into.group_sources.get(source, 0) + count


def bandwidth_sketch(tally: OpTally, which: Literal["algbw", "busbw"]) -> Sketch:
    """The tally's algbw or busbw values as a sketch (its own, or that of its samples)."""
    if isinstance(tally, RunTally):
        return tally.algbw_sketch if which == "algbw" else tally.busbw_sketch
    if isinstance(tally, ShedTally):
        return unpack(tally.algbw_packed if which == "algbw" else tally.busbw_packed)
    return sketch_of(sample_values(tally.algbw_Bps if which == "algbw" else tally.busbw_Bps))


def shed_samples(tally: OpTally, sketcher: Sketcher | None = None) -> ShedTally:
    """A window's tally with its samples given up for their packed sketches (the sums and
    counts as they were): what the whole run needs of it, in a few bytes a bucket. The
    sketches from `sketcher` (default `bandwidth_sketch`)."""
    if isinstance(tally, ShedTally):
        return tally
    sketch = sketcher or bandwidth_sketch
    sums = {name: getattr(tally, name) for name in _SUMS}
    return ShedTally(
        **sums, algbw_packed=pack(sketch(tally, "algbw")), busbw_packed=pack(sketch(tally, "busbw"))
    )
