"""Number and table formatting shared by the text report's sections (pure).

GB = 1e9 B, GB/s = 1e9 B/s, times in ms; "n/a" for unknown values. Table rows are
right-aligned cells (the first left-aligned), two spaces apart whatever their width.
"""

from __future__ import annotations

from collections.abc import Sequence


def giga(value: float) -> str:
    """value / 1e9 with two decimals, or three significant digits below 1."""
    scaled = value / 1e9
    return f"{scaled:.2f}" if abs(scaled) >= 1 or scaled == 0 else f"{scaled:.3g}"


def gb(value: float | None) -> str:
    return "n/a" if value is None else f"{giga(value)} GB"


def gbps(value: float | None) -> str:
    return "n/a" if value is None else f"{giga(value)} GB/s"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.2f}%"


def ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1e3:.2f} ms"


def num(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


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
