"""The text report (pure: Report → str).

Sections in the order users of the original tool know — header, THROUGHPUT,
COMMUNICATION-COMPUTATION OVERLAP, NETWORK LOAD, TRAFFIC DISTRIBUTION — then what commscope
adds: exposed communication, algbw and busbw side by side, the per-window table, the
diagnosis, MFU, GPU time by kernel category, the top kernels and the kernel launches
(`kerneltext`), the cross-rank analysis (matching, clocks, arrival skew, α-β fits, intra- vs
inter-node: `linktext`), what the
traces lack (trace health), and the inputs that were
skipped and why. Every number goes through `textfmt` (units that scale, decimal:
GB = 1e9 B); "n/a" always says why.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Iterator
from typing import Final

from commscope.exporters.alltoallvtext import alltoallv_lines
from commscope.exporters.crosstext import (
    alpha_beta_lines,
    diagnosis_lines,
    health_lines,
    kernel_lines,
    matching_lines,
    skew_lines,
    utilization_lines,
)
from commscope.exporters.extremes import Cut, cut_of
from commscope.exporters.flighttext import flight_lines
from commscope.exporters.graphtext import graph_lines
from commscope.exporters.inspectortext import sources_lines
from commscope.exporters.kerneltext import launch_lines, top_kernel_lines
from commscope.exporters.linktext import link_lines
from commscope.exporters.pipetext import pipeline_lines
from commscope.exporters.textfmt import na, num, pct, rank_list, rank_runs, row
from commscope.model.fields import where
from commscope.model.inspector import NO_COMPUTE, inspected
from commscope.model.schema import (
    FUSED,
    CollectiveStats,
    Evidence,
    RankOverlap,
    Report,
    RunConfig,
    Sections,
    Summary,
    Window,
    reason_text,
)
from commscope.model.units import UNITS_NOTE, duration, rate, size

_RULE = "=" * 80
_THIN = "-" * 80
_MAX_WARNINGS = 12


def render(report: Report, *, every_row: bool = False) -> str:
    """The report's text; a job of more than 16 ranks shows the extreme rows of each long
    table and a summary line (`extremes`), unless `every_row` (the HTML's copy)."""
    cut = cut_of(report, every_row)
    lines = [
        *_header(report, cut),
        *_section("1. THROUGHPUT", _throughput(report)),
        *_section("2. COMMUNICATION-COMPUTATION OVERLAP", _overlap(report, cut)),
        *_section("3. NETWORK LOAD", _network(report, cut)),
        *_section("4. TRAFFIC DISTRIBUTION", _traffic(report)),
        *_section("5. EXPOSED COMMUNICATION", _exposed(report, cut)),
        *_section("6. COLLECTIVE BANDWIDTH: ALGBW AND BUSBW", _bandwidth(report)),
        *_section("7. PER-WINDOW SUMMARY", _windows(report, cut)),
        *_section("8. DIAGNOSIS", diagnosis_lines(report)),
        *_section("9. MODEL FLOPS UTILIZATION", utilization_lines(report)),
        *_section("10. GPU TIME BY KERNEL CATEGORY, IDLE TIME, MEMORY", kernel_lines(report, cut)),
        *_section("10a. TOP KERNELS BY GPU TIME", top_kernel_lines(report, cut)),
        *_section("10b. KERNEL LAUNCHES", launch_lines(report, cut)),
        *_section("10c. CUDA GRAPHS", graph_lines(report, cut)),
        *_section(
            "11. COLLECTIVES MATCHED ACROSS RANKS, CLOCK OFFSETS",
            _within_shards(report, matching_lines(report, cut)),
        ),
        *_section(
            "12. ARRIVAL SKEW AND SLOW RANKS", _within_shards(report, skew_lines(report, cut))
        ),
        *(
            _section(
                "12a. PIPELINE PARALLELISM", _within_shards(report, pipeline_lines(report, cut))
            )
            if report.matching.point_to_point
            else []
        ),
        *_section(
            "13. NETWORK MODEL: α-β FIT", _within_shards(report, alpha_beta_lines(report, cut))
        ),
        *_section(
            "13a. ALL-TO-ALL-V: SPLIT SIZES, IMBALANCE, TRAFFIC", alltoallv_lines(report, cut)
        ),
        *_section("13b. INTRA- VS INTER-NODE", link_lines(report)),
        *_section("14. TRACE HEALTH", health_lines(report)),
        *_section("15. INPUTS", _inputs(report, cut)),
        *(_section("16. MERGED FROM SHARDS", _merged(report)) if report.merge else []),
        *(
            _section("FLIGHT RECORDER", flight_lines(flight))
            if (flight := report.flight_recorder)
            else []
        ),
        *(
            _section("SOURCES", sources_lines(report, _bandwidth, every_row))
            if report.sources
            else []
        ),
        _RULE,
        "END OF REPORT",
        _RULE,
    ]
    return "\n".join(lines) + "\n"


def summary_line(report: Report) -> str:
    """The console's one line: what was read, the verdict, the rank the others wait for, the
    overlap."""
    inputs = report.inputs
    job = ""
    if inputs.job is not None:
        job = (
            f"job {inputs.job} of {len(inputs.jobs)} ({inputs.jobs[inputs.job - 1].description}): "
        )
    awaited = report.skew.waited_for_rank
    fr = report.flight_recorder
    dumps = f" (and {_count(fr.dumps, 'Flight Recorder dump')})" if fr is not None else ""
    return (
        f"commscope: {job}{inputs.files - len(inputs.skipped)} of {inputs.files} files{dumps}, "
        f"{_count(len(report.windows), 'window')}, {_count(len(report.ranks), 'rank')}. "
        f"Verdict: {report.diagnosis.verdict}. "
        f"The rank the others wait for: {'none named' if awaited is None else awaited}. "
        f"Overlap: mean {pct(report.overlap.mean)}{_lowest(report)}."
    )


def _lowest(report: Report) -> str:
    """`, lowest 0.56% (rank 4)` when two ranks or more have an overlap."""
    ratios = [(r.ratio, rank) for rank, r in report.overlap.per_rank.items() if r.ratio is not None]
    if len(ratios) < 2:
        return ""
    ratio, rank = min(ratios, key=lambda pair: pair[0])
    return f", lowest {pct(ratio)} (rank {rank})"


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" + ("" if number == 1 else "s")


def _section(title: str, body: Iterator[str]) -> list[str]:
    return ["", _RULE, title, _RULE, *body]


# ---------------------------------------------------------------- sections


def _header(report: Report, cut: Cut) -> Iterator[str]:
    config = report.config
    yield _RULE
    yield "COMMSCOPE DISTRIBUTED TRAINING PERFORMANCE METRICS"
    yield _RULE
    yield ""
    world = report.world_size if report.world_size is not None else "n/a"
    devices = "GPUs" if on_gpu(report) else "ranks"
    about = ", ".join(x for x in (device(report), config.backend) if x)
    yield f"Configuration: {world} {devices} ({about}), {report.throughput.iterations} iterations"
    model = " ".join(x for x in (config.model, config.flavor) if x)
    unknown = "n/a (not in the config)" if config.config_path else "n/a (no --config)"
    yield f"Model: {model or unknown}"
    local = config.local_batch_size if config.local_batch_size is not None else "n/a"
    seq = config.seq_len if config.seq_len is not None else "n/a"
    glob = config.global_batch_size if config.global_batch_size is not None else "n/a"
    yield f"Batch Size: {local}, Sequence Length: {seq}, Global Batch: {glob}"
    yield from _parallelism(config)
    yield f"Windows: {len(report.windows)} ({_window_names([w.name for w in report.windows])})"
    missing = ""
    if report.world_size is not None and len(report.ranks) < report.world_size:
        missing = f"  ({len(report.ranks)} of {report.world_size} ranks have traces)"
    ranks = rank_list(report.ranks) if cut.every else rank_runs(report.ranks)
    yield f"Ranks: {ranks}{missing}"
    yield from _source_header(report)
    yield from _warnings(config)
    yield from _job_header(report)
    yield from _provenance(report)
    yield UNITS_NOTE
    if report.merge:
        yield (
            f"Merged from {len(report.merge.shards)} shard reports: cross-rank sections cover "
            "process groups inside one shard only (see 16. MERGED FROM SHARDS)"
        )


def _provenance(report: Report) -> Iterator[str]:
    found = report.provenance
    if found is not None:
        yield f"Generated: {found.generated_utc} by commscope {found.tool_version}"
        if found.command:
            yield f"Command: {shlex.join(found.command)}"


def on_gpu(report: Report) -> bool:
    """The traces show a GPU: a GPU name, GPU activity on some rank, or ranks read from NCCL
    Inspector logs (NCCL's collectives run on GPUs)."""
    read = any(inspected(r.evidence) for r in report.overlap.per_rank.values())
    return bool(report.config.gpu_name or report.kernels.per_rank or read)


def device(report: Report) -> str:
    """The GPU's name; "no GPU in the traces" only when they show none."""
    if report.config.gpu_name:
        return report.config.gpu_name
    return "GPU unnamed in the traces" if on_gpu(report) else "no GPU in the traces"


def _parallelism(config: RunConfig) -> Iterator[str]:
    """Each degree with where it came from; n/a with the reason when they cannot be right."""
    if config.parallelism_issue:
        yield f"Parallelism: n/a ({config.parallelism_issue})"
        return
    if not config.parallelism:
        yield "Parallelism: n/a (no --config)"
        return
    yield "Parallelism:"
    for key, value in sorted(config.parallelism.items()):
        source = config.parallelism_source.get(key)
        yield f"  {key}: {value}" + (f"  ({source})" if source else "")


def _warnings(config: RunConfig) -> Iterator[str]:
    shown = config.warnings[:_MAX_WARNINGS]
    if shown:
        yield f"Warnings: {len(config.warnings)}"
        yield from (f"  ! {line}" for line in shown)
    if len(config.warnings) > len(shown):
        yield f"  ! … {len(config.warnings) - len(shown)} more in the JSON report"


def _throughput(report: Report) -> Iterator[str]:
    t = report.throughput
    why = t.na_reason
    yield f"Tokens per Second: {na(num(t.tokens_per_second), why)}"
    device = "GPU" if on_gpu(report) else "rank"  # a CPU (gloo) run has no GPU to count
    yield f"Tokens per Second per {device}: {na(num(t.tokens_per_second_per_gpu), why)}"
    yield f"Samples per Second: {na(num(t.samples_per_second), why)}"
    step = where("steps", report.inputs.sources, " or ")
    yield (
        f"Time per Iteration: {na(duration(t.iteration_time_s), why)}"
        f"  (per rank Σ {step} time / steps, mean over ranks)"
    )
    yield f"Profiled Iterations: {t.iterations}  (distinct {step} numbers, max over ranks)"


def _overlap(report: Report, cut: Cut) -> Iterator[str]:
    o = report.overlap
    yield "Overlap = |comm ∩ compute| / |comm| per rank (unions over all streams)"
    yield f"Average Overlap: {pct(o.mean)}"
    yield f"Min Overlap: {pct(o.min)}"
    yield f"Max Overlap: {pct(o.max)}"
    yield ""
    yield "Per-Rank Overlap:"
    shown = cut.ranks(o.per_rank, lambda r: r.ratio, "overlap", pct)
    for rank, r in shown.items:
        ratio = pct(r.ratio) if r.ratio is not None else _no_ratio(r.evidence)
        yield f"  rank {rank}: {ratio}  [{r.evidence_text}]"
    yield from shown.summary
    yield from _fused(report)


def _fused(report: Report) -> Iterator[str]:
    """Fused kernels (compute and communicate) are in neither union: said with their time."""
    seconds = report.kernels.time_s.get(FUSED)
    if seconds:
        yield ""
        yield "Fused compute+communication kernels (comm-GEMM overlap, e.g. TE userbuffers):"
        yield (
            f"  {duration(seconds)} GPU time over all ranks, in neither the communication nor "
            "the compute union (see 10.)"
        )


def _no_ratio(evidence: frozenset[Evidence]) -> str:
    return NO_COMPUTE if inspected(evidence) else "n/a (no communication)"


def _network(report: Report, cut: Cut) -> Iterator[str]:
    n = report.network
    yield "Bus bandwidth = Σ bus bytes / Σ op time over ops of known size (nccl-tests busbw)"
    yield f"Average Bus Bandwidth: {rate(n.mean_bus_bandwidth_Bps)}"
    peak = rate(n.peak_bandwidth_Bps)
    yield f"Peak Bandwidth (per direction): {peak if peak != 'n/a' else f'n/a ({n.peak_source})'}"
    if n.peak_bandwidth_Bps is not None:
        yield f"  source: {n.peak_source}"
    yield f"Bandwidth Utilization: {pct(n.utilization)}"
    yield f"Total Traffic: {size(n.total_bus_bytes)}  (Σ bus bytes over ranks)"
    yield ""
    yield "Per-Rank Network Stats:"
    shown = cut.ranks(n.per_rank, lambda r: r.bus_bandwidth_Bps, "bus bandwidth", rate)
    for rank, r in shown.items:
        yield ""
        yield f"  rank {rank}:"
        yield f"    Bus Bandwidth: {rate(r.bus_bandwidth_Bps)}"
        yield f"    Simple Bandwidth: {rate(r.simple_bandwidth_Bps)}  (Σ message bytes / comm time)"
        yield f"    Total Bytes: {size(r.message_bytes)} message, {size(r.bus_bytes)} bus"
        yield f"    Communication Operations: {r.ops}"
        yield ""
        yield "    Collective Breakdown:"
        for kind, stats in report.collectives.per_rank.get(rank, {}).items():
            yield from _breakdown(kind, stats)
    if shown.summary:
        yield ""
        yield from shown.summary


def _breakdown(kind: str, s: CollectiveStats) -> Iterator[str]:
    yield f"      {kind}:"
    yield f"        Count: {s.count} ({s.sized_count} of known size)"
    yield f"        Time: {duration(s.time_s)}"
    yield f"        Data Transferred: {size(s.message_bytes)} message, {size(s.bus_bytes)} bus"
    yield f"        algbw Avg/Median/Min/Max/p95: {_summary(s.algbw_Bps)}"
    yield f"        busbw Avg/Median/Min/Max/p95: {_summary(s.busbw_Bps)}"


def _summary(s: Summary) -> str:
    if s.mean is None:
        return "n/a (no op of known size)"
    values = (s.mean, s.median, s.min, s.max, s.p95)
    text = " / ".join(rate(v) for v in values if v is not None)
    if s.relative_error is not None:
        text += f"  (~ median, p95: sketched, within {s.relative_error:.0%})"
    return text


def _approx(value: str, s: Summary) -> str:
    """A quantile cell, marked `~` when it comes from the whole-run sketch."""
    return f"~{value}" if s.relative_error is not None and value != "n/a" else value


def _sketch_note(stats: Iterable[CollectiveStats]) -> Iterator[str]:
    errors = {x.relative_error for s in stats for x in (s.algbw_Bps, s.busbw_Bps)} - {None}
    for error in sorted(e for e in errors if e is not None):
        yield (
            f"~ = quantile of the whole run from a mergeable log-bucket sketch, within {error:.0%}"
            " of the exact one"
        )
        yield "  (counts, bytes, means, min and max are exact, and so is every figure of a window)"


def _traffic(report: Report) -> Iterator[str]:
    if not report.traffic:
        yield "No collectives."
    for kind, t in report.traffic.items():
        yield ""
        yield f"{kind}:"
        yield f"  Count: {t.count}"
        yield f"  Total Traffic: {size(t.bus_bytes)}"
        yield f"  Percent of Total Traffic: {pct(t.share)}"
        yield f"  Average Time: {duration(t.mean_time_s)}"


def _exposed(report: Report, cut: Cut) -> Iterator[str]:
    yield "Exposed = comm time not hidden under compute: |C| - |C ∩ P| (per rank), split into"
    yield "transfer (no member of the collective still awaited), waiting (for the last member"
    yield "to arrive, on aligned clocks) and unmatched (calls matched to no other rank's)"
    yield ""
    widths = [6, 11, 11, 11, 11, 11, 11, 11]
    head = ["rank", "comm", "overlapped", "exposed", "transfer", "waiting", "unmatched", "compute"]
    yield row(head, widths)
    rows = cut.ranks(report.overlap.per_rank, _exposed_s, "exposed", duration)
    for rank, r in rows.items:
        times = (r.comm_time_s, r.overlapped_time_s, r.exposed_comm_time_s, r.exposed_transfer_s,
                 r.exposed_waiting_s, r.exposed_unmatched_s, r.compute_time_s)  # fmt: skip
        shown = (
            [duration(times[0]), *("n/a",) * 6] if inspected(r.evidence) else map(duration, times)
        )
        yield row([rank, *shown], widths)
    yield from rows.summary
    yield from _in_steps(report, cut)


def _exposed_s(r: RankOverlap) -> float | None:
    """A rank's exposed communication; None for an Inspector rank (no compute to hide it)."""
    return None if inspected(r.evidence) else r.exposed_comm_time_s


_STEP_WIDTHS = [6, 11, 11, 11, 11, 11, 11, 11, 11, 13, 15]


def _in_steps(report: Report, cut: Cut) -> Iterator[str]:
    yield ""
    step = where("steps", report.inputs.sources, " or ")
    yield f"Within the profiled steps (S = union of the {step} spans, events clipped to S;"
    yield "the diagnosis divides these by |S|), and what lies outside them:"
    yield ""
    head = ["rank", "steps |S|", "comm", "exposed", "transfer", "waiting", "unmatched",
            "compute", "GPU busy", "comm outside", "compute outside"]  # fmt: skip
    yield row(head, _STEP_WIDTHS)
    shown = cut.ranks(report.steps, lambda s: s.exposed_comm_s, "exposed", duration)
    for rank, s in shown.items:
        times = (s.span_s, s.comm_s, s.exposed_comm_s, s.exposed_transfer_s, s.exposed_waiting_s,
                 s.exposed_unmatched_s, s.compute_s, s.gpu_busy_s, s.comm_outside_s,
                 s.compute_outside_s)  # fmt: skip
        yield row([rank, *map(duration, times)], _STEP_WIDTHS)
    yield from shown.summary
    captured = [int(rank) for rank, s in report.steps.items() if s.capture_span]
    if captured:
        yield (
            f"  ranks {rank_list(captured)}: S is the export's capture span, assumed one step "
            "(no NVTX step range in its NVTX_EVENTS)"
        )


def _bandwidth(report: Report) -> Iterator[str]:
    yield "All ranks pooled. algbw = S / t; busbw = algbw x F (nccl-tests); medians and p95"
    yield ""
    widths = [13, 6, 6, 12, 12, 14, 14, 14]
    head = ["collective", "count", "sized", "message", "bus", "algbw med", "busbw med", "busbw p95"]
    yield row(head, widths)
    for kind, s in report.collectives.all_ranks.items():
        cells = [
            kind,
            str(s.count),
            str(s.sized_count),
            size(s.message_bytes),
            size(s.bus_bytes),
            _approx(rate(s.algbw_Bps.median), s.algbw_Bps),
            _approx(rate(s.busbw_Bps.median), s.busbw_Bps),
            _approx(rate(s.busbw_Bps.p95), s.busbw_Bps),
        ]
        yield row(cells, widths)
    yield from _sketch_note(report.collectives.all_ranks.values())
    yield from _group_sources(report)


def _group_sources(report: Report) -> Iterator[str]:
    """Where each collective type's group size n (its bus factor) came from."""
    lines = [
        f"  {kind}: "
        + ", ".join(f"{source} {count}" for source, count in s.group_size_sources.items())
        for kind, s in report.collectives.all_ranks.items()
        if s.group_size_sources
    ]
    if lines:
        yield ""
        yield "Group size n (for F) taken from, in calls:"
        yield from lines


_WINDOW_WIDTHS = [18, 5, 8, 12, 12, 14, 10]


def _windows(report: Report, cut: Cut) -> Iterator[str]:
    head = ["window", "ranks", "overlap", "exposed/rank", "waiting/rank", "bus bw", "iteration"]
    longest = max((len(w.name) for w in report.windows), default=0)
    widths = [max(_WINDOW_WIDTHS[0], longest), *_WINDOW_WIDTHS[1:]]  # names of any length
    yield row(head, widths)
    by_name = {w.name: w for w in report.windows}
    named = report.inputs.open_windows
    shown = cut.rows(by_name, _mean_exposed, "exposed/rank", duration, noun="windows", named=named)
    for name, window in shown.items:
        yield _window_row(name, window, widths)
    yield _window_row("whole run", report, widths)
    yield from shown.summary


def _mean_exposed(s: Sections) -> float | None:
    """Exposed communication, mean over ranks (an Inspector rank has no compute kernels:
    nothing to be exposed against)."""
    exposed = [
        r.exposed_comm_time_s for r in s.overlap.per_rank.values() if not inspected(r.evidence)
    ]
    return sum(exposed) / len(exposed) if exposed else None


def _window_row(name: str, s: Sections, widths: list[int]) -> str:
    waited = [r.exposed_waiting_s for r in s.overlap.per_rank.values() if not inspected(r.evidence)]
    known = [w for w in waited if w is not None]
    mean_waited = sum(known) / len(known) if known and len(known) == len(waited) else None
    cells = [
        name,
        str(len(s.ranks)),
        pct(s.overlap.mean),
        duration(_mean_exposed(s)),
        duration(mean_waited),
        rate(s.network.mean_bus_bandwidth_Bps),
        duration(s.throughput.iteration_time_s),
    ]
    return row(cells, widths)


def _inputs(report: Report, cut: Cut) -> Iterator[str]:
    i = report.inputs
    analysed = i.files - len(i.skipped)
    yield f"Files: {i.files} ({analysed} analysed, {len(i.skipped)} skipped)"
    yield f"Read: {size(i.bytes_read)}, {i.events:,} events"
    yield (f"Collectives of unknown size: {i.sizes_unknown}  ({where('size_none', i.sources)})")
    for reason, count in i.dropped_events.items():
        yield f"Events dropped: {count} ({reason_text(reason)})"
    if i.skipped:
        yield ""
        yield "Skipped:"
        yield from cut.lines([f"  {s.path}: {s.reason}" for s in i.skipped], "skipped files")
    yield from _source_lines(report, cut)
    yield from _more_inputs(report, cut)


_SOURCE_NAMES = {
    "kineto": "PyTorch profiler (Kineto) traces",
    "nsys": "Nsight Systems SQLite exports",
    "inspector": "NCCL Inspector logs",
}


_MAX_NAMED_WINDOWS: Final = 6  # the header names the first and last beyond this


def _window_names(names: list[str]) -> str:
    """The windows' names, or the first three and the last two of many (an NCCL Inspector
    log of a long run has a window every few minutes: all are in the per-window summary)."""
    if len(names) <= _MAX_NAMED_WINDOWS:
        return ", ".join(names)
    return f"{', '.join(names[:3])}, …, {', '.join(names[-2:])}: all in the per-window summary"


def _source_header(report: Report) -> Iterator[str]:
    """Which formats the ranks' windows were read from (every section comes from them)."""
    sources = report.inputs.sources
    if sources:
        parts = (f"{_SOURCE_NAMES.get(s, s)} ({n} (window, rank) pair{'s' * (n != 1)})"
                 for s, n in sources.items())  # fmt: skip
        yield f"Source: {', '.join(parts)}"


def _source_lines(report: Report, cut: Cut) -> Iterator[str]:
    """Each window's ranks by the format they were read from, when any is not Kineto."""
    if set(report.inputs.sources) - {"kineto"}:
        yield ""
        yield "Sources by window:"
        yield from cut.lines([_window_sources(w, cut) for w in report.windows], "windows")


def _window_sources(window: Window, cut: Cut) -> str:
    by_source: dict[str, list[int]] = {}
    for rank, facts in sorted(window.facts.items(), key=lambda kv: int(kv[0])):
        by_source.setdefault(facts.meta.source, []).append(int(rank))
    ranks = rank_list if cut.every else rank_runs
    found = "; ".join(f"{s}: ranks {ranks(r)}" for s, r in by_source.items())
    return f"  {window.name}: {found}"


def _job_header(report: Report) -> Iterator[str]:
    i = report.inputs
    if i.job is not None:
        about = i.jobs[i.job - 1].description
        yield f"Job: {i.job} of {len(i.jobs)} in these files ({about}); see 15. INPUTS"
    if i.notes:
        yield "Ranks not all from the traces: see the notes in 15. INPUTS"
    if i.open_windows:
        yield (
            f"Mid-run: {', '.join(i.open_windows)} still open, shown without cross-rank sections "
            "(matching, clocks, skew, alpha-beta) until every rank's file has finished; the "
            "run's cross-rank sections cover the completed windows only"
        )
    if i.unended_collectors:
        yield (
            f"Incomplete: collectors {', '.join(i.unended_collectors)} never sent end-of-run; "
            "files they had not sent are missing (see 15. INPUTS)"
        )


def _more_inputs(report: Report, cut: Cut) -> Iterator[str]:
    i = report.inputs
    if i.unended_collectors:
        yield ""
        yield "Collectors without end-of-run (files they had not sent are missing):"
        yield from (f"  {node}" for node in i.unended_collectors)
    if i.ignored:
        yield ""
        yield "Ignored (valid JSON without traceEvents, not named as a trace):"
        yield from cut.lines([f"  {path}" for path in i.ignored], "ignored files")
    if i.notes:
        yield ""
        yield "Notes:"
        yield from cut.lines([f"  {note}" for note in i.notes], "notes")
    if i.jobs:
        yield ""
        yield (
            f"Jobs: these files hold {len(i.jobs)} jobs (told apart by world size, backend, "
            "GPU model and start time)"
        )
        yield (
            f"  this report covers job {i.job} alone: nothing is matched or pooled across "
            f"jobs; `commscope report` writes one report per job (…_job<N>of{len(i.jobs)})"
        )
        for job in i.jobs:
            this = "  <- this report" if job.number == i.job else ""
            files = f"{job.files} file" + ("s" if job.files != 1 else "")
            yield f"  job {job.number}: {job.description}; {files}{this}"


def _merged(report: Report) -> Iterator[str]:
    """Which shard gave which ranks, and what the cross-rank sections cover."""
    merge = report.merge
    if merge is None:
        return
    for number, shard in enumerate(merge.shards, 1):
        windows = f"{len(shard.windows)} window(s)"
        yield f"Shard {number}: {shard.path}  (ranks {rank_list(shard.ranks)}, {windows})"
    yield ""
    yield from (f"{note}." for note in merge.notes)


def _within_shards(report: Report, body: Iterator[str]) -> Iterator[str]:
    """A cross-rank section's body, said to cover groups inside one shard in a merged report."""
    if report.merge:
        yield "Merged report: process groups inside one shard only (see 16. MERGED FROM SHARDS)"
    yield from body
