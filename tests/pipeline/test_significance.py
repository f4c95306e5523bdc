"""Welch's t-test and the Student's t tail: by hand, by closed forms, and against scipy."""

from __future__ import annotations

import ast
import math
import sys
from pathlib import Path

import pytest
from commscope.pipeline.significance import MIN_SAMPLES, Comparison, student_t_sf, welch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from scipy import stats

SIGNIFICANCE = Path(__file__).resolve().parents[2] / "pipeline" / "significance.py"


def cauchy_sf(t: float) -> float:
    """df = 1 is the Cauchy distribution: 1/2 - atan(t)/π, which is atan(1/t)/π for t > 0."""
    if t < 0:
        return 1.0 - cauchy_sf(-t)
    return math.atan(1.0 / t) / math.pi if t > 0 else 0.5


def t2_sf(t: float) -> float:
    """df = 2: 1/2 - t/(2·√(2 + t²)), which is 1/(r·(r + t)) with r = √(2 + t²)."""
    r = math.sqrt(2.0 + t * t)
    return 1.0 / (r * (r + t)) if t >= 0 else 1.0 - t2_sf(-t)


def close(ours: float, oracle: float, tolerance: float) -> bool:
    """Relative agreement, down to where doubles lose precision (below 1e-300)."""
    return math.isclose(ours, oracle, rel_tol=tolerance, abs_tol=1e-300)


# ------------------------------------------------------------------ student_t_sf by hand


def test_cauchy_tail_at_one_is_a_quarter() -> None:
    # df = 1: sf(1) = 1/2 - atan(1)/π = 1/2 - 1/4 = 1/4, and sf(-1) = 3/4 by symmetry
    assert student_t_sf(1.0, 1.0) == pytest.approx(0.25, rel=1e-14)
    assert student_t_sf(-1.0, 1.0) == pytest.approx(0.75, rel=1e-14)


def test_two_degrees_of_freedom_at_one() -> None:
    # df = 2: sf(1) = 1/2 - 1 / (2·√3) = 0.21132486540518713
    assert student_t_sf(1.0, 2.0) == pytest.approx(0.21132486540518713, rel=1e-14)


def test_four_degrees_of_freedom_at_root_two() -> None:
    # df = 4: F(t) = 1/2 + (3/8)·u·(1 - t²/(12(1 + t²/4))), u = t/√(1 + t²/4).
    # t = √2: u = √2/√1.5 = 2/√3, 1 - 2/18 = 8/9, so sf = 1/2 - 2/(3√3) = 0.11509982054024945
    assert student_t_sf(math.sqrt(2.0), 4.0) == pytest.approx(0.11509982054024945, rel=1e-13)


def test_zero_is_the_median() -> None:
    assert student_t_sf(0.0, 7.5) == 0.5
    assert student_t_sf(1e-200, 3.0) == 0.5
    assert student_t_sf(-1e-200, 3.0) == 0.5


def test_infinite_t_and_infinite_df() -> None:
    assert (student_t_sf(math.inf, 2.0), student_t_sf(-math.inf, 2.0)) == (0.0, 1.0)
    assert (student_t_sf(1e200, 2.0), student_t_sf(-1e200, 2.0)) == (0.0, 1.0)
    # df = ∞ is the normal: P(Z > 1.959963984540054) = 0.025
    assert student_t_sf(1.959963984540054, math.inf) == pytest.approx(0.025, rel=1e-14)


def test_large_df_approaches_the_normal() -> None:
    # P(Z > 2) = erfc(√2)/2 = 0.022750131948179195; t with 1e9 df is within 1e-8 of it
    assert student_t_sf(2.0, 1e9) == pytest.approx(0.022750131948179195, rel=1e-7)


@pytest.mark.parametrize(("t", "df"), [(1.0, 0.0), (1.0, -2.0), (1.0, math.nan), (math.nan, 3.0)])
def test_undefined_arguments_are_refused(t: float, df: float) -> None:
    with pytest.raises(ValueError, match="student_t_sf needs df > 0"):
        student_t_sf(t, df)


# ------------------------------------------------------------------ student_t_sf, oracles


@settings(max_examples=500, deadline=None)
@given(st.floats(1.0, 1e5), st.floats(-50.0, 50.0))
def test_sf_matches_scipy(df: float, t: float) -> None:
    # scipy's own error near t = 0 reaches ~2e-9 absolute (df=1, t=5.9e-9: scipy says 0.5,
    # the exact 1/2 - atan(t)/π is 0.4999999981): allow that much there
    ours, theirs = student_t_sf(t, df), float(stats.t.sf(t, df))
    assert close(ours, theirs, 1e-9) or abs(ours - theirs) <= 5e-9


@settings(max_examples=300, deadline=None)
@given(
    st.floats(0.0, 6.0).map(lambda e: 10.0**e),
    st.floats(-3.0, 3.0).map(lambda e: 10.0**e),
    st.sampled_from([1.0, -1.0]),
)
def test_sf_matches_scipy_over_the_whole_promised_range(
    df: float, size: float, sign: float
) -> None:
    # df in [1, 1e6] and |t| in [1e-3, 1e3], drawn on a log scale to reach the corners
    t = sign * size
    assert close(student_t_sf(t, df), float(stats.t.sf(t, df)), 1e-9)


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e3, 1e3))
def test_sf_matches_closed_forms_for_one_and_two_df(t: float) -> None:
    # both closed forms are written without cancelling 1/2 against 1/2 in the tail
    assert close(student_t_sf(t, 1.0), cauchy_sf(t), 1e-12)
    assert close(student_t_sf(t, 2.0), t2_sf(t), 1e-12)


# ------------------------------------------------------------------ welch by hand


def test_textbook_example_by_hand() -> None:
    # A = 1, 2, 3: mean 2, variance 1, squared standard error 1/3
    # B = 2, 4, 6, 8, 10: mean 6, variance (16+4+0+4+16)/4 = 10, squared standard error 2
    # t = (6 - 2) / √(1/3 + 2) = 4·√(3/7) = 2.6186146828319083
    # df = (7/3)² / ((1/3)²/2 + 2²/4) = (49/9) / (19/18) = 98/19 = 5.157894736842105
    # p = 2·sf(t, 98/19) = 0.04577582843879491 (scipy.stats.ttest_ind, equal_var=False)
    result = welch([1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0, 10.0])
    assert (result.mean_a, result.mean_b, result.change) == (2.0, 6.0, 2.0)
    assert result.t == pytest.approx(4.0 * math.sqrt(3.0 / 7.0), rel=1e-15)
    assert result.df == pytest.approx(98.0 / 19.0, rel=1e-15)
    assert result.p_value == pytest.approx(0.04577582843879491, rel=1e-12)
    assert result.reason is None


def test_t_is_positive_when_b_is_slower_and_flips_with_the_order() -> None:
    slower = welch([1.0, 2.0, 3.0], [2.0, 4.0, 6.0, 8.0, 10.0])
    faster = welch([2.0, 4.0, 6.0, 8.0, 10.0], [1.0, 2.0, 3.0])
    assert slower.t is not None and slower.t > 0
    assert faster.t == -slower.t
    assert (faster.df, faster.p_value) == (slower.df, slower.p_value)
    assert faster.change == pytest.approx((2.0 - 6.0) / 6.0)


def test_identical_samples_give_t_zero_and_p_one() -> None:
    # same means, so t = 0 / se = 0 and p = 2·sf(0) = 2·(1/2) = 1
    result = welch([10.0, 12.0, 14.0], [14.0, 10.0, 12.0])
    assert (result.t, result.p_value, result.change) == (0.0, 1.0, 0.0)
    assert result.df == pytest.approx(4.0)  # (2/3 + 2/3)² / (2·(2/3)²/2) = 4


def test_one_constant_side_is_still_a_test() -> None:
    # A = 2, 2, 2 (no variance); B = 1..5: mean 3, variance 2.5, squared standard error 0.5
    # t = (3 - 2) / √0.5 = √2; df = 0.5² / (0.5²/4) = 4 (only B's variance counts)
    # p = 2·sf(√2, 4) = 1 - 4/(3√3) = 0.2301996410804989 (see the df = 4 closed form above)
    result = welch([2.0, 2.0, 2.0], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert result.t == pytest.approx(math.sqrt(2.0), rel=1e-15)
    assert result.df == pytest.approx(4.0, rel=1e-15)
    assert result.p_value == pytest.approx(1.0 - 4.0 / (3.0 * math.sqrt(3.0)), rel=1e-13)
    assert result.reason is None


def test_exactly_min_samples_on_each_side_is_enough() -> None:
    assert MIN_SAMPLES == 3
    assert welch([1.0, 2.0, 4.0], [2.0, 3.0, 5.0]).p_value is not None


# ------------------------------------------------------------------ welch without a t statistic


def test_too_few_steps_on_one_side() -> None:
    result = welch([1.0, 3.0], [1.0, 2.0, 3.0, 4.0, 5.0])
    assert result == Comparison(
        mean_a=2.0,
        mean_b=3.0,
        change=0.5,
        t=None,
        df=None,
        p_value=None,
        reason="too few steps (3 needed on each side; got 2 and 5)",
    )


def test_an_empty_side_has_no_mean() -> None:
    result = welch([], [4.0, 5.0, 6.0])
    assert (result.mean_a, result.mean_b, result.change, result.p_value) == (None, 5.0, None, None)
    assert result.reason == "too few steps (3 needed on each side; got 0 and 3)"


def test_no_variation_and_the_same_value_is_certainly_no_change() -> None:
    # 0.1 summed three times is not 0.3 in floating point: the exact mean keeps 0.1 == 0.1
    result = welch([0.1] * 3, [0.1] * 5)
    assert result == Comparison(0.1, 0.1, 0.0, None, None, 1.0, "no variation on either side")


def test_no_variation_and_different_values_is_certainly_a_change() -> None:
    result = welch([2.0] * 4, [3.0] * 3)
    assert result == Comparison(2.0, 3.0, 0.5, None, None, 0.0, "no variation on either side")


def test_change_is_undefined_when_a_averages_zero() -> None:
    result = welch([-1.0, 0.0, 1.0], [1.0, 2.0, 3.0])
    assert result.change is None
    assert result.t == pytest.approx(2.0 / math.sqrt(2.0 / 3.0))  # (2 - 0) / √(1/3 + 1/3)


# ------------------------------------------------------------------ welch against scipy

step_times = st.lists(st.floats(1e-3, 1e3), min_size=3, max_size=40)


def well_spread(sample: list[float]) -> bool:
    """Far from constant, so numpy's two-pass variance in the oracle keeps 9+ digits."""
    return max(sample) - min(sample) >= 1e-6 * max(sample)


@settings(max_examples=300, deadline=None)
@given(step_times, step_times)
def test_welch_matches_scipy(a: list[float], b: list[float]) -> None:
    assume(well_spread(a) and well_spread(b))
    ours = welch(a, b)
    # our t is B minus A, so the oracle takes B first
    oracle = stats.ttest_ind(b, a, equal_var=False)
    assert ours.t is not None and ours.df is not None and ours.p_value is not None
    assert math.isclose(ours.t, float(oracle.statistic), rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(ours.df, float(oracle.df), rel_tol=1e-9)
    assert close(ours.p_value, float(oracle.pvalue), 1e-9)


# ------------------------------------------------------------------ purity


def test_module_imports_only_the_standard_library() -> None:
    tree = ast.parse(SIGNIFICANCE.read_text(), filename=str(SIGNIFICANCE))
    modules = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    modules |= {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    roots = {name.split(".")[0] for name in modules}
    assert roots <= set(sys.stdlib_module_names) | {"__future__"}
    assert roots.isdisjoint({"os", "sys", "time", "socket", "threading", "logging"})
