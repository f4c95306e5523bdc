"""Live NCCL Inspector tailing with real processes: a line appended to a log the collector
watches shows up as a per-collective busbw on the aggregator's /metrics (bounded waits, no
timing assertion), and the run's final report counts every op once."""

from __future__ import annotations

from pathlib import Path

import pytest
from inspector_builder import DUMP_US, coll
from kineto_builder import dist_head, kernel, trace

from service.harness import (
    Aggregate,
    Proc,
    Processes,
    collector_args,
    free_port,
    sample_value,
    wait_for,
)

pytestmark = [pytest.mark.timeout(120)]

BUSBW_MEAN = "commscope_collective_busbw_mean_bytes_per_second"
SAMPLES = "commscope_collective_busbw_samples"


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)


def samples(aggregate: Aggregate, kind: str, count: int) -> float | None:
    """The mean busbw of `kind` once /metrics counts `count` samples of it (more: an error)."""
    text = aggregate.metrics_text() or ""
    found = sample_value(text, SAMPLES, collective=kind) or 0
    assert found <= count, f"{found} samples of {kind} on /metrics, expected {count}"
    if found != count:
        return None
    return sample_value(text, BUSBW_MEAN, collective=kind)


def test_an_appended_line_is_on_metrics_and_counted_once(procs: Processes, tmp_path: Path) -> None:
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port())
    server = aggregate.start()
    log = tmp_path / "watch" / "inspector" / "node0-pid100.log"
    log.parent.mkdir(parents=True)
    # AllReduce, n = 2, S = 1e6 B in 100 µs: algbw 10 GB/s, busbw 10 x 2(2-1)/2 = 10 GB/s
    append(log, coll(0, sn=1, size=1_000_000, exec_us=100) + "\n" + coll(0, sn=2)[:40])
    args = collector_args(tmp_path / "watch", aggregate.endpoint, "n0", tmp_path / "state")
    collector = procs.start("collect", *args)
    assert wait_for("the first op on /metrics", lambda: samples(aggregate, "AllReduce", 1)) == 1e10
    # the held partial line completes; an AllGather of 250000 B per rank x 2 in 50 µs:
    # S = 5e5 B, algbw 10 GB/s, busbw 10 x (2-1)/2 = 5 GB/s
    append(log, coll(0, sn=2)[40:] + "\n")
    append(log, coll(0, name="AllGather", sn=3, size=250_000, exec_us=50) + "\n")
    wait_for("the AllGather on /metrics", lambda: samples(aggregate, "AllGather", 1), 5.0)
    assert wait_for("two AllReduce samples", lambda: samples(aggregate, "AllReduce", 2)) == 1e10
    collector.terminate()
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    report = aggregate.report()
    assert report["collectives"]["all_ranks"]["AllReduce"]["count"] == 2
    assert report["collectives"]["all_ranks"]["AllGather"]["count"] == 1
    assert report["overlap"]["per_rank"]["0"]["source"] == "nccl inspector"


def three_ops_shown(
    procs: Processes, tmp_path: Path
) -> tuple[Aggregate, Proc, Path, tuple[str, ...], Proc]:
    """An aggregator and a collector tailing a log of 3 AllReduce ops, all 3 on /metrics:
    (the aggregate, its process, the log, the collector's arguments, the collector)."""
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port())
    server = aggregate.start()
    log = tmp_path / "watch" / "node0-pid100.log"
    log.parent.mkdir(parents=True)
    append(log, "".join(coll(0, sn=sn) + "\n" for sn in (1, 2, 3)))
    args = collector_args(tmp_path / "watch", aggregate.endpoint, "n0", tmp_path / "state")
    collector = procs.start("collect", *args)
    wait_for("3 ops on /metrics", lambda: samples(aggregate, "AllReduce", 3))
    return aggregate, server, log, args, collector


def test_a_collector_killed_and_restarted_loses_and_doubles_nothing(
    procs: Processes, tmp_path: Path
) -> None:
    aggregate, server, log, args, collector = three_ops_shown(procs, tmp_path)
    collector.kill()  # SIGKILL: no goodbye, its checkpoint as last written
    collector.wait(30)
    append(log, "".join(coll(0, sn=sn) + "\n" for sn in (4, 5)))
    collector = procs.start("collect-again", *args)
    # the 3 ops shipped before are read again and skipped or refused as duplicates: 5, not 8
    wait_for("5 ops on /metrics", lambda: samples(aggregate, "AllReduce", 5))
    collector.terminate()
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    assert aggregate.report()["collectives"]["all_ranks"]["AllReduce"]["count"] == 5


def test_an_aggregator_killed_mid_log_counts_every_op_once(
    procs: Processes, tmp_path: Path
) -> None:
    aggregate, server, log, _, collector = three_ops_shown(procs, tmp_path)
    server.kill()
    append(log, "".join(coll(0, sn=sn) + "\n" for sn in (4, 5)))
    server = aggregate.start()
    # its rolling statistics start empty: only what arrives after the restart is fed (2 ops;
    # the 3 replayed from its own log are not fed again)
    wait_for("the 2 new ops on /metrics", lambda: samples(aggregate, "AllReduce", 2))
    collector.terminate()
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    assert aggregate.report()["collectives"]["all_ranks"]["AllReduce"]["count"] == 5


def test_two_verbose_logs_give_a_live_skew(procs: Processes, tmp_path: Path) -> None:
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port())
    server = aggregate.start()
    watch = tmp_path / "watch"
    watch.mkdir()
    args = collector_args(watch, aggregate.endpoint, "n0", tmp_path / "state")
    collector = procs.start("collect", *args)
    # AllReduce 1 of the 2-rank world: rank 1 starts 30 µs after rank 0 (hosts' clocks).
    # Rank 0's line first, waited for without the 5 s bound (the collector starting up under
    # load is no part of it); the 5 s run from rank 1's line, which completes the instance.
    append(watch / "node0-pid100.log", coll(0, sn=1, start_us=DUMP_US) + "\n")
    wait_for("rank 0's op on /metrics", lambda: samples(aggregate, "AllReduce", 1))
    append(watch / "node0-pid101.log", coll(1, sn=1, start_us=DUMP_US + 30) + "\n")

    def live_skew() -> float | None:
        text = aggregate.metrics_text() or ""
        name = "commscope_live_arrival_skew_max_seconds"
        return sample_value(text, name, collective="AllReduce")

    assert wait_for("the live skew on /metrics", live_skew, 5.0) == 30e-6
    collector.terminate()
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()


def test_beside_kineto_traces_the_live_report_keeps_the_logs_apart(
    procs: Processes, tmp_path: Path
) -> None:
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port())
    server = aggregate.start()
    watch = tmp_path / "watch"
    (watch / "iteration_2").mkdir(parents=True)
    (watch / "nccl-inspector").mkdir()
    for rank in (0, 1):
        doc = trace([kernel("ncclDevKernel_AllReduce_Sum_f32", 0, 100)], dist_head(rank, 2))
        (watch / "iteration_2" / f"rank{rank}_trace.json").write_bytes(doc)
        log = watch / "nccl-inspector" / f"node0-pid{100 + rank}.log"
        append(log, "".join(coll(rank, sn=sn, start_us=DUMP_US + sn) + "\n" for sn in (1, 2)))
    args = collector_args(watch, aggregate.endpoint, "n0", tmp_path / "state", "--once")
    collector = procs.start("collect", *args)
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    report = aggregate.report()
    # the sections: one AllReduce kernel per rank (Kineto); the logs' 4 ops only apart
    assert report["collectives"]["all_ranks"]["AllReduce"]["count"] == 2
    assert report["inspector"]["collectives"]["all_ranks"]["AllReduce"]["count"] == 4
    assert report["sources"]["network"] == "kineto (the profiled windows)"


K_US = DUMP_US // 300_000_000 * 300_000_000  # the start of the default window holding DUMP_US


def windowed(rank: int, sn: int, at_s: float) -> str:
    """A verbose AllReduce line of 1 MB in 100 µs ending `at_s` s past K_US (2 ranks)."""
    return coll(rank, sn=sn, start_us=K_US + int(at_s * 1e6) - 100) + "\n"


def test_a_window_closed_mid_log_gives_its_figures_before_the_log_ends(
    procs: Processes, tmp_path: Path
) -> None:
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port())
    server = aggregate.start()
    watch = tmp_path / "watch"
    (watch / "insp").mkdir(parents=True)
    logs = [watch / "insp" / f"node0-pid{100 + rank}.log" for rank in (0, 1)]
    # window K (300 s from K_US): ops 1-3 at 30, 40, 50 s; op 4 at 370 s is past K's grace
    # (300 + 60 s): K closes on each rank, while the logs stay open (the job runs on)
    for rank, log in enumerate(logs):
        append(log, "".join(windowed(rank, sn, 20 + 10 * sn) for sn in (1, 2, 3)))
        append(log, windowed(rank, 4, 370))
    args = collector_args(watch, aggregate.endpoint, "n0", tmp_path / "state")
    collector = procs.start("collect", *args)

    def window_shown() -> float | None:
        text = aggregate.metrics_text() or ""
        ops = sample_value(text, "commscope_collective_ops_total", collective="AllReduce")
        bus = sample_value(text, "commscope_bus_bandwidth_bytes_per_second", rank="1")
        return ops if ops == 6 and bus is not None else None

    # the closed window's 2 x 3 ops counted, and rank 1's bus bandwidth (10 GB/s), before
    # any log ended
    assert wait_for("window K's figures on /metrics", window_shown) == 6
    text = aggregate.metrics_text() or ""
    assert sample_value(text, "commscope_bus_bandwidth_bytes_per_second", rank="0") == 1e10
    # a collector killed mid-log and started again: windows K (whole at the aggregator) and
    # K + 1 (op 4 acknowledged) are passed over; op 5 (K + 1) and op 6 (K + 3: K + 2 opens
    # empty and K + 1 closes) are sent once
    collector.kill()
    collector.wait(30)
    for rank, log in enumerate(logs):
        append(log, windowed(rank, 5, 380) + windowed(rank, 6, 1000))
    collector = procs.start("collect-again", *args)
    wait_for("window K + 1 closed", lambda: samples(aggregate, "AllReduce", 12), 60.0)
    collector.terminate()
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    report = aggregate.report()
    assert report["collectives"]["all_ranks"]["AllReduce"]["count"] == 12
    names = [w["name"] for w in report["windows"]]
    assert names == [f"insp@20250718T19{m}00Z" for m in ("30", "35", "40", "45")]
