"""Number and table formatting for every text commscope prints (pure): the text report, the
cross-rank sections, `commscope diff` and the console lines.

Quantities come from `model/units.py` (the one formatter, which the pipeline's findings
use too: `4.06 MB/s`, `10.2 ms`, `544 B`, never scientific notation), re-exported here; this
module adds percentages, p-values, plain figures and tables. "n/a" for unknown values. Table
rows are right-aligned cells (the first left-aligned), two spaces apart whatever their width.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from commscope.model.units import quantity

_PLAIN: Final = ((1.0, ""),)  # a count's units: none


def pct(value: float | None, decimals: int = 2) -> str:
    return "n/a" if value is None else f"{value * 100:.{decimals}f}%"


def num(value: float | None) -> str:
    """A plain figure (tokens/s, a t statistic): two decimals, thousands separated."""
    return "n/a" if value is None else f"{value:,.2f}"


def plain(value: float | None) -> str:
    """A count or its mean: `12`, `12.3`, `1234`, three significant figures."""
    return quantity(value, _PLAIN, whole_base=True).rstrip()


def na(value: str, reason: str | None) -> str:
    return f"n/a ({reason})" if value == "n/a" and reason else value


def row(cells: list[str], widths: list[int]) -> str:
    """Right-aligned cells (the first left-aligned), two spaces apart whatever their width."""
    first, *rest = cells
    return (
        "  "
        + first.ljust(widths[0])
        + "".join("  " + c.rjust(w) for c, w in zip(rest, widths[1:], strict=True))
    )


def rank_list(ranks: Sequence[int], width: int | None = None) -> str:
    """`0-7` for a run of ranks, else `0, 2, 5`; "N ranks" when longer than `width`."""
    if not ranks:
        return "none"
    if list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 1 else str(ranks[0])
    text = ", ".join(map(str, ranks))
    return text if width is None or len(text) <= width else f"{len(ranks)} ranks"


def rank_runs(ranks: Sequence[int], most: int = 8) -> str:
    """`0-40, 42-1023`: runs of consecutive ranks; beyond `most` runs, the first `most` and how
    many ranks in all."""
    if not ranks:
        return "none"
    runs: list[list[int]] = []
    for rank in ranks:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs[:most])
    return text if len(runs) <= most else f"{text}, … ({len(ranks):,} ranks in all)"
