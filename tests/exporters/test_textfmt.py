"""The one number formatter: units that scale, three significant figures, never scientific
notation; read back (an independent parser below), a figure is within its stated precision
and the order of values is kept."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest
from commscope.model.units import (
    BYTES,
    FLOPS,
    RATES,
    TIMES,
    Units,
    duration,
    fewest,
    flop_rate,
    p_value,
    quantity,
    rate,
    size,
)
from hypothesis import given
from hypothesis import strategies as st

SHAPE = re.compile(r"^(-?\d+(?:\.\d+)?) (\S+)$")
TABLES = [BYTES, RATES, TIMES, FLOPS]
finite = st.floats(allow_nan=False, allow_infinity=False)
# From below a nanosecond to past the largest unit, both signs (the tests' whole range).
wide = st.floats(min_value=-1e22, max_value=1e22, allow_nan=False).filter(
    lambda x: x == 0 or abs(x) >= 1e-12
)


def read(text: str, units: Units) -> Decimal:
    """The value a printed quantity stands for, in the base unit (exact decimal arithmetic)."""
    match = SHAPE.match(text)
    assert match, text
    factor = dict((name, f) for f, name in units)[match.group(2)]
    return Decimal(match.group(1)) * Decimal(repr(factor))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # the cases: 0.00406 GB/s, 5.44e-07 GB, 107822144 B
        (0.00406e9, "4.06 MB"),
        (544, "544 B"),
        (107822144, "108 MB"),
        (16, "16 B"),  # a whole number of bytes shows no decimals
        (0.5, "0.500 B"),  # bus bytes S x F can be fractional
        (999.6, "1.00 KB"),  # rounds up into the next unit, never "1000 B"
        (0, "0 B"),
        (-1.5e6, "-1.50 MB"),
        (2.5e18, "2500 PB"),  # past the largest unit every integer digit stays
    ],
)
def test_sizes(value: float, expected: str) -> None:
    assert size(value) == expected


def test_times_rates_and_flops() -> None:
    assert duration(0.010234) == "10.2 ms"
    assert duration(582.3e-6) == "582 µs"
    assert duration(-8.92e-6) == "-8.92 µs"
    assert duration(0) == "0 s"
    assert duration(12345.0) == "12345 s"
    assert duration(4e-10) == "0.400 ns"
    assert rate(41.8e9) == "41.8 GB/s"
    assert rate(None) == "n/a"
    assert flop_rate(312e12) == "312 TFLOP/s"
    assert quantity(float("nan"), TIMES) == "n/a"


def test_digits_asks_for_other_significant_figures_of_the_same_formatter() -> None:
    assert duration(0.010234, digits=4) == "10.23 ms"
    assert duration(0.010234, digits=2) == "10 ms"
    assert rate(2.5e9, digits=2) == "2.5 GB/s"
    assert size(1234, digits=2) == "1.2 KB"
    assert size(999.6e15, digits=4) == "999.6 PB"  # rounds below 1000 PB at 4 figures
    assert size(960e15, digits=1) == "960 PB"  # 1000 PB at 1: every integer digit stays


@pytest.mark.parametrize(
    ("value", "expected"),
    [(0.005, 1), (0.0025, 2), (0.0125, 3), (0.010234, 3), (1e9, 1), (0.0, 1), (750.0, 2)],
)
def test_fewest_digits_that_write_a_value_as_three_do(value: float, expected: int) -> None:
    assert fewest(value) == expected


def test_p_values() -> None:
    assert (p_value(0.02), p_value(0.5), p_value(1.0)) == ("p = 0.02", "p = 0.5", "p = 1")
    assert p_value(1e-4) == "p = 0.0001"
    assert p_value(3e-9) == "p < 0.0001"  # never 3e-09


@given(wide, st.sampled_from(TABLES))
def test_never_scientific(value: float, units: Units) -> None:
    text = quantity(value, units)
    assert SHAPE.match(text), text
    assert not re.search(r"\d[eE][-+]?\d", text)


@given(wide.filter(lambda x: x != 0), st.sampled_from(TABLES))
def test_read_back_within_three_significant_figures(value: float, units: Units) -> None:
    # half a unit in the third significant digit is at most 0.5% of the value
    exact = Decimal(value)
    assert abs(read(quantity(value, units), units) - exact) <= abs(exact) * Decimal("0.005")


@given(wide, wide, st.sampled_from(TABLES))
def test_monotone(a: float, b: float, units: Units) -> None:
    low, high = sorted((a, b))
    assert read(quantity(low, units), units) <= read(quantity(high, units), units)


@given(finite.filter(lambda x: abs(x) >= 1e-6), st.sampled_from(TABLES))
def test_huge_values_keep_their_digits(value: float, units: Units) -> None:
    text = quantity(value, units)
    assert SHAPE.match(text) and "e" not in text and "inf" not in text
