"""Chain attribution of pipeline waiting: each wait goes to the rank that caused it at the root
(pure).

A rank r waits on a neighbour n over D[r][n] (r's exposed P2P waiting on its pairs with n,
within its steps, outside its transfer; one clock for every rank). At an instant t of it, n
had not yet posted its call; if n was itself waiting then (t in D[n][m], m a rank the chain
has not passed through), n's late arrival was spent waiting on m, and the instant goes to m's
root in turn; otherwise to n:

    root(n, t, seen) = root(m, t, seen ∪ {n})  for the lowest-numbered m ∉ seen ∪ {n}
                                                with t ∈ D[n][m]
                     = n                        when there is none

r's instant t of D[r][n] goes to root(n, t, {r}). Each wait's total is kept: Σ over roots of
the attributed waiting = Σ over neighbours of the direct waiting.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from commscope.pipeline.intervals import IntervalSet, difference, intersection

Direct = Mapping[int, Mapping[int, IntervalSet]]  # waiter -> neighbour -> D[waiter][neighbour]


def root_waiting(direct: Direct) -> dict[int, Counter[int]]:
    """waiter -> root rank -> ns of the waiter's waiting that rank caused at the root."""
    found: dict[int, Counter[int]] = {}
    for waiter, on in sorted(direct.items()):
        into: Counter[int] = Counter()
        for near, waits in sorted(on.items()):
            _blame(direct, near, waits, frozenset({waiter}), into)
        found[waiter] = into
    return found


def _blame(
    direct: Direct, rank: int, waits: IntervalSet, seen: frozenset[int], into: Counter[int]
) -> None:
    """`waits` (instants someone waited on `rank`) to their roots, into `into`."""
    rest = waits
    passed_on = seen | {rank}
    for other, busy in sorted(direct.get(rank, {}).items()):
        if other in passed_on or not rest.measure():
            continue
        passed = intersection(rest, busy)
        if passed.measure():
            rest = difference(rest, passed)
            _blame(direct, other, passed, passed_on, into)
    if own := rest.measure():
        into[rank] += own


def shifted(runs: IntervalSet, by: int) -> IntervalSet:
    """`runs` shifted by `by` ns (a rank's own clock onto the common one)."""
    return IntervalSet((start + by, end + by) for start, end in runs.runs())
