"""The whole-run bandwidth sketch: buckets, exact merge, quantiles within 1 % of the exact ones."""

from __future__ import annotations

import math
from collections import Counter

import msgspec
import pytest
from commscope.model.schema import CommOp, OpTally, RankResult, RunTally, ShedTally, Sketch
from commscope.pipeline import sketch
from commscope.pipeline.accumulate import (
    count_op,
    merge_results,
    pooled_ops,
    shed_samples,
)
from commscope.pipeline.sections import tally_stats
from commscope.pipeline.stats import quantile, sample_values, summarize
from hypothesis import given
from hypothesis import strategies as st

GAMMA = 1.01 / 0.99
ROUNDING = 1e-9  # float rounding on top of the 1 % bound (log, pow, interpolation)

bandwidths = st.floats(min_value=1e-3, max_value=1e15, allow_nan=False, allow_infinity=False)
boundaries = st.integers(-300, 300).map(lambda k: GAMMA**k)  # on or next to bucket edges
samples = st.lists(st.one_of(bandwidths, st.just(0.0), boundaries), min_size=1, max_size=200)
signed = st.lists(st.one_of(bandwidths, boundaries, st.just(0.0), bandwidths.map(lambda v: -v)))


def test_a_bucket_holds_the_values_above_the_previous_power_of_gamma() -> None:
    # γ^34 ≈ 1.9807 < 2 <= γ^35 ≈ 2.0207, and 1 = γ^0 is the top of bucket 0
    assert sketch.bucket(2.0) == 35
    assert sketch.bucket(1.0) == 0
    assert sketch.bucket(1.0 / GAMMA**3 * 1.000001) == -2  # just above γ^-3
    assert sketch.representative(0) == pytest.approx(2 / (GAMMA + 1))  # 0.99: 1 % below 1


def test_the_sketch_of_a_small_sample_by_hand() -> None:
    found = sketch.sketch_of([1.0, 2.0, 4.0, 8.0, 0.0, -2.0])
    assert found.count == 6 and found.zeros == 1
    assert found.min == -2.0 and found.max == 8.0
    assert found.sum_parts == [13.0]  # 1 + 2 + 4 + 8 + 0 - 2
    # ln 4 / ln γ ≈ 69.31 → 70; ln 8 / ln γ ≈ 103.97 → 104
    assert found.positive == {0: 1, 35: 1, 70: 1, 104: 1} and found.negative == {35: 1}


def test_the_median_interpolates_between_the_bracketing_buckets() -> None:
    # n = 4: position 0.5 x 3 = 1.5, halfway between rank 1 (2 → bucket 35) and rank 2 (4 → 70)
    found = sketch.sketch_of([1.0, 2.0, 4.0, 8.0])
    expected = (sketch.representative(35) + sketch.representative(70)) / 2
    assert sketch.quantile(found, 0.5) == pytest.approx(expected, rel=1e-15)
    assert abs(expected - 3.0) / 3.0 <= 0.01  # the exact median is 3


def test_the_first_and_last_ranks_are_the_exact_min_and_max() -> None:
    found = sketch.sketch_of([3.0, 7.0, 5.0])
    assert sketch.quantile(found, 0.0) == 3.0 and sketch.quantile(found, 1.0) == 7.0
    assert sketch.quantile(sketch.sketch_of([42.0] * 9), 0.95) == 42.0  # one repeated value


def test_zeros_are_kept_exactly() -> None:
    found = sketch.sketch_of([0.0, 0.0, 0.0, 5.0])
    assert sketch.quantile(found, 0.5) == 0.0  # ranks 1 and 2 are zeros


def test_the_sum_is_exact_where_a_float_sum_is_not() -> None:
    values = [1e16, 1.0, -1e16, 1.0]  # a running float sum loses the first 1.0
    found = sketch.sketch_of(values)
    assert math.fsum(found.sum_parts) == 2.0
    halves = sketch.merge(sketch.sketch_of(values[:1]), sketch.sketch_of(values[1:]))
    assert halves.sum_parts == found.sum_parts


def test_an_empty_sketch_summarises_to_nothing() -> None:
    assert sketch.summary(Sketch()) == summarize([])
    with pytest.raises(ValueError, match="empty"):
        sketch.quantile(Sketch(), 0.5)


def test_the_sketch_round_trips_through_msgpack() -> None:
    found = sketch.sketch_of([1.5, 0.0, -3.0, 1e12])
    assert msgspec.msgpack.decode(msgspec.msgpack.encode(found), type=Sketch) == found


@given(samples, st.floats(min_value=0.0, max_value=1.0))
def test_a_quantile_is_within_one_percent_of_the_exact_one(values: list[float], q: float) -> None:
    exact = quantile(sorted(values), q)
    estimate = sketch.quantile(sketch.sketch_of(values), q)
    assert abs(estimate - exact) <= sketch.ALPHA * exact * (1 + ROUNDING)


@given(samples)
def test_the_summary_keeps_count_mean_min_and_max_exact(values: list[float]) -> None:
    exact, sketched = summarize(values), sketch.summary(sketch.sketch_of(values))
    assert (sketched.mean, sketched.min, sketched.max) == (exact.mean, exact.min, exact.max)
    assert sketched.relative_error == 0.01 and exact.relative_error is None
    for estimate, truth in ((sketched.median, exact.median), (sketched.p95, exact.p95)):
        assert estimate is not None and truth is not None
        assert abs(estimate - truth) <= 0.01 * truth * (1 + ROUNDING)


@given(signed, signed, signed)
def test_merge_is_the_sketch_of_the_union_in_any_order(
    a: list[float], b: list[float], c: list[float]
) -> None:
    sa, sb, sc = (sketch.sketch_of(x) for x in (a, b, c))
    union = sketch.sketch_of([*a, *b, *c])
    assert sketch.merge(sketch.merge(sa, sb), sc) == union
    assert sketch.merge(sa, sketch.merge(sb, sc)) == union
    assert sketch.merge(sketch.merge(sc, sb), sa) == union
    assert sketch.merge(sa, sb) == sketch.merge(sb, sa)
    assert sketch.merge(sa, Sketch()) == sa
    assert union.positive == dict(Counter(sketch.bucket(v) for v in [*a, *b, *c] if v > 0))


@given(st.lists(st.one_of(bandwidths, boundaries), min_size=1, max_size=3 * sketch.FEW))
def test_each_value_is_counted_in_its_bucket_in_ascending_order(values: list[float]) -> None:
    """Few values or many (bucket by bucket, `sketch.FEW`): the counts by `bucket`, ascending."""
    expected = sorted(Counter(sketch.bucket(v) for v in values).items())
    assert list(sketch.sketch_of(values).positive.items()) == expected


@given(st.lists(signed, max_size=6))
def test_merge_all_is_merge_folded_over_the_sketches(samples: list[list[float]]) -> None:
    """Field for field, the buckets in the same order (a report's dicts keep it)."""
    sketches = [sketch.sketch_of(x) for x in samples]
    folded = Sketch()
    for one in sketches:
        folded = sketch.merge(folded, one)
    found = sketch.merge_all(sketches)
    assert found == folded
    assert list(found.positive) == list(folded.positive)
    assert list(found.negative) == list(folded.negative)


def test_pooled_counts_and_sums_alone_read_no_sample() -> None:
    """Two windows of 4 kB AllReduces (2 and 1 of them, F = 1.5 each): 3 ops, 12 kB, bus parts
    1.5 x 12 kB over n = 4 (numerator 6 = 2 x (4 - 1)); sketched or not, no sample is pooled."""
    windows = [_window(1_000, 2_000), _window(4_000)]
    windows[1].ops = {k: shed_samples(t) for k, t in windows[1].ops.items()}
    pooled = pooled_ops(windows, samples=False)["AllReduce"]
    assert type(pooled) is OpTally and not pooled.algbw_Bps and not pooled.busbw_Bps
    assert (pooled.count, pooled.message_bytes, pooled.bus_parts) == (3, 12_000, {4: 72_000})
    assert pooled_ops(windows)["AllReduce"].bus_parts == pooled.bus_parts


def _window(*durations_ns: int) -> RankResult:
    """One rank's window of 4 kB AllReduces (n = 4, F = 1.5) of these durations."""
    tally = OpTally()
    for dur in durations_ns:
        count_op(tally, CommOp("AllReduce", 0, dur, 4_000, 4, True))
    return RankResult(evidence_text="gpu kernels", ops={"AllReduce": tally})


def exact_values(windows: list[RankResult]) -> list[float]:
    return [x for w in windows for x in sample_values(w.ops["AllReduce"].algbw_Bps)]


def test_one_window_keeps_its_exact_samples() -> None:
    window = _window(1_000, 2_000)
    stats = tally_stats(merge_results([window]).ops["AllReduce"])
    assert stats == tally_stats(window.ops["AllReduce"]) and stats.algbw_Bps.relative_error is None
    assert stats.algbw_Bps.median == pytest.approx(3e9, rel=1e-15)  # (4 + 2) / 2 GB/s, exact


def test_several_windows_keep_a_sketch_instead_of_their_samples() -> None:
    # algbw = 4 kB / 1, 2, 4, 8 µs = 4, 2, 1, 0.5 GB/s; exact median (1 + 2) / 2 = 1.5 GB/s
    windows = [_window(1_000, 2_000), _window(4_000), _window(8_000)]
    tally = merge_results(windows).ops["AllReduce"]
    exact = summarize(exact_values(windows))
    assert tally.algbw_Bps == bytearray() and tally.busbw_Bps == bytearray()
    assert isinstance(tally, RunTally) and tally.algbw_sketch.count == 4
    assert tally.algbw_sketch == sketch.sketch_of(exact_values(windows))
    stats = tally_stats(tally)
    assert stats.count == 4 and stats.algbw_Bps.relative_error == 0.01
    assert (stats.algbw_Bps.mean, stats.algbw_Bps.min, stats.algbw_Bps.max) == (
        exact.mean,
        exact.min,
        exact.max,
    )
    assert stats.algbw_Bps.mean == pytest.approx(7.5e9 / 4, rel=1e-15)
    assert stats.busbw_Bps.max == pytest.approx(6e9, rel=1e-15)  # F = 2 x 3 / 4
    assert stats.algbw_Bps.median == pytest.approx(1.5e9, rel=0.01)
    assert stats.algbw_Bps.median != 1.5e9  # it is the sketch's figure


def test_the_stored_window_result_is_unchanged_by_the_run_merge() -> None:
    window = _window(1_000)
    before = msgspec.msgpack.encode(window)
    merge_results([window, _window(2_000)])
    assert msgspec.msgpack.encode(window) == before  # its samples are still there, as stored
    assert type(window.ops["AllReduce"]) is OpTally


def test_a_sketched_tally_never_pools_into_samples_silently() -> None:
    pooled = pooled_ops(
        [
            RankResult(evidence_text="gpu kernels", ops={"AllReduce": OpTally()}),
            RankResult(evidence_text="gpu kernels", ops={"AllReduce": RunTally()}),
        ]
    )
    assert isinstance(pooled["AllReduce"], RunTally)  # one sketched part: the pool is sketched


# ---------------------------------------------------------------- a window's samples shed


def test_a_packed_sketch_is_the_sketch() -> None:
    found = sketch.sketch_of([-2.0, 0.0, 0.1, 0.3, 1e12])
    assert sketch.unpack(sketch.pack(found)) == found and sketch.unpack(b"") == Sketch()
    # 1,000 values in 200 buckets (each a 1-3 byte index and a 1-byte count in msgpack), and
    # the scalars and field names (under 200 bytes): not 8 bytes a value
    spread = sketch.sketch_of([1e9 * sketch.GAMMA ** (i % 200 + 0.5) for i in range(1_000)])
    assert len(spread.positive) == 200 and len(sketch.pack(spread)) < 200 * 4 + 200


def test_a_shed_tally_keeps_the_sums_and_the_sketches_of_its_samples() -> None:
    tally = _window(1_000, 2_000, 4_000).ops["AllReduce"]
    shed = shed_samples(tally)
    assert isinstance(shed, ShedTally) and shed.algbw_Bps == shed.busbw_Bps == bytearray()
    sums = ("count", "sized_count", "message_bytes", "bus_parts", "time_ns", "group_sources")
    assert [getattr(shed, f) for f in sums] == [getattr(tally, f) for f in sums]
    assert sketch.unpack(shed.algbw_packed) == sketch.sketch_of(sample_values(tally.algbw_Bps))
    assert sketch.unpack(shed.busbw_packed) == sketch.sketch_of(sample_values(tally.busbw_Bps))
    assert shed_samples(shed) is shed


def test_a_shed_window_merges_over_windows_as_its_samples_would() -> None:
    windows = [_window(1_000, 2_000), _window(4_000), _window(8_000)]
    shed = [RankResult(evidence_text=w.evidence_text,
                       ops={"AllReduce": shed_samples(w.ops["AllReduce"])})
            for w in windows]  # fmt: skip
    expected = merge_results(windows)
    for mixed in ([shed[0], windows[1], windows[2]], shed, [windows[0], shed[1], shed[2]]):
        assert merge_results(mixed) == expected


def test_exact_figures_are_never_asked_of_a_shed_tally() -> None:
    """A window's own figures need its samples: a shed tally cannot give them (a defect of
    the caller, which must read the samples back), never a silently empty summary."""
    with pytest.raises(TypeError, match="shed"):
        tally_stats(shed_samples(_window(1_000).ops["AllReduce"]))
