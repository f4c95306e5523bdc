"""`commscope diff`: two runs side by side, the step time's significance, bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from commscope.collector.errors import ConfigError
from commscope.collector.schema import (
    Collectives,
    CollectiveStats,
    Overlap,
    Report,
    Skew,
    Summary,
    Throughput,
)
from commscope.exporters import diff, jsonreport

GOLDEN_JSON = Path(__file__).resolve().parent / "golden" / "report.json"
ROOT = Path(__file__).resolve().parents[2]


def run_report(steps_s: list[float], overlap: float, busbw: float, slowest: int | None) -> Report:
    stats = CollectiveStats(count=1, sized_count=1, message_bytes=8, bus_bytes=8, time_s=1.0,
                            algbw_Bps=Summary(), busbw_Bps=Summary(median=busbw))  # fmt: skip
    return Report(
        throughput=Throughput(
            iteration_time_s=sum(steps_s) / len(steps_s) if steps_s else None,
            step_times_s=steps_s,
        ),
        overlap=Overlap(mean=overlap),
        collectives=Collectives(all_ranks={"AllReduce": stats}),
        skew=Skew(slowest_rank=slowest),
    )


def test_the_table_shows_each_figure_and_its_change() -> None:
    a = run_report([0.100, 0.102, 0.098], overlap=0.40, busbw=100e9, slowest=None)
    b = run_report([0.120, 0.121, 0.119], overlap=0.45, busbw=80e9, slowest=3)
    lines = diff.render(a, b, ("a.json", "b.json")).splitlines()
    # iteration 100 ms -> 120 ms: +20.0%; overlap 40% -> 45%: +5.00 points
    assert (
        "  Time per iteration                         100.00 ms         120.00 ms      +20.0%"
        in lines
    )
    assert (
        "  Average overlap                               40.00%            45.00%    +5.00 pp"
        in lines
    )
    assert (
        "  AllReduce                                100.00 GB/s        80.00 GB/s      -20.0%"
        in lines
    )
    assert "Slowest rank: none → rank 3" in lines
    assert lines[:2] == ["A: a.json", "B: b.json"]


def test_a_clear_step_time_change_is_significant() -> None:
    a = run_report([0.100, 0.102, 0.098, 0.101], overlap=0.4, busbw=1e9, slowest=None)
    b = run_report([0.120, 0.121, 0.119, 0.122], overlap=0.4, busbw=1e9, slowest=None)
    verdict = diff.step_significance(a, b)
    assert verdict.startswith("100.25 ms → 120.50 ms (+20.2%), Welch's t = ")
    assert verdict.endswith("over 4 and 4 steps: a significant change at 0.05")


def test_noise_alone_is_not_significant() -> None:
    a = run_report([0.100, 0.110, 0.090, 0.105], overlap=0.4, busbw=1e9, slowest=None)
    b = run_report([0.101, 0.095, 0.108, 0.099], overlap=0.4, busbw=1e9, slowest=None)
    assert diff.step_significance(a, b).endswith("not significant at 0.05")


def test_too_few_steps_give_no_test() -> None:
    a = run_report([0.1], overlap=0.4, busbw=1e9, slowest=None)
    b = run_report([0.1, 0.2, 0.3], overlap=0.4, busbw=1e9, slowest=None)
    assert diff.step_significance(a, b) == (
        "no significance test: too few steps (3 needed on each side; got 1 and 3)"
    )


def test_unknown_figures_are_na_not_zero() -> None:
    assert diff.change(None, 1.0, points=False) == "n/a"
    assert diff.change(0.0, 1.0, points=False) == "n/a"
    assert diff.change(0.5, 0.25, points=True) == "-25.00 pp"


def test_a_report_written_before_the_cross_rank_keys_still_loads() -> None:
    doc = json.loads(GOLDEN_JSON.read_text())
    for key in ("matching", "clocks", "skew", "stragglers", "alpha_beta", "utilization",
                "kernels", "diagnosis"):  # fmt: skip
        doc.pop(key)
    old = diff.load(json.dumps(doc).encode(), "old.json")
    assert old.skew.slowest_rank is None and old.overlap.mean == doc["overlap"]["mean"]


def test_what_is_not_a_report_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match=r"not\.json: not JSON"):
        diff.load(b"not json", "not.json")
    with pytest.raises(ConfigError, match=r"x\.json: not a commscope JSON report"):
        diff.load(b'{"windows": 5}', "x.json")


def test_the_command_compares_two_files(tmp_path: Path) -> None:
    a = run_report([0.100, 0.102, 0.098], overlap=0.40, busbw=100e9, slowest=None)
    (tmp_path / "a.json").write_bytes(jsonreport.render(a))
    (tmp_path / "b.json").write_bytes(GOLDEN_JSON.read_bytes())
    command = [sys.executable, "-m", "commscope.pipeline.cli", "diff", "a.json", "b.json"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Time per iteration" in done.stdout and "Verdict: n/a" in done.stdout
    (tmp_path / "c.json").write_text("{")
    command[-1] = "c.json"
    bad = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert bad.returncode == 1 and bad.stderr.startswith("commscope: error: c.json: not JSON")
