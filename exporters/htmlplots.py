"""The HTML report's six plots, each from the report document to an inline SVG (pure).

Overlap and exposed communication per window and rank (heat maps), each rank's exposed
communication as transfer, waiting and unmatched (stacked bars), busbw against message size
per collective type (log-log, its group of most bus bytes, with the α-β line and the link
peak), arrival skew per instance with the arrivals of the rank the others wait for
highlighted, GPU time by kernel category per rank (stacked bars), and step times per rank
(each step, min to max and the mean). Every figure is read from the `Report` as the JSON
report carries it; a plot that would be too large shows the first `MAX_RANKS` ranks,
`_MAX_WINDOWS` windows or `_MAX_PANELS` panels and says so. A plot without data says why in
a sentence instead of drawing empty axes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from commscope.exporters import svg
from commscope.exporters.svg import Frame, Scale
from commscope.exporters.textfmt import pct
from commscope.model.fields import CAPTURE_ONLY
from commscope.model.inspector import NO_COMPUTE, inspected
from commscope.model.schema import AlphaBeta, RankOverlap, RankSteps, Report, SkewInstances
from commscope.model.units import duration, rate, size

MAX_RANKS: Final = 64
_MAX_WINDOWS: Final = 24
_MAX_PANELS: Final = 6
_MAX_STEP_RINGS: Final = 100  # steps drawn per rank (evenly thinned beyond)
_OVERLAP_TITLE: Final = "Overlap: share of each rank's communication hidden behind compute"
_EXPOSED_TITLE: Final = "Exposed communication: time no compute hid, per rank"
_WIDTH: Final = 900
_CATEGORY_COLOURS: Final = {
    "gemm": svg.BLUE,
    "attention": svg.ORANGE,
    "elementwise": svg.GREEN,
    "reduction": svg.PURPLE,
    "other": svg.GREY,
    "memcpy": svg.SKY,
    "memset": svg.YELLOW,
    "communication": svg.VERMILLION,
    "fused": svg.INK,  # computes and communicates (comm-GEMM overlap)
}


def note(sentence: str) -> str:
    return f'<p class="note">{svg.esc(sentence)}</p>'


def _ranks(keys: Sequence[str]) -> list[int]:
    return sorted(int(k) for k in keys)


def capped(what: str, shown: int, total: int) -> str:
    """A sentence saying a plot shows `shown` of `total` (empty when it shows them all)."""
    return note(f"Showing the first {shown} of {total} {what}.") if total > shown else ""


# ---------------------------------------------------------------- overlap heat maps

_Rows = list[tuple[str, Mapping[str, RankOverlap]]]


def _overlap_rows(report: Report) -> _Rows:
    """(name, per-rank overlap) per window (the first MAX_WINDOWS), then the whole run when
    there are several windows."""
    rows: _Rows = [(w.name, w.overlap.per_rank) for w in report.windows[:_MAX_WINDOWS]]
    if len(report.windows) != 1:
        rows.append(("whole run", report.overlap.per_rank))
    return rows


def overlap_maps(report: Report) -> str:
    ranks = _ranks(list(report.overlap.per_rank))
    if not ranks:
        return note("No rank has communication or compute time: nothing to plot.")
    if _all_inspected(report):
        return note(f"No overlap or exposed communication to plot ({NO_COMPUTE}).")
    rows, shown = _overlap_rows(report), ranks[:MAX_RANKS]
    exposed_top = max((_exposed(o)[0] or 0.0 for _, per in rows for o in per.values()), default=0.0)
    return (
        _heatmap(rows, shown, _ratio, 1.0, tick=_percent, title=_OVERLAP_TITLE)
        + _heatmap(
            rows, shown, _exposed, exposed_top, tick=svg.tick(duration), title=_EXPOSED_TITLE
        )
        + capped("ranks", len(shown), len(ranks))
        + capped("windows", _MAX_WINDOWS, len(report.windows))
    )


def _all_inspected(report: Report) -> bool:
    """Every rank was read from NCCL Inspector logs (none has compute kernels)."""
    found = report.overlap.per_rank.values()
    return bool(found) and all(inspected(o.evidence) for o in found)


def _percent(value: float) -> str:
    return pct(value, 0)  # the bar's ticks are 0, 25, 50, 75 and 100%


def _ratio(o: RankOverlap) -> tuple[float | None, str]:
    return o.ratio, pct(o.ratio)


def _exposed(o: RankOverlap) -> tuple[float | None, str]:
    if inspected(o.evidence):  # no compute kernels: nothing to be exposed against
        return None, "n/a"
    return o.exposed_comm_time_s, duration(o.exposed_comm_time_s)


_Cell = Callable[[RankOverlap], tuple[float | None, str]]


def _heatmap(
    rows: _Rows,
    ranks: Sequence[int],
    cell: _Cell,
    top: float,
    *,
    tick: Callable[[float], str],
    title: str,
) -> str:
    """One row per window, one column per rank, colour = value / top, the value written in
    the cell when it fits; a colour bar from 0 to `top` beneath."""
    width = min(90.0, (_WIDTH - 180) / max(len(ranks), 1))
    height = 26 if len(rows) <= 12 else 16
    frame = Frame(150, 44, width * len(ranks), height * len(rows))
    body = [svg.text(frame.left, 18, title, font_size=svg.FONT + 2, font_weight="bold")]
    body += _rank_labels(frame, ranks, width)
    for i, (name, per_rank) in enumerate(rows):
        y = frame.top + i * height
        cut = name if len(name) <= 20 else name[:19] + "…"
        middle = y + height / 2 + 4
        body.append(svg.text(frame.left - 8, middle, cut, "end", title=name, font_size=svg.FONT))
        for j, rank in enumerate(ranks):
            at = (frame.left + j * width, y, width, height)
            body += _cell(at, f"{name}, rank {rank}", per_rank.get(str(rank)), cell, top)
    body += _colour_bar(frame.left, frame.bottom + 14, 320, top, tick)
    return svg.document(_WIDTH, int(frame.bottom + 58), title, body)


def _rank_labels(frame: Frame, ranks: Sequence[int], width: float) -> list[str]:
    every = max(1, math.ceil(28 / width))
    out = [svg.text(frame.left - 8, frame.top - 8, "rank", "end", font_size=svg.FONT)]
    for j, rank in enumerate(ranks):
        if j % every == 0:
            x = frame.left + (j + 0.5) * width
            out.append(svg.text(x, frame.top - 8, str(rank), "middle", font_size=svg.FONT))
    return out


def _cell(
    at: tuple[float, float, float, float],
    where: str,
    found: RankOverlap | None,
    cell: _Cell,
    top: float,
) -> list[str]:
    x, y, w, h = at
    if found is None:
        return [svg.rect(x, y, w - 1, h - 1, "#eeeeee", title=f"{where}: no trace")]
    value, shown = cell(found)
    fill = "#eeeeee" if value is None else svg.viridis(value / top if top > 0 else 0.0)
    about = f"{where}: overlap {pct(found.ratio)}, exposed {duration(found.exposed_comm_time_s)}"
    out = [svg.rect(x, y, w - 1, h - 1, fill, title=about)]
    if w >= 6.5 * len(shown) + 6 and h >= 16:
        ink = svg.ink_on(fill)
        out.append(svg.text(x + w / 2, y + h / 2 + 4, shown, "middle", font_size=11, fill=ink))
    return out


def _colour_bar(
    x: float, y: float, width: float, top: float, tick: Callable[[float], str]
) -> list[str]:
    steps = 32
    out = [
        svg.rect(x + i * width / steps, y, width / steps + 0.5, 10, svg.viridis(i / (steps - 1)))
        for i in range(steps)
    ]
    for value in svg.ticks(0.0, top, 4) if top > 0 else [0.0]:
        tx = x + (value / top if top > 0 else 0) * width
        out.append(svg.line(tx, y + 10, tx, y + 14, svg.INK))
        out.append(svg.text(tx, y + 27, tick(value), "middle", font_size=svg.FONT - 1))
    return out


# ---------------------------------------------------------------- busbw against message size

_PANEL: Final = (440, 330)  # width, height; the plot area leaves room for a 2-row legend
# the plot area of a panel: room on the right for half the last x tick's label (`100 MB`)
_PANEL_FRAME: Final = Frame(86, 56, _PANEL[0] - 118, _PANEL[1] - 140)
_TITLE_CHARS: Final = 44  # a panel's bold title, cut beyond (the whole in its tooltip)


def bandwidth_panels(report: Report) -> str:
    """One panel per collective type: its fit of most bus bytes (the one the report keeps the
    points of), most bus bytes first."""
    fits = [(g, k, f) for g, kinds in report.alpha_beta.items() for k, f in kinds.items()]
    drawable = [x for x in fits if bandwidth_points(x[2])]
    plotted = sorted(drawable, key=lambda x: -(x[2].bus_bytes or 0.0))[:_MAX_PANELS]
    if not plotted:
        return note(
            "No collective was matched across ranks with known sizes: the busbw of each "
            "instance against its size needs the members' wait-free durations."
        )
    peak = report.network.peak_bandwidth_Bps
    groups = Counter(kind for _, kind, _ in fits)
    panels = [bandwidth_panel(g, k, f, peak, groups[k]) for g, k, f in plotted]
    more = (
        note(f"{len(fits)} α-β fits in all (the text report lists them): each panel shows its "
             "collective's group of most bus bytes.")
        if len(fits) > len(panels) else ""
    )  # fmt: skip
    return '<div class="panels">' + "".join(panels) + "</div>" + _no_peak(report) + more


def _no_peak(report: Report) -> str:
    """Why no dashed link peak is drawn, when none is known."""
    found = report.network
    if found.peak_bandwidth_Bps:
        return ""
    return note(f"No link peak drawn: {found.peak_source or 'not known'}.")


def bandwidth_points(fit: AlphaBeta) -> list[tuple[float, float]]:
    """(message bytes S, busbw B/s) per plotted instance: S = S·F / F (S·F when F varies)."""
    factor = fit.bus_factor or 1.0
    return [(bus / factor, bus / t) for bus, t in fit.points if bus > 0 and t > 0]


def fit_curve(fit: AlphaBeta, xs: Sequence[float]) -> list[tuple[float, float]]:
    """The fitted busbw S·F / (α + S·F / β) at message sizes `xs`, where it is positive."""
    if fit.alpha_s is None or fit.beta_Bps is None:
        return []
    factor = fit.bus_factor or 1.0
    out = []
    for x in xs:
        seconds = fit.alpha_s + x * factor / fit.beta_Bps
        if seconds > 0:
            out.append((x, x * factor / seconds))
    return out


def _log_span(values: Sequence[float]) -> tuple[float, float]:
    lo, hi = min(values), max(values)
    return (lo / 2, hi * 2) if hi <= lo * 1.01 else (lo / 1.1, hi * 1.1)


def bandwidth_panel(
    group: str, kind: str, fit: AlphaBeta, peak: float | None, groups: int = 1
) -> str:
    points = bandwidth_points(fit)
    x_lo, x_hi, x_ticks = svg.log_axis(*_log_span([x for x, _ in points]))
    curve = fit_curve(fit, [x_lo * (x_hi / x_lo) ** (i / 63) for i in range(64)])
    y_lo, y_hi, y_ticks = svg.log_axis(
        *_log_span([y for _, y in points] + [y for _, y in curve] + ([peak] if peak else []))
    )
    frame = _PANEL_FRAME
    sx = Scale(x_lo, x_hi, frame.left, frame.right, log=True)
    sy = Scale(y_lo, y_hi, frame.bottom, frame.top, log=True)
    size_unit = "message size (log)" if fit.bus_factor else "bus bytes S·F (log; F varies)"
    thinned = f"; {len(fit.points)} of {fit.points_total} shown" if (
        fit.points_total > len(fit.points)) else ""  # fmt: skip
    largest = f" (largest of {groups} groups)" if groups > 1 else ""
    body = _panel_title(f"{kind}, group {group}{largest}", _fit_words(fit) + thinned)
    body += svg.y_axis(frame, sy, y_ticks, svg.tick(rate), "busbw (log)")
    body += svg.x_axis(frame, sx, x_ticks, svg.tick(size), size_unit)
    body += [
        svg.circle(sx(x), sy(y), 3.5, svg.BLUE, title=f"{size(x)}: {rate(y)}") for x, y in points
    ]
    marks, legend = _fit_and_peak(frame, (sx, sy), curve, peak)
    body += marks + svg.legend(legend, frame.left, frame.bottom + 58, frame.width)
    return svg.document(_PANEL[0], _PANEL[1], f"busbw against size, {kind} {group}", body)


def _fit_and_peak(
    frame: Frame,
    scales: tuple[Scale, Scale],
    curve: Sequence[tuple[float, float]],
    peak: float | None,
) -> tuple[list[str], list[svg.Key]]:
    """The α-β line and the dashed link peak, with their legend entries."""
    (sx, sy), marks = scales, []
    legend: list[svg.Key] = [("instance (fastest member)", svg.BLUE, "dot")]
    if curve:
        marks.append(svg.polyline([(sx(x), sy(y)) for x, y in curve], svg.ORANGE))
        legend.append(("α-β fit", svg.ORANGE, "line"))
    if peak:
        y = sy(peak)
        dashed = svg.line(frame.left, y, frame.right, y, svg.INK, stroke_dasharray="6 4")
        marks.append(dashed)
        legend.append((f"link peak {rate(peak)}", svg.INK, "dash"))
    return marks, legend


def _fit_words(fit: AlphaBeta) -> str:
    if fit.alpha_s is None or fit.beta_Bps is None:
        return f"no α-β fit: {fit.na_reason or 'n/a'}"
    r2 = "n/a" if fit.r2 is None else f"{fit.r2:.3f}"
    return f"α {duration(fit.alpha_s)}, β {rate(fit.beta_Bps)}, R² {r2}"


def _panel_title(title: str, subtitle: str) -> list[str]:
    cut = title if len(title) <= _TITLE_CHARS else title[: _TITLE_CHARS - 1] + "…"
    whole = title if cut != title else ""
    return [
        svg.text(10, 18, cut, title=whole, font_size=svg.FONT + 2, font_weight="bold"),
        svg.text(10, 36, subtitle, font_size=svg.FONT),
    ]


# ---------------------------------------------------------------- arrival skew per instance


def skew_panels(report: Report) -> str:
    series = report.skew.instances
    if not series:
        return note("No collective was matched across ranks: arrival skew needs two ranks' calls.")
    awaited = report.skew.waited_for_rank
    kinds = sorted(series, key=lambda k: -series[k].total)
    panels = [_skew_panel(kind, series[kind], awaited) for kind in kinds[:_MAX_PANELS]]
    who = (
        f"Rank {awaited} is the rank the others wait for: {report.skew.evidence}"
        if awaited is not None
        else f"No rank is named as the one the others wait for: {report.skew.evidence}"
    )
    return (
        note(who)
        + '<div class="panels">'
        + "".join(panels)
        + "</div>"
        + capped("collective types", len(panels), len(series))
    )


def _skew_panel(kind: str, found: SkewInstances, awaited: int | None) -> str:
    frame = _PANEL_FRAME
    most = max(found.skew_s, default=0.0) or 1e-6  # every skew 0: a 1 µs axis, not 1 s
    top = svg.nice_top(most, 4)  # as many intervals as its ticks
    sx = Scale(0.5, max(len(found.skew_s), 1) + 0.5, frame.left, frame.right)
    sy = Scale(0.0, top, frame.bottom, frame.top)
    thinned = (
        f"; {len(found.skew_s)} of {found.total}, evenly spaced"
        if found.total > len(found.skew_s)
        else ""
    )
    instances = f"{found.total} matched instance{'s' * (found.total != 1)}"
    body = _panel_title(f"{kind}: {instances}", f"in time order{thinned}")
    body += svg.y_axis(frame, sy, svg.ticks(0.0, top, 4), svg.tick(duration), "arrival skew")
    positions = svg.ticks(1.0, float(len(found.skew_s)), 5)
    body += svg.x_axis(frame, sx, [p for p in positions if p == int(p)], _count, "instance")
    for i, (skew, last) in enumerate(zip(found.skew_s, found.last, strict=True), start=1):
        mark = awaited is not None and last == awaited
        who = "no last arriver" if last is None else f"rank {last} arrived last"
        body.append(
            svg.circle(
                sx(i),
                sy(skew),
                4.5 if mark else 3,
                svg.VERMILLION if mark else svg.SKY,
                title=f"instance {i}: skew {duration(skew)}, {who}",
                stroke=svg.INK if mark else "",
            )
        )
    legend: list[svg.Key] = [("another rank (or none) arrived last", svg.SKY, "dot")]
    if awaited is not None:
        legend.insert(
            0, (f"rank {awaited} (the others wait for it) arrived last", svg.VERMILLION, "dot")
        )
    body += svg.legend(legend, frame.left, frame.bottom + 58, frame.width)
    return svg.document(_PANEL[0], _PANEL[1], f"arrival skew per instance, {kind}", body)


def _count(value: float) -> str:
    return f"{value:g}"


# ---------------------------------------------------------------- GPU time by kernel category


def kernel_bars(report: Report) -> str:
    per_rank = {r: k.time_s for r, k in report.kernels.per_rank.items() if k.time_s}
    if not per_rank and _all_inspected(report):
        return note(f"No GPU time by kernel category to plot ({NO_COMPUTE}).")
    if not per_rank:
        return note("No GPU activity in the traces: no GPU time to break down.")
    shown = _ranks(list(per_rank))[:MAX_RANKS]
    keys = {c for r in shown for c, t in per_rank[str(r)].items() if t > 0}  # in the bars
    categories = [c for c in _CATEGORY_COLOURS if c in keys] + sorted(keys - set(_CATEGORY_COLOURS))
    swatches = [(c, _CATEGORY_COLOURS.get(c, svg.GREY)) for c in categories]
    titles = ("GPU time per rank", "Σ kernel durations per category (streams may overlap)")
    return _stacked_bars(per_rank, swatches, titles, "GPU time by kernel category", "GPU time")


_SPLIT_COLOURS: Final = (
    ("transfer", svg.BLUE),
    ("waiting", svg.VERMILLION),
    ("unmatched", svg.GREY),
)


def split_bars(report: Report) -> str:
    """Each rank's exposed communication as transfer, waiting and unmatched (whole run)."""
    per_rank = {
        rank: {part: getattr(row, f"exposed_{part}_s") or 0.0 for part, _ in _SPLIT_COLOURS}
        for rank, row in report.overlap.per_rank.items()
        if row.exposed_transfer_s is not None and not inspected(row.evidence)
    }
    per_rank = {rank: parts for rank, parts in per_rank.items() if math.fsum(parts.values()) > 0}
    if not per_rank:
        return note("No exposed communication split to plot (no rank's cross-rank facts).")
    titles = (
        "Exposed communication per rank",
        "transfer: no member still awaited; waiting: for the last member; unmatched: not split",
    )
    return _stacked_bars(
        per_rank, list(_SPLIT_COLOURS), titles, "exposed communication split", "exposed time"
    )


def _stacked_bars(
    per_rank: Mapping[str, Mapping[str, float]],
    swatches: Sequence[tuple[str, str]],
    titles: tuple[str, str],
    label: str,
    whole: str,
) -> str:
    """One horizontal bar a rank (the first `MAX_RANKS`), stacked by part in `swatches`'
    order, with its legend and a time axis; `whole`: what a bar is, in its tooltips."""
    ranks = _ranks(list(per_rank))
    shown = ranks[:MAX_RANKS]
    top = svg.nice_top(max(math.fsum(per_rank[str(r)].values()) for r in shown))
    height = 22 if len(shown) <= 24 else 11
    frame = Frame(80, 76, _WIDTH - 110, height * len(shown))
    sx = Scale(0.0, top, frame.left, frame.right)
    body = _panel_title(*titles)
    body += svg.legend(list(swatches), frame.left, 58, frame.width)
    body += [svg.line(sx(v), frame.top, sx(v), frame.bottom, "#dddddd") for v in svg.ticks(0, top)]
    font = svg.FONT if height > 12 else 9
    every = max(1, math.ceil(len(shown) / 32))
    colours = dict(swatches)
    for i, rank in enumerate(shown):
        y = frame.top + i * height
        if i % every == 0:
            at = (frame.left - 8, y + height / 2 + 4)
            body.append(svg.text(*at, f"rank {rank}", "end", font_size=font))
        band = (y + 2, height - 4)
        body += _stack(per_rank[str(rank)], colours, sx, band, rank=rank, whole=whole)
    body += svg.x_axis(frame, sx, svg.ticks(0.0, top, 5), svg.tick(duration), titles[0])
    return svg.document(_WIDTH, int(frame.bottom + 48), label, body) + (
        capped("ranks", len(shown), len(ranks))
    )


def _stack(
    times: Mapping[str, float],
    colours: Mapping[str, str],
    sx: Scale,
    band: tuple[float, float],
    *,
    rank: int,
    whole: str,
) -> list[str]:
    (y, h), out, start = band, [], 0.0
    total = math.fsum(times.values())
    for category, colour in colours.items():
        value = times.get(category, 0.0)
        if value > 0:
            share = f" ({value / total:.1%} of the rank's {whole})" if total else ""
            about = f"rank {rank}, {category}: {duration(value)}{share}"
            out.append(
                svg.rect(
                    sx(start),
                    y,
                    sx(start + value) - sx(start),
                    h,
                    colour,
                    title=about,
                )
            )
            start += value
    return out


# ---------------------------------------------------------------- step times per rank


def step_plot(report: Report) -> str:
    steps = {r: s for r, s in report.steps.items() if s.count and s.mean_s is not None}
    if not steps and any(s.capture_span for s in report.steps.values()):
        return note(f"No step times to plot: {CAPTURE_ONLY}.")
    if not steps:
        return note("No ProfilerStep spans in the traces: no step times to plot.")
    ranks = _ranks(list(steps))
    shown = ranks[:MAX_RANKS]
    marked = set(report.stragglers.flagged)
    bottom, top, marks = svg.linear_axis(
        min(steps[str(r)].min_s or 0.0 for r in shown),
        max(steps[str(r)].max_s or 0.0 for r in shown),
    )
    frame = Frame(80, 56, _WIDTH - 110, 260)
    sx = Scale(-0.5, len(shown) - 0.5, frame.left, frame.right)
    sy = Scale(bottom, top, frame.bottom, frame.top)
    from_zero = "" if bottom == 0 else f"; the axis starts at {duration(bottom)}, not 0"
    body = _panel_title(
        "Step time per rank",
        "ProfilerStep durations: each step a ring, the line from min to max, the dot the mean"
        + from_zero,
    )
    body += svg.y_axis(frame, sy, marks, svg.tick(duration), "step time")
    every = max(1, math.ceil(len(shown) / 32))
    labels = [float(i) for i in range(0, len(shown), every)]
    body += svg.x_axis(frame, sx, labels, lambda i: str(shown[int(i)]), "rank")
    samples = step_samples(report)
    for i, rank in enumerate(shown):
        body += _rings(sx(i) - 10, sy, samples.get(str(rank), []), rank)
        body += _whisker(sx(i), sy, steps[str(rank)], rank, rank in marked)
    body += _step_legend(report, frame, sy, straggler=bool(marked & set(shown)))
    return svg.document(_WIDTH, int(frame.bottom + 64), "step time per rank", body) + (
        capped("ranks", len(shown), len(ranks))
    )


def step_samples(report: Report) -> dict[str, list[float]]:
    """Each rank's step durations (s), window after window, from the windows' `facts`."""
    found: dict[str, list[float]] = {}
    for window in report.windows:
        for rank, kept in window.facts.items():
            found.setdefault(rank, []).extend(ns * 1e-9 for ns in kept.result.steps.values())
    return found


def _rings(x: float, sy: Scale, durations: Sequence[float], rank: int) -> list[str]:
    kept = durations[:: max(1, math.ceil(len(durations) / _MAX_STEP_RINGS))]
    return [
        svg.circle(
            x,
            sy(d),
            3,
            "none",
            title=f"rank {rank}: a step of {duration(d)}",
            stroke=svg.GREY,
            width=1,
        )
        for d in kept
    ]


def _step_legend(report: Report, frame: Frame, sy: Scale, *, straggler: bool) -> list[str]:
    legend: list[svg.Key] = [
        ("rank (mean, min to max)", svg.BLUE, "dot"),
        ("one step", svg.GREY, "ring"),
    ]
    if straggler:
        legend.append(("step-time straggler", svg.VERMILLION, "dot"))
    mean, out = report.throughput.iteration_time_s, []
    if mean is not None:
        out.append(
            svg.line(frame.left, sy(mean), frame.right, sy(mean), svg.INK, stroke_dasharray="6 4")
        )
        legend.append((f"iteration time {duration(mean)} (mean over ranks)", svg.INK, "dash"))
    return out + svg.legend(legend, frame.left, frame.bottom + 52, frame.width)


def _whisker(x: float, sy: Scale, found: RankSteps, rank: int, mark: bool) -> list[str]:
    colour = svg.VERMILLION if mark else svg.BLUE
    lo, hi, mean = found.min_s or 0.0, found.max_s or 0.0, found.mean_s or 0.0
    spread = f"min {duration(lo)}, max {duration(hi)}"
    about = f"rank {rank}: {found.count} steps, mean {duration(mean)}, {spread}"
    return [
        svg.line(x, sy(lo), x, sy(hi), colour, stroke_width=3),
        svg.circle(x, sy(mean), 5, colour, title=about, stroke="#ffffff"),
    ]
