"""/metrics from a snapshot where every family has something to say: all are served, promtool
accepts the exposition, and the cross-rank families carry the report's numbers. A sharded
aggregator (`--shard NAME`) serves the same samples, each with a `shard` label."""

from __future__ import annotations

import dataclasses
import math
import subprocess

import pytest
from commscope.exporters.metricnames import FAMILIES, MAX_GROUPS, SHARD_LABEL
from commscope.exporters.prometheus import (
    Buckets,
    BusbwHistogram,
    Rolling,
    Snapshot,
    SnapshotCollector,
    families,
    kept_ranks,
)
from commscope.exporters.publish import BUILD
from commscope.model.report import (
    AllToAllRank,
    AllToAllStep,
    AllToAllV,
    FlightProgress,
    FlightRecorder,
    FlightStuck,
    Graphs,
    GraphStats,
)
from commscope.model.schema import (
    AggregatorStats,
    CollectorStats,
    Event,
    FileStats,
    GpuOp,
    MemoryPeak,
    Pipeline,
    PipelineRank,
    Report,
    Step,
    TraceMeta,
)
from commscope.pipeline.config import JobConfig
from commscope.pipeline.report import Options, ParsedFile, build_report
from crossrank_builder import Scenario, calls, results
from msgspec.structs import replace
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector
from tools import require_tool

SLOW = 2


def report() -> Report:
    sizes = [2**k for k in range(12, 26, 3)]
    scenario = Scenario(ranks=4, instances=30, sizes=sizes, slow_rank=SLOW, late_ns=500_000,
                        offsets_ns={1: 40_000}, seed=5)  # fmt: skip
    per_rank: dict[int, list[Event]] = {r: list(ops) for r, ops in calls(scenario)[0].items()}
    for rank, events in per_rank.items():
        events.append(MemoryPeak(0, (30 + rank) * 2**30, 40 * 2**30))
        events.append(GpuOp("compute", 0, 200_000_000, "gemm"))
        events.append(Step(1, 0, 300_000_000 + rank, 1))
    meta = TraceMeta(world_size=4, gpu_name="NVIDIA H100 80GB HBM3", backend="nccl")
    files = [
        ParsedFile("w", f"w/rank{rank}.json", rank, meta, result, FileStats())
        for rank, result in results(per_rank).items()
    ]
    config = JobConfig(model="llama3", flavor="8B", local_batch_size=1, seq_len=4096)
    hosts = {0: "a", 1: "a", 2: "b", 3: "b"}  # one group of 4 ranks over 2 hosts: inter-node
    options = Options(config=config, config_path="llama3_8b.toml", hosts=hosts, net_peak_Bps=50e9)
    found = build_report(["w"], files, options)
    return replace(found, pipeline=PIPELINE)  # no P2P above: the pipeline section stands in


ALLTOALLV = AllToAllV(
    calls=2,
    busiest_rank=1,
    per_rank={"0": AllToAllRank(sent_bytes=64, received_bytes=32),
              "1": AllToAllRank(sent_bytes=96, received_bytes=128),
              "2": AllToAllRank(), "3": AllToAllRank()},
    steps=[AllToAllStep(step=1), AllToAllStep(step=2, sent_imbalance=1.2, received_imbalance=1.6)],
)  # fmt: skip


# Rank 0's 4 graph launches (1 without kernels, 45 µs of graph kernels), rank 1's 2 (none
# recorded), as `graphs_builder.write_job` gives them; ranks 2 and 3 without graphs.
GRAPHS = Graphs(
    all_ranks=GraphStats(launches=6, empty=3, kernel_time_s=4.5e-5),
    per_rank={"0": GraphStats(launches=4, empty=1, kernel_time_s=4.5e-5),
              "1": GraphStats(launches=2, empty=2), "2": GraphStats(), "3": GraphStats()},
)  # fmt: skip


PIPELINE = Pipeline(
    stages=4,
    per_rank={"0": PipelineRank(stage=0, bubble_s=0.25, neighbour_bubble_s=0.125),
              "1": PipelineRank(stage=1, bubble_s=0.5, neighbour_bubble_s=0.0),
              "2": PipelineRank(stage=2, bubble_s=0.0, neighbour_bubble_s=0.0),
              "3": PipelineRank(stage=3, bubble_s=0.75, neighbour_bubble_s=0.5)},
    waited_for_rank=SLOW,
)  # fmt: skip


def test_pipeline_families_carry_the_section() -> None:
    text = exposition()
    for line in (
        'commscope_pipeline_bubble_seconds{job="llama",rank="0"} 0.25',
        'commscope_pipeline_bubble_seconds{job="llama",rank="1"} 0.5',
        'commscope_pipeline_neighbour_bubble_seconds{job="llama",rank="0"} 0.125',
        'commscope_pipeline_stage_waited_for{job="llama",rank="0"} 0.0',
        'commscope_pipeline_stage_waited_for{job="llama",rank="2"} 1.0',
    ):
        assert line in text


# Rank 3 never joined AllReduce #5 of group 0 that ranks 0-2 entered (Flight Recorder dumps).
FLIGHT = FlightRecorder(
    dumps=4,
    ranks=[0, 1, 2, 3],
    progress=[FlightProgress(group="0", rank=r, enqueued=4 if r == 3 else 5, completed=4,
                             last_op="AllReduce") for r in range(4)],
    stuck=[FlightStuck(group="0", desc="default_pg", rank=3, after_seq=4, after_op="AllReduce",
                       missed_seq=5, missed_op="AllReduce", entered_by=[0, 1, 2])],
)  # fmt: skip


def test_flight_families_flag_the_stuck_rank_and_each_ranks_progress() -> None:
    text = exposition()
    for rank in range(4):
        flag = 1.0 if rank == 3 else 0.0
        labels = f'collective="AllReduce",job="llama",process_group="0",rank="{rank}"'
        assert f"commscope_flight_stuck{{{labels}}} {flag}" in text
        labels = f'job="llama",process_group="0",rank="{rank}"'
        assert f"commscope_flight_last_completed_sequence{{{labels}}} 4.0" in text


class _Fixed(Collector):
    def __init__(self, snapshot: Snapshot) -> None:
        self.metrics = families(snapshot)

    def collect(self):  # type: ignore[no-untyped-def]
        yield from self.metrics


def snapshot(shard: str = "") -> Snapshot:
    """Every family has something to say (but events dropped)."""
    stats = AggregatorStats(
        messages={"batch": 1},
        rejected={"undecodable": 1},
        window_latency_s=0.1,
        refused={"unknown_key": 2},
        io_errors={"loop": 1},
    )
    node = CollectorStats(
        dropped={"unreadable_file": 1},
        read_failures={"worker_died": 2, "unreadable": 1},
        files_lost={"unreadable": 1},
    )
    return Snapshot(
        job="llama",
        report=replace(report(), alltoallv=ALLTOALLV, graphs=GRAPHS, flight_recorder=FLIGHT),
        windows_completed=1,
        busbw={"AllReduce": Rolling(30, {"p50": 1e10, "p95": 2e10, "mean": 1.2e10})},
        aggregator=stats,
        streams={"finished": 4},
        collectors={"n1": (node, True)},
        shard=shard,
        busbw_histogram={"AllReduce": Buckets((1,) * 14 + (2,), 2e12 + 5e6)},
        live_skew={"AllReduce": {"p50": 1e-5, "p95": 4e-5, "max": 5e-5}},
    )


def exposition(shard: str = "") -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed(snapshot(shard)))
    return generate_latest(registry).decode()


def test_every_family_is_served_and_promtool_accepts_them() -> None:
    text = exposition()
    missing = [
        f.name
        for f in FAMILIES
        if not any(f"\n{f.name}{end}" in text for end in ("{", " ", "_bucket{"))
    ]
    # counters with nothing to count yet are absent: the events-dropped family needs dropped events
    assert missing == ["commscope_events_dropped_total"]
    checked = subprocess.run([require_tool("promtool"), "check", "metrics"], input=text.encode(),
                             capture_output=True, timeout=30, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()


def test_cross_rank_families_carry_the_report_numbers() -> None:
    text, found = exposition(), report()
    # the rank the others wait for is a label on a 0/1 gauge, every other rank's at 0
    for rank in range(4):
        flag = 1.0 if rank == SLOW else 0.0
        assert f'commscope_rank_waited_for{{job="llama",rank="{rank}"}} {flag}' in text
    for rank, row in found.overlap.per_rank.items():  # the exposed split, as the report's
        parts = {}
        for part in ("transfer", "waiting", "unmatched"):
            value = getattr(row, f"exposed_{part}_s")
            line = f'commscope_exposed_{part}_seconds_total{{job="llama",rank="{rank}"}} {value}'
            assert line in text
            parts[part] = value
        assert math.fsum(parts.values()) == pytest.approx(row.exposed_comm_time_s, abs=1e-12)
    assert found.overlap.per_rank[str(SLOW)].exposed_waiting_s == 0.0  # nobody to wait for
    late = found.skew.per_rank[str(SLOW)].last
    assert f'commscope_late_arrivals_total{{job="llama",rank="{SLOW}"}} {float(late)}' in text
    beta = found.alpha_beta["0"]["AllReduce"].beta_Bps
    line = next(ln for ln in text.splitlines() if ln.startswith("commscope_beta_bytes_per_second"))
    assert float(line.split()[-1]) == pytest.approx(beta)
    assert 'collective="AllReduce",job="llama",process_group="0"' in line
    mfu = found.utilization.mfu
    assert mfu is not None and f'commscope_mfu_ratio{{job="llama"}} {mfu!r}' in text


def test_alpha_beta_labels_are_capped_at_max_groups() -> None:
    from commscope.model.schema import AlphaBeta

    fits = {str(g): {"AllReduce": AlphaBeta(instances=g, sizes=3, alpha_s=1e-5, beta_Bps=1e9)}
            for g in range(MAX_GROUPS + 5)}  # fmt: skip
    text = "\n".join(
        str(s)
        for m in families(Snapshot(job="j", report=Report(alpha_beta=fits)))
        for s in m.samples
    )
    assert text.count("commscope_alpha_seconds") == MAX_GROUPS
    omitted = next(m for m in families(Snapshot(job="j", report=Report(alpha_beta=fits)))
                   if m.name == "commscope_alpha_beta_groups_omitted")  # fmt: skip
    assert omitted.samples[0].value == 5


def _window_files(name: str, late_ns: int, ranks: range) -> list[ParsedFile]:
    scenario = Scenario(ranks=4, instances=20, slow_rank=SLOW, late_ns=late_ns, seed=len(name))
    per_rank = {r: ops for r, ops in calls(scenario)[0].items() if r in ranks}
    meta = TraceMeta(world_size=4)
    return [ParsedFile(name, f"{name}/rank{rank}.json", rank, meta, result, FileStats())
            for rank, result in results(per_rank).items()]  # fmt: skip


def _skews(metrics: list[object], name: str) -> dict[str, float]:
    """A skew's quantiles by `quantile` label, and its max (a family of its own)."""
    family = next(m for m in metrics if getattr(m, "name", None) == f"{name}_seconds")
    largest = next(m for m in metrics if getattr(m, "name", None) == f"{name}_max_seconds")
    found = {s.labels["quantile"]: s.value for s in family.samples}  # type: ignore[attr-defined]
    return {**found, "max": largest.samples[0].value}  # type: ignore[attr-defined]


def test_skew_gauge_is_the_latest_full_window_and_the_run_gauge_the_whole_run() -> None:
    files = [
        *_window_files("iteration_10", 300_000, range(4)),
        *_window_files("iteration_20", 2_000_000, range(4)),
        *_window_files("iteration_30", 9_000_000, range(2, 4)),  # ranks 0 and 1 not yet done
    ]
    found = build_report(["iteration_10", "iteration_20", "iteration_30"], files, Options())
    assert [len(w.ranks) for w in found.windows] == [4, 4, 2]
    metrics: list[object] = list(families(Snapshot(job="j", report=found)))
    latest = found.windows[1].skew.per_collective["AllReduce"].skew_s
    run = found.skew.per_collective["AllReduce"].skew_s
    assert _skews(metrics, "commscope_arrival_skew") == {
        "0.5": latest.median,
        "0.95": latest.p95,
        "max": latest.max,
    }
    assert _skews(metrics, "commscope_run_arrival_skew") == {
        "0.5": run.median,
        "0.95": run.p95,
        "max": run.max,
    }
    # the windows differ by construction, so the two gauges can tell them apart
    assert latest.median is not None and 1.5e-3 < latest.median < 2.1e-3
    assert run.max is not None and run.max > 8e-3


def test_clock_offsets_of_an_open_window_are_those_of_the_latest_analysed_one() -> None:
    """Mid-run, iteration_30 open (ranks 2 and 3 done) is given without cross-rank sections:
    every rank's offset gauge is its offset in iteration_20, never dropped."""
    files = [
        *_window_files("iteration_20", 2_000_000, range(4)),
        *_window_files("iteration_30", 9_000_000, range(2, 4)),
    ]
    found = build_report(["iteration_20", "iteration_30"], files, Options(waiting={"iteration_30"}))
    metrics = families(Snapshot(job="j", report=found))
    family = next(m for m in metrics if m.name == "commscope_clock_offset_seconds")
    offsets = {s.labels["rank"]: s.value for s in family.samples}
    window = found.windows[0].clocks.per_rank
    assert offsets == {rank: window[rank].offset_s for rank in ("0", "1", "2", "3")}


def samples(shard: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, dict(s.labels), s.value) for m in families(snapshot(shard)) for s in m.samples]


def test_a_shard_labels_every_sample_and_changes_nothing_else() -> None:
    plain, sharded = samples(""), samples("rack-7")
    # all but events dropped; the histogram serves three names (_bucket, _sum, _count)
    assert len({name for name, _, _ in plain}) == len(FAMILIES) - 1 + 2
    assert all(SHARD_LABEL not in labels for _, labels, _ in plain)
    assert sharded == [
        (name, {**labels, "shard": "rack-7"}, value) for name, labels, value in plain
    ]


def test_the_sharded_exposition_passes_promtool() -> None:
    text = exposition("a")
    # the shard comes last, after the family's own labels
    assert 'commscope_ranks{job="llama",shard="a"} 4.0' in text
    assert 'commscope_collector_up{job="llama",node="n1",shard="a"} 1.0' in text
    checked = subprocess.run([require_tool("promtool"), "check", "metrics"], input=text.encode(),
                             capture_output=True, timeout=30, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()


def test_build_info_and_link_peak_are_served() -> None:
    text = exposition()
    version, python, protocol = BUILD
    labels = f'job="llama",protocol="{protocol}",python="{python}",version="{version}"'
    assert f"commscope_build_info{{{labels}}} 1.0" in text
    # H100: the GPU table's 450 GB/s per direction (the report's peak_bandwidth_Bps)
    assert 'commscope_link_peak_bytes_per_second{job="llama"} 4.5e+11' in text


def test_busbw_per_link_class_is_served_against_each_link_s_peak() -> None:
    text, found = exposition(), report()
    assert found.links is not None
    busbw = found.links.inter_node.collectives["AllReduce"].busbw_Bps
    head = 'commscope_node_link_busbw_bytes_per_second{collective="AllReduce",job="llama",'
    (line,) = [line for line in text.splitlines() if line.startswith(head)]
    assert line.startswith(head + 'link="inter_node"} ') and float(line.split()[-1]) == busbw
    peak = "commscope_node_link_peak_bytes_per_second"
    assert f'{peak}{{job="llama",link="inter_node"}} 5e+10' in text
    assert f'{peak}{{job="llama",link="intra_node"}} 4.5e+11' in text


def test_the_busbw_histogram_counts_each_value_under_the_first_bound_at_or_above_it() -> None:
    histogram = BusbwHistogram()
    histogram.add("AllReduce", [5e6, 1e7, 3e9])
    histogram.add("AllReduce", [2e12, math.nan, 0.0, -1.0])  # the last three are left out
    (buckets,) = histogram.snapshot().values()
    # 5e6 and 1e7 are <= 1e7 (le is inclusive); 3e9 first fits under 5e9 (the 7th bound);
    # 2e12 is above 1e12: only +Inf holds it
    assert buckets.cumulative == (2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 4)
    assert buckets.total == 5e6 + 1e7 + 3e9 + 2e12


def test_the_histogram_is_served_with_fixed_bounds_and_no_rank() -> None:
    text = exposition()
    name = "commscope_collective_op_busbw_bytes_per_second"
    assert f'{name}_bucket{{collective="AllReduce",job="llama",le="1e+07"}} 1.0' in text
    assert f'{name}_bucket{{collective="AllReduce",job="llama",le="1e+12"}} 1.0' in text
    assert f'{name}_bucket{{collective="AllReduce",job="llama",le="+Inf"}} 2.0' in text
    assert f'{name}_count{{collective="AllReduce",job="llama"}} 2.0' in text
    assert all("rank=" not in line for line in text.splitlines() if line.startswith(name))


def _ranked(snap: Snapshot) -> dict[str, set[str]]:
    """Per family, the rank label values it serves."""
    out: dict[str, set[str]] = {}
    for metric in families(snap):
        for s in metric.samples:
            if "rank" in s.labels:
                out.setdefault(metric.name, set()).add(s.labels["rank"])
    return out


def _folded(snap: Snapshot) -> float:
    (metric,) = [m for m in families(snap) if m.name == "commscope_ranks_folded"]
    return metric.samples[0].value


def test_a_rank_cap_keeps_the_lowest_ranks_and_the_slowest_and_counts_the_rest() -> None:
    whole = snapshot()
    capped = Snapshot(job=whole.job, report=whole.report, max_rank_series=2)
    # 4 ranks, cap 2: ranks 0 and 1, then the slowest (2) takes the last place: {0, 2}
    assert kept_ranks(whole.report, 2) == {"0", str(SLOW)}
    served = _ranked(capped)
    flight = {name: served.pop(name) for name in list(served) if name.startswith("commscope_fl")}
    assert served and all(ranks == {"0", str(SLOW)} for ranks in served.values())
    # the Flight Recorder families keep their stuck rank (3) in place of the last: {0, 3}
    assert flight and all(ranks == {"0", "3"} for ranks in flight.values())
    assert _folded(capped) == 2  # ranks 1 and 3
    # job-wide families (no rank label) are the same with or without the cap
    uncapped = Snapshot(job=whole.job, report=whole.report, max_rank_series=0)

    def job_wide(snap: Snapshot) -> list[object]:
        skip = {*served, *flight, "commscope_ranks_folded"}
        return [m.samples for m in families(snap) if m.name not in skip]

    assert job_wide(capped) == job_wide(uncapped) != []


def test_no_rank_is_folded_at_or_under_the_cap_or_without_one() -> None:
    whole = snapshot()
    for cap in (0, 4, 1024):
        snap = Snapshot(job=whole.job, report=whole.report, max_rank_series=cap)
        assert kept_ranks(whole.report, cap) is None
        assert _folded(snap) == 0
        assert all(ranks == {"0", "1", "2", "3"} for ranks in _ranked(snap).values())


def served(collector: Collector) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry).decode()


def test_the_aggregators_metrics_render_its_report_once_and_its_own_state_each_time() -> None:
    """Shown again with the same report and new counters (a refresh between reports), the
    collector serves exactly what `families` gives, its report's families not rendered anew;
    a new report (a copy: equal, another object) is rendered anew."""
    first = snapshot()
    collector = SnapshotCollector(first)
    served(collector)  # its counters at 0 (`firstzero`), then their values
    assert served(collector) == served(_Fixed(first))
    of_report = collector._of_report
    stats = replace(first.aggregator, duplicates=7, received_bytes=123)
    later = dataclasses.replace(first, aggregator=stats, windows_completed=2)
    collector.show(later)
    assert served(collector) == served(_Fixed(later)) != served(_Fixed(first))
    assert collector._of_report is of_report
    collector.show(dataclasses.replace(later, report=replace(later.report)))
    assert collector._of_report is not of_report
    assert served(collector) == served(_Fixed(later))


def test_every_help_text_is_ascii() -> None:
    from commscope.exporters.metricnames import COLLECTOR_FAMILIES

    for spec in (*FAMILIES, *COLLECTOR_FAMILIES):
        assert spec.help.isascii() and spec.help.isprintable(), spec.name


def test_quantiles_carry_the_quantile_label_and_max_and_mean_have_families() -> None:
    text = exposition()
    assert "# TYPE commscope_collective_busbw_bytes_per_second summary" in text
    busbw = 'commscope_collective_busbw_bytes_per_second{collective="AllReduce",job="llama",'
    assert f'{busbw}quantile="0.5"}} 1e+10' in text
    assert f'{busbw}quantile="0.95"}} 2e+10' in text
    mean = 'commscope_collective_busbw_mean_bytes_per_second{collective="AllReduce",job="llama"}'
    assert f"{mean} 1.2e+10" in text
    live = 'commscope_live_arrival_skew_seconds{collective="AllReduce",job="llama",'
    assert f'{live}quantile="0.5"}} 1e-05' in text and f'{live}quantile="0.95"}} 4e-05' in text
    largest = 'commscope_live_arrival_skew_max_seconds{collective="AllReduce",job="llama"}'
    assert f"{largest} 5e-05" in text
    assert "stat=" not in text


# The per-rank counters (`counter` kind, labels job and rank)
RANK_COUNTERS = sorted(
    f.name for f in FAMILIES if f.kind == "counter" and f.labels[1:] == ("rank",)
)


def _samples(snap: Snapshot, rank: str) -> dict[str, float]:
    return {
        s.name: s.value for m in families(snap) for s in m.samples if s.labels.get("rank") == rank
    }


def test_a_started_rank_s_counters_are_served_at_0_until_the_report_holds_it() -> None:
    """Rank 7's stream has started (its file-name rank); the report (ranks 0-3) does not hold
    it yet: each per-rank counter is served at 0 for it, no gauge; the reported ranks keep
    their figures."""
    found = report()
    started = Snapshot(job="j", report=found, started_ranks=frozenset({1, 7}))
    assert sorted(_RANK_COUNTERS_EXPECTED) == RANK_COUNTERS
    assert _samples(started, "7") == dict.fromkeys(RANK_COUNTERS, 0.0)
    assert _samples(started, "1") == _samples(Snapshot(job="j", report=found), "1")
    assert _samples(Snapshot(job="j", started_ranks=frozenset({0})), "0") == dict.fromkeys(
        RANK_COUNTERS, 0.0
    )


_RANK_COUNTERS_EXPECTED = [
    f"commscope_{name}_total"
    for name in (
        "exposed_comm_seconds", "exposed_transfer_seconds", "exposed_waiting_seconds",
        "exposed_unmatched_seconds", "comm_seconds", "compute_seconds", "late_arrivals",
        "caused_wait_seconds", "waited_seconds", "alltoallv_sent_bytes", "alltoallv_received_bytes",
        "graph_launches", "graph_launches_unrecorded", "graph_kernel_seconds",
    )
]  # fmt: skip


def test_the_latest_window_gauges_are_the_window_s_exposed_and_compute_time() -> None:
    found = report()
    window = found.windows[-1].overlap.per_rank["2"]
    samples = _samples(Snapshot(job="j", report=found), "2")
    assert samples["commscope_window_exposed_comm_seconds"] == window.exposed_comm_time_s
    assert samples["commscope_window_compute_seconds"] == window.compute_time_s


def test_graph_families_carry_each_rank_s_launches_the_unrecorded_and_the_gpu_time() -> None:
    text = exposition()
    for line in (
        'commscope_graph_launches_total{job="llama",rank="0"} 4.0',
        'commscope_graph_launches_unrecorded_total{job="llama",rank="0"} 1.0',
        'commscope_graph_kernel_seconds_total{job="llama",rank="0"} 4.5e-05',
        'commscope_graph_launches_unrecorded_total{job="llama",rank="1"} 2.0',
        'commscope_graph_kernel_seconds_total{job="llama",rank="1"} 0.0',
    ):
        assert f"\n{line}\n" in text, line


def test_alltoallv_families_carry_the_bytes_the_busiest_rank_and_the_latest_step() -> None:
    text = exposition()
    for line in (
        'commscope_alltoallv_sent_bytes_total{job="llama",rank="1"} 96.0',
        'commscope_alltoallv_received_bytes_total{job="llama",rank="0"} 32.0',
        'commscope_alltoallv_busiest_rank{job="llama",rank="1"} 1.0',
        'commscope_alltoallv_busiest_rank{job="llama",rank="0"} 0.0',
        'commscope_alltoallv_sent_imbalance_ratio{job="llama"} 1.2',
        'commscope_alltoallv_received_imbalance_ratio{job="llama"} 1.6',
    ):
        assert f"\n{line}\n" in text, line
