"""All-to-all-v per call, per step and over the run (`pipeline.alltoallv`): hand-worked values
on a 3-rank call, and a brute-force oracle over random split matrices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

import pytest
from commscope.model.schema import CommOp, RankResult
from commscope.pipeline import alltoallv
from commscope.pipeline.alltoallv import Tally, row_bytes, section, tally
from hypothesis import given, settings
from hypothesis import strategies as st

GROUP = {"0": [0, 1, 2]}
ROW = 8  # bytes a row (one Long)
# rows rank i sends to rank j; what j receives from i is the same entry
SKEWED = [[1, 2, 3], [0, 4, 0], [2, 1, 1]]
EVEN = [[1, 1, 1], [1, 1, 1], [1, 1, 1]]
STEP_NS = 1_000_000


def ops(rows: Sequence[Sequence[int]], start: int, row: int = ROW, durations=None) -> dict:
    """Each rank's call of one all-to-all-v of split matrix `rows` (S = row x max rows)."""
    n = len(rows)
    found = {}
    for rank in range(n):
        sent, received = tuple(rows[rank]), tuple(rows[j][rank] for j in range(n))
        size = row * max(sum(sent), sum(received))
        dur = durations[rank] if durations else 1000
        found[rank] = CommOp("AllToAll", start, dur, size, n, False, "0", None, "pg_config",
                             "Long", sent, received)  # fmt: skip
    return found


def results(calls: Sequence[Mapping[int, CommOp]], steps: int = 2) -> dict[int, RankResult]:
    ranks = sorted({rank for call in calls for rank in call})
    return {
        rank: RankResult(
            evidence_text="cpu (gloo)",
            calls=[call[rank] for call in calls if rank in call],
            steps={step: STEP_NS for step in range(1, steps + 1)},
            step_starts={step: (step - 1) * STEP_NS for step in range(1, steps + 1)},
        )
        for rank in ranks
    }


def tallied(found: Mapping[int, RankResult], members=GROUP) -> Tally:
    calls = {rank: alltoallv.calls_of(r, members) for rank, r in found.items()}
    return tally({rank: c for rank, c in calls.items() if c is not None}, found)


def test_one_skewed_call_worked_by_hand() -> None:
    call = ops(SKEWED, 10, durations=[4000, 1000, 2000])
    got = section(tallied(results([call])))
    assert got is not None
    # sent 48, 32, 32 B (6, 4, 4 rows); received 24, 56, 32 B (3, 7, 4 rows)
    assert [(r.sent_bytes, r.received_bytes) for r in got.per_rank.values()] == [
        (48, 24),
        (32, 56),
        (32, 32),
    ]
    assert got.total_bytes == 112
    assert got.sent_imbalance == pytest.approx(48 / (112 / 3))  # 9/7
    assert got.received_imbalance == pytest.approx(56 / (112 / 3))  # 1.5
    assert got.busiest_rank == 1  # 56 B received
    # busbw: the busiest rank's 56 B in its 1 µs, x (3-1)/3
    assert got.busbw_Bps.median == pytest.approx(56 / 1e-6 * 2 / 3)
    assert got.matrix_ranks == [0, 1, 2]
    assert got.matrix_bytes == [[8, 16, 24], [0, 32, 0], [16, 8, 8]]
    assert got.replay_bytes == 32 * 3  # n x the largest entry of the (one) mean call
    assert got.matrix_na_reason is None


def test_per_step_imbalance_and_the_run_over_both_steps() -> None:
    found = results([ops(SKEWED, 10), ops(EVEN, STEP_NS + 10)])
    got = section(tallied(found))
    assert got is not None
    first, second = got.steps
    assert (first.step, first.calls, first.busiest_rank) == (1, 1, 1)
    assert first.sent_imbalance == pytest.approx(9 / 7)
    assert first.received_imbalance == pytest.approx(1.5)
    assert (second.step, second.sent_imbalance, second.received_imbalance) == (2, 1.0, 1.0)
    assert second.busiest_rank == 0  # a tie: the lowest rank
    # the run: sent 48+24, 32+24, 32+24 = 72, 56, 56 B
    assert got.sent_imbalance == pytest.approx(72 * 3 / 184)
    assert got.call_sent_imbalance.max == pytest.approx(9 / 7)
    assert got.call_sent_imbalance.min == 1.0
    assert got.replay_bytes == 20 * 3  # largest entry 32 + 8 = 40 B over 2 calls


def test_a_sender_without_a_trace_is_read_from_its_receivers() -> None:
    call = ops(SKEWED, 10)
    del call[2]
    got = section(tallied(results([call])))
    assert got is not None
    # rank 2's row from ranks 0 and 1's receive splits: 2 rows to 0, 1 to 1 (to itself: unseen)
    assert got.matrix_bytes == [[8, 16, 24], [0, 32, 0], [16, 8, 0]]
    assert list(got.per_rank) == ["0", "1"]


def test_windows_pool_to_the_sum_of_their_tallies() -> None:
    one, two = tallied(results([ops(SKEWED, 10)])), tallied(results([ops(EVEN, 10)]))
    both = tallied(results([ops(SKEWED, 10), ops(EVEN, STEP_NS + 10)]))
    pooled = section(alltoallv.pooled([one, two]))
    whole = section(both)
    assert pooled is not None and whole is not None
    assert pooled.matrix_bytes == whole.matrix_bytes
    assert pooled.per_rank == whole.per_rank
    assert pooled.sent_imbalance == whole.sent_imbalance


def test_no_section_without_split_sizes() -> None:
    plain = {rank: CommOp("AllToAll", 10, 100, 96, 3, False, "0", None, "pg_config", "Long")
             for rank in range(3)}  # fmt: skip
    assert section(tallied(results([plain]))) is None


def test_row_size_needs_whole_splits_and_a_whole_number_of_rows() -> None:
    base = CommOp("AllToAll", 0, 1, 48, 3, False, None, None, None, "Long", (1, 2, 3), (1, 0, 2))
    assert row_bytes(base) == 8
    cut = CommOp("AllToAll", 0, 1, 48, 4, False, None, None, None, "Long", (1, 2, 3), (1, 0, 2))
    assert row_bytes(cut) is None  # Kineto cut the lists: 3 of 4 group ranks
    odd = CommOp("AllToAll", 0, 1, 50, 3, False, None, None, None, "Long", (1, 2, 3), (1, 0, 2))
    assert row_bytes(odd) is None
    empty = CommOp("AllToAll", 0, 1, 0, 3, False, None, None, None, "Long", (0, 0, 0), (0, 0, 0))
    assert row_bytes(empty) == 0
    unknown = CommOp("AllToAll", 0, 1, None, 3, False, None, None, None, None, (1, 2, 3), (1, 0, 2))
    assert row_bytes(unknown) is None


def test_calls_of_unknown_bytes_are_counted_and_left_out() -> None:
    call = ops(SKEWED, 10)
    call[0] = CommOp("AllToAll", 10, 1000, 50, 3, False, "0", None, "pg_config", "Long",
                     call[0].in_splits, call[0].out_splits)  # fmt: skip
    got = section(tallied(results([call])))
    assert got is not None
    assert (got.calls, got.unknown_bytes, got.total_bytes, got.per_rank) == (1, 1, 0, {})


matrices = st.integers(2, 5).flatmap(
    lambda n: st.lists(st.lists(st.integers(0, 6), min_size=n, max_size=n), min_size=n, max_size=n)
)


@settings(max_examples=60, deadline=None)
@given(rows=matrices, row=st.sampled_from([1, 2, 4, 8]), data=st.data())
def test_imbalance_busbw_and_matrix_agree_with_brute_force(rows, row, data) -> None:
    n = len(rows)
    durations = data.draw(st.lists(st.integers(1, 10_000), min_size=n, max_size=n))
    call = ops(rows, 10, row, durations)
    got = section(tallied(results([call]), {"0": list(range(n))}))
    assert got is not None
    sent = [sum(rows[i]) * row for i in range(n)]
    received = [sum(rows[j][i] for j in range(n)) * row for i in range(n)]
    assert got.matrix_bytes == [[v * row for v in line] for line in rows]
    assert [got.per_rank[str(i)].sent_bytes for i in range(n)] == sent
    assert [got.per_rank[str(i)].received_bytes for i in range(n)] == received
    for figure, values in ((got.sent_imbalance, sent), (got.received_imbalance, received)):
        expected = Fraction(max(values) * n, sum(values)) if sum(values) else None
        assert figure == (None if expected is None else pytest.approx(float(expected)))
    moved = [max(s, r) for s, r in zip(sent, received, strict=True)]
    busiest = moved.index(max(moved))
    assert got.busiest_rank == busiest
    if moved[busiest]:
        bw = moved[busiest] / (durations[busiest] * 1e-9) * (n - 1) / n
        assert got.busbw_Bps.median == pytest.approx(bw)
