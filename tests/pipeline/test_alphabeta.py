"""The α-β fit: hand-worked lines, a brute-force Theil–Sen oracle, recovery under noise."""

from __future__ import annotations

import ast
import math
import random
from itertools import combinations
from pathlib import Path
from statistics import median

import pytest
from commscope.pipeline.alphabeta import (
    FEW_SIZES,
    MAX_BINS,
    MIN_SIZES,
    MIN_SPAN,
    NARROW_SPAN,
    NO_GROWTH,
    NO_POINTS,
    LineFit,
    fit,
    latency_bound,
)
from hypothesis import given, settings
from hypothesis import strategies as st

ALPHABETA = Path(__file__).resolve().parents[2] / "pipeline" / "alphabeta.py"
STDLIB_ONLY = {"__future__", "collections", "dataclasses", "itertools", "math", "statistics"}

Points = list[tuple[float, float]]


def line(alpha_s: float, beta_Bps: float, sizes: list[float]) -> Points:
    return [(s, alpha_s + s / beta_Bps) for s in sizes]


def declined(reason: str, sizes: int, points: int) -> LineFit:
    return LineFit(None, None, None, sizes, points, reason)


# ------------------------------------------------------------------ the module


def test_module_is_pure_stdlib() -> None:
    tree = ast.parse(ALPHABETA.read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {str(m).split(".")[0] for m in modules} <= STDLIB_ONLY | {"typing"}


def test_thresholds() -> None:
    assert (MIN_SIZES, MIN_SPAN, MAX_BINS) == (3, 4.0, 256)


# ------------------------------------------------------------------ hand-worked fits


def test_noise_free_dyadic_line_is_exact() -> None:
    # T = 0.5 + S / 2 at S = 1, 2, 8: every slope is 0.5 and every intercept 0.5, in binary
    assert fit(line(0.5, 2.0, [1, 2, 8])) == LineFit(0.5, 2.0, 1.0, 3, 3, None)


def test_noise_free_realistic_line_to_1e12() -> None:
    # 10 µs latency, 10 GB/s: 10 kB, 100 kB and 1 MB take 11 µs, 20 µs and 110 µs
    result = fit(line(1e-5, 1e10, [1e4, 1e5, 1e6]))
    assert result.alpha_s is not None and result.beta_Bps is not None and result.r2 is not None
    assert abs(result.alpha_s - 1e-5) < 1e-12
    assert math.isclose(result.beta_Bps, 1e10, rel_tol=1e-12)
    assert math.isclose(result.r2, 1.0, rel_tol=1e-12)
    assert (result.sizes, result.points, result.reason) == (3, 3, None)


def test_medians_then_theil_sen_by_hand() -> None:
    points: Points = [(1, 3.0), (1, 3.0), (1, 10.0), (2, 5.0), (4, 8.0), (4, 9.0)]
    points += [(8, 20.0), (8, 17.0), (8, 17.0)]
    # per-size medians: (1, 3), (2, 5), (4, 8.5), (8, 17)
    # pairwise slopes: 1-2: 2/1 = 2      1-4: 5.5/3 = 1.833  1-8: 14/7 = 2
    #                  2-4: 3.5/2 = 1.75  2-8: 12/6 = 2      4-8: 8.5/4 = 2.125
    # sorted 1.75 1.833 2 2 2 2.125: median (2 + 2) / 2 = 2, so β = 1/2
    # intercepts T - 2S: 1, 1, 0.5, 1: median 1 = α
    # R² over all nine points against T = 1 + 2S: residuals 0 0 7 | 0 | -1 0 | 3 0 0,
    # SS_res = 49 + 1 + 9 = 59; ΣT = 92, ΣT² = 1266, SS_tot = 1266 - 92²/9 = 2930/9
    # R² = 1 - 59 * 9 / 2930 = 2399/2930
    result = fit(points)
    assert (result.alpha_s, result.beta_Bps, result.sizes, result.points) == (1.0, 0.5, 4, 9)
    assert result.r2 is not None and math.isclose(result.r2, 2399 / 2930, rel_tol=1e-12)
    assert result.reason is None


def test_negative_alpha_is_reported_not_clamped() -> None:
    # T = -1 + S at S = 4, 8, 16 (durations all positive): α = -1 is the outcome
    assert fit(line(-1.0, 1.0, [4, 8, 16])) == LineFit(-1.0, 1.0, 1.0, 3, 3, None)


def test_unusable_points_are_skipped_and_not_counted() -> None:
    good = line(0.5, 2.0, [1, 2, 8])
    bad = [(0, 1.0), (-4, 1.0), (math.nan, 1.0), (math.inf, 1.0)]
    bad += [(4, math.nan), (4, math.inf), (4, 0.0), (4, -1.0)]
    assert fit(bad + good) == LineFit(0.5, 2.0, 1.0, 3, 3, None)


def test_int_and_float_sizes_are_one_size() -> None:
    points: Points = [(1, 1.0), (1.0, 1.0), (2, 1.5), (8.0, 4.5), (8, 4.5)]
    assert fit(points) == LineFit(0.5, 2.0, 1.0, 3, 5, None)


def test_r2_is_none_when_the_spread_of_durations_underflows() -> None:
    # T = 1e-170 + 1e130 S: every (T - mean)² is below the smallest double
    result = fit(line(1e-170, 1e-130, [1e-300, 2e-300, 8e-300]))
    assert result.alpha_s is not None and result.beta_Bps is not None
    assert math.isclose(result.alpha_s, 1e-170, rel_tol=1e-9)
    assert math.isclose(result.beta_Bps, 1e-130, rel_tol=1e-9)
    assert (result.r2, result.reason) == (None, None)


# ------------------------------------------------------------------ declines


def test_empty_declines() -> None:
    assert fit([]) == declined(NO_POINTS, 0, 0)
    assert fit([(0, 1.0), (4, math.nan)]) == declined(NO_POINTS, 0, 0)


def test_one_size_declines() -> None:
    assert fit([(1024, 1e-5), (1024, 2e-5), (1024, 3e-5)]) == declined(FEW_SIZES, 1, 3)


def test_two_sizes_decline() -> None:
    assert fit(line(1e-5, 1e10, [1e3, 1e6, 1e6])) == declined(FEW_SIZES, 2, 3)


def test_span_under_four_declines() -> None:
    assert fit(line(1e-5, 1e10, [1000, 2000, 3999])) == declined(NARROW_SPAN, 3, 3)
    assert fit(line(1e-5, 1e10, [1000, 2000, 4000])).reason is None


def test_decreasing_durations_decline() -> None:
    assert fit([(1, 3.0), (2, 2.0), (8, 1.0)]) == declined(NO_GROWTH, 3, 3)


def test_flat_durations_decline() -> None:
    assert fit([(1, 2.0), (2, 2.0), (8, 2.0)]) == declined(NO_GROWTH, 3, 3)


def test_slope_too_small_for_a_finite_beta_declines() -> None:
    # slopes 5e-324, 1e-323/3 -> 5e-324, 5e-324/2 -> 0: median 5e-324, and 1/5e-324 = inf
    assert fit([(1, 5e-324), (2, 1e-323), (4, 1.5e-323)]) == declined(NO_GROWTH, 3, 3)


def test_reasons_are_distinct_phrases() -> None:
    assert len({NO_POINTS, FEW_SIZES, NARROW_SPAN, NO_GROWTH}) == 4
    assert (FEW_SIZES, NARROW_SPAN) == (
        "fewer than 3 distinct sizes",
        "largest size is less than 4× the smallest",
    )


# ------------------------------------------------------------------ more sizes than bins


def test_binned_fit_of_a_noise_free_line_is_close_to_exact() -> None:
    sizes = [4096.0 * k for k in range(1, 1001)]
    points = line(2e-5, 5e10, sizes) * 3
    random.Random(7).shuffle(points)
    result = fit(points)
    assert result.alpha_s is not None and result.beta_Bps is not None and result.r2 is not None
    assert math.isclose(result.alpha_s, 2e-5, rel_tol=1e-9)
    assert math.isclose(result.beta_Bps, 5e10, rel_tol=1e-9)
    assert math.isclose(result.r2, 1.0, rel_tol=1e-12)
    assert (result.sizes, result.points, result.reason) == (1000, 3000, None)


def test_slow_instances_spoil_only_their_bins() -> None:
    # 1000 sizes, one instance each, pooled 3 or 4 to a bin; every 20th instance is 3x slow.
    # At most 50 of the 256 bins are off the line: the other 206 still hold the majority of
    # the intercepts and (206 choose 2 = 21,115 of 32,640) of the pairwise slopes.
    points = line(1e-4, 1e9, [1024.0 * k for k in range(1, 1001)])
    points = [(s, 3 * t if i % 20 == 0 else t) for i, (s, t) in enumerate(points)]
    result = fit(points)
    assert result.alpha_s is not None and result.beta_Bps is not None
    assert math.isclose(result.alpha_s, 1e-4, rel_tol=1e-9)
    assert math.isclose(result.beta_Bps, 1e9, rel_tol=1e-9)


# ------------------------------------------------------------------ oracle and properties


@st.composite
def distinct_points(draw: st.DrawFn) -> Points:
    sizes = draw(st.lists(st.integers(1, 10_000), min_size=3, max_size=12, unique=True))
    durations = st.floats(1e-6, 1.0)
    return [(s, draw(durations)) for s in sizes]


@given(distinct_points())
def test_slope_and_intercept_match_brute_force_theil_sen(points: Points) -> None:
    sizes = sorted(s for s, _ in points)
    slope = median((tj - ti) / (sj - si) for (si, ti), (sj, tj) in combinations(points, 2))
    result = fit(points)
    if sizes[-1] < 4 * sizes[0]:
        assert result == declined(NARROW_SPAN, len(points), len(points))
    elif slope <= 0:
        assert result == declined(NO_GROWTH, len(points), len(points))
    else:
        assert result.beta_Bps is not None
        assert math.isclose(1 / result.beta_Bps, slope, rel_tol=1e-12)
        assert result.alpha_s == median(t - slope * s for s, t in points)


@given(distinct_points(), st.randoms(use_true_random=False))
def test_order_of_points_changes_nothing(points: Points, rng: random.Random) -> None:
    shuffled = list(points)
    rng.shuffle(shuffled)
    assert fit(shuffled) == fit(points)


@st.composite
def noisy_runs(draw: st.DrawFn) -> tuple[float, float, Points]:
    """Instances of a line with noise ≤ ±3% and ≤ 10% of them outliers 2-10x slower.

    Sizes sit on either side of the pivot αβ (where S/β = α): l + 1 small ones at 10^-3..10^-1
    of it (α dominates) and l large ones at 10^1..10^3 of it (S/β dominates). Fewer than half
    the instances of a size are outliers, so each size's median is within 3% of the line.
    Then, with s = S/(αβ), a small-large slope is within 0.03 (2 + 0.1 + 10) / (10 - 0.1)
    = 3.7% of 1/β; those pairs, (l + 1) l of them, outnumber the others, l², so the Theil-Sen
    median is within 3.7% too (β within 3.8%). A small size's intercept is then within
    0.03 x 1.1 + 0.037 x 0.1 = 3.7% of α; the small sizes are the majority, so α is within 3.7%.
    """
    alpha = draw(st.floats(1e-6, 1e-3))
    beta = draw(st.floats(1e9, 1e12))
    large = draw(st.lists(st.integers(8, 24), min_size=2, max_size=5, unique=True))
    small = draw(
        st.lists(
            st.integers(-24, -8), min_size=len(large) + 1, max_size=len(large) + 1, unique=True
        )
    )
    sizes = [alpha * beta * 10 ** (eighths / 8) for eighths in small + large]
    runs = [draw(st.lists(st.floats(-0.03, 0.03), min_size=3, max_size=12)) for _ in sizes]
    budget = sum(map(len, runs)) // 10
    points: Points = []
    for size, noise in zip(sizes, runs, strict=True):
        slow = min(draw(st.integers(0, (len(noise) - 1) // 2)), budget)
        budget -= slow
        factors = [draw(st.floats(2.0, 10.0)) for _ in range(slow)] + [1.0] * (len(noise) - slow)
        points += [
            (size, (alpha + size / beta) * (1 + e) * f) for e, f in zip(noise, factors, strict=True)
        ]
    return alpha, beta, points


@settings(max_examples=300, deadline=None)
@given(noisy_runs())
def test_recovers_alpha_and_beta_within_5_percent(run: tuple[float, float, Points]) -> None:
    alpha, beta, points = run
    result = fit(points)
    assert result.alpha_s is not None and result.beta_Bps is not None, result.reason
    assert abs(result.alpha_s - alpha) <= 0.05 * alpha
    assert abs(result.beta_Bps - beta) <= 0.05 * beta
    assert result.points == len(points)


def test_latency_bound_share_by_hand() -> None:
    # α = 10 µs, β = 1 GB/s: knee α·β = 10,000 bytes; two of the four sizes are below it
    points = [(s, 10e-6 + s / 1e9) for s in (1_000.0, 5_000.0, 20_000.0, 100_000.0)]
    line = fit(points)
    assert line.alpha_s == pytest.approx(10e-6) and line.beta_Bps == pytest.approx(1e9)
    assert latency_bound(line, points) == 0.5
    assert latency_bound(line, [*points, (-1.0, 1.0)]) == 0.5  # unusable points do not count
    assert latency_bound(fit(points[:2]), points[:2]) is None  # declined: no knee
    negative = fit([(s, -5e-6 + s / 1e9) for s in (1e4, 1e5, 1e6)])
    assert negative.alpha_s is not None and negative.alpha_s < 0
    assert latency_bound(negative, [(1e4, 5e-6)]) is None  # α ≤ 0: nothing latency-bound
