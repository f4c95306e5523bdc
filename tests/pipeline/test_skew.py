"""The skew tally's packed per-instance facts (`Draws`): exact, and poolable across windows."""

from __future__ import annotations

import math

from commscope.pipeline.matching import Instance
from commscope.pipeline.skew import Draws, arrival, tally
from hypothesis import given, settings
from hypothesis import strategies as st


def test_draws_give_back_every_draw_exactly_and_pool_with_member_sets_renumbered() -> None:
    """Two windows' draws: {2, 3} is set 1 in the first and set 0 in the second; pooled,
    each draw is as appended, and the three distinct member sets are kept once each."""
    first, second = Draws(), Draws()
    first.append(1.5, frozenset({0, 1}), 1)
    first.append(0.1 + 0.2, frozenset({2, 3}), 3)  # 0.30000000000000004: kept bit for bit
    second.append(0.25, frozenset({2, 3}), 2)
    second.append(7e12, frozenset({4, 5}), 5)
    pooled = Draws()
    pooled.extend(first)
    pooled.extend(second)
    assert list(pooled) == [
        (1.5, frozenset({0, 1}), 1),
        (0.1 + 0.2, frozenset({2, 3}), 3),
        (0.25, frozenset({2, 3}), 2),
        (7e12, frozenset({4, 5}), 5),
    ]
    assert (len(pooled), len(first), len(Draws())) == (4, 2, 0)
    assert len({id(members) for _, members, _ in pooled}) == 3  # one object per member set


def test_arrival_is_exact_on_epoch_based_nanosecond_times() -> None:
    """Starts near 1.7e18 ns (a float resolves 256 ns there): skew and waits come out exact."""
    base = 1_700_000_000_000_000_123
    instance = Instance("0", 0, "AllReduce", 1024, 3, {0: base, 1: base + 10, 2: base + 37},
                        {0: 100, 1: 100, 2: 5})  # fmt: skip
    found = arrival(instance, {1: 3.0})
    assert (found.skew_ns, found.last) == (37.0, 2)
    assert found.waits == {0: 37.0, 1: 30.0, 2: 0.0}
    assert found.in_call_ns == 37 + 30 + 0


@given(
    st.dictionaries(st.integers(0, 7), st.integers(0, 10**12), min_size=1, max_size=6),
    st.lists(st.floats(-1e6, 1e6), min_size=8, max_size=8),
    st.integers(0, 2**61),
)
@settings(max_examples=300, deadline=None)
def test_arrival_waits_found_once_are_those_of_the_plain_formulas(
    gaps: dict[int, int], offsets: list[float], base: int
) -> None:
    """The skew as the largest wait and the last arriver as the one waiting 0: bit for bit
    what latest - min(starts) and starts == latest give (subtraction keeps the order)."""
    starts = {rank: base + gap for rank, gap in gaps.items()}
    durations = {rank: 1 + gap % 997 for rank, gap in gaps.items()}
    shifts = dict(enumerate(offsets))
    found = arrival(Instance("0", 0, "AllReduce", 8, len(gaps), starts, durations), shifts)
    origin = min(starts.values())
    aligned = {r: (s - origin) - shifts.get(r, 0.0) for r, s in starts.items()}
    latest = max(aligned.values())
    skew = latest - min(aligned.values())
    at_latest = [r for r, s in aligned.items() if s == latest]
    assert found.skew_ns == skew
    assert found.last == (at_latest[0] if len(at_latest) == 1 and skew > 0 else None)
    assert found.waits == {r: latest - s for r, s in aligned.items()}
    assert found.in_call_ns == math.fsum(min(latest - s, durations[r]) for r, s in aligned.items())


@st.composite
def _instances(draw: st.DrawFn) -> list[Instance]:
    """Instances of 1-5 members of ranks 0-7 on epoch-like times, each one's durations keyed
    in an order of their own (not the starts')."""
    found = []
    for position in range(draw(st.integers(0, 6))):
        gaps = draw(st.dictionaries(st.integers(0, 7), st.integers(0, 10**6), min_size=1,
                                    max_size=5))  # fmt: skip
        starts = {rank: 1_700_000_000_000_000_000 + gap for rank, gap in gaps.items()}
        durations = {rank: 1 + gaps[rank] % 991 for rank in sorted(gaps, reverse=True)}
        found.append(Instance("0", position, "AllGather", None, None, starts, durations))
    return found


@given(_instances(), st.integers(0, 7))
@settings(max_examples=200, deadline=None)
def test_a_ranks_chances_are_those_of_each_draw_it_is_a_member_of(
    found: list[Instance], rank: int
) -> None:
    """(Σ wait, 1 / members) of each draw with `rank` among its members, in order."""
    draws = tally([arrival(item, {}) for item in found]).draws
    want = [(wait, 1 / len(members)) for wait, members, _ in draws if rank in members]
    assert draws.chances(rank) == want
