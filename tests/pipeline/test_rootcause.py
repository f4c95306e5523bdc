"""Chain attribution (`pipeline.rootcause`): a hand-built 4-stage gloo pipeline whose stage 1
is slow, hand-worked; and a brute-force oracle of the recursive definition, instant by
instant, on random small chains."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from commscope.model.schema import Report
from commscope.pipeline.intervals import IntervalSet
from commscope.pipeline.report import Options
from commscope.pipeline.rootcause import root_waiting
from commscope.service.offline import analyse
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import annotation, cpu_op, dist_head, trace

US = 1e-6  # the builders' unit, in seconds
DIMS = {"Input Dims": [[4, 64]], "Input type": ["float"]}


def _p2p(kind: str, ts: float, dur: float, peer: int) -> list[dict]:
    """A gloo send or receive: the c10d operator naming the peer, the span inside it."""
    op = "c10d::send" if kind == "send" else "c10d::recv_"
    args = {"Concrete Inputs": ["", "", str(peer), "0"]}
    return [cpu_op(op, ts, dur, args=args), annotation(f"gloo:{kind}", ts, dur, args=DIMS)]


def four_stages() -> dict[int, list[dict]]:
    """Forward of one microbatch through ranks 0→1→2→3 (µs): each stage receives at 0, so
    its receive spans its wait. Stage 1 computes 40 µs, the others 10.

    rank 0: compute [0,10], send to 1 [10,12]
    rank 1: recv from 0 [0,12] (waits [0,10]), compute [12,52], send to 2 [52,54]
    rank 2: recv from 1 [0,54] (waits [0,52]), compute [54,64], send to 3 [64,66]
    rank 3: recv from 2 [0,66] (waits [0,64]), compute [66,76]"""
    step = annotation("ProfilerStep#1", 0, 80)
    return {
        0: [step, cpu_op("aten::mm", 0, 10), *_p2p("send", 10, 2, 1)],
        1: [step, *_p2p("recv", 0, 12, 0), cpu_op("aten::mm", 12, 40), *_p2p("send", 52, 2, 2)],
        2: [step, *_p2p("recv", 0, 54, 1), cpu_op("aten::mm", 54, 10), *_p2p("send", 64, 2, 3)],
        3: [step, *_p2p("recv", 0, 66, 2), cpu_op("aten::mm", 66, 10)],
    }


def write(folder: Path, events: dict[int, list[dict]]) -> None:
    for rank, listed in events.items():
        head = dist_head(rank=rank, world_size=len(events), backend="gloo")
        tail = {"baseTimeNanoseconds": 1_700_000_000_000_000_000}  # exact at this size too
        (folder / f"rank{rank}_trace.json").write_bytes(trace(listed, head, tail))


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    folder = tmp_path_factory.mktemp("pipeline4")
    write(folder, four_stages())
    return analyse(folder, Options())


def test_direct_waiting_blames_the_last_neighbour_in_the_chain(report: Report) -> None:
    """Rank 1 waits 10 on rank 0, rank 2 waits 52 on rank 1, rank 3 waits 64 on rank 2:
    directly, rank 2 caused the most."""
    rows = report.pipeline.per_rank
    assert {r: round(rows[r].caused_waiting_s / US, 6) for r in rows} == {
        "0": 10, "1": 52, "2": 64, "3": 0}  # fmt: skip


def test_root_attribution_follows_the_chain_back_to_the_slow_stage(report: Report) -> None:
    """Rank 2's wait [0,52] on rank 1: rank 1 itself waited on rank 0 over [0,10] (root 0, as
    rank 0 was computing), so 10 → rank 0, 42 → rank 1. Rank 3's wait [0,64] on rank 2: rank
    2 waited on rank 1 over [0,52] (→ 10 to rank 0, 42 to rank 1 as above), 12 → rank 2.
    Roots: 0: 10 + 10 + 10 = 30, 1: 42 + 42 = 84, 2: 12; Σ 126 = 10 + 52 + 64."""
    rows = report.pipeline.per_rank
    assert {r: round(rows[r].root_caused_waiting_s / US, 6) for r in rows} == {
        "0": 30, "1": 84, "2": 12, "3": 0}  # fmt: skip
    assert [rows[r].stage for r in "0123"] == [0, 1, 2, 3]


# ---------------------------------------------------------------- brute-force oracle

GRID = 30
_SPANS = st.lists(
    st.tuples(st.integers(0, GRID - 1), st.integers(1, 10)).map(
        lambda t: (t[0], min(GRID, t[0] + t[1]))
    ),
    max_size=3,
)


def _root(direct: dict[int, dict[int, list]], rank: int, t: int, seen: frozenset[int]) -> int:
    """The module docstring's recursive definition, for one instant."""
    for other in sorted(direct.get(rank, {})):
        if other not in seen | {rank} and any(a <= t < b for a, b in direct[rank][other]):
            return _root(direct, other, t, seen | {rank})
    return rank


@settings(max_examples=150, deadline=None)
@given(st.integers(2, 5).flatmap(lambda p: st.tuples(
    st.just(p), st.lists(st.tuples(_SPANS, _SPANS), min_size=p, max_size=p))))  # fmt: skip
def test_root_waiting_equals_the_recursive_definition(chain: tuple) -> None:
    """Ranks 0..p-1 in a chain: each waits on its neighbours before and after over random
    intervals; every waiting instant's root is checked one by one."""
    p, spans = chain
    direct = {r: {n: s for n, s in ((r - 1, spans[r][0]), (r + 1, spans[r][1])) if 0 <= n < p}
              for r in range(p)}  # fmt: skip
    expected: dict[int, Counter[int]] = {}
    for waiter, on in direct.items():
        expected[waiter] = Counter()
        for near, intervals in on.items():
            for t in range(GRID):
                if any(a <= t < b for a, b in intervals):
                    expected[waiter][_root(direct, near, t, frozenset({waiter}))] += 1
    sets = {r: {n: IntervalSet(s) for n, s in on.items()} for r, on in direct.items()}
    found = root_waiting(sets)
    assert {r: +c for r, c in found.items()} == {r: +c for r, c in expected.items()}
    direct_total = sum(IntervalSet(s).measure() for on in direct.values() for s in on.values())
    assert sum(sum(c.values()) for c in found.values()) == direct_total
