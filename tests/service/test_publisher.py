"""When the aggregator builds a report for /metrics and what it shows (`service/publisher.py`),
in process with a fake clock: a `Publisher` over an in-memory `Aggregation` (files finished by
hand), and last the aggregator wiring it (records received, a report built beside the loop)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import msgspec
from commscope.model.schema import (
    PROTOCOL_VERSION,
    AggregatorStats,
    FinishedFile,
    RankResult,
    Record,
    Report,
    TraceMeta,
    Welcome,
)
from commscope.pipeline.aggregation import Aggregation, Prepared
from commscope.service.aggregate import Aggregator, AggregatorSettings
from commscope.service.intake import Intake, Rules
from commscope.service.ledger import Ledger
from commscope.service.publisher import Publisher

from tests.pipeline.test_aggregation import (
    SAMPLE,
    loopback_settings,
    receive_all,
    run_records,
)

SETTINGS = AggregatorSettings(listen="tcp://127.0.0.1:0", out=Path("out"), state=Path("state"))
WELCOME = Welcome(protocol=PROTOCOL_VERSION, instance="a" * 32, credit=64)


class StepClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def finished(folder: str, rank: int, world: int) -> FinishedFile:
    meta = TraceMeta(rank=rank, world_size=world)
    return FinishedFile(
        stream=f"{folder}-{rank}", node="n", path=f"/run/{folder}/rank{rank}.json",
        folder=folder, root_name="run", meta=meta, result=RankResult(evidence_text="none"),
    )  # fmt: skip


class Built:
    """A publisher at t=1000 s over an in-memory aggregation; each report build is timed
    (`cost` seconds of the fake clock) and each refresh of the counters noted."""

    def __init__(self, cost: float = 0.0) -> None:
        self.clock = StepClock()
        self.aggregation = Aggregation()
        self.intake = Intake(Rules(), WELCOME, self.clock())
        self.ledger = Ledger(credit=64)
        self.counted: list[float] = []
        self.builds: list[float] = []
        self.cost = cost
        self.publisher = Publisher(
            SETTINGS, self.clock, self.aggregation, AggregatorStats(),
            intake=self.intake, ledger=self.ledger, counters=self.count,
        )  # fmt: skip
        real = self.aggregation.build

        def build(prepared: Prepared) -> Report:
            self.builds.append(self.clock.now)
            self.clock.now += self.cost
            return real(prepared)

        self.aggregation.build = build  # type: ignore[method-assign]

    def count(self) -> None:
        self.counted.append(self.clock())

    def at(self, now: float) -> Publisher:
        self.clock.now = now
        return self.publisher

    def finish(self, *files: FinishedFile) -> None:
        """Files finished and stored, as the aggregator's commit leaves them."""
        self.aggregation.restore(files)
        self.publisher.dirty = True


def test_the_first_publish_builds_a_report_at_once_with_the_counters() -> None:
    built = Built()
    built.publisher.publish()
    assert built.publisher.report is not None and built.builds == [1000.0]
    assert built.counted == [1000.0] and built.publisher.published_at == 1000.0


def test_the_counters_are_published_every_refresh_s_and_the_report_only_when_due() -> None:
    built = Built()
    built.publisher.publish()
    shown = built.publisher.report
    built.at(1004.9).tick()
    built.at(1005.0).tick()  # refresh_s (5 s): the counters, no new report (nothing changed)
    assert built.counted == [1000.0, 1005.0] and built.builds == [1000.0]
    assert built.publisher.report is shown


def test_a_window_completing_is_published_at_once_with_its_latency() -> None:
    """The last record came at 1002; at 1003 a tick finds window `a` complete: a report is
    built at once (no refresh wait), shows one window completed, and its latency is 1 s."""
    built = Built()
    built.publisher.publish()
    built.publisher.last_record = 1002.0
    built.finish(finished("a", 0, 2), finished("a", 1, 2))
    built.at(1003.0).tick()
    publisher = built.publisher
    assert built.builds == [1000.0, 1003.0] and publisher.completed == {"a"}
    assert publisher.windows_shown == 1 and publisher.stats.window_latency_s == 1.0


def test_reports_mid_window_wait_out_ten_times_their_cost() -> None:
    """A report that takes 2 s is built again mid-window only 18 s after it ended (2 s is then
    10% of the time, `REBUILD_SHARE`); a window completing is published at once; the counters
    are published every time. (The open windows come further at each step.)"""
    built = Built(cost=2.0)
    progress = [0]
    built.aggregation.progress = lambda: progress[-1]  # type: ignore[method-assign]
    built.publisher.publish()  # the first: built (1000 to 1002), the next not before 1020
    steps = ((1010.0, False), (1019.9, False), (1020.0, False), (1030.0, True), (1049.9, False))
    for now, completed in steps:
        built.at(now).dirty = True  # a file finished, the open windows came further
        progress.append(len(progress))
        built.publisher.publish(window_completed=completed)
        assert built.publisher.published_at == built.clock.now  # the counters, every time
    # 1020 = 1002 + 18; 1030: a window completed; 1049.9 is before 1032 + 18
    assert built.builds == [1000.0, 1020.0, 1030.0]


def test_a_tailed_op_is_published_within_live_s() -> None:
    built = Built()
    built.publisher.publish()
    built.publisher.live.pending = True
    built.at(1000.9).tick()
    assert built.counted == [1000.0]
    built.at(1001.0).tick()
    assert built.counted == [1000.0, 1001.0] and not built.publisher.live.pending


def test_call_lists_are_shed_only_once_every_finished_file_is_stored() -> None:
    built = Built()
    shed: list[float] = []
    built.aggregation.shed = lambda: shed.append(built.clock.now) or 0  # type: ignore[method-assign]
    built.ledger.finished(finished("a", 0, 2), tailed=False)  # applied, not stored yet
    built.publisher.publish()
    assert shed == []
    built.ledger.written()
    built.at(1001.0).dirty = True
    built.publisher.publish(window_completed=True)
    assert shed == [1001.0]


def test_a_report_whose_file_changed_meanwhile_is_set_out_again() -> None:
    """Beside the loop, a build fails because a file it read was superseded (LookupError):
    the next tick sets it out again at once, though the windows came no further."""
    built = Built()
    built.publisher.publish()  # the first is built at once
    built.publisher.background = True
    fails = [LookupError("a-0 superseded")]
    real = built.aggregation.build

    def build(prepared: Prepared) -> Report:
        if fails:
            raise fails.pop()
        return real(prepared)

    built.aggregation.build = build  # type: ignore[method-assign]
    built.finish(finished("a", 0, 2))
    built.publisher.publish(window_completed=True)
    first = built.publisher.building
    assert first is not None
    first.join(60)
    built.at(1001.0).tick()  # the failed build taken: set out again, and built beside
    again = built.publisher.building
    assert again is not None and again is not first
    again.join(60)
    built.at(1002.0).tick()
    report = built.publisher.report
    assert report is not None and report.inputs.files == 1 and built.publisher.building is None


def test_the_final_report_names_collectors_without_end_of_run() -> None:
    built = Built()
    built.intake.hello("n1", "i1")
    built.intake.hello("n2", "i2")
    built.intake.end_of_run("n2", "i2")
    report = built.publisher.final()
    assert report.inputs.unended_collectors == ["n1"]


# ---------------------------------------------------------------- wired in the aggregator


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
        report = aggregator.publisher.report
        assert report is not None and report.inputs.files == 1
    finally:
        aggregator.store.close()


class Replies:
    """A ROUTER socket's sending side: the replies, decoded."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def send_multipart(self, frames: list[bytes], flags: int = 0) -> None:
        self.sent.append(msgspec.msgpack.decode(frames[1]))


def test_records_are_acknowledged_while_a_report_is_built_beside_the_loop(tmp_path: Path) -> None:
    """Within the loop a report is built on its own thread (held here until released): a file
    finishing meanwhile is applied, stored and acknowledged at once, the report shown stays the
    last one until the new one is built, and that one covers the files finished when it was
    set out (the file finished meanwhile is in the next)."""
    settings = loopback_settings(tmp_path)
    aggregator = Aggregator(settings)
    publisher = aggregator.publisher
    publisher.background = True  # as `run` sets it
    first, second = run_records(SAMPLE, 40)[:2]
    release, real = threading.Event(), aggregator.aggregation.build

    def held(prepared: Prepared) -> Report:
        release.wait(60)
        return real(prepared)

    try:
        aggregator.publish()  # the first report (of nothing yet) is built at once
        shown = publisher.report
        aggregator.aggregation.build = held  # type: ignore[method-assign]
        receive_all(aggregator, first)
        aggregator.commit()
        aggregator._send(Replies())  # type: ignore[arg-type]
        aggregator.publish(window_completed=True)  # set out with the first file: held
        receive_all(aggregator, second)
        aggregator.commit()
        replies = Replies()
        aggregator._send(replies)  # type: ignore[arg-type]
        assert [(a["stream"], a["done"]) for a in replies.sent] == [(second[0].stream, True)]
        assert publisher.building is not None and publisher.report is shown
        release.set()
        publisher.building.join(60)
        aggregator._tick()  # the report shown; the next (the second file came) set out
        assert publisher.report is not shown and publisher.report is not None
        assert publisher.report.inputs.files == 1
        assert publisher.building is not None
        publisher.building.join(60)
        aggregator._tick()
        assert publisher.report.inputs.files == 2
    finally:
        release.set()
        aggregator.store.close()
