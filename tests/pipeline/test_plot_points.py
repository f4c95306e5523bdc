"""What the whole run's report carries for the HTML plots: skew per instance, α-β points."""

from __future__ import annotations

import math

import pytest
from commscope.model.schema import COLLECTIVE_TYPES, AlphaBeta, CommOp, SkewInstances
from commscope.pipeline import crossrank, skew
from commscope.pipeline.stats import thin_indices
from crossrank_builder import results


def op(start: int, dur: int, size: int, seq: int, kind: str = "AllReduce") -> CommOp:
    return CommOp(kind, start, dur, size, 2, True, "0", seq)


def two_ranks() -> dict[int, list[CommOp]]:
    """Same clocks (both end together). Instance 0: r0 starts 0, r1 300 (skew 300 ns, r1 last);
    instance 1: r0 2000, r1 2000 (skew 0, no last arriver); instance 2: r0 4100, r1 4000
    (skew 100, r0 last). Sizes 1000, 4000, 16000 B."""
    return {
        0: [op(0, 1000, 1000, 0), op(2000, 1000, 4000, 1), op(4100, 900, 16000, 2)],
        1: [op(300, 700, 1000, 0), op(2000, 1000, 4000, 1), op(4000, 1000, 16000, 2)],
    }


def window(per_rank: dict[int, list[CommOp]]) -> crossrank.CrossRank:
    infos = {rank: crossrank.RankInfo() for rank in per_rank}
    return crossrank.window(results(per_rank), infos)


def test_thin_indices_are_evenly_spaced_in_order_and_all_when_few() -> None:
    assert thin_indices(10, 4) == [0, 2, 5, 7]  # i * 10 // 4 for i = 0..3
    assert list(thin_indices(3, 4)) == [0, 1, 2]


def test_skew_instances_give_each_instance_its_skew_and_last_arriver_in_order() -> None:
    found = skew.section(window(two_ranks()).arrivals, plot_points=10)
    assert found.instances == {
        "AllReduce": SkewInstances(skew_s=[300 * 1e-9, 0.0, 100 * 1e-9], last=[1, None, 0], total=3)
    }


def test_skew_instances_pool_windows_in_order_and_are_thinned_to_the_cap() -> None:
    one = window(two_ranks())
    pooled = crossrank.pooled([one, one])  # instances 0, 1, 2, 0, 1, 2
    found = skew.section(pooled.arrivals, plot_points=4).instances["AllReduce"]
    # kept indices 0, 1, 3, 4 (i * 6 // 4)
    assert found == SkewInstances(
        skew_s=[300 * 1e-9, 0.0, 300 * 1e-9, 0.0], last=[1, None, 1, None], total=6
    )


def test_a_window_section_carries_no_plot_points() -> None:
    assert skew.section(window(two_ranks()).arrivals).instances == {}


def test_alpha_beta_points_are_the_fit_points_with_the_bus_factor() -> None:
    cross = window(two_ranks())
    table = crossrank.with_points(crossrank.alpha_beta(cross, None), cross)
    fit = table["0"]["AllReduce"]
    # F = 2(n-1)/n = 1 for n = 2; wait-free time = each instance's shortest member duration
    assert fit.bus_factor == 1.0 and fit.points_total == 3
    assert fit.points == [(1000.0, 700 * 1e-9), (4000.0, 1000 * 1e-9), (16000.0, 900 * 1e-9)]


def test_points_are_kept_on_each_types_largest_fit_for_the_largest_types() -> None:
    cross = window(two_ranks())
    kinds = COLLECTIVE_TYPES[: crossrank.PLOT_FITS + 1]
    # bus bytes 10 x (type's index) + group: group "2" is each type's largest, type 0 the least
    table = {
        str(g): {
            k: AlphaBeta(instances=1, sizes=1, bus_bytes=10.0 * i + g) for i, k in enumerate(kinds)
        }
        for g in range(3)
    }
    some = cross.points[("0", "AllReduce")]
    cross.points.update({(g, k): some for g in table for k in kinds})
    kept = crossrank.with_points(table, cross)
    plotted = [(g, k) for g, fits in kept.items() for k, fit in fits.items() if fit.points]
    assert sorted(plotted) == [("2", k) for k in sorted(kinds[1:])]


@pytest.mark.parametrize(("sizes", "expected"), [((2, 2), 0.5), ((2, 4), math.nan)])
def test_bus_factor_is_nan_when_the_group_sizes_differ(  # AllGather: F = (n-1)/n
    sizes: tuple[int, int], expected: float
) -> None:
    per_rank = {r: [CommOp("AllGather", 0, 10, 64, n, True, "0", i) for i, n in enumerate(sizes)]
                for r in (0, 1)}  # fmt: skip
    factor = window(per_rank).factors[("0", "AllGather")]
    assert factor == expected or (math.isnan(factor) and math.isnan(expected))
