"""`crossrank.drawn`: each matched instance's members' waiting and transfer on their own
clocks, and its last arriver, as the timeline draws them (hand-worked)."""

from __future__ import annotations

from commscope.model.schema import CommOp
from commscope.pipeline import crossrank
from crossrank_builder import results


def allreduce(start: int, dur: int, seq: int) -> CommOp:
    return CommOp("AllReduce", start, dur, 4096, 3, True, "0", seq)


# test_crossrank's hand-built window: rank clocks offset 0, +1000, -500 ns; instance 0 arrives
# at 0, 100, 400 (true), instance 1 at 5000, 5300, 5100; every member ends at 1000 / 6000
CALLS = {
    0: [allreduce(0, 1000, 0), allreduce(5000, 1000, 1)],
    1: [allreduce(1100, 900, 0), allreduce(6300, 700, 1)],
    2: [allreduce(-100, 600, 0), allreduce(4600, 900, 1)],
}


def test_each_member_waits_until_the_last_arrival_on_its_own_clock() -> None:
    """Instance 0 (last r2 at 400): r0 waits [0, 400), r1 [1100, 1400) on its clock, r2 not
    at all. Instance 1 (last r1 at 5300): r0 waits [5000, 5300), r2 [4600, 4800)."""
    infos = {rank: crossrank.RankInfo() for rank in CALLS}
    drawn, found = crossrank.drawn(results(CALLS), infos)
    assert {rank: round(offset) for rank, (offset, _, _) in found.items()} == {
        0: 0, 1: 1000, 2: -500}  # fmt: skip
    assert [item.last for item in drawn] == [2, 1]
    assert [item.pieces for item in drawn] == [
        {0: ((0, 400), (400, 1000)), 1: ((1100, 1400), (1400, 2000)),
         2: ((-100, -100), (-100, 500))},
        {0: ((5000, 5300), (5300, 6000)), 1: ((6300, 6300), (6300, 7000)),
         2: ((4600, 4800), (4800, 5500))},
    ]  # fmt: skip
