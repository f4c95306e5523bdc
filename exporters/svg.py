"""Hand-written SVG for the HTML report's plots (pure: data in, strings out).

Scales (linear and log10) map data to pixels; `ticks` and `log_ticks` choose round axis
values; `tick` labels them with `collector.units`' formatters, the ones every tooltip and the
text report use (decimal units: KB = 1e3 B, GB/s = 1e9 B/s). Every piece of text that reaches
the page goes through `esc`, so a kernel, group or window name holding `<`, `&` or quotes stays
text. Colours are Okabe and Ito's colour-blind-safe set for categories and viridis for heat
maps.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from commscope.model.units import fewest

# Okabe & Ito (2008): distinguishable with every common colour-vision deficiency.
BLUE: Final = "#0072B2"
ORANGE: Final = "#E69F00"
SKY: Final = "#56B4E9"
GREEN: Final = "#009E73"
YELLOW: Final = "#F0E442"
VERMILLION: Final = "#D55E00"
PURPLE: Final = "#CC79A7"
GREY: Final = "#999999"
INK: Final = "#222222"
# viridis at 0, 1/9, …, 1 (perceptually uniform, readable in grey and by colour-blind eyes)
VIRIDIS: Final = (
    "#440154",
    "#482878",
    "#3e4989",
    "#31688e",
    "#26828e",
    "#1f9e89",
    "#35b779",
    "#6ece58",
    "#b5de2b",
    "#fde725",
)
FONT: Final = 12  # px, tick labels; titles and axis labels a little larger


def esc(text: object) -> str:
    """`text` as HTML/SVG character data or an attribute value (quotes escaped too)."""
    return html.escape(str(text), quote=True)


def table_row(values: Iterable[object], tag: str = "td") -> str:
    """An HTML table row of these cells, escaped (`tag` "th": a header row)."""
    return "<tr>" + "".join(f"<{tag}>{esc(v)}</{tag}>" for v in values) + "</tr>"


@dataclass(frozen=True)
class Scale:
    """Data [lo, hi] onto pixels [start, end] (end < start for a y axis), linear or log10."""

    lo: float
    hi: float
    start: float
    end: float
    log: bool = False

    def __call__(self, value: float) -> float:
        lo, hi, v = self.lo, self.hi, value
        if self.log:
            lo, hi, v = math.log10(lo), math.log10(hi), math.log10(max(value, self.lo * 1e-3))
        fraction = (v - lo) / (hi - lo) if hi != lo else 0.5
        return self.start + fraction * (self.end - self.start)


def ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round values (1, 2, 2.5 or 5 x 10^k apart) from the first ≥ lo to the last ≤ hi, about
    `count` intervals; [lo] when the range is empty."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / count
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * (1 - 1e-9))
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    return [_clean(i * step) for i in range(first, last + 1)]


def nice_top(value: float, count: int = 5) -> float:
    """The smallest round tick ≥ `value` (> 0) on a 0-based axis of about `count` intervals."""
    if not value > 0:
        return 1.0
    found = ticks(0.0, value, count)
    step = found[1] - found[0] if len(found) > 1 else value
    return found[-1] if found[-1] >= value else _clean(found[-1] + step)


def log_ticks(lo: float, hi: float) -> list[float]:
    """Round values within [lo, hi] (0 < lo < hi) for a log axis: the powers of ten, or 1, 2
    and 5 times them when fewer than three powers of ten fall inside, or linear round values
    when fewer than two of those do."""
    first = math.floor(math.log10(lo))
    last = math.ceil(math.log10(hi))
    decades = [10.0**k for k in range(first, last + 1)]
    inside = [v for v in decades if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
    if len(inside) >= 3:
        return inside
    steps = [_clean(m * d) for d in decades for m in (1, 2, 5)]
    found = [v for v in steps if lo * (1 - 1e-9) <= v <= hi * (1 + 1e-9)]
    return found if len(found) >= 2 else [v for v in ticks(lo, hi, 4) if v > 0]


def log_axis(lo: float, hi: float) -> tuple[float, float, list[float]]:
    """A log axis holding [lo, hi] (0 < lo ≤ hi): its bounds widened to the 1-2-5 values next
    outside, and its ticks (`log_ticks`), the lower bound labelled too unless it would crowd
    the first tick (within a tenth of the axis), so no point lies below the lowest label by
    more than that."""
    low, high = _one_two_five(lo, up=False), _one_two_five(hi, up=True)
    if not high > low:
        high = _clean(low * 2)
    found = log_ticks(low, high)
    room = math.log10(high / low) / 10
    if found[0] > low and math.log10(found[0] / low) >= room:
        found.insert(0, low)
    return low, high, found


def _one_two_five(value: float, *, up: bool) -> float:
    """The 1, 2 or 5 x 10^k value next at or above (`up`) or at or below `value` (> 0)."""
    decade = 10.0 ** math.floor(math.log10(value))
    ladder = [_clean(m * decade) for m in (1, 2, 5, 10)]
    if up:
        return min(v for v in ladder if v >= value * (1 - 1e-9))
    return max(v for v in ladder if v <= value * (1 + 1e-9))


def linear_axis(lo: float, hi: float, count: int = 5) -> tuple[float, float, list[float]]:
    """A linear axis holding [lo, hi] (0 ≤ lo ≤ hi): from 0 to `nice_top`, or, when the values
    vary by less than half of hi, from the round value next at or below lo to the one next at
    or above hi on the same step, so small variation is not flattened against a 0 baseline;
    with its ticks."""
    if not (hi > 0 and lo > hi / 2):
        top = nice_top(hi, count)
        return 0.0, top, ticks(0.0, top, count)
    found = ticks(lo, hi, count)
    step = found[1] - found[0] if len(found) > 1 else hi / 10
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    grid = [_clean(i * step) for i in range(first, max(last, first + 1) + 1)]
    return grid[0], grid[-1], grid


def _clean(value: float) -> float:
    return float(f"{value:.12g}") + 0.0  # no 0.30000000000000004 and no -0.0


def tick(show: Callable[[float, int], str]) -> Callable[[float], str]:
    """An axis label: `show` (a `collector.units` formatter, the one the tooltips and the text
    report use) with the fewest significant figures that write the round tick value: `2.5 ms`,
    `10 ms`, `500 KB`, not `2.50 ms`."""
    return lambda value: show(value, fewest(value))


def viridis(fraction: float) -> str:
    """The viridis colour at `fraction` of the way (clamped to 0 … 1), interpolated in RGB."""
    position = min(max(fraction, 0.0), 1.0) * (len(VIRIDIS) - 1)
    index = min(int(position), len(VIRIDIS) - 2)
    a, b = _rgb(VIRIDIS[index]), _rgb(VIRIDIS[index + 1])
    t = position - index
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b, strict=True))


def ink_on(background: str) -> str:
    """Black or white text, whichever reads on `background` (relative luminance, WCAG)."""
    r, g, b = (_linear(c / 255) for c in _rgb(background))
    return "#000000" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.18 else "#ffffff"


def _rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def _linear(c: float) -> float:
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


# ---------------------------------------------------------------- elements


def document(width: int, height: int, label: str, body: Sequence[str]) -> str:
    """An inline <svg> of that size (scaled down with the page), `label` for screen readers."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{esc(label)}">'
        + "".join(body)
        + "</svg>"
    )


def text(
    x: float, y: float, content: str, anchor: str = "start", *, title: str = "", **style: str | int
) -> str:
    """`content` at (x, y); `title`: its tooltip (the whole of a label cut short)."""
    extra = "".join(f' {k.replace("_", "-")}="{esc(v)}"' for k, v in style.items())
    inner = tip(title) if title else ""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{inner}{esc(content)}</text>'
    )


def tip(content: str) -> str:
    """A tooltip for the element it sits in."""
    return f"<title>{esc(content)}</title>"


def rect(x: float, y: float, w: float, h: float, fill: str, *, title: str = "") -> str:
    inner = tip(title) if title else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="{max(h, 0):.1f}" '
        f'fill="{fill}">{inner}</rect>'
    )


def circle(
    x: float,
    y: float,
    r: float,
    fill: str,
    *,
    title: str = "",
    stroke: str = "",
    width: float = 1.5,
) -> str:
    """A dot (`fill`), or a ring (fill "none", `stroke` `width` px wide)."""
    edge = f' stroke="{stroke}" stroke-width="{width:g}"' if stroke else ""
    inner = tip(title) if title else ""
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:g}" fill="{fill}"{edge}>{inner}</circle>'


def line(x1: float, y1: float, x2: float, y2: float, stroke: str, **style: str | float) -> str:
    extra = "".join(f' {k.replace("_", "-")}="{v}"' for k, v in style.items())
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{stroke}"{extra}/>'
    )


def polyline(points: Sequence[tuple[float, float]], stroke: str, width: float = 2) -> str:
    joined = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline points="{joined}" fill="none" stroke="{stroke}" stroke-width="{width}"/>'


# ---------------------------------------------------------------- axes and legends


@dataclass(frozen=True)
class Frame:
    """A plot's area inside its SVG: left, top, width and height in pixels."""

    left: float
    top: float
    width: float
    height: float

    @property
    def right(self) -> float:
        return self.left + self.width

    @property
    def bottom(self) -> float:
        return self.top + self.height


def y_axis(
    frame: Frame, scale: Scale, values: Sequence[float], label: Callable[[float], str], title: str
) -> list[str]:
    """Grid lines and labels at `values`, and the axis title turned along it."""
    out = []
    for value in values:
        y = scale(value)
        out.append(line(frame.left, y, frame.right, y, "#dddddd"))
        out.append(text(frame.left - 6, y + 4, label(value), "end", font_size=FONT))
    middle = frame.top + frame.height / 2
    out.append(
        f'<text x="12" y="{middle:.1f}" text-anchor="middle" font-size="{FONT + 1}" '
        f'transform="rotate(-90 12 {middle:.1f})">{esc(title)}</text>'
    )
    return out


def x_axis(
    frame: Frame, scale: Scale, values: Sequence[float], label: Callable[[float], str], title: str
) -> list[str]:
    """Ticks and labels at `values` below the frame, and the axis title under them."""
    out = [line(frame.left, frame.bottom, frame.right, frame.bottom, INK)]
    for value in values:
        x = scale(value)
        out.append(line(x, frame.bottom, x, frame.bottom + 4, INK))
        out.append(text(x, frame.bottom + 17, label(value), "middle", font_size=FONT))
    middle = frame.left + frame.width / 2
    out.append(text(middle, frame.bottom + 36, title, "middle", font_size=FONT + 1))
    return out


Key = tuple[str, str] | tuple[str, str, str]  # (label, colour[, mark]): a legend entry


def legend(items: Sequence[Key], x: float, y: float, width: float) -> list[str]:
    """Marks and labels left to right, wrapping within `width`. An entry's mark is how the
    plot draws it: "box" (the default), "dot", "ring", "line" or "dash"."""
    out, cx, cy = [], x, y
    for label, colour, *mark in items:
        size = 22 + 7 * len(label)
        if cx + size > x + width and cx > x:
            cx, cy = x, cy + 18
        out.append(swatch(cx, cy - 4, colour, mark[0] if mark else "box"))
        out.append(text(cx + 16, cy, label, font_size=FONT))
        cx += size + 10
    return out


def swatch(x: float, y: float, colour: str, mark: str) -> str:
    """A legend's mark 12 px wide, centred on height `y`."""
    if mark == "dot":
        return circle(x + 6, y, 4, colour)
    if mark == "ring":
        return circle(x + 6, y, 3.5, "none", stroke=colour, width=1)
    if mark in {"line", "dash"}:
        dash = {"stroke_dasharray": "4 2"} if mark == "dash" else {}
        return line(x, y, x + 12, y, colour, stroke_width=2, **dash)
    return rect(x, y - 6, 12, 12, colour)
