"""When the aggregator may build a report for /metrics before a window completes (pure).

A window completing is shown at once. Before that a report is built again only when both
(1) the open windows have come further since the last report was set out: a quarter more of a
window's ranks have a finished file (`Aggregation.progress`; of a window whose world size no
file states, its ranks have doubled), and (2) the last report's cost is paid back: it took
`cost` seconds, so the next waits `cost` x (1 - share) / share (`REBUILD_SHARE`).
(2) bounds the time spent on reports; (1) bounds their number by the window, not by how long
its files take to arrive: a window is shown at a quarter, half and three quarters of its ranks
and when complete, whether they arrive within seconds or over an hour, and each such report
costs about what the completing one does, so a window costs at most about four reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

REBUILD_SHARE: Final = 0.1  # of the time, at most, building reports before a window completes


@dataclass
class Pacing:
    """What decides the next mid-window report (see the module)."""

    shown: int = 0  # the open windows' progress when the last report was set out
    rebuild_after: float = -math.inf

    def set_out(self, progress: int) -> None:
        """A report is set out over the files finished so far, the open windows this far."""
        self.shown = progress

    def retry(self) -> None:
        """The report set out could not be built (a file it read changed): set it out anew."""
        self.shown = -1

    def built(self, now: float, cost: float) -> None:
        self.rebuild_after = now + cost * (1 - REBUILD_SHARE) / REBUILD_SHARE

    def may_rebuild(self, now: float, progress: int) -> bool:
        return progress > self.shown and now >= self.rebuild_after
