"""Looped, interleaved and V schedules (`pipeline.virtual`): TorchTitan's stage placement, the
schedule bubble per schedule, a loop found in the P2P pattern, and a hand-built 3-rank looped
pipeline (2 stages a rank) worked by hand."""

from __future__ import annotations

from typing import Any

from commscope.model.schema import CommOp, RankResult
from commscope.pipeline import crossrank, stages
from commscope.pipeline.virtual import bubble_fraction, looped, rank_stages

from tests.pipeline.test_stages import _op, _result


def test_stages_are_placed_round_robin_or_in_a_v() -> None:
    """TorchTitan's stage_ids_this_rank: loop r, r + p, ...; V r and 2p - 1 - r."""
    assert [rank_stages(r, 4, 2, "loop") for r in range(4)] == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert rank_stages(1, 4, 3, "loop") == [1, 5, 9]
    assert [rank_stages(r, 4, 2, "v") for r in range(4)] == [[0, 7], [1, 6], [2, 5], [3, 4]]


def test_each_schedule_has_its_bubble_formula() -> None:
    """p = 4 ranks, v = 2 stages each, m = 8 microbatches."""
    assert bubble_fraction("1F1B", 4, 1, 8)[0] == 3 / 8
    assert bubble_fraction(None, 4, 1, 8)[0] == 3 / 8  # GPipe or 1F1B assumed
    assert bubble_fraction("Interleaved1F1B", 4, 2, 8)[0] == 3 / 16  # (p-1)/(v m)
    assert bubble_fraction("LoopedBFS", 4, 2, 8)[0] == 3 / 16
    assert bubble_fraction("InterleavedZeroBubble", 4, 2, 8)[0] == 0.0
    assert bubble_fraction("ZBVZeroBubble", 4, 2, 8)[0] == 0.0
    assert bubble_fraction("DualPipeV", 4, 2, 8) == (None, "unknown for DualPipeV")


def test_a_loop_of_sends_gives_positions_and_stages_per_rank() -> None:
    """Ranks 5 → 7 → 2 → 4 → 5: 6 sends a step on each edge but the wrap 4 → 5 with 4, so
    v = 6 / (6 - 4) = 3 and rank 5 (the wrap's receiver) is at position 0."""
    edges = {(5, 7): 6, (7, 2): 6, (2, 4): 6, (4, 5): 4}
    assert looped(edges) == ({5: 0, 7: 1, 2: 2, 4: 3}, 3)
    assert looped({(0, 1): 2, (1, 2): 2, (2, 0): 2}) is None  # no wrap: not a loop
    assert looped({(0, 1): 2, (1, 2): 2}) is None  # a chain
    assert looped({(0, 1): 4, (1, 2): 4, (2, 0): 1}) is None  # 4 / 3: not whole


def three_ranks_looped() -> dict[int, RankResult]:
    """One microbatch through 6 stages on 3 ranks (stage s on rank s mod 3), forward only,
    each stage computing 10 ns and each transfer 2 ns:

    rank 0: compute [0,10], send→1 [10,12], recv←2 [12,36], compute [36,46], send→1 [46,48]
    rank 1: recv←0 [0,12], compute [12,22], send→2 [22,24], recv←0 [24,48],
            compute [48,58], send→2 [58,60]
    rank 2: recv←1 [0,24], compute [24,34], send→0 [34,36], recv←1 [36,60], compute [60,70]"""
    calls: dict[int, list[CommOp]] = {
        0: [_op(10, 12, send_to=1), _op(12, 36, recv_from=2), _op(46, 48, send_to=1)],
        1: [_op(0, 12, recv_from=0), _op(22, 24, send_to=2), _op(24, 48, recv_from=0),
            _op(58, 60, send_to=2)],
        2: [_op(0, 24, recv_from=1), _op(34, 36, send_to=0), _op(36, 60, recv_from=1)],
    }  # fmt: skip
    compute = {0: [(0, 10), (36, 46)], 1: [(12, 22), (48, 58)], 2: [(24, 34), (60, 70)]}
    return {r: _result(calls[r], compute[r], (0, 100)) for r in range(3)}


def _section(pp: int | None = None, world: int | None = None, schedule: str | None = None) -> Any:
    infos = {r: crossrank.RankInfo() for r in range(3)}
    tally = crossrank.window(three_ranks_looped(), infos).pipeline
    return stages.section(tally, pp, world, schedule)


def test_a_looped_pipeline_is_found_in_its_p2p_pattern() -> None:
    """Forward edges 0→1 (2 sends), 1→2 (2), 2→0 (1, the wrap): v = 2 / (2 - 1) = 2; m = rank
    0's 2 activation sends / 1 step / v = 1. Interleaved1F1B assumed: (p-1)/(v m) = 2/2 = 1,
    so the schedule bubble is min(bubble, 1 x 20 ns compute). Rank 0: transfer [10,12],
    [34,36], [46,48] = 6, bubble 100 - 20 - 6 = 74 = 20 + 54; rank 1: transfer 8, bubble 72."""
    found = _section()
    assert (found.stages, found.stages_per_rank, found.stage_source) == (3, 2, stages.LOOP)
    assert found.microbatches == 1.0
    assert found.schedule == "Interleaved1F1B (assumed)"
    assert found.bubble_formula is not None and found.bubble_formula.startswith("(p-1)/(v*m)")
    rows = found.per_rank
    assert [rows[r].virtual_stages for r in "012"] == [[0, 3], [1, 4], [2, 5]]
    assert (rows["0"].bubble_s, rows["0"].schedule_bubble_s, rows["0"].neighbour_bubble_s) == (
        74e-9, 20e-9, 54e-9)  # fmt: skip
    assert (rows["1"].transfer_s, rows["1"].bubble_s, rows["1"].schedule_bubble_s) == (
        8e-9, 72e-9, 20e-9)  # fmt: skip


def test_the_config_places_a_v_schedule() -> None:
    """pp = 3 of 3 ranks, ZBVZeroBubble: V placement (r, 5 - r), schedule bubble ≈ 0."""
    found = _section(pp=3, world=3, schedule="ZBVZeroBubble")
    assert found.stage_source is not None and found.stage_source.startswith("config")
    assert [found.per_rank[r].virtual_stages for r in "012"] == [[0, 5], [1, 4], [2, 3]]
    assert (found.schedule, found.per_rank["0"].schedule_bubble_s) == (
        "ZBVZeroBubble (config)",
        0.0,
    )
    assert found.per_rank["0"].neighbour_bubble_s == found.per_rank["0"].bubble_s
