"""Trace health: what the traces lack, how much of it, and which sections that weakens (pure).

Each check reads the parsed files' metadata and counters and the sections built from them,
and names a gap only when there is one: ranks without profiled steps or without a trace at
all, collectives without a process group, a `Seq`, a launch in the trace, a size or a group
size of their own, collectives whose members disagree (desyncs, each named), traces without
`pg_config`, a time base, a GPU name or memory events, events dropped, and kernels named like
communication that match no communicating family (`collector.families`), with their GPU time,
and CUDA graph launches whose replayed kernels the profiler did not record (`pipeline.graphs`).
`checked` lists every check made, so no issue means none of them found a gap.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Protocol

from commscope.model.bus import bus_fraction
from commscope.model.fields import where
from commscope.model.schema import (
    INSPECTOR_LOGS,
    KERNEL_CATEGORIES,
    Desync,
    FileStats,
    Health,
    HealthIssue,
    RankResult,
    Sections,
    TraceMeta,
    reason_text,
)
from commscope.pipeline.clocks import epoch_ns

_MATCHING: Final = "matching across ranks, and the clock offsets, arrival skew and α-β fits on it"
# Which sections each gap weakens, and how.
_WEAKENS: Final[dict[str, tuple[str, ...]]] = {
    "steps": (
        "throughput: iteration time and tokens/s leave these ranks out (n/a without any)",
        "diagnosis: no step-relative figure for these ranks",
        "step-time stragglers: these ranks are left out",
    ),
    "capture_step": (
        "throughput: iteration time and tokens/s leave these ranks out (n/a without any)",
        "diagnosis: the step figures of these ranks cover their export's capture span "
        "(assumed one step)",
        "step-time stragglers: these ranks are left out",
    ),
    "ranks": (
        f"{_MATCHING}: a group with an untraced member has fewer instances",
        "means and totals over ranks: they cover the traced ranks only",
    ),
    "process_group": (f"{_MATCHING}: these calls form one unnamed group, paired by index",),
    "pg_config": (f"{_MATCHING}: group members guessed from the ranks seen",),
    "seq": (f"{_MATCHING}: a call missing on one rank shifts every later pairing (desyncs)",),
    "desync": (
        f"{_MATCHING}: these positions pair nothing (a job out of step, or calls missing from a "
        "trace that was cut or sampled, shifting the pairing by index)",
    ),
    "launch": (
        "collectives: type unknown (Other), size only from the kernel's own args",
        _MATCHING,
    ),
    "sizes": (
        "network load, busbw and traffic cover the calls of known size only",
        "α-β fits leave them out",
    ),
    "group_size_world": (
        "busbw, bus bytes, traffic and α-β: overstated when the group is smaller than the world",
    ),
    "group_size_unknown": ("busbw, bus bytes, traffic and α-β: n/a for these calls",),
    "base_time": (
        "clock offsets and arrival skew: the offsets rest on the traces' relative clocks alone",
    ),
    "gpu_name": (
        "network load: link peak and utilization n/a unless --peak-bandwidth",
        "MFU and HFU n/a unless --peak-tflops",
    ),
    "memory": (
        "memory peak: n/a for these ranks (Kineto: profile with profile_memory=True; Nsight "
        "Systems exports: their memory tables are not read)",
    ),
    "dropped": ("every section: the dropped events count nowhere",),
    "compute": (
        "overlap, exposed communication, GPU time by category and idle time: n/a",
        "diagnosis: no compute-relative figure for these ranks",
    ),
    "comm_lookalike": (
        "overlap, exposed communication and the verdict: these kernels count as compute; "
        "if they communicate, communication is understated",
        "collectives, network load and traffic: they are not counted",
    ),
    "call_starts": (
        "clock offsets and arrival skew: n/a for the collectives these ranks take part in "
        "(NCCL_INSPECTOR_DUMP_VERBOSE=1 logs the starts)",
    ),
    "graph_kernels": (
        "overlap, exposed communication, compute and GPU time: the replays' kernels count "
        "nowhere, so compute and communication time and their overlap are under-counted for "
        "the steps holding these launches",
        "collectives, network load and traffic: communication kernels inside these graphs "
        "are not counted",
        "CUDA graphs: kernels per launch and GPU time cover the recorded replays only",
    ),
}


class _TraceFile(Protocol):
    """What a check needs of one parsed file (`report.ParsedFile` is one)."""

    @property
    def meta(self) -> TraceMeta: ...

    @property
    def stats(self) -> FileStats: ...

    @property
    def result(self) -> RankResult: ...


def issue(key: str, missing: str, counts: tuple[int, int], unit: str) -> HealthIssue | None:
    """A gap of `counts` = (how many lack it, out of how many); None when nothing lacks it."""
    count, total = counts
    if count <= 0 or total <= 0:
        return None
    return HealthIssue(key=key, missing=missing, count=count, total=total, unit=unit,
                       share=count / total, weakens=list(_WEAKENS[key]))  # fmt: skip


def _calls(found: Sections) -> int:
    return sum(s.count for s in found.collectives.all_ranks.values())


def _sources(files: Sequence[_TraceFile]) -> set[str]:
    return {f.meta.source for f in files}


def _steps(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    bare = sum(1 for s in found.steps.values() if not s.count and not s.capture_span)
    missing = f"{where('steps', _sources(files), ' or ')} spans"
    return issue("steps", missing, (bare, len(found.steps)), "ranks")


def _capture_step(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    captured = sum(1 for steps in found.steps.values() if steps.capture_span)
    what = (
        "an NVTX step range in their Nsight Systems export's NVTX_EVENTS (ProfilerStep#N, "
        "train_step, iteration N: the capture span taken as one step)"
    )
    return issue("capture_step", what, (captured, len(found.steps)), "ranks")


def _ranks(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    world = max((f.meta.world_size for f in files if f.meta.world_size), default=0)
    untraced = world - len(found.ranks)
    return issue("ranks", "a trace", (untraced, world), "ranks")


def _groups(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    ungrouped = sum(f.result.ungrouped_calls for f in files)
    counts = (ungrouped, _calls(found))
    missing = where("process_group", _sources(files))
    return issue("process_group", missing, counts, "collective calls")


def _pg_config(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    if len(found.ranks) < 2 or not found.collectives.all_ranks:
        return None
    bare = sum(1 for f in files if not f.meta.pg_ranks)
    return issue("pg_config", where("pg_config", _sources(files)), (bare, len(files)), "files")


def _seq(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    m = found.matching
    counts = (m.by_index, m.instances)
    return issue("seq", where("seq", _sources(files)), counts, "matched instances")


def _desyncs(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    m = found.matching
    what = "agreement between their members (desyncs: type, size, dtype or split sizes differ)"
    gap = issue(
        "desync", what, (m.desync_count, m.instances + m.desync_count), "collective positions"
    )
    if gap is not None:
        gap.named = [_desync_line(d) for d in m.desyncs]
    return gap


def _desync_line(d: Desync) -> str:
    """`group 0 seq 12: calls differ in message size, dtype (ranks 3, 5 depart)`."""
    shown = ", ".join(map(str, d.ranks[:_NAMED_RANKS]))
    more = f" and {len(d.ranks) - _NAMED_RANKS} more" if len(d.ranks) > _NAMED_RANKS else ""
    who = f"rank {shown} departs" if len(d.ranks) == 1 else f"ranks {shown}{more} depart"
    departing = f" ({who})" if d.ranks else ""
    place = f"group {d.process_group} {d.key} {d.position}"
    return f"{place}: calls differ in {', '.join(d.differs)}{departing}"


_NAMED_RANKS: Final = 8


def _launch(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    counts = (sum(f.stats.no_launch for f in files), sum(f.stats.comm_kernels for f in files))
    missing = where("launch", _sources(files))
    return issue("launch", missing, counts, "communication kernels")


def _sizes(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    unknown = sum(s.count - s.sized_count for s in found.collectives.all_ranks.values())
    missing = f"a message size ({where('size', _sources(files))})"
    return issue("sizes", missing, (unknown, _calls(found)), "collective calls")


def _group_sizes(source: str) -> Callable[[Sequence[_TraceFile], Sections], HealthIssue | None]:
    """Calls whose bus factor needs n and got it from `source` ("world size" or "unknown")."""
    world = source == "world size"
    key = "group_size_world" if world else "group_size_unknown"

    def check(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
        missing = (
            "a group size of their own (n fell back to the world size)"
            if world
            else f"any group size ({where('group_size', _sources(files))})"
        )
        kinds = [s for kind, s in found.collectives.all_ranks.items()
                 if bus_fraction(kind, None) is None]  # fmt: skip
        count = sum(s.group_size_sources.get(source, 0) for s in kinds)
        return issue(key, missing, (count, sum(s.count for s in kinds)), "collective calls")

    return check


def _base_time(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    if len(found.ranks) < 2:
        return None
    bare = sum(1 for f in files if epoch_ns(f.meta.base_time_ns, f.result.start_ns) is None)
    what = f"a time base ({where('base_time', _sources(files))})"
    return issue("base_time", what, (bare, len(files)), "files")


def _on_gpu(files: Sequence[_TraceFile]) -> list[_TraceFile]:
    return [f for f in files if f.result.gpu_span_ns > 0]


def _gpu_name(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    gpu = _on_gpu(files)
    bare = sum(1 for f in gpu if not f.meta.gpu_name)
    what = f"the GPU's name ({where('gpu_name_health', _sources(files))})"
    return issue("gpu_name", what, (bare, len(gpu)), "GPU files")


def _memory(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    gpu = _on_gpu(files)
    bare = sum(1 for f in gpu if f.result.memory_peak_bytes is None)
    what = f"memory events ({where('memory', _sources(files))})"
    return issue("memory", what, (bare, len(gpu)), "GPU files")


def _dropped(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    reasons: Counter[str] = Counter()
    for f in files:
        reasons.update(f.stats.dropped)
    dropped = sum(reasons.values())
    read = max(sum(f.stats.events for f in files), dropped)
    what = "; ".join(f"{count} {reason_text(key)}" for key, count in sorted(reasons.items()))
    return issue("dropped", f"a usable form (dropped: {what})", (dropped, read), "events")


def _compute(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    bare = sum(1 for f in files if f.meta.source == INSPECTOR_LOGS)
    what = "compute kernels (read from NCCL Inspector logs)"
    return issue("compute", what, (bare, len(files)), "files")


def _call_starts(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    bare = sum(1 for f in files if not f.meta.call_starts)
    what = "the start times of their calls (NCCL Inspector logs, not verbose)"
    return issue("call_starts", what, (bare, len(files)), "files")


_LISTED: Final = 10  # look-alike kernels named in the report
_KERNEL_TIME: Final = (*KERNEL_CATEGORIES, "communication", "fused")  # kernels, not copies


def _lookalikes(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    named = sum(f.stats.lookalike_ns for f in files)
    total = sum(f.result.kernel_ns.get(key, 0) for f in files for key in _KERNEL_TIME)
    what = "a communicating family (named like communication, counted as compute)"
    gap = issue("comm_lookalike", what, (named, total), "ns of GPU kernel time")
    if gap is not None:
        gap.kernels = _lookalike_kernels(files)
    return gap


def _lookalike_kernels(files: Iterable[_TraceFile]) -> dict[str, float]:
    """The LISTED longest look-alike kernels over the files (each file keeps its longest:
    `FileStats.lookalikes`), GPU seconds by shown name."""
    times: Counter[str] = Counter()
    for f in files:
        times.update(f.stats.lookalikes)
    ranked = sorted(times.items(), key=lambda item: (-item[1], item[0]))[:_LISTED]
    return {name: ns * 1e-9 for name, ns in ranked}


def _graph_kernels(files: Sequence[_TraceFile], found: Sections) -> HealthIssue | None:
    pooled = found.graphs.all_ranks
    if pooled is None:
        return None
    why = where("graph_replay", _sources(files))
    what = f"their kernels (no kernel of their correlation in the trace: {why})"
    gap = issue("graph_kernels", what, (pooled.empty, pooled.launches), "CUDA graph launches")
    if gap is not None:
        gap.named = [f"rank {rank}: {g.empty} of {g.launches} graph launches without kernels"
                     for rank, g in found.graphs.per_rank.items() if g.empty][:_LISTED]  # fmt: skip
    return gap


_Check = Callable[[Sequence[_TraceFile], Sections], HealthIssue | None]
CHECKS: Final[tuple[tuple[str, _Check], ...]] = (
    ("steps", _steps),
    ("ranks", _ranks),
    ("process_group", _groups),
    ("pg_config", _pg_config),
    ("seq", _seq),
    ("desync", _desyncs),
    ("launch", _launch),
    ("sizes", _sizes),
    ("group_size_world", _group_sizes("world size")),
    ("group_size_unknown", _group_sizes("unknown")),
    ("base_time", _base_time),
    ("gpu_name", _gpu_name),
    ("memory", _memory),
    ("dropped", _dropped),
    ("compute", _compute),
    ("call_starts", _call_starts),
    ("capture_step", _capture_step),
    ("comm_lookalike", _lookalikes),
    ("graph_kernels", _graph_kernels),
)


def check(files: Iterable[_TraceFile], found: Sections) -> Health:
    """Every check on the files behind `found` (a window's, or the run's)."""
    listed = list(files)
    issues = [gap for _, test in CHECKS if (gap := test(listed, found)) is not None]
    return Health(checked=[key for key, _ in CHECKS], issues=issues)
