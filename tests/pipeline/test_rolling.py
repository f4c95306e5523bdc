"""RollingBandwidth by hand-worked examples and against a brute-force oracle of raw values."""

from __future__ import annotations

import ast
import math
import random
from pathlib import Path

import pytest
from commscope.pipeline.rolling import (
    BUCKETS,
    GAMMA,
    OVERFLOW,
    TOP,
    UNDERFLOW,
    UPPER,
    RollingBandwidth,
    bucket,
    representative,
)
from hypothesis import given, settings
from hypothesis import strategies as st

ROLLING = Path(__file__).resolve().parents[2] / "pipeline" / "rolling.py"


# ------------------------------------------------------------------ buckets


def test_buckets_cover_one_to_1e15_with_underflow_and_overflow() -> None:
    # log(1e15) / log(2**(1/16)) = 16 * log2(1e15) = 797.26..., so 798 buckets 0..797
    assert TOP == 798
    assert math.isclose(UPPER, 2.0 ** (798 / 16), rel_tol=1e-12)
    assert UPPER > 1e15
    assert BUCKETS == 800
    assert (bucket(1.0), bucket(1e15), bucket(UPPER)) == (0, 797, OVERFLOW)
    assert (bucket(0.999), bucket(5e-324), bucket(1e300)) == (UNDERFLOW, UNDERFLOW, OVERFLOW)


def test_bucket_of_2e9_by_hand() -> None:
    # 16 * log2(2e9) = 16 * 30.897 = 494.35 -> 494, midpoint 2**(494.5 / 16) ~ 2.0124e9
    assert bucket(2e9) == 494
    assert representative(494) == pytest.approx(2.0124e9, rel=1e-4)
    assert 2e9 / GAMMA**0.5 <= representative(494) <= 2e9 * GAMMA**0.5


# ------------------------------------------------------------------ hand-worked quantiles


def four() -> RollingBandwidth:
    rolling = RollingBandwidth(horizon_s=60.0)
    rolling.add("AllReduce", [3e9, 1e9, 4e9, 2e9], now_s=0.0)
    return rolling


def test_median_of_four_values() -> None:
    # exact: q * (n - 1) = 1.5, halfway between 2e9 and 3e9 = 2.5e9; estimate halfway between
    # the midpoints of their buckets 494 and 503
    estimate = four().quantile("AllReduce", 0.5, now_s=0.0)
    assert estimate == pytest.approx(0.5 * (GAMMA**494.5 + GAMMA**503.5), rel=1e-12)
    assert estimate is not None
    assert 2.5e9 / GAMMA <= estimate <= 2.5e9 * GAMMA


def test_p95_of_four_values() -> None:
    # exact: 0.95 * 3 = 2.85 -> 3e9 + 0.85 * (4e9 - 3e9) = 3.85e9; rank 3 is the maximum, kept
    # exactly, rank 2 stands for the midpoint of bucket 503
    estimate = four().quantile("AllReduce", 0.95, now_s=0.0)
    assert estimate == pytest.approx(GAMMA**503.5 + 0.85 * (4e9 - GAMMA**503.5), rel=1e-12)
    assert estimate is not None
    assert 3.85e9 / GAMMA <= estimate <= 3.85e9 * GAMMA


def test_p25_of_four_values() -> None:
    # exact: 0.25 * 3 = 0.75 -> 1e9 + 0.75 * 1e9 = 1.75e9; rank 0 is the minimum, kept exactly
    estimate = four().quantile("AllReduce", 0.25, now_s=0.0)
    assert estimate == pytest.approx(1e9 + 0.75 * (GAMMA**494.5 - 1e9), rel=1e-12)


def test_extreme_quantiles_are_the_exact_minimum_and_maximum() -> None:
    rolling = four()
    assert rolling.quantile("AllReduce", 0.0, now_s=0.0) == 1e9
    assert rolling.quantile("AllReduce", 1.0, now_s=0.0) == 4e9


def test_count_and_mean_are_exact() -> None:
    rolling = four()
    assert rolling.count("AllReduce", now_s=0.0) == 4
    assert rolling.mean("AllReduce", now_s=0.0) == 2.5e9


def test_one_repeated_value_gives_that_value() -> None:
    rolling = RollingBandwidth()
    rolling.add("AllGather", [7.3e10] * 100, now_s=5.0)
    for q in (0.0, 0.1, 0.5, 0.95, 1.0):
        assert rolling.quantile("AllGather", q, now_s=5.0) == 7.3e10


def test_out_of_range_values_are_kept_and_clamped_to_what_was_seen() -> None:
    rolling = RollingBandwidth()
    rolling.add("Send", [0.5, 0.25, 2e15, 4e15], now_s=0.0)
    assert rolling.count("Send", now_s=0.0) == 4
    assert rolling.mean("Send", now_s=0.0) == (0.5 + 0.25 + 2e15 + 4e15) / 4
    assert rolling.quantile("Send", 0.0, now_s=0.0) == 0.25
    assert rolling.quantile("Send", 1.0, now_s=0.0) == 4e15
    # rank 1 (0.5) is in the underflow bucket and stands for the minimum, rank 2 (2e15) is in
    # the overflow bucket and stands for the maximum: 0.25 + 0.5 * (4e15 - 0.25)
    assert rolling.quantile("Send", 0.5, now_s=0.0) == 0.25 + 0.5 * (4e15 - 0.25)


def test_empty_key_has_no_statistics() -> None:
    rolling = RollingBandwidth()
    assert rolling.quantile("AllReduce", 0.5, now_s=0.0) is None
    assert rolling.mean("AllReduce", now_s=0.0) is None
    assert rolling.count("AllReduce", now_s=0.0) == 0
    assert rolling.keys() == []


# ------------------------------------------------------------------ configuration


def test_default_slot_is_a_sixtieth_of_the_horizon() -> None:
    rolling = RollingBandwidth()
    assert (rolling.horizon_s, rolling.slot_s, rolling.max_slots) == (600.0, 10.0, 61)


def test_slot_not_dividing_the_horizon_rounds_the_ring_up() -> None:
    # ceil(10 / 3) + 1 = 5
    assert RollingBandwidth(horizon_s=10.0, slot_s=3.0).max_slots == 5


@pytest.mark.parametrize(
    ("horizon_s", "slot_s"),
    [(0.0, None), (-1.0, None), (math.nan, None), (math.inf, None), (60.0, 0.0), (60.0, -1.0),
     (60.0, math.nan), (60.0, math.inf), (1e6, 1e-3)],
)  # fmt: skip
def test_bad_configuration_raises(horizon_s: float, slot_s: float | None) -> None:
    with pytest.raises(ValueError, match=r"slot_s|horizon_s"):
        RollingBandwidth(horizon_s, slot_s)


@pytest.mark.parametrize("q", [-0.01, 1.01, math.nan])
def test_quantile_outside_zero_one_raises(q: float) -> None:
    with pytest.raises(ValueError, match="q must lie"):
        four().quantile("AllReduce", q, now_s=0.0)


# ------------------------------------------------------------------ horizon and slots


def test_values_expire_one_slot_after_the_horizon() -> None:
    # horizon 60 s in 1 s slots: a value added at 0.5 s lies in slot [0, 1), which overlaps
    # (now - 60, now] until now reaches 61
    rolling = RollingBandwidth(horizon_s=60.0, slot_s=1.0)
    rolling.add("AllReduce", [1e9], now_s=0.5)
    assert rolling.count("AllReduce", now_s=60.0) == 1
    assert rolling.count("AllReduce", now_s=60.999) == 1
    assert rolling.count("AllReduce", now_s=61.0) == 0
    assert rolling.quantile("AllReduce", 0.5, now_s=61.0) is None
    assert rolling.mean("AllReduce", now_s=61.0) is None
    assert rolling.keys() == []
    assert rolling.footprint() == (0, 0)


def test_older_slots_expire_first() -> None:
    rolling = RollingBandwidth(horizon_s=60.0, slot_s=1.0)
    rolling.add("AllReduce", [1e9], now_s=0.0)
    rolling.add("AllReduce", [3e9, 5e9], now_s=30.0)
    assert rolling.mean("AllReduce", now_s=60.0) == 3e9
    assert rolling.mean("AllReduce", now_s=61.0) == 4e9
    assert rolling.quantile("AllReduce", 0.0, now_s=61.0) == 3e9
    assert rolling.count("AllReduce", now_s=91.0) == 0


def test_keys_are_independent() -> None:
    rolling = RollingBandwidth(horizon_s=60.0, slot_s=1.0)
    rolling.add("AllReduce", [1e9, 2e9], now_s=0.0)
    rolling.add("AllGather", [8e10], now_s=30.0)
    assert rolling.keys() == ["AllGather", "AllReduce"]
    assert (rolling.count("AllReduce", 30.0), rolling.count("AllGather", 30.0)) == (2, 1)
    assert rolling.quantile("AllGather", 0.5, now_s=30.0) == 8e10
    assert rolling.mean("AllReduce", now_s=30.0) == 1.5e9
    assert rolling.count("AllReduce", now_s=61.0) == 0
    assert rolling.keys() == ["AllGather"]
    assert rolling.count("AllGather", now_s=61.0) == 1


def test_unusable_values_are_rejected_not_binned() -> None:
    rolling = RollingBandwidth()
    rolling.add("AllReduce", [math.nan, math.inf, -math.inf, 0.0, -5.0, 1e9], now_s=0.0)
    rolling.add("AllGather", [0.0], now_s=0.0)
    assert rolling.rejected == 6
    assert rolling.count("AllReduce", now_s=0.0) == 1
    assert rolling.quantile("AllReduce", 0.5, now_s=0.0) == 1e9
    assert rolling.keys() == ["AllReduce"]


def test_values_before_any_known_time_are_rejected() -> None:
    rolling = RollingBandwidth()
    rolling.add("AllReduce", [1e9, 2e9], now_s=math.nan)
    assert rolling.rejected == 2
    assert rolling.keys() == []


def test_time_going_backwards_means_the_latest_time_seen() -> None:
    rolling = RollingBandwidth(horizon_s=60.0, slot_s=1.0)
    rolling.add("AllReduce", [1e9], now_s=100.0)
    rolling.add("AllReduce", [3e9], now_s=50.0)  # stamped 100.0, in slot [100, 101)
    assert rolling.count("AllReduce", now_s=0.0) == 2
    assert rolling.mean("AllReduce", now_s=-1e9) == 2e9
    assert rolling.count("AllReduce", now_s=160.5) == 2
    rolling.add("AllReduce", [5e9], now_s=120.0)
    assert rolling.count("AllReduce", now_s=161.0) == 1
    assert rolling.mean("AllReduce", now_s=100.0) == 5e9  # still 161.0


def test_non_finite_time_means_the_latest_time_seen() -> None:
    rolling = RollingBandwidth(horizon_s=60.0, slot_s=1.0)
    rolling.add("AllReduce", [1e9], now_s=10.0)
    rolling.add("AllReduce", [2e9], now_s=math.inf)
    rolling.add("AllReduce", [3e9], now_s=math.nan)
    assert rolling.count("AllReduce", now_s=-math.inf) == 3
    assert rolling.count("AllReduce", now_s=71.0) == 0


def test_memory_is_bounded_over_a_long_run() -> None:
    # 1e6 values over 100 horizons, spread over every bucket from underflow to overflow
    rolling = RollingBandwidth(horizon_s=60.0, slot_s=1.0)
    keys = ["AllReduce", "AllGather", "ReduceScatter"]
    rng = random.Random(20240611)
    largest = 0
    for step in range(2000):
        values = [10 ** rng.uniform(-2.0, 17.0) for _ in range(500)]
        rolling.add(keys[step % 3], values, now_s=step * 3.0 + rng.random())
        slots, buckets = rolling.footprint()
        assert slots <= len(keys) * rolling.max_slots
        assert buckets <= slots * BUCKETS
        largest = max(largest, buckets)
    # the clock is 5997 + r (r < 1): slots from floor(5937 + r) = 5937 on are live, which are
    # those of steps 1979..1999 (3 * 1979 = 5937): 21 calls of 500 values
    assert sum(rolling.count(key, now_s=0.0) for key in keys) == 21 * 500
    assert rolling.count("AllReduce", now_s=5997.0 + 61.0) == 0
    assert rolling.footprint() == (0, 0)
    assert largest <= len(keys) * rolling.max_slots * BUCKETS


def test_module_is_pure() -> None:
    tree = ast.parse(ROLLING.read_text())
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
        )
        if name
    }
    assert imported == {"__future__", "math", "bisect", "collections", "dataclasses", "itertools",
                        "typing"}  # fmt: skip


# ------------------------------------------------------------------ brute-force oracle


class Oracle:
    """Every (time, key, value) kept raw; the same clock and slot rule, nothing else shared."""

    def __init__(self, horizon_s: float, slot_s: float) -> None:
        self.horizon_s, self.slot_s = horizon_s, slot_s
        self.now_s = -math.inf
        self.events: list[tuple[float, str, float]] = []

    def advance(self, now_s: float) -> None:
        if math.isfinite(now_s) and now_s > self.now_s:
            self.now_s = now_s

    def add(self, key: str, values: list[float], now_s: float) -> None:
        self.advance(now_s)
        self.events.extend((self.now_s, key, v) for v in values)

    def values(self, key: str, now_s: float) -> list[float]:
        """Sorted values of `key` whose slot overlaps (now - horizon, now], newest slots only."""
        self.advance(now_s)
        now, h, s = self.now_s, self.horizon_s, self.slot_s
        first = max(math.floor((now - h) / s), math.floor(now / s) - math.ceil(h / s))
        return sorted(v for t, k, v in self.events if k == key and math.floor(t / s) >= first)


def exact_quantile(ordered: list[float], q: float) -> tuple[float, float, float]:
    """(lo, hi, interpolated): numpy's default quantile of an ascending sample, by hand."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    lo, hi = ordered[low], ordered[min(low + 1, len(ordered) - 1)]
    return lo, hi, lo + (hi - lo) * (position - low)


in_range = st.floats(min_value=1.0, max_value=1e15)
repeated = st.sampled_from([1.0, 1e3, 2e9, 2e9 * GAMMA, 1e15])
calls = st.lists(
    st.tuples(
        st.sampled_from(["AllReduce", "AllGather"]),
        st.lists(st.one_of(in_range, repeated), max_size=12),
        st.floats(min_value=-50.0, max_value=150.0),  # time step; negative goes backwards
    ),
    min_size=1,
    max_size=25,
)
quantiles = st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=5)
horizons = st.floats(min_value=1.0, max_value=400.0)
divisors = st.one_of(st.none(), st.floats(min_value=0.3, max_value=90.0))


def replay(
    horizon_s: float, divisor: float | None, steps: list[tuple[str, list[float], float]]
) -> tuple[RollingBandwidth, Oracle, float]:
    slot_s = None if divisor is None else horizon_s / divisor
    rolling = RollingBandwidth(horizon_s, slot_s)
    oracle = Oracle(horizon_s, rolling.slot_s)
    now = 1000.0
    for key, values, step in steps:
        now += step
        rolling.add(key, values, now)
        oracle.add(key, values, now)
        assert rolling.footprint().slots <= 2 * rolling.max_slots
    return rolling, oracle, now


@settings(max_examples=300, deadline=None)
@given(horizons, divisors, calls, st.floats(min_value=-20.0, max_value=500.0), quantiles)
def test_agrees_with_oracle(
    horizon_s: float,
    divisor: float | None,
    steps: list[tuple[str, list[float], float]],
    later: float,
    qs: list[float],
) -> None:
    rolling, oracle, now = replay(horizon_s, divisor, steps)
    for key in ("AllReduce", "AllGather"):
        ordered = oracle.values(key, now + later)
        assert rolling.count(key, now + later) == len(ordered)
        mean = rolling.mean(key, now + later)
        for q in qs:
            estimate = rolling.quantile(key, q, now + later)
            if not ordered:
                assert (estimate, mean) == (None, None)
                continue
            assert mean == pytest.approx(math.fsum(ordered) / len(ordered), rel=1e-9)
            lo, hi, exact = exact_quantile(ordered, q)
            assert estimate is not None
            assert lo / GAMMA <= estimate <= hi * GAMMA
            assert exact / GAMMA <= estimate <= exact * GAMMA
            assert ordered[0] <= estimate <= ordered[-1]
    assert rolling.keys() == sorted(
        {k for k in ("AllReduce", "AllGather") if oracle.values(k, now + later)}
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(min_value=1e-3, max_value=1e300), min_size=1, max_size=30),
    st.floats(min_value=0.0, max_value=1.0),
)
def test_any_positive_values_stay_within_what_was_seen(values: list[float], q: float) -> None:
    rolling = RollingBandwidth()
    rolling.add("AllToAll", values, now_s=0.0)
    estimate = rolling.quantile("AllToAll", q, now_s=0.0)
    assert estimate is not None
    assert min(values) <= estimate <= max(values)
    assert rolling.quantile("AllToAll", 0.0, now_s=0.0) == min(values)
    assert rolling.quantile("AllToAll", 1.0, now_s=0.0) == max(values)


@settings(max_examples=200, deadline=None)
@given(st.one_of(in_range, repeated), st.integers(1, 50), st.floats(min_value=0.0, max_value=1.0))
def test_a_repeated_value_is_returned_exactly(value: float, times: int, q: float) -> None:
    rolling = RollingBandwidth()
    rolling.add("Broadcast", [value] * times, now_s=0.0)
    assert rolling.quantile("Broadcast", q, now_s=0.0) == value


@settings(max_examples=200, deadline=None)
@given(horizons, divisors, st.lists(st.floats(min_value=-10.0, max_value=1e4), max_size=60))
def test_ring_never_exceeds_its_bound(
    horizon_s: float, divisor: float | None, times: list[float]
) -> None:
    rolling = RollingBandwidth(horizon_s, None if divisor is None else horizon_s / divisor)
    for now_s in sorted(times):
        rolling.add("AllReduce", [1e9], now_s)
        assert rolling.footprint().slots <= rolling.max_slots
