"""One rank's view of one window as a reader left it: what a file's reduction hands the
report (pure). Apart from `report` so that a worker process, which makes these, need not
import the report's sections (`service.worker`)."""

from __future__ import annotations

from dataclasses import dataclass

from commscope.model.flight import FlightDump
from commscope.model.schema import FileStats, RankResult, TraceMeta


@dataclass(frozen=True)
class ParsedFile:
    window: str
    path: str
    name_rank: int | None
    meta: TraceMeta
    result: RankResult
    stats: FileStats
    note: str | None = None  # how the reader placed it where the file did not say (nsys ranks)
    flight: FlightDump | None = None  # a Flight Recorder dump (`pipeline.flight`), no events
