"""The aggregator's live figures between reports: busbw and skew (shell by its imports, as it
fills the Prometheus exporter's types; no I/O itself, `now` is given).

Each finished file's busbw samples go into the rolling statistics (quantiles and mean over
`horizon_s`) and the busbw histogram when it is made durable; a tailed Inspector log's ops go
in as they arrive instead (and its verbose ops' starts give the live skew), to be published
within `_LIVE_S`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from commscope.exporters.prometheus import STATS, BusbwHistogram, Rolling
from commscope.model.schema import Facts, FinishedFile
from commscope.pipeline import inspector_live
from commscope.pipeline.rolling import RollingBandwidth
from commscope.pipeline.stats import sample_values

_LIVE_S: Final = 1.0  # a tailed Inspector op is on /metrics within this (plus the tick)


class Live:
    def __init__(self, horizon_s: float) -> None:
        self.rolling = RollingBandwidth(horizon_s)
        self.histogram = BusbwHistogram()
        self.skew = inspector_live.LiveSkew()
        self.skews = inspector_live.RecentSkews(horizon_s)
        self.pending = False  # a tailed Inspector op arrived since the last publish

    def tailed(self, part: Facts, busbw: dict[str, list[float]], now: float) -> None:
        """A tailed Inspector log's ops (their busbw as `Aggregation.apply` absorbed them)."""
        for kind, values in busbw.items():
            self._add(kind, values, now)
        for kind, skew_s in self.skew.add(part.stream, part):
            self.skews.add(kind, skew_s, now)
        self.pending = True

    def finished(self, item: FinishedFile, now: float) -> None:
        """A finished file's busbw samples, per collective type (none if it is unusable)."""
        for kind, tally in (item.result.ops if item.result is not None else {}).items():
            self._add(kind, sample_values(tally.busbw_Bps), now)

    def _add(self, kind: str, values: Sequence[float], now: float) -> None:
        self.rolling.add(kind, values, now)
        self.histogram.add(kind, values)

    def due(self, now: float, published_at: float) -> bool:
        """Whether a tailed op waits to be shown (`_LIVE_S` after the last publish)."""
        return self.pending and now - published_at >= _LIVE_S

    def busbw(self, now: float) -> dict[str, Rolling]:
        """The rolling busbw statistics per collective type, as /metrics shows them."""
        kinds = self.rolling.keys()
        return {kind: self._rolling(kind, now) for kind in kinds}

    def _rolling(self, kind: str, now: float) -> Rolling:
        rolling = self.rolling
        stats = {name: rolling.quantile(kind, q, now) for name, q in STATS.items()}
        return Rolling(
            count=rolling.count(kind, now), stats={**stats, "mean": rolling.mean(kind, now)}
        )
