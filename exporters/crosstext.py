"""The text report's later sections (pure: Report → lines): diagnosis, MFU, kernel time,
the cross-rank analysis (matching, clocks, arrival skew), the α-β network model and the
trace health.

Each number carries its unit and definition; "n/a" says why. Every number goes through
`textfmt` (units that scale: µs/ms/s, MB/s/GB/s, GFLOP, TFLOP/s).
"""

from __future__ import annotations

from collections.abc import Iterator

from commscope.collector.inspector import NO_COMPUTE, inspected
from commscope.collector.schema import Clocks, Matching, Report
from commscope.collector.units import duration, flop_rate, flops, rate, size
from commscope.exporters.textfmt import na, pct, rank_list, row

_FIGURES = (
    ("exposed_comm_fraction", "exposed communication / step time"),
    ("compute_fraction", "compute / step time"),
    ("gpu_busy_fraction", "GPU busy / step time"),
    ("gpu_idle_fraction", "GPU idle / GPU active span (first to last activity)"),
    ("overlap", "communication overlapped by compute"),
    ("wait_fraction_of_comm", "matched collectives' time spent waiting for late arrivers"),
    ("bandwidth_utilization", "bus bandwidth / link peak"),
    ("mfu", "MFU"),
)


def diagnosis_lines(report: Report) -> Iterator[str]:
    d = report.diagnosis
    yield f"Verdict: {d.verdict}"
    yield ""
    yield "Figures (whole run, mean over ranks; step time = the profiled steps' span):"
    for key, label in _FIGURES:
        yield f"  {label}: {pct(d.figures.get(key))}"
    if d.left_out:
        yield "Left out of the step figures:"
        yield from (f"  - {line}" for line in d.left_out)
    if d.assumptions:
        yield "Assumptions:"
        yield from (f"  - {line}" for line in d.assumptions)
    for finding in d.findings:
        yield ""
        yield f"[{finding.verdict}]"
        yield from (f"  - {line}" for line in finding.evidence)
        yield from (f"  → {line}" for line in finding.suggestions)


def utilization_lines(report: Report) -> Iterator[str]:
    u = report.utilization
    yield "MFU = tokens/s per GPU x FLOPs per token / GPU peak FLOP/s; HFU counts recomputation"
    yield f"FLOPs per Token: {flops(u.flops_per_token)}  ({u.flops_source})"
    yield f"GPU Peak: {flop_rate(u.peak_flops)}  ({u.peak_source})"
    achieved = flop_rate(u.model_flops_per_second_per_gpu)
    yield f"Model FLOP/s per GPU: {na(achieved, u.na_reason)}"
    yield f"MFU: {na(pct(u.mfu), u.na_reason)}"
    factor = f"  (x{u.hfu_factor:.3f}: {u.hfu_reason})" if u.hfu is not None else ""
    yield f"HFU: {na(pct(u.hfu), u.na_reason or u.hfu_reason)}{factor}"
    if u.warning:
        yield f"WARNING: MFU {u.warning}"


_KERNEL_WIDTHS = [15, 12, 8]
_RANK_WIDTHS = [6, 11, 11, 11, 7, 12, 12]


def kernel_lines(report: Report) -> Iterator[str]:
    k = report.kernels
    if not k.per_rank:
        if any(inspected(o.source) for o in report.overlap.per_rank.values()):
            yield f"GPU time by category and idle time: {NO_COMPUTE}"
            return
        yield "No GPU activity in the traces (CPU-only run): no kernel breakdown or GPU idle time."
        return
    yield "GPU time = Σ durations per category, all ranks (concurrent streams both count)"
    yield ""
    yield row(["category", "time", "share"], _KERNEL_WIDTHS)
    for category, seconds in k.time_s.items():
        yield row([category, duration(seconds), pct(k.share.get(category))], _KERNEL_WIDTHS)
    yield ""
    yield "Idle = GPU active span (first start to last end) - union of all GPU activity"
    yield f"Mean Idle: {pct(k.idle_ratio_mean)}"
    yield ""
    head = ["rank", "busy", "span", "idle", "idle", "mem peak", "reserved"]
    yield row(head, _RANK_WIDTHS)
    for rank, r in k.per_rank.items():
        times = (r.busy_s, r.span_s, r.idle_s)
        cells = [rank, *map(duration, times), pct(r.idle_ratio),
                 size(r.memory_peak_bytes), size(r.memory_reserved_peak_bytes)]  # fmt: skip
        yield row(cells, _RANK_WIDTHS)


_GROUP_WIDTHS = [12, 14, 14, 5, 9, 7, 9]


def matching_lines(report: Report) -> Iterator[str]:
    m = report.matching
    yield "An instance = one collective on every member of its process group whose trace is here"
    yield "(by Process Group Name + Seq when every call has them, else by running index)"
    yield (
        f"Matched Instances: {m.instances} ({m.by_seq} by Seq, {m.by_index} by index); "
        f"unmatched calls: {m.unmatched}; desyncs: {m.desync_count}"
    )
    yield f"Point-to-Point Calls (SendRecv, pairwise, not matched): {m.point_to_point}"
    if m.groups:
        yield ""
        head = ["group", "members", "traced", "key", "instances", "desyncs", "unmatched"]
        yield row(head, _GROUP_WIDTHS)
        for name, g in m.groups.items():
            cells = [name, rank_list(g.members, 14), rank_list(g.ranks_with_traces, 14), g.key,
                     str(g.instances), str(g.desyncs), str(g.unmatched)]  # fmt: skip
            yield row(cells, _GROUP_WIDTHS)
    yield from _desyncs(m)
    yield ""
    yield from _clocks(report.clocks)


def _desyncs(m: Matching) -> Iterator[str]:
    if not m.desyncs:
        return
    yield ""
    yield f"Desyncs (members disagree; first {len(m.desyncs)} of {m.desync_count}):"
    for d in m.desyncs:
        differ = f"calls differ in {', '.join(d.differs)}" if d.differs else "calls differ"
        who = "rank {} departs" if len(d.ranks) == 1 else "ranks {} depart"
        departing = "; " + who.format(rank_list(d.ranks, 40)) if d.ranks else ""
        yield f"  group {d.process_group} {d.key} {d.position} ({differ}{departing}):"
        yield "    " + ", ".join(f"rank {rank}: {_sized(call)}" for rank, call in d.calls.items())


def _sized(call: str) -> str:
    """A desync's call as the JSON keeps it (`AllReduce 107822144 B Float`), its size scaled."""
    kind, count, *rest = call.split(" ")
    if count.isdigit() and rest[:1] == ["B"]:
        return " ".join([kind, size(int(count)), *rest[1:]])
    return call


def _clocks(c: Clocks) -> Iterator[str]:
    yield f"Clock Offsets: {c.method}"
    if not c.per_rank:
        return
    yield f"  (subtracted from each rank's times; rank {c.reference_rank} is the reference)"
    widths = [6, 12, 12, 8]
    yield row(["rank", "offset", "± (1 s.e.)", "samples"], widths)
    for rank, o in c.per_rank.items():
        cells = [rank, duration(o.offset_s), duration(o.uncertainty_s), str(o.samples)]
        yield row(cells, widths)


_SKEW_WIDTHS = [13, 9, 11, 11, 11, 11]
_ARRIVAL_WIDTHS = [6, 9, 11, 9, 13, 11]


def skew_lines(report: Report) -> Iterator[str]:
    s = report.skew
    yield "Skew = latest - earliest start of a matched instance (clocks aligned);"
    yield "waiting = Σ over members of (last arriver's start - own start)"
    if not s.per_collective:
        yield "No collective matched across ranks."
    else:
        yield ""
        yield row(["collective", "instances", "skew med", "skew p95", "skew max", "waiting"],
                  _SKEW_WIDTHS)  # fmt: skip
        for kind, k in s.per_collective.items():
            cells = [kind, str(k.instances), duration(k.skew_s.median), duration(k.skew_s.p95),
                     duration(k.skew_s.max), duration(k.wait_s)]  # fmt: skip
            yield row(cells, _SKEW_WIDTHS)
        yield ""
        head = ["rank", "last", "expected", "share", "caused wait", "waited"]
        yield row(head, _ARRIVAL_WIDTHS)
        for rank, a in s.per_rank.items():
            cells = [rank, f"{a.last}/{a.instances}", f"{a.expected_last:.1f}", pct(a.last_share),
                     duration(a.caused_wait_s), duration(a.waited_s)]  # fmt: skip
            yield row(cells, _ARRIVAL_WIDTHS)
    yield ""
    slowest = f"rank {s.slowest_rank}" if s.slowest_rank is not None else "none named"
    yield f"Slowest Rank: {slowest}"
    yield f"  {s.evidence}"
    yield ""
    t = report.stragglers
    threshold = f"robust z ≥ {t.robust_z_threshold:g}" if t.robust_z_threshold else "not tested"
    yield f"Step-Time Stragglers (z over ranks of the mean step time; flagged: {threshold}):"
    yield f"  flagged: {', '.join(map(str, t.flagged)) or 'none'}; {t.evidence}"


_FIT_WIDTHS = [10, 13, 9, 5, 10, 10, 6, 7, 9]


def alpha_beta_lines(report: Report) -> Iterator[str]:
    yield "T = α + S·F/β fitted (Theil-Sen on per-size medians) to each matched instance's"
    yield "fastest member (the one that did not wait); β is comparable to busbw;"
    yield "below knee: share of the instances with S·F < α·β (latency-bound)"
    peak = report.network.peak_bandwidth_Bps
    yield f"Link Peak: {rate(peak)}"
    if not report.alpha_beta:
        yield "No collective matched across ranks: nothing to fit."
        return
    yield ""
    head = ["group", "collective", "instances", "sizes", "α", "β", "R²", "β/peak", "below knee"]
    yield row(head, _FIT_WIDTHS)
    reasons = []
    for group, kinds in report.alpha_beta.items():
        for kind, f in kinds.items():
            alpha = duration(f.alpha_s)
            r2 = f"{f.r2:.3f}" if f.r2 is not None else "n/a"
            cells = [group, kind, str(f.instances), str(f.sizes), alpha, rate(f.beta_Bps), r2,
                     pct(f.peak_ratio), pct(f.latency_bound)]  # fmt: skip
            yield row(cells, _FIT_WIDTHS)
            if f.na_reason:
                reasons.append(f"  {group} {kind}: n/a ({f.na_reason})")
    if reasons:
        yield ""
        yield from reasons


def health_lines(report: Report) -> Iterator[str]:
    h = report.health
    yield "What the traces lack, and the sections it weakens (whole run)"
    if not h.issues:
        yield f"Nothing missing: every check passed ({', '.join(h.checked)})."
        return
    for issue in h.issues:
        yield ""
        yield f"{issue.unit} without {issue.missing}: {issue.count} of {issue.total} " \
              f"({pct(issue.share)})"  # fmt: skip
        yield from (f"  weakens {line}" for line in issue.weakens)
        yield from (f"  {line}" for line in issue.named)
