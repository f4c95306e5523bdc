"""Serving metric families computed elsewhere (shell: a lock shared with the scrape thread).

Each daemon has its own `Published` collector — the aggregator's over its snapshot, a
collector's over its own counters — naming every family it may serve in `describe()`, so a
registry refuses a duplicate name and one daemon's /metrics never shows another's families.
`publish()` swaps in families already computed: a scrape never computes nor waits. `serve`
puts /metrics on a background thread. `family` makes an empty family from its table entry.
`BUILD` holds the `commscope_build_info` labels, read once at import (the package's metadata).
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Iterable, Iterator
from typing import Final
from wsgiref.simple_server import WSGIServer

from commscope.collector.schema import PROTOCOL_VERSION
from commscope.collector.version import installed_version
from commscope.exporters.metricnames import Family
from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

AnyFamily = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily


# version, python, protocol: the labels of commscope_build_info after `job`
BUILD: Final = (installed_version(), platform.python_version(), str(PROTOCOL_VERSION))


def family(spec: Family) -> AnyFamily:
    if spec.kind == "counter":
        return CounterMetricFamily(spec.name.removesuffix("_total"), spec.help, labels=spec.labels)
    if spec.kind == "histogram":
        return HistogramMetricFamily(spec.name, spec.help, labels=spec.labels)
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


def scalar(spec: Family) -> GaugeMetricFamily | CounterMetricFamily:
    """The empty family of a gauge or counter (one value a sample)."""
    made = family(spec)
    if isinstance(made, HistogramMetricFamily):
        raise TypeError(f"{spec.name} is a histogram")
    return made


class Published(Collector):
    """Serves the families last published, out of the `specs` it describes."""

    def __init__(self, specs: Iterable[Family], metrics: list[Metric]) -> None:
        self._specs = tuple(specs)
        self._lock = threading.Lock()
        self._metrics = metrics

    def publish(self, metrics: list[Metric]) -> None:
        with self._lock:
            self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            metrics = self._metrics
        yield from metrics

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
