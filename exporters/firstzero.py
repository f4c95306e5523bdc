"""Counters that a scrape first sees at 0 (pure).

`rate()` and `increase()` read the difference between samples, so a counter series whose
first sample already holds a window's value loses that window. `FirstZero.stage` gives the
families to serve with every counter or histogram series no scrape has shown yet held at 0,
and the series it held; once a scrape has shown that stage, `shown` takes them and the true
values follow at the next scrape. Nothing is lost: a counter is cumulative, so the held value
is served one scrape later, and end-of-run values are exact once scraped twice.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, NamedTuple

from prometheus_client.core import Metric

_SeriesKey = tuple[str, tuple[tuple[str, str], ...]]  # family name, labels (no `le`)
_HELD: Final = frozenset({"counter", "histogram"})


class Stage(NamedTuple):
    """What to serve first (`held`), what to serve once it was scraped (`values`), and the
    series held at 0 in `held` (none: `held` is `values`)."""

    held: list[Metric]
    values: list[Metric]
    new: frozenset[_SeriesKey]


def _series_key(metric: Metric, labels: dict[str, str]) -> _SeriesKey:
    return metric.name, tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


def _new_series(metric: Metric, shown: set[_SeriesKey]) -> frozenset[_SeriesKey]:
    """The counter or histogram series of `metric` that no scrape has shown."""
    if metric.type not in _HELD:
        return frozenset()
    keys = (_series_key(metric, s.labels) for s in metric.samples)
    return frozenset(key for key in keys if key not in shown)


def _zeroed(metric: Metric, new: frozenset[_SeriesKey]) -> Metric:
    """`metric` with the samples of the series in `new` at 0."""
    held = Metric(metric.name, metric.documentation, metric.type, metric.unit)
    held.samples = [
        s._replace(value=0.0) if _series_key(metric, s.labels) in new else s for s in metric.samples
    ]
    return held


class FirstZero:
    """The series a scrape has shown (`shown`), and the stages that hold the others at 0.
    A family object met again whose series were all shown then is not looked through again
    (the aggregator serves its report's families as the same objects until the next report;
    families are never changed once published)."""

    def __init__(self) -> None:
        self.shown: set[_SeriesKey] = set()
        self._clear: dict[int, Metric] = {}  # by identity, kept alive so no id is reused

    def stage(self, metrics: list[Metric]) -> Stage:
        held: list[Metric] = []
        new: set[_SeriesKey] = set()
        clear: dict[int, Metric] = {}
        for metric in metrics:
            fresh = frozenset() if id(metric) in self._clear else _new_series(metric, self.shown)
            held.append(_zeroed(metric, fresh) if fresh else metric)
            new |= fresh
            if not fresh:
                clear[id(metric)] = metric
        self._clear = clear
        return Stage(held if new else metrics, metrics, frozenset(new))

    def scraped(self, keys: Iterable[_SeriesKey]) -> None:
        """A scrape has shown these series (at 0)."""
        self.shown.update(keys)
