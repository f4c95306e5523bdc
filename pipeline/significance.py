"""Whether the step time changed between two runs: Welch's t-test, stdlib only (pure).

`welch(a, b)` compares run A's step times with run B's (finite numbers) by the two-sided
Welch (unequal variances) t-test; t is signed like `change`, positive when B is slower. The
p-value comes from `student_t_sf`, the Student's t survival function from the regularized
incomplete beta function's continued fraction (modified Lentz, as in Numerical Recipes'
`betacf`) with a Stirling-series log-beta for large df: within 1e-10 relative of the exact
value for df in [1, 1e6] and |t| up to 1e3, the error growing about linearly with df beyond
(1e-7 at 1e9). With fewer than MIN_SAMPLES steps on either side there is no test: t, df and
p_value are None. When neither side varies at all, t and df are None too (t would be
infinite, or 0/0) but the answer is certain: p_value is 1.0 when both sides hold the same
value and 0.0 when they differ. `reason` says why t is missing. `change` is relative to A's
mean and None when that mean is not positive; a mean is None only for an empty side.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

MIN_SAMPLES: Final = 3
_MAX_ITERATIONS: Final = 1000  # about 60 suffice for df up to 1e6 and |t| up to 1e3
_EPSILON: Final = 1e-15  # the continued fraction stops when a step changes it by less
_TINY: Final = 1e-300  # keeps Lentz's denominators away from zero
_STIRLING_FROM: Final = 100.0  # lgamma differences lose digits beyond this; Stirling does not


@dataclass(frozen=True)
class Comparison:
    """Run B's step times against run A's; see the module docstring for the None cases."""

    mean_a: float | None
    mean_b: float | None
    change: float | None  # (mean_b - mean_a) / mean_a
    t: float | None  # Welch's t, (mean_b - mean_a) / standard error
    df: float | None  # Welch-Satterthwaite degrees of freedom
    p_value: float | None  # two-sided
    reason: str | None  # why there is no t statistic


def welch(a: Sequence[float], b: Sequence[float]) -> Comparison:
    """Welch's two-sided t-test of B's mean against A's."""
    if min(len(a), len(b)) < MIN_SAMPLES:
        return _too_few(a, b)
    mean_a, mean_b = float(statistics.mean(a)), float(statistics.mean(b))
    change = _change(mean_a, mean_b)
    error_a = float(statistics.variance(a)) / len(a)  # squared standard errors of the means
    error_b = float(statistics.variance(b)) / len(b)
    if error_a + error_b == 0:
        p_value = 1.0 if mean_a == mean_b else 0.0
        return Comparison(
            mean_a, mean_b, change, None, None, p_value, "no variation on either side"
        )
    t = (mean_b - mean_a) / math.sqrt(error_a + error_b)
    df = (error_a + error_b) ** 2 / (error_a**2 / (len(a) - 1) + error_b**2 / (len(b) - 1))
    p_value = min(1.0, 2.0 * student_t_sf(abs(t), df))
    return Comparison(mean_a, mean_b, change, t, df, p_value, None)


def _change(mean_a: float | None, mean_b: float | None) -> float | None:
    """(mean_b - mean_a) / mean_a, or None when either is unknown or mean_a is not positive."""
    if mean_a is None or mean_b is None or mean_a <= 0:
        return None
    return (mean_b - mean_a) / mean_a


def _too_few(a: Sequence[float], b: Sequence[float]) -> Comparison:
    mean_a = float(statistics.mean(a)) if a else None
    mean_b = float(statistics.mean(b)) if b else None
    reason = f"too few steps ({MIN_SAMPLES} needed on each side; got {len(a)} and {len(b)})"
    change = _change(mean_a, mean_b)
    return Comparison(mean_a, mean_b, change, None, None, None, reason)


def student_t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` (> 0, real; inf for the normal) degrees of freedom."""
    if math.isnan(t) or math.isnan(df) or df <= 0:
        raise ValueError(f"student_t_sf needs df > 0 and a number t (got t={t}, df={df})")
    if t < 0:
        return 1.0 - student_t_sf(-t, df)
    if math.isinf(df):
        return 0.5 * math.erfc(t / math.sqrt(2.0))
    if t * t == 0:  # below 1e-154 the answer is 0.5 to the last digit
        return 0.5
    if math.isinf(t):
        return 0.0
    # x = df / (df + t²) and 1 - x, each from log1p to keep every digit of both.
    log_x, log_y = -math.log1p(t * t / df), -math.log1p(df / (t * t))
    return 0.5 * _regularized_beta(log_x, log_y, df / 2.0, 0.5)


def _regularized_beta(log_x: float, log_y: float, a: float, b: float) -> float:
    """I_x(a, b) for 0 < x < 1, given log(x) and log(1 - x)."""
    x, y = math.exp(log_x), math.exp(log_y)
    front = math.exp(a * log_x + b * log_y - _log_beta(a, b))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _continued_fraction(a, b, x) / a
    return 1.0 - front * _continued_fraction(b, a, y) / b


def _log_beta(a: float, b: float) -> float:
    """log B(a, b), by a Stirling series when the larger argument is large."""
    small, large = min(a, b), max(a, b)
    if large < _STIRLING_FROM:
        return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    # log Γ(large) - log Γ(large + small) without subtracting two huge lgamma values.
    ratio = (
        -(large - 0.5) * math.log1p(small / large)
        - small * math.log(large + small)
        + small
        + _stirling_correction(large)
        - _stirling_correction(large + small)
    )
    return math.lgamma(small) + ratio


def _stirling_correction(z: float) -> float:
    """log Γ(z) - ((z - 1/2) log z - z + log(2π)/2), below 1e-21 off for z >= 100."""
    z2 = z * z
    return (1 / 12 - (1 / 360 - (1 / 1260 - 1 / (1680 * z2)) / z2) / z2) / z


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of I_x(a, b), by the modified Lentz method (NR `betacf`)."""
    c, d = 1.0, 1.0 / _nonzero(1.0 - (a + b) * x / (a + 1.0))
    fraction = d
    for m in range(1, _MAX_ITERATIONS + 1):
        even = m * (b - m) * x / ((a - 1.0 + 2 * m) * (a + 2 * m))
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 1.0 + 2 * m))
        c, d, step = _lentz(even, c, d)
        fraction *= step
        c, d, step = _lentz(odd, c, d)
        fraction *= step
        if abs(step - 1.0) < _EPSILON:
            return fraction
    raise ArithmeticError(f"incomplete beta: no convergence for a={a}, b={b}, x={x}")


def _lentz(coefficient: float, c: float, d: float) -> tuple[float, float, float]:
    """One modified Lentz step: the new c and d, and the factor they multiply the value by."""
    d = 1.0 / _nonzero(1.0 + coefficient * d)
    c = _nonzero(1.0 + coefficient / c)
    return c, d, c * d


def _nonzero(value: float) -> float:
    return value if abs(value) >= _TINY else _TINY
