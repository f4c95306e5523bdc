"""The skew tally's packed per-instance facts (`Draws`): exact, and poolable across windows."""

from __future__ import annotations

from commscope.pipeline.skew import Draws


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
