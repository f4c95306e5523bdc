"""`pipeline.waiting`: exposed communication split into transfer, waiting and unmatched."""

from __future__ import annotations

from collections.abc import Iterable

from commscope.model.schema import ExposedSplit
from commscope.pipeline.intervals import IntervalSet, difference, packed
from commscope.pipeline.matching import Instance
from commscope.pipeline.skew import arrival
from commscope.pipeline.waiting import (
    Exposed,
    cuts,
    cuts_at,
    pieces,
    pooled,
    split,
    unmatched_ns,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def instance(starts: dict[int, int], durations: dict[int, int]) -> Instance:
    return Instance("0", 0, "AllReduce", 1024, len(starts), starts, durations)


def exposed(
    calls: Iterable[tuple[int, int]],
    compute: Iterable[tuple[int, int]],
    steps: Iterable[tuple[int, int]] = ((0, 10**9),),
    base: int = 0,
) -> Exposed:
    """A rank's E = C \\ P and S as its `RankResult` packs them."""
    return Exposed(
        packed(difference(IntervalSet(calls), IntervalSet(compute))),
        packed(IntervalSet(steps)),
        base,
    )


def test_a_member_waits_from_its_start_to_the_last_arrival_then_transfers() -> None:
    found = pieces(instance({0: 100, 1: 300}, {0: 500, 1: 200}), {})
    assert found == {0: ((100, 300), (300, 600)), 1: ((300, 300), (300, 500))}


def test_the_last_arrival_is_taken_on_aligned_clocks_and_carried_back() -> None:
    # rank 1's clock runs 50 ns ahead: it arrived at 250 on rank 0's clock, 300 on its own
    found = pieces(instance({0: 100, 1: 300}, {0: 500, 1: 200}), {1: 50.0})
    assert found == {0: ((100, 250), (250, 600)), 1: ((300, 300), (300, 500))}


def test_a_member_that_ends_before_the_last_arrival_only_waited() -> None:
    found = pieces(instance({0: 0, 1: 1000}, {0: 500, 1: 100}), {})
    assert found[0] == ((0, 500), (500, 500))


def test_hand_worked_split_of_two_ranks_with_compute_steps_and_an_unmatched_call() -> None:
    # rank 0: the AllReduce [100, 600) with compute over [200, 400), so E = [100, 200) ∪
    # [400, 600); waiting [100, 300), transfer [300, 600) -> exposed transfer [400, 600) = 200,
    # exposed waiting [100, 200) = 100; an unmatched call [1000, 1100) adds 100 unmatched.
    # S = [0, 500): within it E = [100, 200) ∪ [400, 500): 100 transfer, 100 waiting.
    # rank 1: the AllReduce [300, 600), no compute: it waited nothing, all 300 transfer.
    # Both traces have the base time 5000: the instance's starts carry it, the runs do not.
    ranks = {
        0: exposed([(100, 600), (1000, 1100)], [(200, 400)], [(0, 500)], base=5000),
        1: exposed([(300, 600)], [], base=5000),
    }
    found = split([instance({0: 5100, 1: 5300}, {0: 500, 1: 300})], {}, ranks)
    assert found[0] == ExposedSplit(
        exposed_ns=400, transfer_ns=200, waiting_ns=100,
        exposed_in_steps_ns=200, transfer_in_steps_ns=100, waiting_in_steps_ns=100,
    )  # fmt: skip
    assert unmatched_ns(found[0]) == 100
    assert found[1] == ExposedSplit(
        exposed_ns=300, transfer_ns=300, exposed_in_steps_ns=300, transfer_in_steps_ns=300
    )


def test_an_instance_with_an_untimed_member_stays_unmatched() -> None:
    ranks = {0: exposed([(100, 600)], []), 1: exposed([(300, 600)], [])}
    found = split([instance({0: 100, 1: 300}, {0: 500, 1: 300})], {}, ranks, untimed={1})
    assert found[0] == ExposedSplit(exposed_ns=500, exposed_in_steps_ns=500)


def test_splits_pool_by_rank_over_windows() -> None:
    a = {0: ExposedSplit(exposed_ns=5, transfer_ns=1, waiting_ns=2)}
    b = {0: ExposedSplit(exposed_ns=7, transfer_ns=3), 1: ExposedSplit(exposed_ns=1)}
    assert pooled([a, b]) == {
        0: ExposedSplit(exposed_ns=12, transfer_ns=4, waiting_ns=2),
        1: ExposedSplit(exposed_ns=1),
    }


# ---------------------------------------------------------------- the oracle: time unit by unit

SPAN = 60
spans = st.tuples(st.integers(0, SPAN - 1), st.integers(1, 20)).map(
    lambda p: (p[0], min(SPAN, p[0] + p[1]))
)


@st.composite
def windows(draw: st.DrawFn) -> tuple[list[Instance], dict[int, dict[str, list[tuple[int, int]]]]]:
    """Up to 3 ranks; instances over random member subsets; each rank's own unmatched calls,
    compute and steps (times in units of a small span)."""
    ranks = list(range(draw(st.integers(2, 3))))
    found = []
    for position in range(draw(st.integers(0, 4))):
        members = draw(st.lists(st.sampled_from(ranks), min_size=2, max_size=3, unique=True))
        calls = {m: draw(spans) for m in members}
        found.append(
            Instance(
                "0",
                position,
                "AllReduce",
                None,
                len(members),
                {m: s for m, (s, _) in calls.items()},
                {m: e - s for m, (s, e) in calls.items()},
            )
        )
    own = {
        r: {key: draw(st.lists(spans, max_size=3)) for key in ("unmatched", "compute", "steps")}
        for r in ranks
    }
    return found, own


def units(intervals: Iterable[tuple[int, int]]) -> set[int]:
    return {t for start, end in intervals for t in range(start, end)}


@settings(max_examples=300, deadline=None)
@given(windows())
def test_the_split_agrees_with_a_unit_by_unit_oracle_and_sums_to_the_exposed_time(
    drawn: tuple[list[Instance], dict[int, dict[str, list[tuple[int, int]]]]],
) -> None:
    found_instances, own = drawn
    calls: dict[int, list[tuple[int, int]]] = {r: list(own[r]["unmatched"]) for r in own}
    waits: dict[int, set[int]] = {r: set() for r in own}
    moves: dict[int, set[int]] = {r: set() for r in own}
    for item in found_instances:
        last = max(item.starts.values())
        for m, start in item.starts.items():
            end = start + item.durations[m]
            calls[m].append((start, end))
            waits[m] |= units([(start, min(last, end))])
            moves[m] |= units([(max(last, start), end)])
    ranks = {r: exposed(calls[r], own[r]["compute"], own[r]["steps"]) for r in own}
    found = split(found_instances, {}, ranks)
    for r in own:
        e = units(calls[r]) - units(own[r]["compute"])
        e_steps = e & units(own[r]["steps"])
        want = ExposedSplit(
            exposed_ns=len(e),
            transfer_ns=len(e & moves[r]),
            waiting_ns=len((e & waits[r]) - moves[r]),
            exposed_in_steps_ns=len(e_steps),
            transfer_in_steps_ns=len(e_steps & moves[r]),
            waiting_in_steps_ns=len((e_steps & waits[r]) - moves[r]),
        )
        assert found[r] == want
        # the rest of E is what no matched call covers: the three parts sum to |E|
        assert unmatched_ns(found[r]) == len(e - waits[r] - moves[r])


@given(
    st.dictionaries(st.integers(0, 7), st.integers(0, 10**12), min_size=1, max_size=6),
    st.lists(st.integers(-(10**6), 10**6), min_size=8, max_size=8),
    st.lists(st.floats(-1e6, 1e6), min_size=8, max_size=8),
    st.integers(0, 2**61),
)
@settings(max_examples=300, deadline=None)
def test_the_cuts_from_an_arrivals_last_arrival_are_the_cuts_found_alone(
    gaps: dict[int, int], durations: list[int], offsets: list[float], base: int
) -> None:
    """A window cuts each matched instance at the last arrival its `skew.Arrival` found
    (`cuts_at`, not found again): member for member the cuts `cuts` finds alone, on epoch
    times, with shifts, and with durations of any sign."""
    starts = {rank: base + gap for rank, gap in gaps.items()}
    found = instance(starts, {rank: durations[rank] for rank in starts})
    shifts = dict(enumerate(offsets))
    at = arrival(found, shifts)
    assert cuts_at(found, shifts, at.origin_ns, at.latest_ns) == cuts(found, shifts)
    assert cuts(found, shifts) == [
        (m, s, min(max(c, s), e), e) for m, ((s, c), (_, e)) in _plain(found, shifts).items()
    ]


def _plain(found: Instance, shifts: dict[int, float]) -> dict[int, tuple[tuple[int, int], ...]]:
    """Each member's ((start, the last arrival on its clock), (_, end)) by the contract's
    formulas, unclamped."""
    ref = min(found.starts.values())
    last = max((s - ref) - shifts.get(m, 0.0) for m, s in found.starts.items())
    return {m: ((s, ref + round(last + shifts.get(m, 0.0))), (0, s + found.durations[m]))
            for m, s in found.starts.items()}  # fmt: skip
