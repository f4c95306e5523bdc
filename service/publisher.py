"""The aggregator's publisher (shell: reports are built on a thread beside the loop): when a
report is built for /metrics, and what /metrics shows.

The report over finished files is published when a window completes (at once), and before
that at each further quarter of a window's ranks, at most `REBUILD_SHARE` of the time going
to building reports (`Pacing`); the service's own counters every `refresh_s`, a tailed
Inspector op within `LIVE_S`. Within `run` a report is built on a thread beside the loop
(`_ReportBuild`), from what `Aggregation.prepare` set out, so the loop keeps applying,
storing and acknowledging (a loop busy for seconds makes collectors resend). At the end the
final report is the one `commscope report` writes for the same files, shown on /metrics too.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import msgspec
from commscope.exporters.prometheus import Snapshot, SnapshotCollector
from commscope.model.schema import AggregatorStats, Report
from commscope.pipeline.aggregation import Aggregation, Prepared
from commscope.pipeline.report import Options
from commscope.service import heap
from commscope.service.intake import Intake
from commscope.service.ledger import Ledger
from commscope.service.live import Live
from commscope.service.pacing import Pacing

log = logging.getLogger("commscope.aggregate")


class Settings(Protocol):
    """What the publisher reads of the aggregator's settings."""

    @property
    def job(self) -> str: ...
    @property
    def shard(self) -> str: ...
    @property
    def options(self) -> Options: ...
    @property
    def refresh_s(self) -> float: ...
    @property
    def horizon_s(self) -> float: ...
    @property
    def max_rank_series(self) -> int: ...
    @property
    def ranks(self) -> frozenset[int] | None: ...


@dataclass(frozen=True)
class _SetOut:
    """A report set out: when, whether it shows a window completed, the windows complete."""

    began: float = 0.0
    completing: bool = False
    completes: int = 0


class Publisher:
    """Builds the reports /metrics shows, paced (see the module); `counters` refreshes the
    service's own counters in `stats` before each publish."""

    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], float],
        aggregation: Aggregation,
        stats: AggregatorStats,
        *,
        intake: Intake,
        ledger: Ledger,
        counters: Callable[[], None],
    ) -> None:
        self.settings, self.clock = settings, clock
        self.aggregation, self.stats = aggregation, stats
        self.intake, self.ledger = intake, ledger
        self._counters = counters
        self.live = Live(settings.horizon_s)
        self.exporter = SnapshotCollector(Snapshot(job=settings.job, shard=settings.shard))
        self.pacing = Pacing()  # when a mid-window report may be built
        self.report: Report | None = None  # the report shown
        self.building: _ReportBuild | None = None
        self.background = False  # set by `begin`: reports are built beside the loop
        self.dirty = True  # files finished or superseded since the last report set out
        self.completed: set[str] = set()  # the windows complete
        self.windows_shown = 0  # as of the report shown
        self.published_at = -math.inf  # publish at the first tick
        self.last_record = clock()  # a record applied as received (not a heartbeat)
        self._window_waiting = False  # a window completed: its report is due at once
        self.dump_waiting = False  # a Flight Recorder dump finished (a hang?): due at once too
        self._set_out_as = _SetOut()
        self._heap = heap.Freezer()

    def recovered(self) -> None:
        """The state read back: its complete windows are shown as such (not as news)."""
        self.completed = set(self.aggregation.complete_windows())
        self.windows_shown = len(self.completed)
        self._set_out_as = _SetOut(completes=self.windows_shown)

    def begin(self) -> None:
        """The daemon's loop begins: reports are built beside it, the heap kept out of the GC."""
        self.background = True
        self._heap.start()

    def stop(self) -> None:
        self._heap.stop()

    # ---------------------------------------------------------------- pacing
    def tick(self) -> None:
        """Publish at once when a window completes; otherwise every `refresh_s` (the report
        when `Pacing` allows, the service's own counters always)."""
        now = self.clock()
        fresh: set[str] = set()
        if self.dirty:
            complete = set(self.aggregation.complete_windows())
            fresh, self.completed = complete - self.completed, complete
        built = self.building is not None and not self.building.is_alive()
        live = self.live.due(now, self.published_at)
        urgent = fresh or self.dump_waiting
        if urgent or built or live or now - self.published_at >= self.settings.refresh_s:
            self.publish(window_completed=bool(fresh))

    def publish(self, window_completed: bool = False) -> None:
        """Show the service's figures, with a report built anew when one is due. Within
        `run` the report is built beside the loop (`_ReportBuild`), which keeps receiving,
        applying, storing and acknowledging meanwhile; it is shown once built (the first,
        at start, is built at once)."""
        self._window_waiting = self._window_waiting or window_completed
        if self.building is not None and not self.building.is_alive():
            self._collect(self.building)
        if self.building is None and self._due():
            prepared = self._set_out()
            if self.background and self.report is not None:
                self.building = _ReportBuild(self.aggregation, prepared)
                self.building.start()
            else:
                self._built(self.aggregation.build(prepared))
        self._counters()
        if self.report is not None:
            self.exporter.show(self.snapshot(self.report))
        self.live.pending = False
        self.published_at = self.clock()

    def _due(self) -> bool:
        return self.report is None or (
            self.dirty
            and (
                self._window_waiting
                or self.dump_waiting
                or self.pacing.may_rebuild(self.clock(), self.aggregation.progress())
            )
        )

    def _set_out(self) -> Prepared:
        """Set a report out from the files finished so far (`Aggregation.prepare`)."""
        self.dirty = False
        self._set_out_as = _SetOut(self.clock(), self._window_waiting, len(self.completed))
        self._window_waiting = self.dump_waiting = False
        self.pacing.set_out(self.aggregation.progress())
        return self.aggregation.prepare(self.settings.options, metrics_only=True)  # for /metrics

    def _built(self, report: Report, cpu_s: float | None = None) -> None:
        """Show a report built: the next mid-window one waits out its cost (`Pacing`).
        Each is logged with its time (and the CPU of its thread when built beside the loop)."""
        set_out = self._set_out_as
        cost = self.clock() - set_out.began
        extra = {"seconds": round(cost, 3), "window_completed": set_out.completing}
        log.info("report built", extra={**extra, "cpu_s": cpu_s} if cpu_s is not None else extra)
        self.pacing.built(self.clock(), cost)
        self.report, self.windows_shown = report, set_out.completes
        if set_out.completing:
            self.stats.window_latency_s = self.clock() - self.last_record
        if self.ledger.stored:  # every finished file is stored: call lists can go
            self.aggregation.shed()
        if self.background:  # the daemon: its long-lived heap out of the GC's walks
            self._heap.after_report()

    def _collect(self, build: _ReportBuild) -> None:
        """Take a report built beside the loop. One that could not be built because a file it
        read was superseded meanwhile (its stored copy gone) is set out again."""
        self.building = None
        if isinstance(build.error, LookupError):
            log.info(
                "report built again: a file changed meanwhile", extra={"why": str(build.error)}
            )
            self.dirty = True
            self._window_waiting = self._window_waiting or self._set_out_as.completing
            self.pacing.retry()
            return
        if build.error is not None:
            raise build.error
        if build.report is not None:
            self._built(build.report, build.cpu_s)

    def wait(self) -> None:
        """Let a report being built beside the loop end (the run is over)."""
        if self.building is not None:
            self.building.join()
            self.building = None

    # ---------------------------------------------------------------- what /metrics shows
    def snapshot(self, report: Report) -> Snapshot:
        now = self.clock()
        aggregation = self.aggregation
        done = aggregation.finished.values()
        return Snapshot(
            job=self.settings.job,
            report=report,
            windows_completed=self.windows_shown,
            busbw=self.live.busbw(now),
            aggregator=msgspec.structs.replace(self.stats),
            streams={
                "open": len(aggregation.open),
                "done": sum(1 for f in done if f.result is not None),
                "skipped": sum(1 for f in done if f.result is None),
            },
            collectors=self.intake.collectors(now),
            shard=self.settings.shard,
            busbw_histogram=self.live.histogram.snapshot(),
            max_rank_series=self.settings.max_rank_series,
            live_skew=self.live.skews.stats(now),
            started_ranks=self._ranks_started(),
        )

    def _ranks_started(self) -> frozenset[int]:
        """Ranks whose streams have started (a file-name rank) or ended usable (the trace's
        rank), within a shard's `--ranks`: /metrics shows their counters at 0 from then on."""
        aggregation, owned = self.aggregation, self.settings.ranks
        started = [s.start.name_rank for s in aggregation.open.values()]
        ended = [f.meta.rank if f.meta.rank is not None else f.name_rank
                 for f in aggregation.finished.values() if f.result is not None]  # fmt: skip
        known = {rank for rank in (*started, *ended) if rank is not None}
        return frozenset(known if owned is None else known & owned)

    def final(self) -> Report:
        """The run's final report (`unended_collectors` named), shown on /metrics."""
        report = self.aggregation.report(self.settings.options, final=True)
        if unended := self.intake.unended():
            inputs = msgspec.structs.replace(report.inputs, unended_collectors=unended)
            report = msgspec.structs.replace(report, inputs=inputs)
        self.exporter.show(self.snapshot(report))
        return report


class _ReportBuild(threading.Thread):
    """A report built beside the aggregator's loop, from what `Aggregation.prepare` set out
    (`publish`): the loop keeps acknowledging, so collectors do not resend while a large
    job's report takes seconds. Its report, or the error that stopped it, is kept for the loop."""

    def __init__(self, aggregation: Aggregation, prepared: Prepared) -> None:
        super().__init__(name="commscope-report", daemon=True)
        self.aggregation = aggregation
        self.prepared = prepared
        self.report: Report | None = None
        self.error: Exception | None = None
        self.cpu_s = 0.0

    def run(self) -> None:
        began = time.thread_time()
        try:
            self.report = self.aggregation.build(self.prepared)
        except Exception as exc:  # handed to the loop: raised there, or the report set out again
            self.error = exc
        self.cpu_s = round(time.thread_time() - began, 3)
