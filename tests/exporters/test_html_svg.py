"""The SVG primitives of the HTML report: scales, ticks, unit labels, colours, escaping."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Callable

import pytest
from commscope.exporters import svg
from commscope.model.units import duration, rate, size


@pytest.mark.parametrize(
    ("lo", "hi", "count", "expected"),
    [
        (0.0, 10.0, 5, [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]),  # raw step 2 -> 2
        (0.0, 1.0, 4, [0.0, 0.25, 0.5, 0.75, 1.0]),  # raw 0.25 -> 2.5 x 0.1
        (0.0, 7.3, 5, [0.0, 2.0, 4.0, 6.0]),  # raw 1.46 -> 2; last tick ≤ hi
        (0.15, 0.62, 5, [0.2, 0.3, 0.4, 0.5, 0.6]),  # raw 0.094 -> 0.1, first ≥ lo
        (3e-6, 3e-6, 5, [3e-6]),  # an empty range: its one value
    ],
)
def test_ticks_are_round_values_within_the_range(
    lo: float, hi: float, count: int, expected: list[float]
) -> None:
    assert svg.ticks(lo, hi, count) == expected


def test_nice_top_is_the_first_round_tick_at_or_above_the_value() -> None:
    assert svg.nice_top(7.3) == 8.0  # ticks 0, 2, 4, 6 and one step more
    assert svg.nice_top(6.0) == 6.0
    assert svg.nice_top(0.0) == 1.0  # nothing to show: a unit axis


def test_log_ticks_are_powers_of_ten_or_one_two_five_when_the_span_is_narrow() -> None:
    assert svg.log_ticks(1.0, 1e4) == [1.0, 10.0, 100.0, 1000.0, 10000.0]
    assert svg.log_ticks(150.0, 600.0) == [200.0, 500.0]  # no power of ten inside
    assert svg.log_ticks(8.0, 1200.0) == [10.0, 100.0, 1000.0]
    assert svg.log_ticks(11.0, 19.0) == [12.0, 14.0, 16.0, 18.0]  # none of 1-2-5: linear


def test_scales_map_linear_and_log_ranges_onto_pixels() -> None:
    assert svg.Scale(0.0, 10.0, 100.0, 200.0)(5.0) == 150.0
    assert svg.Scale(0.0, 10.0, 300.0, 100.0)(10.0) == 100.0  # a y axis grows upwards
    assert svg.Scale(1.0, 100.0, 0.0, 200.0, log=True)(10.0) == 100.0  # a decade of two
    assert svg.Scale(5.0, 5.0, 0.0, 200.0)(5.0) == 100.0  # an empty range: the middle


@pytest.mark.parametrize(
    ("show", "value", "expected"),
    [
        (duration, 0.0025, "2.5 ms"),  # 2 significant figures write 2.5 exactly
        (duration, 0.005, "5 ms"),  # not "5.00 ms"
        (duration, 0.0125, "12.5 ms"),  # 3 needed
        (duration, 0.0, "0 s"),
        (rate, 1e9, "1 GB/s"),
        (size, 500.0, "500 B"),
        (size, 2e5, "200 KB"),
    ],
)
def test_ticks_are_labelled_by_the_tooltips_formatter_with_the_digits_they_need(
    show: Callable[[float, int], str], value: float, expected: str
) -> None:
    assert svg.tick(show)(value) == expected


def test_the_svg_module_has_no_formatter_of_its_own() -> None:
    # one formatter on the page (collector.units): the old si/seconds/percent copies wrote
    # four significant figures where the tooltips write three
    assert not {"si", "seconds", "percent"} & set(vars(svg))


def test_viridis_runs_from_its_first_to_its_last_colour_and_ink_contrasts() -> None:
    assert svg.viridis(0.0) == "#440154" and svg.viridis(1.0) == "#fde725"
    assert svg.viridis(-1.0) == "#440154" and svg.viridis(2.0) == "#fde725"  # clamped
    # 0.5 is 4.5 of 9 steps: halfway from (38, 130, 142) to (31, 158, 137) is (34.5, 144,
    # 139.5), rounded half to even: (34, 144, 140)
    assert svg.viridis(0.5) == "#22908c"
    assert svg.ink_on("#440154") == "#ffffff" and svg.ink_on("#fde725") == "#000000"


def test_text_with_markup_stays_text_in_well_formed_svg() -> None:
    name = '<script>alert("x")</script> & co'
    drawn = svg.document(
        100, 50, name, [svg.text(0, 10, name), svg.rect(0, 0, 5, 5, "#000", title=name)]
    )
    root = ET.fromstring(drawn)
    namespace = "{http://www.w3.org/2000/svg}"
    assert root.get("aria-label") == name
    assert root.find(f"{namespace}text").text == name  # type: ignore[union-attr]
    assert root.find(f"{namespace}rect/{namespace}title").text == name  # type: ignore[union-attr]
    assert root.find(f".//{namespace}script") is None


def test_text_and_circles_carry_their_tooltip_as_a_title_child() -> None:
    label = ET.fromstring(svg.text(1, 2, "iter…", title="iter<1>", font_size=12))
    assert (label.text, label[0].tag, label[0].text) == (None, "title", "iter<1>")
    assert label[0].tail == "iter…" and label.get("font-size") == "12"
    ring = ET.fromstring(svg.circle(1, 2, 3, "none", title="a step", stroke="#999999", width=1))
    assert (ring.get("fill"), ring.get("stroke"), ring.get("stroke-width")) == (
        "none",
        "#999999",
        "1",
    )
    assert ring[0].text == "a step"


def test_legend_wraps_items_that_do_not_fit_the_width() -> None:
    drawn = svg.legend([("aaaaaaaaaa", svg.BLUE), ("bbbbbbbbbb", svg.ORANGE)], 0, 20, 120)
    # each item takes 22 + 7 x 10 = 92 px: the second starts a new row, 18 px lower
    assert 'y="10.0"' in drawn[0] and 'y="28.0"' in drawn[2]


def test_legend_marks_draw_as_the_plot_draws_the_entry() -> None:
    drawn = svg.legend(
        [("a", svg.BLUE, "dot"), ("b", svg.INK, "dash"), ("c", svg.GREY)], 0, 20, 900
    )
    assert drawn[0].startswith("<circle") and 'stroke-dasharray="4 2"' in drawn[2]
    assert drawn[4].startswith("<rect")  # the default: a box


def test_a_log_axis_widens_to_one_two_five_values_and_labels_its_lower_bound() -> None:
    # 130 .. 4,100: bounds 100 and 5,000; powers of ten inside are 100 and 1,000 (two), so
    # 1-2-5 ticks; 100 is itself a tick, so every point lies at or above a label
    assert svg.log_axis(130.0, 4100.0) == (
        100.0,
        5000.0,
        [100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0],
    )
    # 3 .. 2e6: bounds 2 and 2e6 (itself a 1-2-5 value), decade ticks 10 … 1e6; 2 is 0.7
    # decade below 10, more than a tenth of the 6-decade axis, so it is labelled too
    low, high, found = svg.log_axis(3.0, 2e6)
    assert (low, high) == (2.0, 2e6)
    assert found == [2.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0, 1e6]
    # 0.9e6 .. 2e9: bound 5e5 is 0.3 decade under 1e6, less than a tenth of 3.6 decades: the
    # bound stays unlabelled rather than crowd the 1e6 label
    assert svg.log_axis(9e5, 2e9)[2][0] == 1e6
    assert svg.log_axis(7.0, 7.0)[:2] == (5.0, 10.0)  # one value: the 1-2-5 values around it


def test_a_linear_axis_starts_at_zero_unless_the_values_vary_by_less_than_half() -> None:
    assert svg.linear_axis(0.2, 7.3) == (0.0, 8.0, [0.0, 2.0, 4.0, 6.0, 8.0])
    # 0.95 .. 1.07 varies by 11% of 1.07: raw step 0.12 / 5 = 0.024 -> 0.025; the grid runs
    # from the multiple at or below 0.95 to the one at or above 1.07
    assert svg.linear_axis(0.95, 1.07) == (0.95, 1.075, [0.95, 0.975, 1.0, 1.025, 1.05, 1.075])
