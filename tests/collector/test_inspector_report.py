"""`commscope report` on NCCL Inspector logs written by the test (offline reader)."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from commscope.exporters import naming
from commscope.exporters.text import render
from commscope.pipeline.report import Options
from commscope.service.cli import main
from commscope.service.offline import analyse
from inspector_builder import DUMP_US, coll
from kineto_builder import dist_head, kernel, trace

LOGS = ("node0-pid100.log", "node0-pid101.jsonl.gz")
NOW = datetime(2026, 11, 24, tzinfo=UTC)


def write_job(folder: Path, cut_short: bool = False) -> None:
    """Two ranks, 2 AllReduce (1e6 B) and 1 AllGather (500000 B per rank), verbose; rank 1
    arrives 20 µs later at every op and its AllReduce takes 10 µs more."""
    folder.mkdir(parents=True)
    for rank, name in enumerate(LOGS):
        lines = [coll(rank, sn=sn, exec_us=100 + 10 * rank, start_us=DUMP_US + sn * 1000
                      + 20 * rank) for sn in (1, 2)]  # fmt: skip
        lines.append(coll(rank, name="AllGather", sn=3, size=500_000, exec_us=50,
                          start_us=DUMP_US + 3000 + 20 * rank))  # fmt: skip
        text = "\n".join(lines) + "\n"
        if rank == 0:
            text += "this is not json\n" + coll(0, sn=4, version="v9.0") + "\n"
            text += coll(0, sn=5)[:30] if cut_short else ""
        data = text.encode()
        (folder / name).write_bytes(gzip.compress(data) if name.endswith(".gz") else data)


def test_bandwidth_traffic_matching_and_skew_from_logs(tmp_path: Path) -> None:
    write_job(tmp_path / "job", cut_short=True)
    report = analyse(tmp_path / "job", Options())
    run = report.collectives.all_ranks
    # AllReduce: n = 2, F = 1; 4 ops of 1e6 B: bus bytes 4e6
    assert (run["AllReduce"].count, run["AllReduce"].bus_bytes) == (4, 4_000_000)
    # AllGather: S = 500000 x 2 = 1e6, F = 1/2: bus bytes 2 x 5e5
    assert (run["AllGather"].count, run["AllGather"].bus_bytes) == (2, 1_000_000)
    # rank 0: bus 2e6 + 5e5 over 100 + 100 + 50 µs = 10 GB/s
    assert report.network.per_rank["0"].bus_bandwidth_Bps == 2_500_000 / 250e-6
    assert report.matching.by_seq == 3 and report.matching.unmatched == 0
    assert report.overlap.per_rank["0"].ratio is None
    assert set(report.skew.per_collective) == {"AllReduce", "AllGather"}
    dropped = report.inputs.dropped_events
    assert dropped == {
        "inspector_not_json": 1,
        "inspector_unknown_version": 1,
        "inspector_cut_short": 1,
    }


def test_the_text_report_says_overlap_is_not_applicable(tmp_path: Path) -> None:
    write_job(tmp_path / "job")
    text = render(analyse(tmp_path / "job", Options()))
    assert "rank 0: n/a: NCCL Inspector has no compute kernels  [nccl inspector]" in text
    assert "0.00%" not in text.split("3. NETWORK LOAD")[0].split("OVERLAP")[1]


def test_nothing_is_exposed_or_on_a_cpu_for_logs_without_compute(tmp_path: Path) -> None:
    """No compute kernels: the window summary's exposed time is n/a, not the comm time, and
    the ranks are GPUs (NCCL's), in the header and the file name."""
    write_job(tmp_path / "job")
    report = analyse(tmp_path / "job", Options())
    text = render(report)
    whole = next(line for line in text.splitlines() if line.startswith("  whole run"))
    assert whole.split()[3:5] == ["n/a", "n/a"]  # overlap, exposed/rank
    assert "2 GPUs (GPU unnamed in the traces" in text
    assert naming.basename(report, "job", NOW).endswith("_job_gpu2")


def test_a_log_with_no_usable_line_is_skipped_with_its_reason(tmp_path: Path) -> None:
    write_job(tmp_path / "job")
    (tmp_path / "job" / "node1-pid7.log").write_text('{"header": ')
    report = analyse(tmp_path / "job", Options())
    (skipped,) = report.inputs.skipped
    assert skipped.path.endswith("node1-pid7.log")
    assert "no NCCL Inspector operation" in skipped.reason
    assert "cut short" in skipped.reason


def test_beside_kineto_traces_the_logs_are_reported_apart_not_counted_twice(
    tmp_path: Path,
) -> None:
    write_job(tmp_path / "run" / "inspector")
    window = tmp_path / "run" / "iteration_2"
    window.mkdir()
    for rank in (0, 1):
        doc = trace([kernel("ncclDevKernel_AllReduce_Sum_f32", 0, 100)], dist_head(rank, 2))
        (window / f"rank{rank}_trace.json").write_bytes(doc)
    report = analyse(tmp_path / "run", Options())
    # the sections: Kineto's one AllReduce kernel per rank, none of the logs' 6 ops
    assert report.collectives.all_ranks["AllReduce"].count == 2
    assert [w.name for w in report.windows] == ["iteration_2"]
    assert report.sources["overlap"] == "kineto (the profiled windows)"
    assert report.sources["inspector"].startswith("nccl inspector (the whole run, apart")
    apart = report.inspector
    assert apart is not None and apart.collectives.all_ranks["AllReduce"].count == 4
    assert apart.matching.by_seq == 3 and report.inputs.skipped == []
    text = render(report)
    assert "NCCL Inspector logs, the whole run (apart" in text.split("SOURCES")[-1]


def test_logs_alone_say_where_each_section_comes_from(tmp_path: Path) -> None:
    write_job(tmp_path / "job")
    sources = analyse(tmp_path / "job", Options()).sources
    assert sources["network"] == "nccl inspector" and sources["skew"] == "nccl inspector"
    assert sources["overlap"] == "n/a: NCCL Inspector has no compute kernels"
    assert sources["top_kernels"] == sources["launches"] == sources["overlap"]
    assert sources["graphs"] == sources["overlap"]
    assert sources["throughput"] == "n/a: NCCL Inspector has no ProfilerStep spans"


def test_logs_without_start_times_match_but_give_no_skew(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for rank, name in enumerate(("node0-pid100.log", "node0-pid101.log")):
        lines = [coll(rank, sn=sn, exec_us=100 + 10 * rank) for sn in (1, 2, 3)]
        (folder / name).write_text("\n".join(lines) + "\n")
    report = analyse(folder, Options())
    assert report.matching.by_seq == 3
    assert report.skew.per_collective == {} and report.clocks.per_rank == {}
    # α-β still reads each instance's fastest member: 3 instances, all of one size
    assert report.alpha_beta["world 0xabc"]["AllReduce"].instances == 3
    issues = {i.key: (i.count, i.total) for i in report.health.issues}
    assert issues["call_starts"] == (2, 2) and issues["compute"] == (2, 2)
    assert report.sources["skew"] == "n/a: NCCL Inspector logs without start times (not verbose)"


def windowed_logs(folder: Path) -> None:
    """Two ranks' verbose logs, 3 AllReduces ending 10 s, 400 s and 700 s past 19:30:00 UTC
    (a multiple of 300 s and of 600 s): 5-minute windows 19:30, 19:35, 19:40; 10-minute
    windows 19:30, 19:40."""
    base = DUMP_US // 600_000_000 * 600_000_000
    folder.mkdir(parents=True)
    for rank in (0, 1):
        lines = [
            coll(rank, sn=sn, start_us=base + end_s * 1_000_000 - 100) + "\n"
            for sn, end_s in enumerate((10, 400, 700), start=1)
        ]
        (folder / f"node0-pid{100 + rank}.log").write_text("".join(lines))


def window_names(out: Path) -> list[str]:
    (document,) = out.glob("*.json")
    return [w["name"] for w in json.loads(document.read_text())["windows"]]


def test_the_inspector_window_option_cuts_the_report(tmp_path: Path) -> None:
    windowed_logs(tmp_path / "insp")
    base = ["report", str(tmp_path / "insp"), "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    assert window_names(tmp_path / "a") == [
        f"insp@20250718T19{m}00Z" for m in ("30", "35", "40")
    ]  # the default, 300 s
    # 600 s, the logs read in worker processes: the same windows a collector cuts
    assert (
        main([*base, "--out", str(tmp_path / "b"), "--inspector-window", "600", "--jobs", "2"]) == 0
    )
    assert window_names(tmp_path / "b") == ["insp@20250718T193000Z", "insp@20250718T194000Z"]
    assert main([*base, "--out", str(tmp_path / "c"), "--inspector-window", "0"]) == 0
    assert window_names(tmp_path / "c") == ["insp"]  # the whole log, as before windows


def test_an_inspector_window_out_of_range_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    windowed_logs(tmp_path / "insp")
    argv = ["report", str(tmp_path / "insp"), "--out", str(tmp_path / "o"), "--inspector-window"]
    assert main([*argv, "-1"]) == 1
    assert "--inspector-window must be 0 to 604800 seconds, got -1" in capsys.readouterr().err
