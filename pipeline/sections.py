"""From per-rank results to the report's sections, per the metric contract (pure).

The same function serves one window and the whole run: a run's per-rank results are the
windows' results merged (numerators and denominators summed), so every run ratio is
Σ numerator / Σ denominator over windows, never a mean of ratios. Bandwidth quantiles over
several windows come from merged sketches (`RunTally`, within 1%, labelled in the summary);
a window's are exact.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Final, Literal, TypeVar

import msgspec
from commscope.model.fields import CAPTURE_ONLY, where
from commscope.model.inspector import inspected
from commscope.model.schema import (
    FUSED,
    KERNEL_CATEGORIES,
    Collectives,
    CollectiveStats,
    Kernels,
    Network,
    OpTally,
    Overlap,
    RankKernels,
    RankNetwork,
    RankOverlap,
    RankResult,
    RankSteps,
    RunTally,
    Sections,
    ShedTally,
    Summary,
    Throughput,
    TrafficShare,
    Utilization,
)
from commscope.pipeline import sketch
from commscope.pipeline.accumulate import (
    Sketcher,
    bandwidth_sketch,
    bus_bytes,
    bus_total,
    pooled_ops,
)
from commscope.pipeline.graphs import graphs
from commscope.pipeline.skew import stragglers
from commscope.pipeline.stats import mean, ratio, sample_values, summarize
from commscope.pipeline.topkernels import launches, top_kernels
from commscope.pipeline.waiting import Split

_NS: Final = 1e-9
_GPU_ACTIVITY: Final = (*KERNEL_CATEGORIES, "communication", "memcpy", "memset")
_IMPLAUSIBLE: Final = (
    "above 100%: the batch size, sequence length, FLOPs per token or GPU peak is wrong"
)

# Peak link bandwidth per direction (bytes/s), matched as a substring of the GPU name: the
# GPU-to-GPU link within a node (NVLink; AMD Infinity Fabric), half the total (both
# directions) that the vendor's public specifications give per GPU. It is the intra-node
# link's peak (`hosts`); the network's is --net-peak, as no trace names the NIC.
_PEAK_BPS: Final = (
    ("GB200", 900e9),  # NVLink 5, 1.8 TB/s: nvidia.com/en-us/data-center/gb200-nvl72/
    ("B200", 900e9),  # NVLink 5, 1.8 TB/s: nvidia.com/en-us/data-center/dgx-b200/
    ("H200", 450e9),  # NVLink 4, 900 GB/s: nvidia.com/en-us/data-center/h200/
    ("H100", 450e9),  # NVLink 4, 900 GB/s (SXM): nvidia.com/en-us/data-center/h100/
    ("A100", 300e9),  # NVLink 3, 600 GB/s: nvidia.com/en-us/data-center/a100/
    ("V100", 150e9),  # NVLink 2, 300 GB/s (SXM2): nvidia.com/en-us/data-center/v100/
    # Infinity Fabric, 7 links x 128 GB/s = 896 GB/s:
    # amd.com/en/products/accelerators/instinct/mi300/mi300x.html
    ("MI300X", 448e9),
)


class Context(msgspec.Struct, frozen=True, kw_only=True):
    """What the sections need beyond the ranks' results."""

    world_size: int | None = None
    peak_Bps: float | None = None
    peak_source: str | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    batch_reason: str | None = None
    flops_per_token: float | None = None
    flops_source: str | None = None  # the formula, or why FLOPs per token are unknown
    peak_flops: float | None = None
    peak_flops_source: str | None = None
    hfu_factor: float | None = None
    hfu_reason: str | None = None
    pp_degree: int | None = None  # the config's pipeline_parallel_degree (None: not given)
    pp_schedule: str | None = None  # the config's pipeline_parallel_schedule (None: not given)


def peak_bandwidth(
    gpu_name: str | None, override_Bps: float | None, sources: Collection[str] = ()
) -> tuple[float | None, str]:
    """(peak link bandwidth per direction, where it came from); `sources`: the input formats,
    whose field for the GPU name a missing one names."""
    if override_Bps is not None:
        return override_Bps, "--peak-bandwidth"
    if gpu_name is None:
        return None, f"GPU unknown ({where('gpu_name', sources)}); give --peak-bandwidth"
    upper = gpu_name.upper()
    for key, peak in _PEAK_BPS:
        if key in upper:
            return peak, f"{key} table value"
    return None, f"no table value for {gpu_name}; give --peak-bandwidth"


def sections(
    results: Mapping[int, RankResult], context: Context, sketcher: Sketcher | None = None
) -> Sections:
    """Every section of the report for these ranks (`sketcher`: each window's bandwidth
    sketches where tallies of several windows are pooled, `accumulate.pooled_ops`)."""
    ranks = sorted(results)
    ordered = {rank: results[rank] for rank in ranks}
    rates = throughput(ordered, context)
    steps = {rank: _rank_steps(result) for rank, result in ordered.items()}
    return Sections(
        ranks=ranks,
        overlap=overlap(ordered),
        collectives=Collectives(
            per_rank={str(r): collective_stats(res.ops) for r, res in ordered.items()},
            all_ranks=collective_stats(pooled_ops(ordered.values(), sketcher=sketcher)),
        ),
        network=network(ordered, context),
        traffic=traffic(ordered),
        throughput=rates,
        steps={str(rank): s for rank, s in steps.items()},
        utilization=utilization(rates, context),
        kernels=kernels(ordered),
        stragglers=stragglers({r: s.mean_s for r, s in steps.items() if s.mean_s is not None}),
        top_kernels=top_kernels(ordered),
        launches=launches(ordered),
        graphs=graphs(ordered),
    )


def metrics_sections(results: Mapping[int, RankResult], context: Context) -> Sections:
    """The sections the live /metrics reads of a run (`exporters.prometheus`), each as
    `sections` gives it, and nothing else: the ranks, overlap, throughput, utilization,
    kernels, the collectives over all ranks (counts and sums: their bandwidths are not read)
    and the network's peak. What a mid-run report needs of the run, its results merged
    without samples (`accumulate.merge_results`); the final report gives every section."""
    ranks = sorted(results)
    ordered = {rank: results[rank] for rank in ranks}
    rates = throughput(ordered, context)
    return Sections(
        ranks=ranks,
        overlap=overlap(ordered),
        collectives=Collectives(
            all_ranks=collective_stats(pooled_ops(ordered.values(), samples=False))
        ),
        network=Network(peak_bandwidth_Bps=context.peak_Bps, peak_source=context.peak_source),
        throughput=rates,
        utilization=utilization(rates, context),
        kernels=kernels(ordered),
    )


def overlap(results: Mapping[int, RankResult]) -> Overlap:
    per_rank = {str(rank): _rank_overlap(result) for rank, result in results.items()}
    ratios = [o.ratio for o in per_rank.values() if o.ratio is not None]
    return Overlap(
        mean=mean(ratios),
        min=min(ratios) if ratios else None,
        max=max(ratios) if ratios else None,
        per_rank=per_rank,
    )


def _rank_overlap(result: RankResult) -> RankOverlap:
    """overlap_ratio = |C ∩ P| / |C|; exposed = |C| - |C ∩ P|. None for a rank read from
    NCCL Inspector logs (no compute kernels: not 0)."""
    return RankOverlap(
        ratio=None if inspected(result.evidence) else ratio(result.overlap_ns, result.comm_ns),
        comm_time_s=result.comm_ns * _NS,
        overlapped_time_s=result.overlap_ns * _NS,
        exposed_comm_time_s=(result.comm_ns - result.overlap_ns) * _NS,
        compute_time_s=result.compute_ns * _NS,
        evidence_text=result.evidence_text,
    )


def collective_stats(ops: Mapping[str, OpTally]) -> dict[str, CollectiveStats]:
    return {kind: tally_stats(tally) for kind, tally in ops.items()}


def tally_stats(tally: OpTally) -> CollectiveStats:
    return CollectiveStats(
        count=tally.count,
        sized_count=tally.sized_count,
        message_bytes=tally.message_bytes if tally.sized_count else None,
        bus_bytes=bus_bytes(tally) if tally.bus_count else None,
        time_s=tally.time_ns * _NS,
        algbw_Bps=_bandwidths(tally, "algbw"),
        busbw_Bps=_bandwidths(tally, "busbw"),
        group_size_sources=dict(sorted(tally.group_sources.items())),
    )


def _bandwidths(tally: OpTally, which: Literal["algbw", "busbw"]) -> Summary:
    """Exact from a window's samples; from the sketch over several windows (a `RunTally`).
    A window's tally whose samples were shed cannot give exact figures: never guessed."""
    if isinstance(tally, RunTally):
        return sketch.summary(bandwidth_sketch(tally, which))
    if isinstance(tally, ShedTally):
        raise TypeError("a window's exact bandwidths asked of a tally whose samples were shed")
    return summarize(sample_values(tally.algbw_Bps if which == "algbw" else tally.busbw_Bps))


def network(results: Mapping[int, RankResult], context: Context) -> Network:
    per_rank = {str(rank): _rank_network(result) for rank, result in results.items()}
    bus_bandwidth = mean([n.bus_bandwidth_Bps for n in per_rank.values()])
    tallies = [tally for result in results.values() for tally in result.ops.values()]
    return Network(
        mean_bus_bandwidth_Bps=bus_bandwidth,
        peak_bandwidth_Bps=context.peak_Bps,
        peak_source=context.peak_source,
        utilization=ratio(bus_bandwidth, context.peak_Bps),
        total_bus_bytes=bus_total(tallies) if any(t.bus_count for t in tallies) else None,
        per_rank=per_rank,
    )


def _rank_network(result: RankResult) -> RankNetwork:
    """bus_bandwidth = Σ(S·F) / Σ dur over sized ops; simple_bandwidth = Σ S / |C|."""
    tallies = result.ops.values()
    sized = sum(t.sized_count for t in tallies)
    bus_known = sum(t.bus_count for t in tallies)
    bus = bus_total(tallies)
    message_bytes = sum(t.message_bytes for t in tallies)
    return RankNetwork(
        bus_bandwidth_Bps=ratio(bus, sum(t.bus_time_ns for t in tallies) * _NS)
        if bus_known
        else None,
        simple_bandwidth_Bps=ratio(message_bytes, result.comm_ns * _NS) if sized else None,
        message_bytes=message_bytes if sized else None,
        bus_bytes=bus if bus_known else None,
        ops=sum(t.count for t in tallies),
    )


def traffic(results: Mapping[int, RankResult]) -> dict[str, TrafficShare]:
    """Per collective type over all ranks: count, bus bytes, share of all bus bytes."""
    totals = pooled_ops(results.values(), samples=False)
    sums = {kind: bus_bytes(t) for kind, t in totals.items()}
    everything = bus_total(totals.values())
    return {
        kind: TrafficShare(
            count=t.count,
            bus_bytes=sums[kind] if t.bus_count else None,
            share=ratio(sums[kind], everything) if t.bus_count else None,
            mean_time_s=ratio(t.time_ns * _NS, t.count),
        )
        for kind, t in sorted(totals.items(), key=lambda item: (-sums[item[0]], item[0]))
    }


def throughput(results: Mapping[int, RankResult], context: Context) -> Throughput:
    """Iteration time = mean over ranks of (Σ step durations / number of steps); an export's
    capture span (`RankResult.capture_ns`) is no training step."""
    per_rank = [sum(r.steps.values()) * _NS / len(r.steps) for r in results.values() if r.steps]
    iteration = mean(per_rank)
    iterations = max((len(r.steps) for r in results.values()), default=0)
    captured = any(r.capture_ns for r in results.values())
    reason = _throughput_gap(iteration, context, captured)
    tokens = samples = None
    if reason is None and iteration and context.global_batch is not None:
        samples = context.global_batch / iteration
        tokens = samples * context.seq_len if context.seq_len is not None else None
    by_step: dict[int, list[int]] = {}
    for result in results.values():
        for step, duration in result.steps.items():
            by_step.setdefault(step, []).append(duration)
    return Throughput(
        step_times_s=[math.fsum(d) * _NS / len(d) for _, d in sorted(by_step.items())],
        iterations=iterations,
        iteration_time_s=iteration,
        tokens_per_second=tokens,
        tokens_per_second_per_gpu=ratio(tokens, context.world_size),
        samples_per_second=samples,
        global_batch_size=context.global_batch,
        seq_len=context.seq_len,
        na_reason=reason,
    )


def _throughput_gap(iteration: float | None, context: Context, captured: bool) -> str | None:
    if iteration is None:
        return CAPTURE_ONLY if captured else "no ProfilerStep spans in the traces"
    if context.global_batch is None:
        return context.batch_reason or "no batch size (give --config or --batch-size)"
    if context.seq_len is None:
        return "no sequence length (give --config or --seq-len)"
    return None


def _rank_steps(result: RankResult) -> RankSteps:
    """Step times; time within S (the union of the profiled steps' spans) and outside it."""
    durations = [d * _NS for d in result.steps.values()]
    found = RankSteps(
        count=len(durations),
        mean_s=mean(durations),
        min_s=min(durations) if durations else None,
        max_s=max(durations) if durations else None,
        capture_span=result.capture_ns > 0,
    )
    clip = result.in_steps
    if clip is None:
        return found
    return msgspec.structs.replace(
        found,
        span_s=clip.span_ns * _NS,
        comm_s=clip.comm_ns * _NS,
        exposed_comm_s=(clip.comm_ns - clip.overlap_ns) * _NS,
        compute_s=clip.compute_ns * _NS,
        gpu_busy_s=clip.gpu_busy_ns * _NS if result.gpu_span_ns else None,
        comm_outside_s=(result.comm_ns - clip.comm_ns) * _NS,
        compute_outside_s=(result.compute_ns - clip.compute_ns) * _NS,
    )


def utilization(rates: Throughput, context: Context) -> Utilization:
    """MFU = tokens/s per GPU x FLOPs per token / peak FLOP/s; HFU = MFU x recompute factor."""
    reason = None
    if context.flops_per_token is None:
        reason = context.flops_source or "FLOPs per token unknown"
    elif context.peak_flops is None:
        reason = context.peak_flops_source or "GPU peak FLOP/s unknown"
    elif rates.tokens_per_second_per_gpu is None:
        reason = f"no tokens/s ({rates.na_reason or 'world size unknown'})"
    model = None
    if reason is None and context.flops_per_token is not None:
        model = (rates.tokens_per_second_per_gpu or 0.0) * context.flops_per_token
    mfu = ratio(model, context.peak_flops)
    hfu = mfu * context.hfu_factor if mfu is not None and context.hfu_factor else None
    return Utilization(
        mfu=mfu,
        hfu=hfu,
        hfu_factor=context.hfu_factor,
        flops_per_token=context.flops_per_token,
        flops_source=context.flops_source,
        peak_flops=context.peak_flops,
        peak_source=context.peak_flops_source,
        model_flops_per_second_per_gpu=model,
        na_reason=reason,
        hfu_reason=context.hfu_reason,
        warning=_IMPLAUSIBLE if mfu is not None and mfu > 1 else None,
    )


def kernels(results: Mapping[int, RankResult]) -> Kernels:
    """GPU time by category (Σ durations) over all ranks and per rank, and idle time."""
    fused = any(res.kernel_ns.get(FUSED) for res in results.values())
    per_rank = {str(r): _rank_kernels(res, fused) for r, res in results.items() if res.gpu_span_ns}
    totals = {
        category: sum(res.kernel_ns.get(category, 0) for res in results.values()) * _NS
        for category in activity(fused)
    }
    return Kernels(
        time_s=totals,
        share=_shares(totals),
        idle_ratio_mean=mean([k.idle_ratio for k in per_rank.values()]),
        per_rank=per_rank,
    )


def activity(fused: bool) -> tuple[str, ...]:
    """The GPU time categories a report lists (`fused` when some rank has fused kernels)."""
    return (*_GPU_ACTIVITY, FUSED) if fused else _GPU_ACTIVITY


def _rank_kernels(result: RankResult, fused: bool = False) -> RankKernels:
    """Idle = span of GPU activity minus the union of all GPU activity."""
    times = {c: result.kernel_ns.get(c, 0) * _NS for c in activity(fused)}
    idle = result.gpu_span_ns - result.gpu_busy_ns
    return RankKernels(
        time_s=times,
        share=_shares(times),
        busy_s=result.gpu_busy_ns * _NS,
        span_s=result.gpu_span_ns * _NS,
        idle_s=idle * _NS,
        idle_ratio=ratio(idle, result.gpu_span_ns),
        memory_peak_bytes=result.memory_peak_bytes,
        memory_reserved_peak_bytes=result.memory_reserved_peak_bytes,
    )


def _shares(times: Mapping[str, float]) -> dict[str, float]:
    total = math.fsum(times.values())
    return {c: t / total for c, t in times.items()} if total else {}


def with_split(found: Sections, split: Mapping[int, Split]) -> Sections:
    """`found` with each rank's exposed communication split into transfer, waiting and
    unmatched (`pipeline.waiting`) over the windows whose cross-rank facts are in. A rank
    keeps None where its split does not cover its exposed time: only open windows, a window
    still open beside closed ones, or results kept by a commscope before the split."""
    per_rank = {
        name: _split_row(row, row.exposed_comm_time_s, _whole(split.get(int(name))))
        for name, row in found.overlap.per_rank.items()
    }
    steps = {
        name: _split_row(row, row.exposed_comm_s, _in_steps(split.get(int(name))))
        for name, row in found.steps.items()
    }
    overlap = msgspec.structs.replace(found.overlap, per_rank=per_rank)
    return msgspec.structs.replace(found, overlap=overlap, steps=steps)


_Parts = tuple[int, int, int] | None  # (|E|, exposed transfer, exposed waiting) ns
Row = TypeVar("Row", RankOverlap, RankSteps)


def _whole(split: Split | None) -> _Parts:
    return None if split is None else (split.exposed_ns, split.transfer_ns, split.waiting_ns)


def _in_steps(split: Split | None) -> _Parts:
    if split is None:
        return None
    return (split.exposed_in_steps_ns, split.transfer_in_steps_ns, split.waiting_in_steps_ns)


def _split_row(row: Row, exposed_s: float | None, parts: _Parts) -> Row:
    """The row with its split when `parts` covers its exposed time exactly."""
    if parts is None or exposed_s is None or round(exposed_s / _NS) != parts[0]:
        return row
    exposed, transfer, waiting = parts
    return msgspec.structs.replace(
        row,
        exposed_transfer_s=transfer * _NS,
        exposed_waiting_s=waiting * _NS,
        exposed_unmatched_s=(exposed - transfer - waiting) * _NS,
    )
