"""The aggregator's heap and Python's cyclic garbage collector (shell: it drives `gc`).

What the live aggregator holds grows with the ranks and windows (each file's result, cached
sections and cross-rank facts) and outlives the reports that made it; the collector's full
collections walk all of it, in whichever report or drain they happen to land (at 1,024 ranks
~15% of the CPU a window: docs/performance.md, "Scale"). After each report, `Freezer` moves
what is alive out of the collector's reach (`gc.freeze`): reference counting still frees
everything that is not in a cycle, and the collector still walks what is new; and it
collects less often (`THRESHOLDS`: the youngest generation every 10,000 allocations net, not
700; a replay of a 1,024-rank window: 0.12 s of GC, against 0.3 s with freezing alone and 0.5 s
as Python sets it). The aggregator
makes no cycles of its own once started (a replay of a 1,024-rank run: none but msgspec's at
start), but a library might: every `FULL_EVERY` reports everything is unfrozen and collected
once, so a cycle among frozen objects lives at most that long.
"""

from __future__ import annotations

import gc
from typing import Final

FULL_EVERY: Final = 20  # reports between two full collections of the whole heap
THRESHOLDS: Final = (10_000, 20, 20)  # gc.set_threshold: Python's are (700, 10, 10)


class Freezer:
    def __init__(self, full_every: int = FULL_EVERY) -> None:
        self.full_every = full_every
        self.reports = 0
        self._before = gc.get_threshold()

    def start(self) -> None:
        """The daemon starts: collect less often (`THRESHOLDS`)."""
        self._before = gc.get_threshold()
        gc.set_threshold(*THRESHOLDS)

    def stop(self) -> None:
        """The daemon's run is over (it may have run in a larger process: the tests): the
        heap unfrozen, the thresholds as they were before `start`."""
        gc.unfreeze()
        gc.set_threshold(*self._before)

    def after_report(self) -> None:
        """Freeze what is alive now; every `full_every` reports, collect everything first."""
        self.reports += 1
        if self.reports % self.full_every == 0:
            gc.unfreeze()
            gc.collect()
        gc.freeze()
