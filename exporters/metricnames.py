"""The Prometheus metric families commscope exports (pure: names, types, labels, help).

One table, read by the `/metrics` collector, the deploy checks and the Grafana dashboard test.
Names follow Prometheus conventions: prefix `commscope_`, base units, counters end `_total`.
Labels are bounded: `job`, `rank` (at most `--max-rank-series` ranks), `collective`, `node`
(a collector), `quantile` ("0.5", "0.95": Prometheus' summary convention; max and
mean are families of their own), small fixed `reason`/`kind`/`state`/`category` sets, and
`process_group` for at most `MAX_GROUPS` groups (those with the most matched collectives),
`link` (intra_node, inter_node: `commscope_node_link_*`, with `collective` at most);
never file names, kernel names or message sizes. The one histogram (per-op busbw) carries
`job` and `collective` only: no rank x collective x bucket product.
An aggregator run with `--shard NAME` adds `shard` (`SHARD_LABEL`) to every family it serves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, NamedTuple

from commscope.model.schema import (
    DROP_REASONS,
    EVENT_DROP_REASONS,
    READ_FAILURES,
    REASONS,
    REFUSED_REASONS,
    REJECT_REASONS,
)

MAX_GROUPS: Final = 16
# The label every family of a sharded aggregator carries (one value per aggregator: the set of
# nodes whose collectors point at it); absent when it runs without --shard.
SHARD_LABEL: Final = "shard"
SHARD_PATTERN: Final = "^[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,62}$"


class Family(NamedTuple):
    name: str  # as exposed (counters with their `_total`; histograms without `_bucket`)
    kind: str  # "gauge" | "counter" | "histogram" | "summary" (quantiles only)
    labels: tuple[str, ...]  # a histogram's `le` is not listed
    help: str


# Upper bounds (bytes/s) of the per-op busbw histogram: 10 MB/s (a CPU gloo run) to 1 TB/s
# (NVLink), 1-2.5-5 steps per decade in GB/s. Fixed, so every aggregator and shard has the
# same buckets and `sum by (le)` adds them up.
BUSBW_BUCKETS: Final = (
    1e7, 1e8, 2.5e8, 5e8, 1e9, 2.5e9, 5e9, 1e10, 2.5e10, 5e10, 1e11, 2.5e11, 5e11, 1e12,
)  # fmt: skip
# The per-rank series an aggregator exports by default (`--max-rank-series`): beyond it the
# lowest-numbered ranks keep theirs (and the rank the others wait for), the rest are folded
# (counted).
MAX_RANK_SERIES: Final = 1024


def capped_ranks(
    ranks: Iterable[int], cap: int, wanted: Iterable[int] = ()
) -> frozenset[int] | None:
    """The ranks with per-rank series under a cap of `cap` (`--max-rank-series`; None: all of
    them, within the cap or 0): the lowest-numbered, with the `wanted` ones (the rank the
    others wait for, the stuck ranks) in place of the last."""
    found = sorted(set(ranks))
    if cap <= 0 or len(found) <= cap:
        return None
    first = sorted(set(wanted))[:cap]
    others = [rank for rank in found if rank not in first]
    return frozenset([*others[: cap - len(first)], *first])


_J: Final = ("job",)
_JR: Final = ("job", "rank")
_JC: Final = ("job", "collective")
_JCQ: Final = ("job", "collective", "quantile")  # "0.5", "0.95", as summaries have it
_JN: Final = ("job", "node")
_UP: Final = "commscope_collector_up"  # the aggregator's view of a collector


def _by_reason(what: str, keys: Iterable[str]) -> str:
    """A HELP text naming each `reason` key with its text (the one table, `schema.REASONS`)."""
    return f"{what}; reason: one of " + ", ".join(f"{key} ({REASONS[key]})" for key in keys)


FAMILIES: Final = (
    # ---- the run, from finished windows
    Family(
        "commscope_comm_compute_overlap_ratio",
        "gauge",
        _JR,
        "|C & P| / |C| of the rank's latest finished window (fraction of 1)",
    ),
    Family(
        "commscope_run_comm_compute_overlap_ratio",
        "gauge",
        _JR,
        "|C & P| / |C| of the rank over every finished window so far",
    ),
    Family(
        "commscope_exposed_comm_seconds_total",
        "counter",
        _JR,
        "communication time not overlapped by compute (|C| - |C & P|), finished windows",
    ),
    Family(
        "commscope_exposed_transfer_seconds_total",
        "counter",
        _JR,
        "exposed communication moving data: no member of the collective still awaited, finished "
        "windows with cross-rank facts",
    ),
    Family(
        "commscope_exposed_waiting_seconds_total",
        "counter",
        _JR,
        "exposed communication waiting for the last member of a matched collective to arrive, "
        "finished windows with cross-rank facts",
    ),
    Family(
        "commscope_exposed_unmatched_seconds_total",
        "counter",
        _JR,
        "exposed communication in calls matched to no other rank's call (not split), finished "
        "windows with cross-rank facts",
    ),
    Family("commscope_comm_seconds_total", "counter", _JR, "|C|: union of communication time"),
    Family(
        "commscope_alltoallv_sent_bytes_total",
        "counter",
        _JR,
        "bytes the rank sent in all-to-all calls that recorded split sizes (own slice included)",
    ),
    Family(
        "commscope_alltoallv_received_bytes_total",
        "counter",
        _JR,
        "bytes the rank received in all-to-all calls that recorded split sizes",
    ),
    Family(
        "commscope_alltoallv_busiest_rank",
        "gauge",
        _JR,
        "1 for the rank that sent or received the most all-to-all-v bytes over the run, else 0",
    ),
    Family(
        "commscope_flight_stuck",
        "gauge",
        ("job", "process_group", "rank", "collective"),
        "1 for a rank that never joined the collective of its process group that other ranks "
        "entered (Flight Recorder dumps; collective: that one's type); 0 for the group's other "
        "dumped ranks (collective: their last enqueued one)",
    ),
    Family(
        "commscope_flight_last_completed_sequence",
        "gauge",
        ("job", "process_group", "rank"),
        "the sequence id of the last collective of the process group the rank saw complete, "
        "from its Flight Recorder dump",
    ),
    Family(
        "commscope_alltoallv_sent_imbalance_ratio",
        "gauge",
        _J,
        "max/mean over ranks of the all-to-all-v bytes sent in the latest profiled step",
    ),
    Family(
        "commscope_alltoallv_received_imbalance_ratio",
        "gauge",
        _J,
        "max/mean over ranks of the all-to-all-v bytes received in the latest profiled step",
    ),
    Family("commscope_compute_seconds_total", "counter", _JR, "|P|: union of compute time"),
    Family(
        "commscope_bus_bandwidth_bytes_per_second",
        "gauge",
        _JR,
        "sum of S*F / sum of durations over the rank's sized collectives in its latest finished "
        "window",
    ),
    Family(
        "commscope_iteration_seconds",
        "gauge",
        _JR,
        "mean ProfilerStep duration of the rank's latest finished window",
    ),
    Family(
        "commscope_window_exposed_comm_seconds",
        "gauge",
        _JR,
        "exposed communication (|C| - |C & P|) of the rank's latest finished window: the "
        "exposed fraction of a run whose windows are far apart, without rate()",
    ),
    Family(
        "commscope_window_compute_seconds",
        "gauge",
        _JR,
        "|P|: union of compute time of the rank's latest finished window",
    ),
    Family("commscope_collective_ops_total", "counter", _JC, "collectives, all ranks"),
    Family(
        "commscope_collective_message_bytes_total",
        "counter",
        _JC,
        "sum of message sizes S of sized collectives, all ranks",
    ),
    Family(
        "commscope_collective_bus_bytes_total",
        "counter",
        _JC,
        "sum of S*F (traffic) of sized collectives, all ranks",
    ),
    Family(
        "commscope_collective_seconds_total",
        "counter",
        _JC,
        "sum of collective durations, all ranks",
    ),
    Family(
        "commscope_collective_busbw_bytes_per_second",
        "summary",
        _JCQ,
        "per-op busbw over the rolling horizon: quantile 0.5, 0.95 (log-bucket estimates)",
    ),
    Family(
        "commscope_collective_busbw_mean_bytes_per_second",
        "gauge",
        _JC,
        "mean per-op busbw over the rolling horizon",
    ),
    Family(
        "commscope_collective_op_busbw_bytes_per_second",
        "histogram",
        _JC,
        "per-op busbw (S*F / duration) of sized collectives, all ranks, finished windows since "
        "the aggregator started (no rank label: aggregate with sum by (le, collective))",
    ),
    Family(
        "commscope_link_peak_bytes_per_second",
        "gauge",
        _J,
        "the link's peak bandwidth per direction (--peak-bandwidth or the GPU's table entry), "
        "the ceiling busbw is compared with",
    ),
    Family(
        "commscope_collective_busbw_samples",
        "gauge",
        _JC,
        "sized ops inside the rolling busbw horizon",
    ),
    Family(
        "commscope_tokens_per_second",
        "gauge",
        _J,
        "global batch x seq_len / iteration time, over finished windows",
    ),
    # ---- cross-rank analysis, MFU, kernels
    Family(
        "commscope_arrival_skew_seconds",
        "summary",
        _JCQ,
        "latest - earliest start of matched collectives (aligned clocks), quantile 0.5|0.95, "
        "in the latest finished window every rank has finished that has the collective",
    ),
    Family(
        "commscope_arrival_skew_max_seconds",
        "gauge",
        _JC,
        "largest latest - earliest start of matched collectives (aligned clocks) in the latest "
        "finished window every rank has finished that has the collective",
    ),
    Family(
        "commscope_live_arrival_skew_seconds",
        "summary",
        _JCQ,
        "latest - earliest start of collectives in tailed NCCL Inspector logs (hosts' own "
        "clocks, not aligned), quantile 0.5|0.95, over the rolling horizon",
    ),
    Family(
        "commscope_live_arrival_skew_max_seconds",
        "gauge",
        _JC,
        "largest latest - earliest start of collectives in tailed NCCL Inspector logs (hosts' "
        "own clocks, not aligned) over the rolling horizon",
    ),
    Family(
        "commscope_run_arrival_skew_seconds",
        "summary",
        _JCQ,
        "latest - earliest start of matched collectives (aligned clocks), quantile 0.5|0.95, "
        "over the run's finished windows",
    ),
    Family(
        "commscope_run_arrival_skew_max_seconds",
        "gauge",
        _JC,
        "largest latest - earliest start of matched collectives (aligned clocks) over the "
        "run's finished windows",
    ),
    Family(
        "commscope_late_arrivals_total",
        "counter",
        _JR,
        "matched collectives at which the rank arrived last",
    ),
    Family(
        "commscope_caused_wait_seconds_total",
        "counter",
        _JR,
        "time the other members waited for the rank when it arrived last",
    ),
    Family(
        "commscope_waited_seconds_total",
        "counter",
        _JR,
        "time the rank waited for the last arriver of matched collectives",
    ),
    Family(
        "commscope_rank_waited_for",
        "gauge",
        _JR,
        "1 for the rank the others wait for, when the evidence is clear; 0 for every other "
        "rank with matched collectives",
    ),
    Family(
        "commscope_pipeline_bubble_seconds",
        "gauge",
        _JR,
        "time within the profiled steps a pipeline stage's rank neither computed nor moved "
        "data (the run)",
    ),
    Family(
        "commscope_pipeline_neighbour_bubble_seconds",
        "gauge",
        _JR,
        "the part of the bubble the schedule does not imply (its formula: the report's pipeline "
        "section): what slower stages added (the run)",
    ),
    Family(
        "commscope_pipeline_stage_waited_for",
        "gauge",
        _JR,
        "1 for the rank whose P2P calls caused the most exposed pipeline waiting at the root, "
        "when the evidence is clear (p <= 0.05); 0 for the other ranks of the pipeline",
    ),
    Family(
        "commscope_matched_collectives_total",
        "counter",
        _J,
        "collective instances matched across ranks",
    ),
    Family(
        "commscope_collective_desyncs_total",
        "counter",
        _J,
        "positions where group members disagree on the collective's type or size",
    ),
    Family(
        "commscope_clock_offset_seconds",
        "gauge",
        _JR,
        "the rank's clock offset against the reference rank in its latest finished window",
    ),
    Family(
        "commscope_alpha_seconds",
        "gauge",
        ("job", "process_group", "collective"),
        "alpha of T = alpha + S*F/beta fitted to wait-free collective durations",
    ),
    Family(
        "commscope_beta_bytes_per_second",
        "gauge",
        ("job", "process_group", "collective"),
        "beta of T = alpha + S*F/beta (bus bytes per second, comparable to busbw)",
    ),
    Family(
        "commscope_node_link_busbw_bytes_per_second",
        "gauge",
        ("job", "link", "collective"),
        "bus bandwidth sum(S*F) / sum(wait-free T) of the collectives whose group stays on one "
        "node (link=intra_node) or crosses nodes (link=inter_node)",
    ),
    Family(
        "commscope_node_link_peak_bytes_per_second",
        "gauge",
        ("job", "link"),
        "peak per direction of the intra-node link (NVLink: --peak-bandwidth or the GPU's "
        "table entry) and of the inter-node link (--net-peak, else the table entry of the NIC "
        "the traces name, assumed)",
    ),
    Family(
        "commscope_alpha_beta_groups_omitted",
        "gauge",
        _J,
        f"process groups with a fit but beyond the {MAX_GROUPS} exported",
    ),
    Family("commscope_mfu_ratio", "gauge", _J, "model FLOP/s per GPU / GPU peak FLOP/s"),
    Family("commscope_hfu_ratio", "gauge", _J, "MFU x recomputation factor"),
    Family(
        "commscope_gpu_time_seconds_total",
        "counter",
        ("job", "category"),
        "sum of GPU activity durations by category (gemm, attention, ..., communication, memcpy, "
        "fused)",
    ),
    Family(
        "commscope_gpu_idle_ratio",
        "gauge",
        _JR,
        "GPU idle / (last GPU activity end - first start), over finished windows",
    ),
    Family(
        "commscope_gpu_memory_peak_bytes",
        "gauge",
        _JR,
        "highest `Total Allocated` of the rank's GPU in finished windows",
    ),
    Family("commscope_graph_launches_total", "counter", _JR, "CUDA graph launch calls"),
    Family(
        "commscope_graph_launches_unrecorded_total",
        "counter",
        _JR,
        "CUDA graph launches none of whose kernels the trace holds (the profiler skipped them)",
    ),
    Family(
        "commscope_graph_kernel_seconds_total",
        "counter",
        _JR,
        "summed GPU time of the kernels CUDA graphs replayed (recorded replays)",
    ),
    Family("commscope_windows_completed_total", "counter", _J, "windows with every rank ended"),
    Family("commscope_ranks", "gauge", _J, "ranks seen in finished files"),
    Family(
        "commscope_ranks_folded",
        "gauge",
        _J,
        "ranks whose per-rank series are not exported (beyond --max-rank-series); job-wide "
        "figures still count them",
    ),
    Family("commscope_inputs_skipped_total", "counter", _J, "trace files skipped whole"),
    Family(
        "commscope_events_dropped_total",
        "counter",
        ("job", "reason"),
        _by_reason("malformed trace events dropped", EVENT_DROP_REASONS),
    ),
    # ---- the aggregator itself
    Family(
        "commscope_build_info",
        "gauge",
        ("job", "version", "python", "protocol"),
        "always 1: the commscope version, Python version and wire protocol serving /metrics",
    ),
    Family(
        "commscope_aggregator_messages_total",
        "counter",
        ("job", "kind"),
        "wire messages received, by kind",
    ),
    Family("commscope_aggregator_events_total", "counter", _J, "events applied"),
    Family(
        "commscope_aggregator_duplicates_total",
        "counter",
        _J,
        "records received again and acknowledged, not applied",
    ),
    Family(
        "commscope_aggregator_out_of_order_total",
        "counter",
        _J,
        "records ahead of the next expected one, left for the resend",
    ),
    Family(
        "commscope_aggregator_rejected_total",
        "counter",
        ("job", "reason"),
        _by_reason("messages refused, and connections dropped", REJECT_REASONS),
    ),
    Family("commscope_aggregator_acks_total", "counter", _J, "acknowledgements sent"),
    Family(
        "commscope_aggregator_refused_connections_total",
        "counter",
        ("job", "reason"),
        _by_reason("connections refused at the Curve handshake", REFUSED_REASONS),
    ),
    Family("commscope_aggregator_streams", "gauge", ("job", "state"), "trace streams, by state"),
    Family("commscope_aggregator_log_bytes", "gauge", _J, "write-ahead log of open streams, bytes"),
    Family(
        "commscope_aggregator_received_bytes_total",
        "counter",
        _J,
        "message payload bytes received from collectors, refused ones included (ZeroMQ framing "
        "and routing ids not counted)",
    ),
    Family(
        "commscope_aggregator_io_errors_total",
        "counter",
        ("job", "where"),
        "I/O errors the aggregator survived and retried (loop: receiving and storing; reports)",
    ),
    Family(
        "commscope_aggregator_window_latency_seconds",
        "gauge",
        _J,
        "from a window's last record received to its metrics published",
    ),
    # ---- collectors, relayed in their heartbeats
    Family("commscope_collector_up", "gauge", _JN, "1 while the collector's heartbeats arrive"),
    Family("commscope_collector_files_total", "counter", _JN, "trace files found"),
    Family("commscope_collector_files_done_total", "counter", _JN, "files fully acknowledged"),
    Family("commscope_collector_files_skipped_total", "counter", _JN, "files sent as unusable"),
    Family("commscope_collector_events_total", "counter", _JN, "events read"),
    Family("commscope_collector_batches_sent_total", "counter", _JN, "records sent"),
    Family("commscope_collector_batches_resent_total", "counter", _JN, "records sent again"),
    Family("commscope_collector_batches_acked_total", "counter", _JN, "records acknowledged"),
    Family("commscope_collector_unacked_batches", "gauge", _JN, "records awaiting an ack"),
    Family("commscope_collector_unacked_bytes", "gauge", _JN, "encoded bytes awaiting an ack"),
    Family(
        "commscope_collector_lag_seconds", "gauge", _JN, "age of the oldest unacknowledged record"
    ),
    Family(
        "commscope_collector_dropped_total",
        "counter",
        ("job", "node", "reason"),
        _by_reason("what the collector dropped", DROP_REASONS),
    ),
    Family(
        "commscope_collector_read_failures_total",
        "counter",
        ("job", "node", "reason"),
        _by_reason("reads of a file that failed and were made again", READ_FAILURES),
    ),
    Family(
        "commscope_collector_files_lost_total",
        "counter",
        ("job", "node", "reason"),
        _by_reason(
            "files every read of which failed (by the last one), named in the report", READ_FAILURES
        ),
    ),
)

NAMES: Final = frozenset(f.name for f in FAMILIES)

# A collector's own /metrics (exporters/collectormetrics.py): its counters, as the aggregator
# relays them, and whether its aggregator answers. Not the aggregator's families.
_COLLECTOR_CONNECTED: Final = Family(
    "commscope_collector_connected",
    "gauge",
    _JN,
    "1 while this collector's aggregator answers, 0 after --silence seconds without an answer",
)
_BUILD_INFO: Final = next(f for f in FAMILIES if f.name == "commscope_build_info")
COLLECTOR_FAMILIES: Final = (
    _BUILD_INFO,
    *(f for f in FAMILIES if f.name.startswith("commscope_collector_") and f.name != _UP),
    _COLLECTOR_CONNECTED,
)
