"""When a report for /metrics may be built before a window completes (`service/pacing.py`)."""

from __future__ import annotations

from pathlib import Path

import msgspec
from commscope.collector.schema import Record
from commscope.service.aggregate import Aggregator, AggregatorSettings
from commscope.service.pacing import Pacing

from tests.pipeline.test_aggregation import NODE, SAMPLE, StepClock, run_records


def trickle(pacing: Pacing, files: int, cost: float = 0.0, gap: float = 1000.0) -> list[int]:
    """Files finish one at a time, `gap` seconds apart; a report is set out whenever allowed
    and takes `cost`. Returns the file counts (since the start) at which reports were built."""
    built = []
    for n in range(1, files + 1):
        pacing.finished(1)
        now = n * gap
        if pacing.may_rebuild(now):
            pacing.set_out(completing=False)
            pacing.built(now + cost, cost)
            built.append(n)
    return built


def started() -> Pacing:
    """The first report (of nothing) set out and built, in no time."""
    pacing = Pacing()
    pacing.set_out(completing=True)
    pacing.built(0.0, 0.0)
    return pacing


def test_files_trickling_in_are_reported_each_time_they_double() -> None:
    """Time never holds a report back (no cost, 1000 s apart): 20 files one by one give
    reports at 1, 2, 4, 8 and 16 files, not 20 reports."""
    assert trickle(started(), 20) == [1, 2, 4, 8, 16]


def test_a_window_completing_starts_the_count_again() -> None:
    """A completing report at 10 files: the next mid-window ones come at 11, 12 and 14 files
    (1, 2 and 4 since then), not at 20."""
    pacing = started()
    pacing.finished(10)
    pacing.set_out(completing=True)
    pacing.built(0.0, 0.0)
    assert [10 + n for n in trickle(pacing, 5)] == [11, 12, 14]


def test_a_report_waits_out_nine_times_its_cost() -> None:
    """Files finish 1 s apart and each report takes 2 s: set out at t=1, it ends at 3, so
    the next may come only 18 s later (at 21: 21 files against 1 shown, grown), and the one
    after that not before 41 (23 + 18): of files at t=1..40, reports at 1 and 21."""
    assert trickle(started(), 40, cost=2.0, gap=1.0) == [1, 21]


def test_a_report_not_built_is_set_out_again_without_waiting_for_more_files() -> None:
    """4 files shown, the build fails (a file it read changed): the next may be set out at
    once, though no file finished since."""
    pacing = started()
    pacing.finished(4)
    pacing.set_out(completing=False)
    assert not pacing.may_rebuild(1.0)
    pacing.retry()
    assert pacing.may_rebuild(1.0)


def test_the_aggregator_counts_each_file_it_makes_durable(tmp_path: Path) -> None:
    """The gloo sample's first file finishing (its window not complete: rank 1 missing) is
    counted once committed, and the mid-window report then built covers it."""
    settings = AggregatorSettings(
        listen="tcp://127.0.0.1:0", out=tmp_path / "out", state=tmp_path / "state"
    )
    clock = StepClock()
    aggregator = Aggregator(settings, clock=clock)
    first: list[Record] = run_records(SAMPLE, 40)[0]
    try:
        aggregator.publish()
        for record in first:
            aggregator.receive([NODE.encode(), msgspec.msgpack.encode(record)])
        aggregator.commit()
        assert aggregator.pacing.finishes == 1
        clock.now += 100.0
        aggregator.publish()
        assert aggregator._report is not None and aggregator._report.inputs.files == 1
    finally:
        aggregator.store.close()
