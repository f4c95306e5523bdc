"""The text report's later sections (pure: Report → lines): diagnosis, MFU, kernel time,
the cross-rank analysis (matching, clocks, arrival skew), the α-β network model and the
trace health.

Each number carries its unit and definition; "n/a" says why. Times in ms or µs, bandwidth in
GB/s (1e9 B/s), FLOP/s in TFLOP/s (1e12).
"""

from __future__ import annotations

from collections.abc import Iterator

from commscope.collector.inspector import NO_COMPUTE
from commscope.collector.inspector import SOURCE as INSPECTOR
from commscope.collector.schema import Clocks, Matching, Report
from commscope.exporters.textfmt import gbps, ms, na, pct, rank_list, row

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
    fpt = f"{u.flops_per_token:.4g}" if u.flops_per_token is not None else "n/a"
    yield f"FLOPs per Token: {fpt}  ({u.flops_source})"
    peak = f"{u.peak_flops / 1e12:.1f} TFLOP/s" if u.peak_flops is not None else "n/a"
    yield f"GPU Peak: {peak}  ({u.peak_source})"
    achieved = u.model_flops_per_second_per_gpu
    rate = f"{achieved / 1e12:.2f} TFLOP/s" if achieved is not None else "n/a"
    yield f"Model FLOP/s per GPU: {na(rate, u.na_reason)}"
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
        if any(INSPECTOR in o.source for o in report.overlap.per_rank.values()):
            yield f"GPU time by category and idle time: {NO_COMPUTE}"
            return
        yield "No GPU activity in the traces (CPU-only run): no kernel breakdown or GPU idle time."
        return
    yield "GPU time = Σ durations per category, all ranks (concurrent streams both count)"
    yield ""
    yield row(["category", "time", "share"], _KERNEL_WIDTHS)
    for category, seconds in k.time_s.items():
        yield row([category, ms(seconds), pct(k.share.get(category))], _KERNEL_WIDTHS)
    yield ""
    yield "Idle = GPU active span (first start to last end) - union of all GPU activity"
    yield f"Mean Idle: {pct(k.idle_ratio_mean)}"
    yield ""
    head = ["rank", "busy", "span", "idle", "idle", "mem peak", "reserved"]
    yield row(head, _RANK_WIDTHS)
    for rank, r in k.per_rank.items():
        cells = [rank, ms(r.busy_s), ms(r.span_s), ms(r.idle_s), pct(r.idle_ratio),
                 _bytes(r.memory_peak_bytes), _bytes(r.memory_reserved_peak_bytes)]  # fmt: skip
        yield row(cells, _RANK_WIDTHS)


def _bytes(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 1e9:.2f} GB"


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
        calls = ", ".join(f"rank {rank}: {call}" for rank, call in d.calls.items())
        yield f"  group {d.process_group} {d.key} {d.position}: {calls}"


def _clocks(c: Clocks) -> Iterator[str]:
    yield f"Clock Offsets: {c.method}"
    if not c.per_rank:
        return
    yield f"  (subtracted from each rank's times; rank {c.reference_rank} is the reference)"
    widths = [6, 12, 12, 8]
    yield row(["rank", "offset", "± (1 s.e.)", "samples"], widths)
    for rank, o in c.per_rank.items():
        spread = f"{o.uncertainty_s * 1e6:.2f} µs" if o.uncertainty_s is not None else "n/a"
        cells = [rank, f"{o.offset_s * 1e6:.2f} µs", spread, str(o.samples)]
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
            cells = [kind, str(k.instances), ms(k.skew_s.median), ms(k.skew_s.p95),
                     ms(k.skew_s.max), ms(k.wait_s)]  # fmt: skip
            yield row(cells, _SKEW_WIDTHS)
        yield ""
        head = ["rank", "last", "expected", "share", "caused wait", "waited"]
        yield row(head, _ARRIVAL_WIDTHS)
        for rank, a in s.per_rank.items():
            cells = [rank, f"{a.last}/{a.instances}", f"{a.expected_last:.1f}",
                     pct(a.last_share), ms(a.caused_wait_s), ms(a.waited_s)]  # fmt: skip
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
    yield f"Link Peak: {gbps(peak)}"
    if not report.alpha_beta:
        yield "No collective matched across ranks: nothing to fit."
        return
    yield ""
    head = ["group", "collective", "instances", "sizes", "α", "β", "R²", "β/peak", "below knee"]
    yield row(head, _FIT_WIDTHS)
    reasons = []
    for group, kinds in report.alpha_beta.items():
        for kind, f in kinds.items():
            alpha = f"{f.alpha_s * 1e6:.2f} µs" if f.alpha_s is not None else "n/a"
            r2 = f"{f.r2:.3f}" if f.r2 is not None else "n/a"
            cells = [group, kind, str(f.instances), str(f.sizes), alpha, gbps(f.beta_Bps), r2,
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
