"""The aggregator's Prometheus metrics from precomputed state (pure, but for the lock of
`SnapshotCollector`, a `publish.Published`).

The aggregator publishes a `Snapshot` (the report over finished files, the rolling busbw
quantiles, the per-op busbw histogram, its own and its collectors' counters); `families()`
turns it into metric families named in `metricnames.FAMILIES`; `SnapshotCollector.collect()`
yields those of the latest snapshot, so a scrape never computes anything nor waits for the
aggregator's loop. With more ranks than `Snapshot.max_rank_series`, only the lowest-numbered
ranks (and the rank the others wait for) get per-rank series; `commscope_ranks_folded`
counts the others.
`BusbwHistogram` counts per-op busbw into the fixed `BUSBW_BUCKETS` as windows finish.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Final, NamedTuple

from commscope.exporters import flightmetrics
from commscope.exporters.collectormetrics import counter_samples, reason_samples
from commscope.exporters.metricnames import (
    BUSBW_BUCKETS,
    FAMILIES,
    MAX_GROUPS,
    MAX_RANK_SERIES,
    SHARD_LABEL,
    Family,
    capped_ranks,
)
from commscope.exporters.publish import BUILD, AnyFamily, Published, family
from commscope.model.schema import (
    AggregatorStats,
    CollectiveSkew,
    CollectorStats,
    Report,
    Window,
)
from prometheus_client.core import HistogramMetricFamily, Metric

STATS: Final = {"p50": 0.5, "p95": 0.95}
# A statistic's `quantile` label (Prometheus' summary convention); max and mean have families.
_QUANTILE: Final = {"p50": "0.5", "p95": "0.95"}
_SKEW_QUANTILES: Final = (("0.5", "median"), ("0.95", "p95"))
_BY_NAME: Final = {f.name: f for f in FAMILIES}


@dataclass(frozen=True)
class Rolling:
    count: int
    stats: Mapping[str, float | None]  # "p50", "p95", "mean"


class Buckets(NamedTuple):
    """One collective's histogram: counts of values <= each of `BUSBW_BUCKETS`, then the
    count of all (+Inf), and their sum."""

    cumulative: tuple[int, ...]
    total: float


class BusbwHistogram:
    """Per-op busbw counted into `BUSBW_BUCKETS` per collective type, since creation (values
    not finite or not positive are left out, as the rolling quantiles leave them out)."""

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def add(self, kind: str, values: Iterable[float]) -> None:
        counts = self._counts.setdefault(kind, [0] * (len(BUSBW_BUCKETS) + 1))
        total = 0.0
        for value in values:
            if math.isfinite(value) and value > 0:
                counts[bisect_left(BUSBW_BUCKETS, value)] += 1  # first bound >= value: le
                total += value
        self._sums[kind] = self._sums.get(kind, 0.0) + total

    def snapshot(self) -> dict[str, Buckets]:
        return {
            kind: Buckets(tuple(accumulate(counts)), self._sums[kind])
            for kind, counts in sorted(self._counts.items())
        }


@dataclass(frozen=True)
class Snapshot:
    job: str
    report: Report = field(default_factory=Report)
    windows_completed: int = 0
    busbw: Mapping[str, Rolling] = field(default_factory=dict)
    aggregator: AggregatorStats = field(default_factory=AggregatorStats)
    streams: Mapping[str, int] = field(default_factory=dict)  # state -> count
    collectors: Mapping[str, tuple[CollectorStats, bool]] = field(default_factory=dict)
    shard: str = ""  # the aggregator's --shard: a `shard` label on every sample ("": none)
    busbw_histogram: Mapping[str, Buckets] = field(default_factory=dict)
    max_rank_series: int = MAX_RANK_SERIES  # ranks with per-rank series at most (0: no cap)
    # tailed NCCL Inspector logs: collective type -> stat (p50, p95, max) -> skew seconds
    live_skew: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    # ranks whose streams have started (a file-name rank) or ended (the trace's rank): their
    # per-rank counters are served at 0 until the report holds them
    started_ranks: frozenset[int] = frozenset()


class _Families:
    """Metric families by exposed name, filled sample by sample; with a `shard`, every
    sample carries it as its last label; with `keep`, a sample with a `rank` label outside
    it is left out."""

    def __init__(
        self, shard: str = "", keep: frozenset[str] | None = None, side: bool | None = None
    ) -> None:
        self._made: dict[str, AnyFamily] = {}
        self._shard = (shard,) if shard else ()
        self._keep = keep
        self._side = side  # only the service's families (True), only the report's (False)

    def add(self, name: str, labels: tuple[str, ...], value: float | None) -> None:
        if value is None or not self._taken(name) or not self._kept(name, labels):
            return
        made = self._family(name)
        assert not isinstance(made, HistogramMetricFamily)
        made.add_metric([*labels, *self._shard], value)

    def histogram(self, name: str, labels: tuple[str, ...], buckets: Buckets) -> None:
        """A histogram sample: cumulative counts per bound of `BUSBW_BUCKETS`, then +Inf."""
        if not self._taken(name):
            return
        made = self._family(name)
        assert isinstance(made, HistogramMetricFamily)
        bounds = [*(f"{b:g}" for b in BUSBW_BUCKETS), "+Inf"]  # 1e+07, as Go's clients write it
        pairs = [(le, float(n)) for le, n in zip(bounds, buckets.cumulative, strict=True)]
        made.add_metric([*labels, *self._shard], pairs, buckets.total)

    def _taken(self, name: str) -> bool:
        return self._side is None or _of_service(name) == self._side

    def _kept(self, name: str, labels: tuple[str, ...]) -> bool:
        spec = _BY_NAME[name]
        return (
            self._keep is None
            or name in flightmetrics.FAMILY_NAMES  # capped by their own ranks
            or "rank" not in spec.labels
            or (labels[spec.labels.index("rank")] in self._keep)
        )

    def _family(self, name: str) -> AnyFamily:
        made = self._made.get(name)
        if made is None:
            made = self._made[name] = family(self._spec(name))
        return made

    def _spec(self, name: str) -> Family:
        spec = _BY_NAME[name]
        return spec._replace(labels=(*spec.labels, SHARD_LABEL)) if self._shard else spec

    def all(self) -> list[Metric]:
        return [self._made[f.name] for f in FAMILIES if f.name in self._made]

    def joined(self, other: _Families) -> list[Metric]:
        """Both sides' families in `FAMILIES` order (each family filled by one side)."""
        made = {**self._made, **other._made}
        return [made[f.name] for f in FAMILIES if f.name in made]


# The families of the aggregator's own state (its counters, the collectors', the rolling busbw
# and the live skew), published afresh at every refresh; the others come from the report alone
# and are rendered once a report (`SnapshotCollector`): at 1,024 ranks, ~15,000 samples.
_SERVICE: Final = frozenset({
    "commscope_build_info", "commscope_windows_completed_total",
    "commscope_collective_busbw_samples", "commscope_collective_busbw_bytes_per_second",
    "commscope_collective_busbw_mean_bytes_per_second",
    "commscope_collective_op_busbw_bytes_per_second", "commscope_live_arrival_skew_seconds",
    "commscope_live_arrival_skew_max_seconds",
})  # fmt: skip


def _of_service(name: str) -> bool:
    return name in _SERVICE or name.startswith(("commscope_aggregator_", "commscope_collector_"))


def kept_ranks(
    report: Report, cap: int, started: frozenset[int] = frozenset()
) -> frozenset[str] | None:
    """The ranks with per-rank series under a cap of `cap` (None: all of them): the `cap`
    lowest-numbered of those reported or `started`, the rank the others wait for in place of
    the last when it is not among them."""
    awaited = report.skew.waited_for_rank
    kept = capped_ranks({*report.ranks, *started}, cap, () if awaited is None else (awaited,))
    return None if kept is None else frozenset(str(rank) for rank in kept)


def families(snapshot: Snapshot) -> list[Metric]:
    return _filled(snapshot, None, _PARTS).all()


def _filled(
    snapshot: Snapshot, side: bool | None, parts: tuple[Callable[[_Families, Snapshot], None], ...]
) -> _Families:
    """The families of `side` (None: all), filled by `parts`."""
    keep = kept_ranks(snapshot.report, snapshot.max_rank_series, snapshot.started_ranks)
    out = _Families(snapshot.shard, keep, side)
    out.add("commscope_build_info", (snapshot.job, *BUILD), 1.0)
    folded = 0 if keep is None else len(set(snapshot.report.ranks)) - len(keep)
    out.add("commscope_ranks_folded", (snapshot.job,), folded)
    for part in parts:
        part(out, snapshot)
    return out


def _ranks(out: _Families, snapshot: Snapshot) -> None:
    job = snapshot.job
    for rank, o in snapshot.report.overlap.per_rank.items():
        out.add("commscope_run_comm_compute_overlap_ratio", (job, rank), o.ratio)
        out.add("commscope_exposed_comm_seconds_total", (job, rank), o.exposed_comm_time_s)
        out.add("commscope_exposed_transfer_seconds_total", (job, rank), o.exposed_transfer_s)
        out.add("commscope_exposed_waiting_seconds_total", (job, rank), o.exposed_waiting_s)
        out.add("commscope_exposed_unmatched_seconds_total", (job, rank), o.exposed_unmatched_s)
        out.add("commscope_comm_seconds_total", (job, rank), o.comm_time_s)
        out.add("commscope_compute_seconds_total", (job, rank), o.compute_time_s)


# The per-rank counters, served at 0 for a rank whose stream has started (`_started`).
_RANK_COUNTERS: Final = tuple(
    f.name for f in FAMILIES if f.kind == "counter" and f.labels == ("job", "rank")
)


def _not_reported(snapshot: Snapshot) -> list[str]:
    """The ranks started that the report does not hold yet."""
    reported = set(snapshot.report.ranks)
    return [str(rank) for rank in sorted(snapshot.started_ranks - reported)]


def _started(out: _Families, snapshot: Snapshot) -> None:
    for rank in _not_reported(snapshot):
        for name in _RANK_COUNTERS:
            out.add(name, (snapshot.job, rank), 0.0)


def _latest_windows(windows: list[Window]) -> dict[str, Window]:
    """Each rank's latest window (windows are in time order)."""
    return {str(rank): w for w in windows for rank in w.ranks}


def _latest(out: _Families, snapshot: Snapshot) -> None:
    job = snapshot.job
    for rank, window in _latest_windows(snapshot.report.windows).items():
        overlap = window.overlap.per_rank[rank]
        network = window.network.per_rank[rank]
        steps = window.steps[rank]
        out.add("commscope_comm_compute_overlap_ratio", (job, rank), overlap.ratio)
        out.add("commscope_bus_bandwidth_bytes_per_second", (job, rank), network.bus_bandwidth_Bps)
        out.add("commscope_iteration_seconds", (job, rank), steps.mean_s)
        out.add("commscope_window_exposed_comm_seconds", (job, rank), overlap.exposed_comm_time_s)
        out.add("commscope_window_compute_seconds", (job, rank), overlap.compute_time_s)


def _collectives(out: _Families, snapshot: Snapshot) -> None:
    job = snapshot.job
    for kind, s in snapshot.report.collectives.all_ranks.items():
        out.add("commscope_collective_ops_total", (job, kind), s.count)
        out.add("commscope_collective_message_bytes_total", (job, kind), s.message_bytes)
        out.add("commscope_collective_bus_bytes_total", (job, kind), s.bus_bytes)
        out.add("commscope_collective_seconds_total", (job, kind), s.time_s)
    for kind, rolling in snapshot.busbw.items():
        out.add("commscope_collective_busbw_samples", (job, kind), rolling.count)
        for stat, value in rolling.stats.items():
            if stat in _QUANTILE:
                labels = (job, kind, _QUANTILE[stat])
                out.add("commscope_collective_busbw_bytes_per_second", labels, value)
        mean = rolling.stats.get("mean")
        out.add("commscope_collective_busbw_mean_bytes_per_second", (job, kind), mean)
    for kind, buckets in snapshot.busbw_histogram.items():
        out.histogram("commscope_collective_op_busbw_bytes_per_second", (job, kind), buckets)
    peak = snapshot.report.network.peak_bandwidth_Bps
    out.add("commscope_link_peak_bytes_per_second", (job,), peak)


def _run(out: _Families, snapshot: Snapshot) -> None:
    job, report = snapshot.job, snapshot.report
    out.add("commscope_tokens_per_second", (job,), report.throughput.tokens_per_second)
    out.add("commscope_windows_completed_total", (job,), snapshot.windows_completed)
    out.add("commscope_ranks", (job,), len(report.ranks))
    out.add("commscope_inputs_skipped_total", (job,), len(report.inputs.skipped))
    for reason, count in report.inputs.dropped_events.items():
        out.add("commscope_events_dropped_total", (job, reason), count)


def _cross_rank(out: _Families, snapshot: Snapshot) -> None:
    job, report = snapshot.job, snapshot.report
    for name, per_collective in (
        ("commscope_arrival_skew", _latest_skews(report)),
        ("commscope_run_arrival_skew", report.skew.per_collective),
    ):
        for kind, skew in per_collective.items():
            for quantile, field_name in _SKEW_QUANTILES:
                value = getattr(skew.skew_s, field_name)
                out.add(f"{name}_seconds", (job, kind, quantile), value)
            out.add(f"{name}_max_seconds", (job, kind), skew.skew_s.max)
    for kind, stats in snapshot.live_skew.items():
        _live_skew(out, (job, kind), stats)
    for rank, arrival in report.skew.per_rank.items():
        out.add("commscope_late_arrivals_total", (job, rank), arrival.last)
        out.add("commscope_caused_wait_seconds_total", (job, rank), arrival.caused_wait_s)
        out.add("commscope_waited_seconds_total", (job, rank), arrival.waited_s)
    awaited = report.skew.waited_for_rank
    for rank in report.skew.per_rank:
        out.add("commscope_rank_waited_for", (job, rank), float(rank == str(awaited)))
    _pipeline(out, job, report)
    out.add("commscope_matched_collectives_total", (job,), report.matching.instances)
    out.add("commscope_collective_desyncs_total", (job,), report.matching.desync_count)
    analysed = [w for w in report.windows if w.name not in report.inputs.open_windows]
    for rank, window in _latest_windows(analysed).items():
        offset = window.clocks.per_rank.get(rank)
        if offset is not None:
            out.add("commscope_clock_offset_seconds", (job, rank), offset.offset_s)
    out.add("commscope_mfu_ratio", (job,), report.utilization.mfu)
    out.add("commscope_hfu_ratio", (job,), report.utilization.hfu)


def _alltoallv(out: _Families, snapshot: Snapshot) -> None:
    """All-to-all-v bytes per rank, the busiest rank, and the latest step's imbalance."""
    job, found = snapshot.job, snapshot.report.alltoallv
    if found is None:
        return
    for rank, r in found.per_rank.items():
        out.add("commscope_alltoallv_sent_bytes_total", (job, rank), r.sent_bytes)
        out.add("commscope_alltoallv_received_bytes_total", (job, rank), r.received_bytes)
        out.add(
            "commscope_alltoallv_busiest_rank", (job, rank), float(rank == str(found.busiest_rank))
        )
    last = found.steps[-1] if found.steps else None
    if last is not None:
        out.add("commscope_alltoallv_sent_imbalance_ratio", (job,), last.sent_imbalance)
        out.add("commscope_alltoallv_received_imbalance_ratio", (job,), last.received_imbalance)


def _flight(out: _Families, snapshot: Snapshot) -> None:
    report = snapshot.report.flight_recorder
    for name, labels, value in flightmetrics.samples(
        snapshot.job, report, snapshot.max_rank_series
    ):
        out.add(name, labels, value)


def _pipeline(out: _Families, job: str, report: Report) -> None:
    awaited = report.pipeline.waited_for_rank
    for rank, row in report.pipeline.per_rank.items():
        out.add("commscope_pipeline_bubble_seconds", (job, rank), row.bubble_s)
        out.add("commscope_pipeline_neighbour_bubble_seconds", (job, rank), row.neighbour_bubble_s)
        out.add("commscope_pipeline_stage_waited_for", (job, rank), float(rank == str(awaited)))


def _live_skew(out: _Families, labels: tuple[str, str], stats: Mapping[str, float]) -> None:
    """A collective's live skew: its quantiles, and its max in a family of its own."""
    for stat, value in stats.items():
        if stat in _QUANTILE:
            out.add("commscope_live_arrival_skew_seconds", (*labels, _QUANTILE[stat]), value)
    out.add("commscope_live_arrival_skew_max_seconds", labels, stats.get("max"))


def _latest_skews(report: Report) -> dict[str, CollectiveSkew]:
    """Each collective type's skew in the latest window that every rank has finished and
    that has the type (a window some ranks have not finished times only the others)."""
    world = report.world_size
    full = [w for w in report.windows if world is None or len(w.ranks) >= world]
    return {kind: skew for w in full for kind, skew in w.skew.per_collective.items()}


def _alpha_beta(out: _Families, snapshot: Snapshot) -> None:
    """The MAX_GROUPS process groups with the most matched instances (label set bounded)."""
    job = snapshot.job
    fitted = [
        (group, kind, fit)
        for group, kinds in snapshot.report.alpha_beta.items()
        for kind, fit in kinds.items()
        if fit.beta_Bps is not None
    ]
    weight: dict[str, int] = {}
    for group, _, fit in fitted:
        weight[group] = weight.get(group, 0) + fit.instances
    kept = set(sorted(weight, key=lambda g: (-weight[g], g))[:MAX_GROUPS])
    for group, kind, fit in fitted:
        if group in kept:
            out.add("commscope_alpha_seconds", (job, group, kind), fit.alpha_s)
            out.add("commscope_beta_bytes_per_second", (job, group, kind), fit.beta_Bps)
    if fitted:
        out.add("commscope_alpha_beta_groups_omitted", (job,), len(weight) - len(kept))


def _links(out: _Families, snapshot: Snapshot) -> None:
    """Busbw per link class and collective type (2 x the collective types: bounded)."""
    job, links = snapshot.job, snapshot.report.links
    if links is None:
        return
    for name, link in (("intra_node", links.intra_node), ("inter_node", links.inter_node)):
        out.add("commscope_node_link_peak_bytes_per_second", (job, name), link.peak_Bps)
        for kind, found in link.collectives.items():
            labels = (job, name, kind)
            out.add("commscope_node_link_busbw_bytes_per_second", labels, found.busbw_Bps)


def _gpu(out: _Families, snapshot: Snapshot) -> None:
    job, kernels = snapshot.job, snapshot.report.kernels
    if kernels.per_rank:
        for category, seconds in kernels.time_s.items():
            out.add("commscope_gpu_time_seconds_total", (job, category), seconds)
    for rank, k in kernels.per_rank.items():
        out.add("commscope_gpu_idle_ratio", (job, rank), k.idle_ratio)
        out.add("commscope_gpu_memory_peak_bytes", (job, rank), k.memory_peak_bytes)
    _graphs(out, snapshot)


def _graphs(out: _Families, snapshot: Snapshot) -> None:
    """CUDA graph launches, those without recorded kernels, their kernels' GPU time."""
    job = snapshot.job
    for rank, g in snapshot.report.graphs.per_rank.items():
        out.add("commscope_graph_launches_total", (job, rank), g.launches)
        out.add("commscope_graph_launches_unrecorded_total", (job, rank), g.empty)
        out.add("commscope_graph_kernel_seconds_total", (job, rank), g.kernel_time_s)


def _aggregator(out: _Families, snapshot: Snapshot) -> None:
    job, stats = snapshot.job, snapshot.aggregator
    for kind, count in stats.messages.items():
        out.add("commscope_aggregator_messages_total", (job, kind), count)
    out.add("commscope_aggregator_events_total", (job,), stats.events)
    out.add("commscope_aggregator_duplicates_total", (job,), stats.duplicates)
    out.add("commscope_aggregator_out_of_order_total", (job,), stats.out_of_order)
    for reason, count in stats.rejected.items():
        out.add("commscope_aggregator_rejected_total", (job, reason), count)
    out.add("commscope_aggregator_acks_total", (job,), stats.acks)
    for reason, count in stats.refused.items():
        out.add("commscope_aggregator_refused_connections_total", (job, reason), count)
    for state, count in snapshot.streams.items():
        out.add("commscope_aggregator_streams", (job, state), count)
    out.add("commscope_aggregator_log_bytes", (job,), stats.log_bytes)
    out.add("commscope_aggregator_received_bytes_total", (job,), stats.received_bytes)
    out.add("commscope_aggregator_window_latency_seconds", (job,), stats.window_latency_s)
    for where, count in stats.io_errors.items():
        out.add("commscope_aggregator_io_errors_total", (job, where), count)


def _collectors(out: _Families, snapshot: Snapshot) -> None:
    """Each collector's counters as its heartbeats relay them, and whether it is up."""
    job = snapshot.job
    for node, (s, up) in snapshot.collectors.items():
        labels = (job, node)
        out.add("commscope_collector_up", labels, 1.0 if up else 0.0)
        for name, value in counter_samples(s).items():
            out.add(name, labels, value)
        for reason, count in s.dropped.items():
            out.add("commscope_collector_dropped_total", (job, node, reason), count)
        for name, key, count in reason_samples(s):
            out.add(name, (job, node, key), count)


_PARTS: Final = (_ranks, _started, _latest, _collectives, _run, _cross_rank, _alpha_beta, _links,
                 _gpu, _aggregator, _collectors, _alltoallv, _flight)  # fmt: skip
_SERVICE_PARTS: Final = (_collectives, _run, _cross_rank, _aggregator, _collectors)


class SnapshotCollector(Published):
    """The aggregator's metrics: the families of the latest published snapshot (`families`),
    those of its report rendered once for each report shown (the key holds the report, so its
    identity is not reused while the entry lives)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._of_report: tuple[tuple[object, ...], _Families] | None = None
        super().__init__(FAMILIES, self._families(snapshot))

    def show(self, snapshot: Snapshot) -> None:
        self.publish(self._families(snapshot))

    def _families(self, snapshot: Snapshot) -> list[Metric]:
        key = (
            snapshot.report,
            snapshot.job,
            snapshot.shard,
            snapshot.max_rank_series,
            tuple(_not_reported(snapshot)),
        )
        known = self._of_report
        if known is None or known[0][0] is not key[0] or known[0][1:] != key[1:]:
            known = self._of_report = (key, _filled(snapshot, False, _PARTS))
        return known[1].joined(_filled(snapshot, True, _SERVICE_PARTS))
