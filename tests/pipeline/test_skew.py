"""The skew tally's packed per-instance facts (`Draws`): exact, and poolable across windows."""

from __future__ import annotations

from commscope.pipeline.matching import Instance
from commscope.pipeline.skew import Draws, arrival


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
