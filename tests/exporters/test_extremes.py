"""Which rows of a long table the text report prints: every row up to 16, else the 3 lowest
and 3 highest by the key figure and the named rows, in table order, with a summary line
worked out by hand; a brute-force oracle for the choice."""

from __future__ import annotations

from commscope.exporters.extremes import (
    EACH_END,
    FULL_UP_TO,
    MAX_NAMED,
    Cut,
    cut_of,
    named_ranks,
    pick,
)
from commscope.exporters.textfmt import pct, plain, rank_runs
from commscope.model.schema import Report, Skew, Stragglers
from commscope.model.units import duration
from hypothesis import given
from hypothesis import strategies as st

MS = 1e-3


def test_a_table_of_16_rows_or_fewer_shows_every_one() -> None:
    figures = {str(r): float(r % 5) for r in range(FULL_UP_TO)}
    assert pick(figures) == list(figures)


def test_a_long_table_shows_the_three_lowest_and_highest_in_its_own_order() -> None:
    # 20 ranks, exposed (r + 1) ms but rank 4 the lowest (0.5 ms) and rank 9 the highest
    figures = {str(r): (r + 1) * MS for r in range(20)}
    figures["4"], figures["9"] = 0.5 * MS, 30 * MS
    assert pick(figures) == ["0", "1", "4", "9", "18", "19"]


def test_named_rows_stay_and_ties_count_the_earlier_row_lower() -> None:
    figures = {str(r): 1.0 for r in range(20)}  # all tied: rows 0-2 lowest, 17-19 highest
    assert pick(figures, named=["7", "99"]) == ["0", "1", "2", "7", "17", "18", "19"]


def test_rows_without_a_figure_fill_a_table_that_has_too_few_with_one() -> None:
    figures: dict[str, float | None] = {str(r): None for r in range(20)}
    figures["10"], figures["15"] = 2.0, 1.0
    assert pick(figures) == ["0", "1", "2", "3", "10", "15"]


def test_the_summary_line_of_a_20_rank_table_worked_by_hand() -> None:
    # exposed (r + 1) ms: mean 10.5 ms, median (10 + 11) / 2 = 10.5 ms, min 1 ms, max 20 ms
    per_rank = {str(r): (r + 1) * MS for r in range(20)}
    rows = Cut(named=("7",), every=False).ranks(per_rank, lambda v: v, "exposed", duration)
    assert [rank for rank, _ in rows.items] == ["0", "1", "2", "7", "17", "18", "19"]
    assert rows.summary == [
        "  … 7 of 20 ranks shown (the 3 lowest and 3 highest by exposed, and ranks named in the "
        "report: 7; all in the JSON and HTML); exposed over all: mean 10.5 ms, median 10.5 ms, "
        "min 1.00 ms, max 20.0 ms"
    ]


def test_the_summary_counts_the_rows_without_a_figure() -> None:
    # 19 ratios r / 100 (rank 19 has none): mean 9%, median 9%, min 0%, max 18%
    per_rank: dict[str, float | None] = {str(r): r / 100 for r in range(19)} | {"19": None}
    rows = Cut(every=False).ranks(per_rank, lambda v: v, "overlap", pct)
    assert [rank for rank, _ in rows.items] == ["0", "1", "2", "16", "17", "18"]
    assert rows.summary[0].endswith(
        "overlap over all: mean 9.00%, median 9.00%, min 0.00%, max 18.00% (n/a on 1)"
    )


def test_a_table_with_no_figure_says_it_shows_the_first_rows() -> None:
    fits: dict[str, float | None] = {str(g): None for g in range(30)}
    rows = Cut(every=False).rows(fits, lambda v: v, "β", duration, noun="fits")
    assert [key for key, _ in rows.items] == ["0", "1", "2", "3", "4", "5"]
    assert rows.summary == [
        "  … 6 of 30 fits shown (the first; all in the JSON and HTML); β over all: n/a on every one"
    ]


def test_every_prints_every_row_and_no_summary() -> None:
    per_rank = {str(r): float(r) for r in range(100)}
    rows = Cut(every=True).ranks(per_rank, lambda v: v, "exposed", duration)
    assert len(rows.items) == 100 and rows.summary == []


def test_a_long_list_shows_its_first_twelve_and_how_many_more() -> None:
    items = [f"  file{n}" for n in range(40)]
    assert Cut(every=False).lines(items, "skipped files") == [
        *items[:12],
        "  … 28 more skipped files in the JSON and HTML reports",
    ]
    assert Cut(every=False).lines(items[:16], "skipped files") == items[:16]
    assert Cut(every=True).lines(items, "skipped files") == items


def test_a_long_rank_list_shows_the_first_six_and_how_many_in_all() -> None:
    assert Cut(every=False).listed(list(range(0, 80, 10))) == "0, 10, 20, 30, 40, 50, … (8 in all)"
    assert Cut(every=False).listed([3, 9]) == "3, 9"
    assert Cut(every=True).listed(list(range(8))) == "0, 1, 2, 3, 4, 5, 6, 7"


def test_the_named_ranks_are_the_one_waited_for_then_stragglers_by_robust_z() -> None:
    report = Report(
        ranks=list(range(32)),
        skew=Skew(waited_for_rank=7),
        stragglers=Stragglers(flagged=[3, 7, 12], robust_z={"3": 4.0, "7": 5.0, "12": 9.0}),
    )
    assert named_ranks(report) == ("7", "12", "3")
    assert cut_of(report) == Cut(named=("7", "12", "3"), every=False)
    assert cut_of(report, every=True).every
    assert cut_of(Report(ranks=list(range(16)))).every  # a job of 16 ranks keeps every row


def test_rank_runs_join_consecutive_ranks_and_cut_after_eight_runs() -> None:
    assert rank_runs([0, 1, 2, 4, 6, 7]) == "0-2, 4, 6-7"
    assert rank_runs([]) == "none"
    assert rank_runs(list(range(0, 40, 2))) == "0, 2, 4, 6, 8, 10, 12, 14, … (20 ranks in all)"


def test_plain_counts() -> None:
    assert [plain(v) for v in (8, 7.74, 1234.0, None)] == ["8", "7.74", "1234", "n/a"]


def oracle(figures: dict[str, float | None], named: list[str]) -> list[str]:
    """Brute force: a row's place among the rows with a figure (lower figure, or the same
    and earlier); kept in the first or last EACH_END places, or named; then rows without a
    figure in order while fewer than 2 x EACH_END are kept."""
    keys = list(figures)
    if len(keys) <= FULL_UP_TO:
        return keys
    known = [k for k in keys if figures[k] is not None]

    def place(k: str) -> int:
        v = figures[k]
        return sum(1 for o in known if (figures[o], keys.index(o)) < (v, keys.index(k)))

    kept = {k for k in known if place(k) < EACH_END or place(k) >= len(known) - EACH_END}
    kept |= set([k for k in dict.fromkeys(named) if k in figures][:MAX_NAMED])
    for k in keys:
        if len(kept) >= 2 * EACH_END:
            break
        if figures[k] is None:
            kept.add(k)
    return [k for k in keys if k in kept]


values = st.one_of(st.none(), st.integers(0, 6).map(float))


@given(
    st.lists(values, min_size=0, max_size=40),
    st.lists(st.integers(0, 45).map(str), max_size=9),
)
def test_the_choice_agrees_with_a_brute_force_oracle(
    found: list[float | None], named: list[str]
) -> None:
    figures = {str(i): v for i, v in enumerate(found)}
    assert pick(figures, named) == oracle(figures, named)
