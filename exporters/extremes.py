"""Which rows of a long table the text report prints (pure): every row of a small job; the
extreme rows and one summary line of a large one.

A job of `FULL_UP_TO` ranks or fewer keeps every row of every table. Beyond that, a table of
more than `FULL_UP_TO` rows (ranks, groups, fits, windows) shows the `EACH_END` rows lowest and
highest by its key figure and the rows the report names (the rank the others wait for, flagged
stragglers), in the table's order, then one line: how many rows are shown of how many, and
the mean, median, min and max of the key figure over all of them. Long lists (skipped files,
notes) show their first `_MAX_LINES`. The JSON, and the HTML's copy of the text (`Cut.every`),
keep every row.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from statistics import fmean, median
from typing import Final, Generic, TypeVar

from commscope.model.schema import Report

FULL_UP_TO: Final = 16  # a job (or a table) of this many ranks (rows) or fewer shows every row
EACH_END: Final = 3  # rows shown at each end of a longer table, by its key figure
MAX_NAMED: Final = 6  # rows a table keeps because the report names them
_MAX_LINES: Final = 12  # a long list shows its first ones

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
_Format = Callable[[float | None], str]


@dataclass(frozen=True)
class _Rows(Generic[K, V]):
    """A table's rows to print, in its order, and the summary line under them (none when
    every row is printed)."""

    items: list[tuple[K, V]]
    summary: list[str]


@dataclass(frozen=True)
class Cut:
    """How one rendering cuts the report's long tables: `named` ranks (most telling first)
    stay in every per-rank table; `every` prints every row."""

    named: tuple[str, ...] = ()
    every: bool = True

    def ranks(
        self,
        per_rank: Mapping[str, V],
        figure: Callable[[V], float | None],
        what: str,
        fmt: _Format,
        also: Iterable[str] = (),
    ) -> _Rows[str, V]:
        """A per-rank table's rows by `figure` (`what`, printed with `fmt`); `also`: ranks
        this table names besides the report's."""
        named = (*self.named, *also)
        return self.rows(per_rank, figure, what, fmt, noun="ranks", named=named)

    def rows(
        self,
        table: Mapping[K, V],
        figure: Callable[[V], float | None],
        what: str,
        fmt: _Format,
        *,
        noun: str,
        named: Sequence[K] = (),
    ) -> _Rows[K, V]:
        """Any table's rows (`noun`: what a row is) by `figure`; `named` rows stay."""
        if self.every:
            return _Rows(list(table.items()), [])
        figures = {key: figure(value) for key, value in table.items()}
        shown = pick(figures, named)
        if len(shown) == len(table):
            return _Rows(list(table.items()), [])
        kept = _first_named(figures, named)
        line = summary(figures, len(shown), [k for k in shown if k in kept], what=what, fmt=fmt,
                       noun=noun)  # fmt: skip
        return _Rows([(key, table[key]) for key in shown], [line])

    def lines(self, items: Sequence[str], noun: str) -> list[str]:
        """A list's items, or the first `_MAX_LINES` of a long one and how many more there are."""
        if self.every or len(items) <= FULL_UP_TO:
            return list(items)
        more = len(items) - _MAX_LINES
        return [*items[:_MAX_LINES], f"  … {more:,} more {noun} in the JSON and HTML reports"]

    def listed(self, ranks: Sequence[int]) -> str:
        """`3, 9, 12`; of a long list, the first MAX_NAMED and how many in all."""
        if self.every or len(ranks) <= MAX_NAMED:
            return ", ".join(map(str, ranks))
        return f"{', '.join(map(str, ranks[:MAX_NAMED]))}, … ({len(ranks):,} in all)"


def cuts(report: Report) -> bool:
    """Whether the text report of `report` leaves rows out (a job of more than FULL_UP_TO ranks)."""
    return len(report.ranks) > FULL_UP_TO


def cut_of(report: Report, every: bool = False) -> Cut:
    """The cut of `report`'s text: every row for a small job or when `every`."""
    return Cut(named=named_ranks(report), every=every or not cuts(report))


def named_ranks(report: Report) -> tuple[str, ...]:
    """The ranks the report names, most telling first: the rank the others wait for, then the
    flagged step-time stragglers by robust z (at most MAX_NAMED)."""
    waited = report.skew.waited_for_rank
    z = report.stragglers.robust_z
    flagged = sorted(report.stragglers.flagged, key=lambda r: (-z.get(str(r), 0.0), r))
    found = ([] if waited is None else [waited]) + flagged
    return tuple(dict.fromkeys(map(str, found)))[:MAX_NAMED]


def pick(figures: Mapping[K, float | None], named: Sequence[K] = ()) -> list[K]:
    """The keys a table shows, in its order: every one of FULL_UP_TO or fewer; else the
    EACH_END lowest and highest by figure (ties: the earlier row counts as lower), the first
    MAX_NAMED named keys in the table, and, while fewer than 2 x EACH_END are chosen, the
    first rows without a figure."""
    keys = list(figures)
    if len(keys) <= FULL_UP_TO:
        return keys
    known = sorted((value, i) for i, key in enumerate(keys) if (value := figures[key]) is not None)
    chosen = {i for _, i in known[:EACH_END] + known[-EACH_END:]}
    chosen |= {keys.index(key) for key in _first_named(figures, named)}
    bare = (i for i, key in enumerate(keys) if figures[key] is None and i not in chosen)
    chosen.update(islice(bare, max(0, 2 * EACH_END - len(chosen))))
    return [keys[i] for i in sorted(chosen)]


def _first_named(figures: Mapping[K, float | None], named: Sequence[K]) -> list[K]:
    return list(dict.fromkeys(key for key in named if key in figures))[:MAX_NAMED]


def summary(
    figures: Mapping[K, float | None],
    shown: int,
    named: Sequence[K],
    *,
    what: str,
    fmt: _Format,
    noun: str,
) -> str:
    """The line under a cut table: rows shown of all, why, and the key figure over all rows."""
    values = [v for v in figures.values() if v is not None]
    why = f"the {EACH_END} lowest and {EACH_END} highest by {what}" if values else "the first"
    if 0 < len(values) < 2 * EACH_END:
        why += f", then the first with {what} n/a"
    if named:
        why += f", and {noun} named in the report: {', '.join(map(str, named))}"
    head = f"  … {shown:,} of {len(figures):,} {noun} shown ({why}; all in the JSON and HTML)"
    return f"{head}; {what} over all: {_spread(values, fmt, len(figures))}"


def _spread(values: Sequence[float], fmt: _Format, total: int) -> str:
    """`mean …, median …, min …, max …` of `values`, and how many rows had none."""
    if not values:
        return "n/a on every one"
    mean, middle, low, high = map(fmt, (fmean(values), median(values), min(values), max(values)))
    text = f"mean {mean}, median {middle}, min {low}, max {high}"
    return text + (f" (n/a on {total - len(values):,})" if len(values) < total else "")
