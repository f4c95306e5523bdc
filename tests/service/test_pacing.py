"""When a report for /metrics may be built before a window completes (`service/pacing.py`)."""

from __future__ import annotations

from pathlib import Path

from commscope.model.schema import Record
from commscope.service.aggregate import Aggregator
from commscope.service.pacing import Pacing

from tests.pipeline.test_aggregation import (
    SAMPLE,
    StepClock,
    loopback_settings,
    receive_all,
    run_records,
)


def trickle(
    pacing: Pacing, progress: list[int], cost: float = 0.0, gap: float = 1000.0, since: float = 0
) -> list[int]:
    """The open windows' progress at each step, `gap` seconds apart after `since`; a report
    is set out whenever allowed and takes `cost`. Returns the steps (from 1) at which reports
    were set out."""
    built = []
    for step, now_at in enumerate(progress, start=1):
        now = since + step * gap
        if pacing.may_rebuild(now, now_at):
            pacing.set_out(now_at)
            pacing.built(now + cost, cost)
            built.append(step)
    return built


def started() -> Pacing:
    """The first report (of nothing) set out and built, in no time."""
    pacing = Pacing()
    pacing.set_out(0)
    pacing.built(0.0, 0.0)
    return pacing


def quarters(ranks: int) -> list[int]:
    """A window of `ranks` ranks arriving one by one: its progress after each (quarters seen,
    as `Aggregation.progress` counts them), 0 again once complete."""
    return [min(3, 4 * seen // ranks) if seen < ranks else 0 for seen in range(1, ranks + 1)]


def test_a_window_trickling_in_is_reported_at_each_quarter_of_its_ranks() -> None:
    """Time never holds a report back (no cost, 1000 s apart): 16 ranks one by one give
    reports at 4, 8 and 12 ranks (a quarter, half, three quarters), not 16 reports."""
    assert quarters(16) == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 0]
    assert trickle(started(), quarters(16)) == [4, 8, 12]


def test_a_window_completing_lowers_the_progress_and_the_next_starts_from_there() -> None:
    """Two windows of 4 ranks one after the other (the completing report, built by the
    service at once, sets out progress 0): the second is shown at 1, 2 and 3 of its ranks."""
    pacing = started()
    assert trickle(pacing, quarters(4)) == [1, 2, 3]
    pacing.set_out(0)  # the first window's completing report
    assert trickle(pacing, quarters(4), since=10_000) == [1, 2, 3]


def test_a_report_waits_out_nine_times_its_cost() -> None:
    """Progress grows at every step (1 s apart) and each report takes 2 s: set out at t=1, it
    ends at 3, so the next may come only 18 s later (at 21), and the one after that not
    before 41 (23 + 18): of steps 1..40, reports at 1 and 21."""
    assert trickle(started(), list(range(1, 41)), cost=2.0, gap=1.0) == [1, 21]


def test_a_report_not_built_is_set_out_again_without_waiting_for_more_ranks() -> None:
    """Progress 2 shown, the build fails (a file it read changed): the next may be set out at
    once, though the windows came no further."""
    pacing = started()
    pacing.set_out(2)
    assert not pacing.may_rebuild(1.0, 2)
    pacing.retry()
    assert pacing.may_rebuild(1.0, 2)


def test_the_aggregator_reports_a_window_half_come(tmp_path: Path) -> None:
    """The gloo sample's first file finishing (world 2: its window half come, rank 1 missing)
    makes the open windows' progress 2 quarters, and the mid-window report then built
    covers it."""
    settings = loopback_settings(tmp_path)
    clock = StepClock()
    aggregator = Aggregator(settings, clock=clock)
    first: list[Record] = run_records(SAMPLE, 40)[0]
    try:
        aggregator.publish()
        receive_all(aggregator, first)
        aggregator.commit()
        assert aggregator.aggregation.progress() == 2
        clock.now += 100.0
        aggregator.publish()
        assert aggregator._report is not None and aggregator._report.inputs.files == 1
    finally:
        aggregator.store.close()
