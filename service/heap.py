"""The aggregator's heap and Python's cyclic garbage collector (shell: it drives `gc`).

What the live aggregator holds grows with the ranks and windows (each file's result, cached
sections and cross-rank facts) and outlives the reports that made it; the collector's full
collections walk all of it, in whichever report or drain they happen to land (at 1,024 ranks
~15% of the CPU a window: docs/performance.md, "Scale").

After each report, `Freezer` moves what is alive out of the collector's reach (`gc.freeze`):
reference counting still frees everything that is not in a cycle, and the collector still walks
what is new; and it collects less often (`THRESHOLDS`: the youngest generation every 10,000
allocations net, not 700; a replay of a 1,024-rank window: 0.12 s of GC, against 0.3 s with
freezing alone and 0.5 s as Python sets it).

The aggregator makes no cycles of its own once started (a replay of a 1,024-rank run: none but
msgspec's at start), but a library might: everything is unfrozen and collected once at most
every `FULL_EVERY` reports, so a cycle among frozen objects does not live for ever.

A full collection walks the whole heap, which grows with the run (a replay of 256 ranks: 2.2 s
at window 60), so it also waits until the process has spent `1 / FULL_SHARE` times the last
one's CPU since it: full collections take at most `FULL_SHARE` of the daemon's CPU however
long the run (a cycle then lives until that much work is done, or `FULL_EVERY` reports,
whichever is later).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Final

FULL_EVERY: Final = 20  # reports between two full collections of the whole heap, at least
FULL_SHARE: Final = 0.05  # of the daemon's CPU that full collections may take, at most
THRESHOLDS: Final = (10_000, 20, 20)  # gc.set_threshold: Python's are (700, 10, 10)


class Freezer:
    """`clock`: the process's CPU seconds (a fake one in tests)."""

    def __init__(
        self,
        full_every: int = FULL_EVERY,
        clock: Callable[[], float] = time.process_time,
        share: float = FULL_SHARE,
    ) -> None:
        self.full_every, self.clock, self.share = full_every, clock, share
        self.reports = 0
        self.collections = 0
        self._since = 0  # reports since the last full collection
        self._last_at = clock()  # CPU time at the end of the last full collection
        self._last_cost = 0.0  # its CPU seconds
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
        """Freeze what is alive now; collect everything first when a full collection is due
        (`full_due`)."""
        self.reports += 1
        self._since += 1
        if self.full_due():
            began = self.clock()
            gc.unfreeze()
            gc.collect()
            self._last_at = self.clock()
            self._last_cost, self._since = self._last_at - began, 0
            self.collections += 1
        gc.freeze()

    def full_due(self) -> bool:
        """`full_every` reports since the last full collection, and the CPU spent since paid
        it back (`share`)."""
        paid = self.clock() - self._last_at >= self._last_cost / self.share
        return self._since >= self.full_every and paid
