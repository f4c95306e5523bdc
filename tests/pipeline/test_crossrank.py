"""Cross-rank analysis: matching, clock offsets, arrival skew, slow ranks, α-β, stragglers."""

from __future__ import annotations

import itertools
import math

import pytest
from commscope.model.schema import CommOp, RankResult
from commscope.pipeline import crossrank
from commscope.pipeline.matching import Instance, match
from commscope.pipeline.skew import Arrival, arrival, skew, stragglers, wait_tail
from commscope.pipeline.skew import section as skew_section
from crossrank_builder import Scenario, calls, results
from hypothesis import given, settings
from hypothesis import strategies as st


def op(kind: str, start: int, dur: int, *, size: int | None = 4096, seq: int | None = None,
       group: str | None = "0") -> CommOp:  # fmt: skip
    return CommOp(kind, start, dur, size, 3, True, group, seq)


def infos(per_rank: dict[int, list[CommOp]], base: dict[int, int] | None = None) -> dict:
    return {r: crossrank.RankInfo(base_ns=(base or {}).get(r, 0)) for r in per_rank}


def window(
    per_rank: dict[int, list[CommOp]], base: dict[int, int] | None = None
) -> crossrank.CrossRank:
    return crossrank.window(results(per_rank), infos(per_rank, base))


def arrivals(per_rank: dict[int, list[CommOp]]) -> list[Arrival]:
    return crossrank.aligned(results(per_rank), infos(per_rank))[2]


def hand_built() -> dict[int, list[CommOp]]:
    """Clocks: rank 1 reads +1000 ns, rank 2 -500 ns. True arrivals (end):
    instance 0: r0 0, r1 100, r2 400 (all end at 1000); instance 1: r0 5000, r1 5300,
    r2 5100 (end 6000). Recorded = true + offset, durations = end - arrival."""
    return {
        0: [op("AllReduce", 0, 1000, seq=0), op("AllReduce", 5000, 1000, seq=1)],
        1: [op("AllReduce", 1100, 900, seq=0), op("AllReduce", 6300, 700, seq=1)],
        2: [op("AllReduce", -100, 600, seq=0), op("AllReduce", 4600, 900, seq=1)],
    }


def test_offsets_are_recovered_exactly_from_noise_free_ends() -> None:
    clocks = window(hand_built()).clocks
    assert clocks.reference_rank == 0
    assert {r: round(o.offset_s * 1e9) for r, o in clocks.per_rank.items()} == {
        "0": 0,
        "1": 1000,
        "2": -500,
    }
    assert [o.samples for o in clocks.per_rank.values()] == [2, 2, 2]


def test_skew_last_arriver_and_waits_on_aligned_clocks() -> None:
    # instance 0: skew 400, last r2, waits r0 400 r1 300 -> r2 caused 700
    # instance 1: skew 300, last r1, waits r0 300 r2 200 -> r1 caused 500
    found = skew(arrivals(hand_built()))
    kind = found.per_collective["AllReduce"]
    assert kind.instances == 2
    assert (kind.skew_s.median, kind.skew_s.max) == pytest.approx((350e-9, 400e-9), abs=1e-18)
    assert kind.wait_s == pytest.approx(1200e-9, abs=1e-18)
    got = {r: (a.last, round(a.caused_wait_s * 1e9), round(a.waited_s * 1e9))
           for r, a in found.per_rank.items()}  # fmt: skip
    assert got == {"0": (0, 0, 700), "1": (1, 500, 300), "2": (1, 700, 200)}
    assert [a.expected_last for a in found.per_rank.values()] == pytest.approx([2 / 3] * 3)
    assert found.waited_for_rank is None
    assert found.evidence.startswith(
        "no rank clearly the one the others wait for: rank 2 arrived last at 1 of 2"
    )


def test_the_fastest_member_gives_the_wait_free_duration() -> None:
    assert [a.fastest_ns for a in arrivals(hand_built())] == [600, 700]


def test_a_type_mismatch_is_a_desync_not_a_match() -> None:
    calls_ = hand_built()
    calls_[1][1] = op("AllGather", 6300, 700, seq=1)
    matching = window(calls_).matching
    assert (matching.instances, matching.desync_count, matching.by_seq) == (1, 1, 1)
    desync = matching.desyncs[0]
    assert (desync.process_group, desync.key, desync.position) == ("0", "seq", 1)
    assert desync.calls == {
        "0": "AllReduce 4096 B",
        "1": "AllGather 4096 B",
        "2": "AllReduce 4096 B",
    }


def test_a_size_mismatch_is_a_desync_for_all_to_all_too_without_split_sizes() -> None:
    for kind in ("AllReduce", "AllToAll"):
        ranks = {
            0: [op(kind, 0, 10, size=100, seq=0)],
            1: [op(kind, 0, 10, size=200, seq=0)],
        }
        assert window(ranks).matching.desync_count == 1


def test_seq_matching_survives_a_call_missing_on_one_rank() -> None:
    """Rank 0's trace began after seq 0: by Seq the rest still pairs up."""
    ranks = {
        0: [op("AllReduce", 2000, 10, size=8, seq=1)],
        1: [op("AllReduce", 0, 10, size=4, seq=0), op("AllReduce", 2000, 10, size=8, seq=1)],
        2: [op("AllReduce", 0, 10, size=4, seq=0), op("AllReduce", 2000, 10, size=8, seq=1)],
    }
    matching = window(ranks).matching
    assert (matching.instances, matching.desync_count, matching.unmatched) == (2, 0, 0)
    unsequenced = {r: [op(o.collective, o.start_ns, o.dur_ns, size=o.message_bytes) for o in ops]
                   for r, ops in ranks.items()}  # fmt: skip
    by_index = window(unsequenced).matching
    # index 0 pairs rank 0's seq-1 call with the others' seq-0 calls: sizes differ
    assert (by_index.by_index, by_index.desync_count) == (1, 1)


def test_a_call_no_other_member_made_is_unmatched() -> None:
    ranks = {0: [op("AllReduce", 0, 10, seq=0), op("AllReduce", 50, 10, seq=7)],
             1: [op("AllReduce", 0, 10, seq=0)]}  # fmt: skip
    matching = window(ranks).matching
    assert (matching.instances, matching.unmatched, matching.groups["0"].unmatched) == (1, 1, 1)


def test_a_lone_rank_of_a_group_has_nothing_unmatched() -> None:
    matching = match({0: [op("AllReduce", 0, 10, seq=0)]})
    assert (matching.summary.instances, matching.summary.unmatched) == (0, 0)


def test_point_to_point_calls_are_counted_not_matched() -> None:
    ranks = {0: [op("SendRecv", 0, 10)], 1: [op("SendRecv", 0, 10)]}
    matching = window(ranks).matching
    assert (matching.point_to_point, matching.instances, matching.groups) == (2, 0, {})


def test_calls_without_a_group_are_matched_by_running_index() -> None:
    ranks = {r: [op("AllReduce", 0, 10, group=None), op("Broadcast", 100, 10, group=None)]
             for r in range(2)}  # fmt: skip
    matching = window(ranks).matching
    assert (matching.by_index, list(matching.groups)) == (2, ["(unnamed)"])
    assert matching.groups["(unnamed)"].key == "index"


def test_known_members_name_ranks_without_traces() -> None:
    found = match(hand_built(), members={"0": list(range(8))})
    group = found.summary.groups["0"]
    assert (group.members, group.ranks_with_traces) == (list(range(8)), [0, 1, 2])


def test_trace_base_times_are_added_before_comparing_ranks() -> None:
    ranks = {0: [op("AllReduce", 1000, 50, seq=0)], 1: [op("AllReduce", 0, 50, seq=0)]}
    clocks = window(ranks, base={0: 0, 1: 1000}).clocks
    assert [o.offset_s for o in clocks.per_rank.values()] == [0.0, 0.0]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(-10_000_000, 10_000_000), min_size=3, max_size=6),
    st.integers(0, 2**16),
)
def test_random_offsets_are_recovered_within_1pct_of_the_skew_scale(
    offsets: list[int], seed: int
) -> None:
    scenario = Scenario(
        ranks=len(offsets),
        instances=30,
        offsets_ns=dict(enumerate(offsets)),
        slow_rank=1,
        late_ns=2_000_000,
        jitter_ns=200_000,
        end_noise_ns=2_000,
        seed=seed,
    )
    clocks = window(calls(scenario)[0]).clocks
    scale = scenario.late_ns + scenario.jitter_ns
    for rank, offset in clocks.per_rank.items():
        expected = offsets[int(rank)] - offsets[0]
        assert abs(offset.offset_s * 1e9 - expected) <= 0.01 * scale


@settings(max_examples=30, deadline=None)
@given(st.integers(3, 8), st.data(), st.integers(0, 2**16))
def test_an_injected_slow_rank_is_named(ranks: int, data: st.DataObject, seed: int) -> None:
    slow = data.draw(st.integers(0, ranks - 1))
    offsets = {r: data.draw(st.integers(-5_000_000, 5_000_000)) for r in range(ranks)}
    scenario = Scenario(
        ranks=ranks,
        instances=24,
        offsets_ns=offsets,
        slow_rank=slow,
        late_ns=1_000_000,
        jitter_ns=100_000,
        end_noise_ns=1_000,
        seed=seed,
    )
    per_rank, truth = calls(scenario)
    found = skew(arrivals(per_rank))
    assert found.waited_for_rank == slow
    assert found.per_rank[str(slow)].last == truth.last.count(slow) == 24


@pytest.mark.parametrize("seed", range(10))
def test_no_rank_is_named_when_arrivals_are_random(seed: int) -> None:
    scenario = Scenario(ranks=4, instances=40, jitter_ns=500_000, end_noise_ns=1_000, seed=seed)
    found = skew(arrivals(calls(scenario)[0]))
    assert found.waited_for_rank is None
    assert found.evidence.startswith("no rank clearly the one the others wait for")


def test_skews_match_the_injected_ones() -> None:
    scenario = Scenario(ranks=4, instances=20, offsets_ns={1: 3_000_000, 2: -7_000_000, 3: 11},
                        jitter_ns=300_000, seed=3)  # fmt: skip
    per_rank, truth = calls(scenario)
    found = arrivals(per_rank)
    assert [round(a.skew_ns) for a in found] == truth.skew_ns
    assert [a.last for a in found] == truth.last


def test_alpha_beta_from_matched_instances_recovers_the_link() -> None:
    sizes = [2**k for k in range(10, 27, 2)]  # 1 KiB … 64 MiB
    scenario = Scenario(ranks=4, instances=90, sizes=sizes, alpha_s=25e-6, beta_Bps=80e9,
                        slow_rank=2, late_ns=300_000, end_noise_ns=500, seed=1)  # fmt: skip
    fit = crossrank.alpha_beta(window(calls(scenario)[0]), peak_Bps=160e9)["0"]["AllReduce"]
    assert fit.alpha_s == pytest.approx(25e-6, rel=0.05)
    assert fit.beta_Bps == pytest.approx(80e9, rel=0.05)
    assert fit.peak_ratio == pytest.approx(0.5, rel=0.05)
    assert (fit.instances, fit.sizes) == (90, 9)
    # knee α·β = 2 MB of bus bytes; S·F = 1.5 x S: the six sizes up to 1 MiB are below it
    assert fit.latency_bound == pytest.approx(6 / 9)


def test_alpha_beta_declines_when_every_size_is_alike() -> None:
    fit = crossrank.alpha_beta(window(calls(Scenario(ranks=2, instances=10))[0]), peak_Bps=None)
    fit = fit["0"]["AllReduce"]
    assert (fit.alpha_s, fit.beta_Bps, fit.sizes) == (None, None, 1)
    assert fit.na_reason == "fewer than 3 distinct sizes"


def test_windows_pool_into_the_run() -> None:
    one = window(hand_built())
    run = crossrank.pooled([one, one])
    assert (run.matching.instances, len(run.arrivals.draws)) == (4, 4)
    assert skew_section(run.arrivals).per_rank["2"].caused_wait_s == pytest.approx(1400e-9)
    assert run.matching.groups["0"].instances == 4
    assert run.clocks.per_rank["1"].offset_s == one.clocks.per_rank["1"].offset_s


def test_pooling_is_a_left_fold_but_for_the_clocks() -> None:
    """Three windows (builder scenarios with different seeds) pooled at once, or the third
    into the first two pooled: the same instances, matching, α-β points and skew section;
    the clocks (a median over windows) are left out without `clocked`."""
    one, two, three = (window(calls(Scenario(ranks=3, slow_rank=1, seed=s))[0]) for s in (1, 2, 3))
    at_once = crossrank.pooled([one, two, three])
    folded = crossrank.pooled([crossrank.pooled([one, two], clocked=False), three], clocked=False)
    assert (folded.matching, folded.instances) == (at_once.matching, at_once.instances)
    assert (folded.points, folded.factors) == (at_once.points, at_once.factors)
    assert skew_section(folded.arrivals, 10) == skew_section(at_once.arrivals, 10)
    assert (folded.clocks.per_rank, at_once.matching.instances) == ({}, 120)
    assert at_once.clocks.per_rank["1"].samples == 120  # 40 instances a window, 3 windows


def test_a_step_time_straggler_is_flagged_by_robust_z() -> None:
    # median 10 ms, MAD 0 -> 1.2533 x mean |dev| = 1.2533 x 0.6 ms; rank 4: 3 / 0.752 = 3.99
    # classic z: mean 10.6, pstdev 1.2 -> rank 4: 2.4 / 1.2 = 2.0
    found = stragglers({0: 0.010, 1: 0.010, 2: 0.010, 3: 0.010, 4: 0.013})
    assert found.flagged == [4]
    assert found.z["4"] == pytest.approx(2.0)
    assert found.robust_z["4"] == pytest.approx(0.003 / (1.2533 * 0.0006))
    assert found.evidence.startswith("rank 4: 13.0 ms per step against a median of 10.0 ms (+30%")


def test_steps_of_two_ranks_cannot_show_a_straggler() -> None:
    found = stragglers({0: 0.010, 1: 0.020})
    assert (found.flagged, found.z) == ([], {})


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 30), st.sampled_from([1 / 2, 1 / 3, 1 / 8])), max_size=9),
    st.integers(1, 120),
)
def test_wait_tail_agrees_with_enumeration(
    instances: list[tuple[int, float]], observed: int
) -> None:
    """Integer waits with one unit per wait: the tail is exact."""
    brute = math.fsum(
        math.prod(p if hit else 1 - p for (_, p), hit in zip(instances, outcome, strict=True))
        for outcome in itertools.product((False, True), repeat=len(instances))
        if sum(w for (w, _), hit in zip(instances, outcome, strict=True) if hit) >= observed
    )
    total = sum(w for w, _ in instances)
    tail = wait_tail(instances, observed, resolution=total) if total else 1.0
    assert tail == pytest.approx(brute if total else 1.0, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.floats(1e-3, 50.0), st.sampled_from([1 / 2, 1 / 4])), min_size=1,
             max_size=8),
    st.floats(0.01, 200.0),
)  # fmt: skip
def test_wait_tail_never_understates_the_chance(instances: list[tuple[float, float]],
                                                observed: float) -> None:  # fmt: skip
    brute = math.fsum(
        math.prod(p if hit else 1 - p for (_, p), hit in zip(instances, outcome, strict=True))
        for outcome in itertools.product((False, True), repeat=len(instances))
        if sum(w for (w, _), hit in zip(instances, outcome, strict=True) if hit) >= observed
    )
    assert wait_tail(instances, observed, resolution=50) >= brute - 1e-12


def test_wait_tail_of_equal_waits_is_the_binomial_tail() -> None:
    # 8 instances of 2 members, all 5 ms: P(at least 6 of 8 last) = (28 + 8 + 1) / 256
    assert wait_tail([(5e6, 0.5)] * 8, 30e6) == pytest.approx(37 / 256, abs=1e-12)


def test_results_carry_the_calls_in_start_order() -> None:
    result: RankResult = results({0: [op("AllReduce", 50, 1), op("Broadcast", 10, 1)]})[0]
    assert [c.collective for c in result.calls] == ["Broadcast", "AllReduce"]


def test_a_wait_counts_within_the_call_at_most_the_calls_own_duration() -> None:
    # rank 0 starts 500 ns before rank 1 but its call lasts 100 ns (clocks off, or a call that
    # returned early): it waited 500, of which 100 within its call; call time 100 + 100
    instance = Instance("0", 0, "AllReduce", 4096, 2, starts={0: 0, 1: 500},
                        durations={0: 100, 1: 100})  # fmt: skip
    found = skew([arrival(instance, {})]).per_collective["AllReduce"]
    assert (found.wait_s, found.wait_in_call_s, found.call_time_s) == pytest.approx(
        (500e-9, 100e-9, 200e-9), abs=1e-18
    )
