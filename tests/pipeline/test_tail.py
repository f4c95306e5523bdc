"""What each rank's profile saw last (`pipeline.tail`): per group the last collective, the last
step's compute and exposed communication, merged over windows, aligned and set against the
other ranks' median in the report's rows; a brute-force oracle for the last call per group."""

from __future__ import annotations

from commscope.model.schema import (
    ClockOffset,
    Clocks,
    CommOp,
    LastCall,
    ProfiledCall,
    ProfileTail,
    RankResult,
)
from commscope.model.wire import MAX_TAIL_CALLS
from commscope.pipeline import tail
from commscope.pipeline.intervals import IntervalSet
from hypothesis import given
from hypothesis import strategies as st


def _call(group: str | None, seq: int | None, start: int, dur: int, kind: str = "AllReduce"):
    return CommOp(kind, start, dur, 4096, 2, False, group, seq)  # type: ignore[arg-type]


def test_each_groups_last_call_and_the_last_steps_figures() -> None:
    """Steps 1 [0,450) and 2 [450,750); compute [0,50) ∪ [460,520), exposed [50,100) ∪
    [520,600): step 2 holds 60 ns of compute and 80 of exposed communication. Group 0's last
    call is #2 (AllGather [300,400): step 1), group 1's #1, the unnamed one [500,600) (step 2)."""
    calls = [
        _call("0", 1, 0, 100),
        _call("1", 1, 150, 100),
        _call("0", 2, 300, 100, "AllGather"),
        _call(None, None, 500, 100),
    ]
    steps = {1: (0, 450), 2: (450, 300)}
    found = tail.of(
        calls, steps, IntervalSet([(0, 50), (460, 520)]), IntervalSet([(50, 100), (520, 600)])
    )
    assert found == ProfileTail(
        calls=[
            LastCall("0", 2, "AllGather", 400, 1, 4096),
            LastCall("1", 1, "AllReduce", 250, 1, 4096),
            LastCall(None, None, "AllReduce", 600, 2, 4096),
        ],
        step=2,
        step_ns=300,
        compute_ns=60,
        exposed_ns=80,
    )


def test_a_window_without_calls_or_steps_has_no_tail() -> None:
    assert tail.of([], {}, IntervalSet(), IntervalSet()) is None
    (only,) = tail.of([_call("0", 3, 10, 5)], {}, IntervalSet(), IntervalSet()).calls  # type: ignore[union-attr]
    assert (only.seq, only.step) == (3, None)


def test_merge_keeps_the_latest_call_of_each_group_and_the_highest_step() -> None:
    calls = [LastCall("0", 4, "AllReduce", 900), LastCall("1", 2, "AllGather", 100)]
    first = ProfileTail(calls=calls, step=3, step_ns=10, compute_ns=4, exposed_ns=5)
    second = ProfileTail(calls=[LastCall("0", 5, "AllReduce", 950)], step=7, step_ns=20)
    merged = tail.merge([first, None, second])
    assert merged == ProfileTail(
        calls=[LastCall("0", 5, "AllReduce", 950), LastCall("1", 2, "AllGather", 100)],
        step=7,
        step_ns=20,
    )
    assert tail.merge([None]) is None


def _result(steps: dict[int, int], found: ProfileTail | None) -> RankResult:
    return RankResult(evidence_text="gpu kernels", steps=steps, tail=found)


def test_report_rows_align_ends_and_set_the_step_against_the_others_median() -> None:
    """Rank 1's clock runs 2,000 ns ahead (offset 2 µs), its time base 1e9 ns: its call ending at
    500 ns of its trace ends at 1e9 + 500 - 2,000 aligned. Its last step, 5, took 30 ns; ranks
    0 and 2 took 10 and 40 ns for step 5: median 25 ns."""
    clocks = Clocks(reference_rank=0, per_rank={
        "0": ClockOffset(offset_s=0.0, uncertainty_s=0.0, samples=3),
        "1": ClockOffset(offset_s=2e-6, uncertainty_s=None, samples=3)})  # fmt: skip
    one = ProfileTail(calls=[LastCall("0", 9, "AllReduce", 500)], step=5, step_ns=30,
                      compute_ns=12, exposed_ns=18)  # fmt: skip
    placed = [
        (0, _result({4: 11, 5: 10}, None), 0),
        (1, _result({5: 30}, one), 10**9),
        (2, _result({5: 40}, ProfileTail(calls=[LastCall("0", 9, "AllReduce", 7)])), 0),
    ]
    rows = tail.report_tails(placed, clocks)
    assert [r.rank for r in rows] == [1, 2]  # rank 0 has no tail
    row = rows[0]
    assert row.calls == [ProfiledCall(group="0", seq=9, collective="AllReduce",
                                      end_ns=10**9 + 500 - 2_000, step=None,
                                      message_bytes=None)]  # fmt: skip
    assert (row.step, row.step_s, row.compute_s, row.exposed_comm_s) == (5, 30e-9, 12e-9, 18e-9)
    assert (row.others_median_s, row.others) == (25e-9, 2)
    assert rows[1].calls[0].end_ns is None  # rank 2 has no clock offset: no aligned time
    assert rows[1].step is None


def test_windows_of_a_rank_merge_on_its_own_clock() -> None:
    """Two windows (files) of one rank with time bases 100 and 1,000: the call ending at 50 of
    the second (1,050) is later than the one ending at 900 of the first (1,000)."""
    clocks = Clocks(reference_rank=0)
    early = ProfileTail(calls=[LastCall("0", 1, "AllReduce", 900)])
    late = ProfileTail(calls=[LastCall("0", 2, "AllReduce", 50)])
    (row,) = tail.report_tails(
        [(0, _result({}, early), 100), (0, _result({}, late), 1_000)], clocks
    )
    assert [(c.seq, c.end_ns) for c in row.calls] == [(2, 1_050)]


_CALLS = st.lists(
    st.tuples(st.sampled_from(["0", "1", None]), st.integers(0, 50), st.integers(1, 20)),
    max_size=12,
)


@given(_CALLS)
def test_the_last_call_of_each_group_is_the_one_started_last(found: list) -> None:
    calls = sorted((_call(g, i, start, dur) for i, (g, start, dur) in enumerate(found)),
                   key=lambda c: (c.start_ns, c.dur_ns))  # fmt: skip
    got = tail.of(calls, {}, IntervalSet(), IntervalSet())
    groups = {c.process_group for c in calls}
    expected = {
        g: max((c for c in calls if c.process_group == g), key=lambda c: (c.start_ns, c.dur_ns))
        for g in groups
    }
    assert got is None if not calls else got is not None
    for last in got.calls if got else []:
        want = expected[last.group]
        assert last.end_ns == want.start_ns + want.dur_ns


def test_a_rank_keeps_the_latest_ending_groups_up_to_the_bound() -> None:
    """1,030 groups, group g's call ending at g + 1: the first 6 are left out."""
    calls = [_call(f"g{g:04}", 1, g, 1) for g in range(MAX_TAIL_CALLS + 6)]
    found = tail.of(calls, {}, IntervalSet(), IntervalSet())
    assert found is not None
    assert [c.group for c in found.calls] == [f"g{g:04}" for g in range(6, MAX_TAIL_CALLS + 6)]
