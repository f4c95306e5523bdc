"""The text report's later sections (pure: Report → lines): diagnosis, MFU, kernel time,
the cross-rank analysis (matching, clocks, arrival skew), the α-β network model and the
trace health.

Each number carries its unit and definition; "n/a" says why. Every number goes through
`textfmt` (units that scale: µs/ms/s, MB/s/GB/s, GFLOP, TFLOP/s).
"""

from __future__ import annotations

from collections.abc import Iterator

from commscope.exporters.extremes import FULL_UP_TO, Cut
from commscope.exporters.textfmt import na, pct, plain, rank_list, rank_runs, row
from commscope.model.fields import where
from commscope.model.inspector import NO_COMPUTE, inspected
from commscope.model.schema import AlphaBeta, Clocks, Matching, Report
from commscope.model.units import duration, flop_rate, flops, rate, size

_FIGURES = (
    ("exposed_comm_fraction", "exposed communication / step time"),
    ("exposed_transfer_fraction", "  of it transfer (no member still awaited)"),
    ("exposed_waiting_fraction", "  of it waiting for the last member to arrive"),
    ("exposed_unmatched_fraction", "  of it in calls matched to no other rank's (not split)"),
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
    yield f"Confidence: {d.confidence}{f' ({d.confidence_reason})' if d.confidence_reason else ''}"
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


def kernel_lines(report: Report, cut: Cut) -> Iterator[str]:
    k = report.kernels
    if not k.per_rank:
        if any(inspected(o.evidence) for o in report.overlap.per_rank.values()):
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
    shown = cut.ranks(k.per_rank, lambda r: r.idle_ratio, "idle", pct)
    for rank, r in shown.items:
        times = (r.busy_s, r.span_s, r.idle_s)
        cells = [rank, *map(duration, times), pct(r.idle_ratio),
                 size(r.memory_peak_bytes), size(r.memory_reserved_peak_bytes)]  # fmt: skip
        yield row(cells, _RANK_WIDTHS)
    yield from shown.summary


_GROUP_WIDTHS = [12, 14, 14, 5, 9, 7, 9]


def matching_lines(report: Report, cut: Cut) -> Iterator[str]:
    m = report.matching
    yield "An instance = one collective on every member of its process group whose trace is here"
    yield f"({where('matching_key', report.inputs.sources)})"
    yield (
        f"Matched Instances: {m.instances} ({m.by_seq} by Seq, {m.by_index} by index); "
        f"unmatched calls: {m.unmatched}; desyncs: {m.desync_count}"
    )
    yield f"Point-to-Point Calls (SendRecv, pairwise, not matched): {m.point_to_point}"
    if m.groups:
        yield ""
        head = ["group", "members", "traced", "key", "instances", "desyncs", "unmatched"]
        yield row(head, _GROUP_WIDTHS)
        shown = cut.rows(m.groups, lambda g: g.instances, "instances", plain, noun="groups",
                         named=_troubled(m))  # fmt: skip
        for name, g in shown.items:
            cells = [name, rank_list(g.members, 14), rank_list(g.ranks_with_traces, 14), g.key,
                     str(g.instances), str(g.desyncs), str(g.unmatched)]  # fmt: skip
            yield row(cells, _GROUP_WIDTHS)
        yield from shown.summary
    yield from _desyncs(m, cut)
    yield ""
    yield from _clocks(report.clocks, cut)


def _troubled(m: Matching) -> list[str]:
    """The groups with desyncs or unmatched calls, most first (a cut table keeps them)."""
    found = [(g.desyncs + g.unmatched, name) for name, g in m.groups.items()]
    return [name for count, name in sorted(found, key=lambda x: -x[0]) if count]


def _desyncs(m: Matching, cut: Cut) -> Iterator[str]:
    if not m.desyncs:
        return
    yield ""
    yield f"Desyncs (members disagree; first {len(m.desyncs)} of {m.desync_count}):"
    for d in m.desyncs:
        differ = f"calls differ in {', '.join(d.differs)}" if d.differs else "calls differ"
        who = "rank {} departs" if len(d.ranks) == 1 else "ranks {} depart"
        departing = "; " + who.format(rank_list(d.ranks, 40)) if d.ranks else ""
        yield f"  group {d.process_group} {d.key} {d.position} ({differ}{departing}):"
        yield f"    {_calls(d.calls, cut)}"


def _calls(calls: dict[str, str], cut: Cut) -> str:
    """Each member's call; in a cut report, the ranks of each distinct call (`AllReduce 4.19
    MB: ranks 0-511; AllReduce 2.10 MB: ranks 512-1023`) when there are many members."""
    if cut.every or len(calls) <= FULL_UP_TO:
        return ", ".join(f"rank {rank}: {_sized(call)}" for rank, call in calls.items())
    by_call: dict[str, list[int]] = {}
    for rank, call in calls.items():
        by_call.setdefault(call, []).append(int(rank))
    return "; ".join(f"{_sized(c)}: ranks {rank_runs(sorted(r))}" for c, r in by_call.items())


def _sized(call: str) -> str:
    """A desync's call as the JSON keeps it (`AllReduce 107822144 B Float`), its size scaled."""
    kind, count, *rest = call.split(" ")
    if count.isdigit() and rest[:1] == ["B"]:
        return " ".join([kind, size(int(count)), *rest[1:]])
    return call


def _clocks(c: Clocks, cut: Cut) -> Iterator[str]:
    yield f"Clock Offsets: {c.method}"
    if not c.per_rank:
        return
    yield f"  (subtracted from each rank's times; rank {c.reference_rank} is the reference)"
    widths = [6, 12, 12, 8]
    yield row(["rank", "offset", "± (1 s.e.)", "samples"], widths)
    reference = () if c.reference_rank is None else (str(c.reference_rank),)
    shown = cut.ranks(c.per_rank, lambda o: o.offset_s, "offset", duration, also=reference)
    for rank, o in shown.items:
        cells = [rank, duration(o.offset_s), duration(o.uncertainty_s), str(o.samples)]
        yield row(cells, widths)
    yield from shown.summary


_SKEW_WIDTHS = [13, 9, 11, 11, 11, 11]
_ARRIVAL_WIDTHS = [6, 9, 11, 9, 13, 11]


def skew_lines(report: Report, cut: Cut) -> Iterator[str]:
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
        shown = cut.ranks(s.per_rank, lambda a: a.caused_wait_s, "caused wait", duration)
        for rank, a in shown.items:
            cells = [rank, f"{a.last}/{a.instances}", f"{a.expected_last:.1f}", pct(a.last_share),
                     duration(a.caused_wait_s), duration(a.waited_s)]  # fmt: skip
            yield row(cells, _ARRIVAL_WIDTHS)
        yield from shown.summary
    yield ""
    awaited = f"rank {s.waited_for_rank}" if s.waited_for_rank is not None else "none named"
    yield f"The Rank the Others Wait For: {awaited}"
    yield f"  {s.evidence}"
    yield ""
    t = report.stragglers
    threshold = f"robust z ≥ {t.robust_z_threshold:g}" if t.robust_z_threshold else "not tested"
    yield f"Step-Time Stragglers (z over ranks of the mean step time; flagged: {threshold}):"
    yield f"  flagged: {cut.listed(t.flagged) or 'none'}; {t.evidence}"


_FIT_WIDTHS = [10, 13, 9, 5, 10, 10, 6, 7, 9]


def alpha_beta_lines(report: Report, cut: Cut) -> Iterator[str]:
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
    fits = {(group, kind): f for group, kinds in report.alpha_beta.items()
            for kind, f in kinds.items()}  # fmt: skip
    shown = cut.rows(fits, lambda f: f.beta_Bps, "β", rate, noun="fits")
    for (group, kind), f in shown.items:
        alpha = duration(f.alpha_s)
        r2 = f"{f.r2:.3f}" if f.r2 is not None else "n/a"
        cells = [group, kind, str(f.instances), str(f.sizes), alpha, rate(f.beta_Bps), r2,
                 pct(f.peak_ratio), pct(f.latency_bound)]  # fmt: skip
        yield row(cells, _FIT_WIDTHS)
    yield from shown.summary
    reasons = _fit_reasons(fits, tally=bool(shown.summary))
    if reasons:
        yield ""
        yield from reasons


_Fit = tuple[str, str]  # (process group, collective)


def _fit_reasons(fits: dict[_Fit, AlphaBeta], *, tally: bool) -> list[str]:
    """Why each fit is n/a; `tally` (a cut table): each reason once, with how many fits of
    all it stops and the first of them."""
    failed = [(key, reason) for key, f in fits.items() if (reason := f.na_reason)]
    if not tally:
        return [f"  {group} {kind}: n/a ({reason})" for (group, kind), reason in failed]
    by_reason: dict[str, list[_Fit]] = {}
    for key, reason in failed:
        by_reason.setdefault(reason, []).append(key)
    return [f"  n/a ({reason}): {len(keys):,} of {len(fits):,} fits (first: {' '.join(keys[0])})"
            for reason, keys in by_reason.items()]  # fmt: skip


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
        if issue.kernels:
            yield f"  the {len(issue.kernels)} longest (GPU time, all ranks):"
            yield from (f"    {duration(s):>10}  {name}" for name, s in issue.kernels.items())
        yield from (f"  {line}" for line in issue.named)
