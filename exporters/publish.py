"""Serving metric families computed elsewhere (shell: a lock shared with the scrape thread).

Each daemon has its own `Published` collector — the aggregator's over its snapshot, a
collector's over its own counters — naming every family it may serve in `describe()`, so a
registry refuses a duplicate name and one daemon's /metrics never shows another's families.
`publish()` swaps in families already computed: a scrape never computes nor waits; a counter
or histogram series is served at 0 by the first scrape that sees it (`firstzero`). `serve`
puts /metrics on a background thread. `family` makes an empty family from its table entry.
`BUILD` holds the `commscope_build_info` labels, read once at import (the package's metadata).
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Final
from wsgiref.simple_server import WSGIServer

from commscope.exporters.firstzero import FirstZero, Stage
from commscope.exporters.metricnames import Family
from commscope.model.schema import PROTOCOL_VERSION
from commscope.model.version import installed_version
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample


class _QuantileFamily(Metric):
    """A summary of quantiles alone (`quantile` among its labels, no `_sum` or `_count`): the
    rolling and per-window quantiles, which have no cumulative sum or count to go with them."""

    def __init__(self, name: str, documentation: str, labels: tuple[str, ...]) -> None:
        super().__init__(name, documentation, "summary")
        self._labelnames = labels

    def add_metric(self, labels: Sequence[str], value: float) -> None:
        named = dict(zip(self._labelnames, labels, strict=True))
        self.samples.append(Sample(self.name, named, value, None))


AnyFamily = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily | _QuantileFamily


# version, python, protocol: the labels of commscope_build_info after `job`
BUILD: Final = (installed_version(), platform.python_version(), str(PROTOCOL_VERSION))


def family(spec: Family) -> AnyFamily:
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)
    if spec.kind == "histogram":
        return HistogramMetricFamily(spec.name, spec.help, labels=spec.labels)
    if spec.kind == "summary":
        return _QuantileFamily(spec.name, spec.help, spec.labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


def scalar(spec: Family) -> GaugeMetricFamily | CounterMetricFamily:
    """The empty family of a gauge or counter (one value a sample)."""
    made = family(spec)
    if not isinstance(made, GaugeMetricFamily | CounterMetricFamily):
        raise TypeError(f"{spec.name} is a {spec.kind}")
    return made


class Published(Collector):
    """Serves the families last published, out of the `specs` it describes; a counter or
    histogram series no scrape has shown yet is served at 0 first (`firstzero`)."""

    def __init__(self, specs: Iterable[Family], metrics: list[Metric]) -> None:
        self._specs = tuple(specs)
        self._lock = threading.Lock()
        self._gate = FirstZero()  # touched by the publishing thread only
        self._served: Stage = Stage([], [], frozenset())
        self._taken = False  # a scrape has served `_served.held` (then its values follow)
        self.publish(metrics)

    def publish(self, metrics: list[Metric]) -> None:
        """Serve `metrics` from the next scrape on, new series held at 0 for one scrape (the
        stage computed outside the lock, again under it when a scrape took the last one
        meanwhile: a series a scrape showed at 0 is never held again)."""
        self._fold()
        staged = self._gate.stage(metrics)
        with self._lock:
            if self._taken and self._served.new:
                self._gate.scraped(self._served.new)
                staged = self._gate.stage(metrics)
            self._served, self._taken = staged, False

    def _fold(self) -> None:
        """Let the gate know the series a scrape has shown at 0."""
        with self._lock:
            if self._taken and self._served.new:
                self._gate.scraped(self._served.new)
                self._served = self._served._replace(new=frozenset())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            served, taken, self._taken = self._served, self._taken, True
        yield from served.values if taken else served.held

    def describe(self) -> Iterator[Metric]:
        return (family(spec) for spec in self._specs)


def serve(published: Published, port: int | None, addr: str) -> WSGIServer | None:
    """Serve `/metrics` from `published` on a background thread (None: no port asked)."""
    if port is None:
        return None
    registry = CollectorRegistry()
    registry.register(published)
    server, _ = start_http_server(port, addr, registry=registry)
    return server
