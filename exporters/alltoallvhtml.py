"""The HTML report's all-to-all-v heat map (pure: Report → SVG): the run's rank x rank traffic
matrix, row = sender, column = receiver, colour = bytes over the largest entry (viridis)."""

from __future__ import annotations

from typing import Final

from commscope.exporters import svg
from commscope.exporters.alltoallvtext import why_none
from commscope.exporters.svg import Frame
from commscope.model.report import AllToAllV
from commscope.model.schema import Report
from commscope.model.units import size

MAX_RANKS: Final = 64  # ranks drawn (the first); every entry is in the JSON
_WIDTH: Final = 900
_TITLE: Final = "All-to-all-v traffic: bytes each rank (row) sent each rank (column), whole run"
ABOUT: Final = (
    "Split sizes recorded by all-to-all calls (MoE token dispatch and combine), times their "
    "row size, summed over the run. A bright row is a rank that sends much (its tokens go to "
    "many experts), a bright column a rank that receives much (its experts are popular)."
)


def heat_map(report: Report) -> str:
    found = report.alltoallv
    if found is None or not found.matrix_ranks:
        why = (found is not None and found.matrix_na_reason) or why_none(report)
        return f'<p class="note">{svg.esc("No traffic matrix: " + why + ".")}</p>'
    return _drawn(found)


def _drawn(found: AllToAllV) -> str:
    ranks = found.matrix_ranks[:MAX_RANKS]
    cell = min(64.0, (_WIDTH - 200) / len(ranks))
    frame = Frame(110, 60, cell * len(ranks), cell * len(ranks))
    top = max((v for line in found.matrix_bytes for v in line), default=0)
    body = [svg.text(frame.left, 18, _TITLE, font_size=svg.FONT + 2, font_weight="bold")]
    body.append(svg.text(frame.left - 8, frame.top - 10, "from \\ to", "end", font_size=svg.FONT))
    every = max(1, round(28 / cell))
    for i, rank in enumerate(ranks):
        if i % every == 0:
            middle = frame.top + (i + 0.5) * cell
            body.append(svg.text(frame.left - 8, middle + 4, str(rank), "end", font_size=svg.FONT))
            x = frame.left + (i + 0.5) * cell
            body.append(svg.text(x, frame.top - 10, str(rank), "middle", font_size=svg.FONT))
    for i, sender in enumerate(ranks):
        for j, receiver in enumerate(ranks):
            at = (frame.left + j * cell, frame.top + i * cell, cell)
            body += _cell(at, sender, receiver, found.matrix_bytes[i][j], top)
    body.append(
        svg.text(frame.left, frame.bottom + 22, f"brightest: {size(top)}", font_size=svg.FONT)
    )
    shown = "" if len(found.matrix_ranks) <= MAX_RANKS else f" (first {MAX_RANKS} ranks)"
    return svg.document(_WIDTH, int(frame.bottom + 40), _TITLE + shown, body)


def _cell(
    at: tuple[float, float, float], sender: int, receiver: int, value: int, top: int
) -> list[str]:
    """One entry: its colour, its bytes in a tooltip and, when they fit, written in it."""
    x, y, cell = at
    fill = svg.viridis(value / top if top > 0 else 0.0)
    shown = size(value)
    about = f"rank {sender} -> rank {receiver}: {shown}"
    out = [svg.rect(x, y, cell - 1, cell - 1, fill, title=about)]
    if cell >= 6.5 * len(shown) + 6:
        ink = svg.ink_on(fill)
        out.append(
            svg.text(x + cell / 2, y + cell / 2 + 4, shown, "middle", font_size=11, fill=ink)
        )
    return out
