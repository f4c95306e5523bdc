"""When the aggregator may build a report for /metrics before a window completes (pure).

A window completing is shown at once; between completions a report is rebuilt only when both
(1) the files finished since the last completing report have at least doubled since the last
report was set out (`GROWTH`), and (2) the last report's cost is paid back: it took `cost`
seconds, so the next waits `cost` x (1 - share) / share (`REBUILD_SHARE`). (2) bounds the
time spent on reports; (1) bounds their number by the window's files, not by how long they
take to arrive: files trickling in over an hour cost about log2(files) reports, not one every
few seconds. Each report costs about what a window's does, so mid-window reports cost a
window at most about log2(its files) of them, whatever the wall time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

REBUILD_SHARE: Final = 0.1  # of the time, at most, building reports before a window completes
GROWTH: Final = 2  # files since the last completing report, against those the last report had


@dataclass
class Pacing:
    """The counts and times that decide the next mid-window report (see the module)."""

    finishes: int = 0  # files finished since the start
    base: int = 0  # of them, finished when the last completing (or first) report was set out
    shown: int = 0  # finished when the last report was set out
    rebuild_after: float = -math.inf

    def finished(self, files: int) -> None:
        self.finishes += files

    def set_out(self, completing: bool) -> None:
        """A report is set out over the files finished so far (a window's, if `completing`)."""
        self.shown = self.finishes
        if completing:
            self.base = self.finishes

    def retry(self) -> None:
        """The report set out could not be built (a file it read changed): set it out anew."""
        self.shown = self.base

    def built(self, now: float, cost: float) -> None:
        self.rebuild_after = now + cost * (1 - REBUILD_SHARE) / REBUILD_SHARE

    def may_rebuild(self, now: float) -> bool:
        new, last = self.finishes - self.base, self.shown - self.base
        return new >= max(1, GROWTH * last) and now >= self.rebuild_after
