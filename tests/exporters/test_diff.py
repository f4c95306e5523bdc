"""`commscope diff`: two runs side by side, the step time's significance, bad inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from commscope.exporters import diff, jsonreport
from commscope.model.errors import ConfigError
from commscope.model.schema import (
    Collectives,
    CollectiveStats,
    JobDifference,
    Overlap,
    Report,
    RunConfig,
    Skew,
    Summary,
    Throughput,
)
from commscope.pipeline import compare
from commscope.service.cli import EXIT_UNTESTED, main
from msgspec.structs import replace

GOLDEN_JSON = Path(__file__).resolve().parent / "golden" / "report.json"
ROOT = Path(__file__).resolve().parents[2]


def render(a: Report, b: Report, names: tuple[str, str]) -> str:
    return diff.render(a, b, names, compare.compare(a, b))


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
        skew=Skew(waited_for_rank=slowest),
    )


def test_the_table_shows_each_figure_and_its_change() -> None:
    a = run_report([0.100, 0.102, 0.098], overlap=0.40, busbw=100e9, slowest=None)
    b = run_report([0.120, 0.121, 0.119], overlap=0.45, busbw=80e9, slowest=3)
    lines = render(a, b, ("a.json", "b.json")).splitlines()
    # iteration 100 ms -> 120 ms: +20.0%; overlap 40% -> 45%: +5.00 points
    assert (
        "  Time per iteration                            100 ms            120 ms      +20.0%"
        in lines
    )
    assert (
        "  Average overlap                               40.00%            45.00%    +5.00 pp"
        in lines
    )
    assert (
        "  AllReduce                                   100 GB/s         80.0 GB/s      -20.0%"
        in lines
    )
    assert "The rank the others wait for: none → rank 3" in lines
    assert lines[:2] == ["A: a.json", "B: b.json"]


def test_a_clear_step_time_change_is_significant() -> None:
    a = run_report([0.100, 0.102, 0.098, 0.101], overlap=0.4, busbw=1e9, slowest=None)
    b = run_report([0.120, 0.121, 0.119, 0.122], overlap=0.4, busbw=1e9, slowest=None)
    verdict = diff.step_significance(compare.step_test(a, b))
    # means 100.25 and 120.5 ms, printed to three significant figures
    assert verdict.startswith("100 ms → 120 ms (+20.2%), Welch's t = ")
    assert verdict.endswith("over 4 and 4 steps: a significant change at 0.05")


def test_noise_alone_is_not_significant() -> None:
    a = run_report([0.100, 0.110, 0.090, 0.105], overlap=0.4, busbw=1e9, slowest=None)
    b = run_report([0.101, 0.095, 0.108, 0.099], overlap=0.4, busbw=1e9, slowest=None)
    assert diff.step_significance(compare.step_test(a, b)).endswith("not significant at 0.05")


def test_too_few_steps_give_no_test() -> None:
    a = run_report([0.1], overlap=0.4, busbw=1e9, slowest=None)
    b = run_report([0.1, 0.2, 0.3], overlap=0.4, busbw=1e9, slowest=None)
    assert diff.step_significance(compare.step_test(a, b)) == (
        "no significance test: too few steps (3 needed on each side; got 1 and 3)"
    )


def test_unknown_figures_are_na_not_zero() -> None:
    assert diff.change(None, 1.0, points=False) == "n/a"
    assert diff.change(0.0, 1.0, points=False) == "n/a"
    assert diff.change(0.5, 0.25, points=True) == "-25.00 pp"
    # 4.06 MB/s → 999 MB/s: x246, not +24506.4%; just under ten times stays a percentage
    assert diff.change(4.06e6, 999e6, points=False) == "x246"
    assert diff.change(1.0, 9.99, points=False) == "+899.0%"


def test_a_report_written_before_the_cross_rank_keys_still_loads() -> None:
    doc = json.loads(GOLDEN_JSON.read_text())
    for key in ("matching", "clocks", "skew", "stragglers", "alpha_beta", "utilization",
                "kernels", "diagnosis"):  # fmt: skip
        doc.pop(key)
    doc["schema_version"] = 1
    doc["config"] = {k: v for k, v in doc["config"].items() if "warnings" not in k
                     and not k.startswith("parallelism_")}  # fmt: skip
    old = compare.load(json.dumps(doc).encode(), "old.json")
    assert old.skew.waited_for_rank is None and old.overlap.mean == doc["overlap"]["mean"]
    assert old.schema_version == 1 and old.config.warnings == []


def test_the_golden_report_loads_whole() -> None:
    report = compare.load(GOLDEN_JSON.read_bytes(), "golden.json")
    assert jsonreport.render(report) == GOLDEN_JSON.read_bytes()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (b'{"windows": 5}', "no schema_version, overlap, collectives, throughput, inputs"),
        (b'{"name": "resnet", "accuracy": 0.9}', "no schema_version, overlap"),  # another tool
        (b"[1, 2]", "a JSON list, not an object"),
        (b"3", "a JSON int, not an object"),
        (b'{"schemaVersion": 1, "traceEvents": []}', "a profiler trace: run `commscope report`"),
        (b'{"schema_version": "3", "overlap": {}, "collectives": {}, "throughput": {}, '
         b'"inputs": {}}', "schema_version '3' is not a version number"),
        (b'{"schema_version": 3, "overlap": 5, "collectives": {}, "throughput": {}, '
         b'"inputs": {}}', "Expected `object`, got `int` - at `$.overlap`"),
    ],
)  # fmt: skip
def test_what_is_not_a_report_is_refused_with_the_reason(data: bytes, why: str) -> None:
    with pytest.raises(ConfigError) as caught:
        compare.load(data, "x.json")
    assert str(caught.value).startswith(f"x.json: not a commscope JSON report ({why}")


def test_what_is_not_json_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"not\.json: not JSON"):
        compare.load(b"not json", "not.json")
    with pytest.raises(ConfigError, match=r"deep\.json: not a commscope JSON report \(nested too"):
        compare.load(b"[" * 100_000 + b"]" * 100_000, "deep.json")


def job(world: int | None, gpu: str | None, model: str | None, tp: int) -> Report:
    degrees = {"tensor_parallel_degree": tp, "data_parallel_shard_degree": 4}
    config = RunConfig(gpu_name=gpu, backend="nccl", model=model, seq_len=2048,
                       parallelism=degrees)  # fmt: skip
    return Report(world_size=world, config=config)


def test_unrelated_runs_are_said_first() -> None:
    a = job(8, "NVIDIA H100 80GB HBM3", "llama3", tp=2)
    b = job(16, "NVIDIA A100-SXM4-80GB", "llama3", tp=4)
    lines = render(a, b, ("a.json", "b.json")).splitlines()
    assert lines[3:8] == [
        "UNRELATED RUNS: A and B are not two runs of one job. They differ in:",
        "  world size: 8 → 16",
        "  GPU: NVIDIA H100 80GB HBM3 → NVIDIA A100-SXM4-80GB",
        "  parallelism: tensor_parallel_degree 2 → tensor_parallel_degree 4",
        "A change below may come from these differences, not from the code.",
    ]
    assert min(i for i, line in enumerate(lines) if line.startswith("  whole run")) == 9


def test_a_different_model_is_named_and_unknowns_are_not_differences() -> None:
    a = job(8, None, "llama3 8B", tp=2)
    b = job(8, "NVIDIA H100 80GB HBM3", "llama3 70B", tp=2)  # A's GPU is unknown: not compared
    assert compare.differences(a, b) == [JobDifference("model", "llama3 8B", "llama3 70B")]


def test_runs_of_one_job_say_what_they_share() -> None:
    a = job(8, "NVIDIA H100 80GB HBM3", "llama3", tp=2)
    lines = render(a, a, ("a.json", "b.json")).splitlines()
    assert lines[3] == "Same setup: 8 ranks (NVIDIA H100 80GB HBM3, nccl), model llama3"
    unknown = Report()  # nothing known of A: no difference can be named, the setups are shown
    assert render(unknown, a, ("a", "b")).splitlines()[3] == (
        "Setup: A world size unknown (no GPU in the traces), model n/a; "
        "B 8 ranks (NVIDIA H100 80GB HBM3, nccl), model llama3"
    )


def test_a_report_of_a_newer_schema_loads_with_a_note() -> None:
    doc = json.loads(GOLDEN_JSON.read_text())
    doc["schema_version"] = 99
    newer = compare.load(json.dumps(doc).encode(), "new.json")
    lines = render(newer, newer, ("a.json", "b.json")).splitlines()
    assert lines[3].startswith("Note: A was written by a newer commscope (schema 99")


def test_a_significantly_slower_b_is_a_regression() -> None:
    a = run_report([0.100, 0.102, 0.098, 0.101], overlap=0.4, busbw=1e9, slowest=None)
    b = run_report([0.120, 0.121, 0.119, 0.122], overlap=0.4, busbw=1e9, slowest=None)
    test = compare.step_test(a, b)
    verdict = diff.regression(test)
    assert test.worse
    assert verdict.startswith("step time significantly worse: 100 ms → 120 ms (+20.2%), p ")
    assert verdict.endswith("(Welch's t, significant below 0.05)")
    # the same change the other way is an improvement: not a regression
    test = compare.step_test(b, a)
    verdict = diff.regression(test)
    assert not test.worse and verdict.startswith("step time not significantly worse: 120 ms")


def test_noise_and_too_few_steps_are_not_regressions() -> None:
    a = run_report([0.100, 0.110, 0.090, 0.105], overlap=0.4, busbw=1e9, slowest=None)
    b = run_report([0.101, 0.095, 0.108, 0.099], overlap=0.4, busbw=1e9, slowest=None)
    assert not compare.step_test(a, b).worse
    few = run_report([0.5], overlap=0.4, busbw=1e9, slowest=None)
    test = compare.step_test(a, few)
    assert not test.worse
    assert diff.regression(test) == (
        "step time not tested, not gated: too few steps (3 needed on each side; got 4 and 1)"
    )


def test_the_command_compares_two_files(tmp_path: Path) -> None:
    a = run_report([0.100, 0.102, 0.098], overlap=0.40, busbw=100e9, slowest=None)
    (tmp_path / "a.json").write_bytes(jsonreport.render(a))
    (tmp_path / "b.json").write_bytes(GOLDEN_JSON.read_bytes())
    command = [sys.executable, "-m", "commscope.service.cli", "diff", "a.json", "b.json"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Time per iteration" in done.stdout and "Verdict: n/a" in done.stdout
    (tmp_path / "c.json").write_text("{")
    command[-1] = "c.json"
    bad = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         check=False)  # fmt: skip
    assert bad.returncode == 1 and bad.stderr.startswith("commscope: error: c.json: not JSON")


def run_diff(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "commscope.service.cli", "diff", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip


def test_fail_on_regression_gates_on_a_slower_step_time(tmp_path: Path) -> None:
    fast = run_report([0.100, 0.102, 0.098, 0.101], overlap=0.4, busbw=1e9, slowest=None)
    slow = run_report([0.120, 0.121, 0.119, 0.122], overlap=0.4, busbw=1e9, slowest=None)
    (tmp_path / "fast.json").write_bytes(jsonreport.render(fast))
    (tmp_path / "slow.json").write_bytes(jsonreport.render(slow))
    worse = run_diff(tmp_path, "fast.json", "slow.json", "--fail-on-regression")
    assert worse.returncode == 5, worse.stderr
    assert worse.stderr.startswith("commscope: step time significantly worse: 100 ms → 120 ms")
    assert "Time per iteration" in worse.stdout
    better = run_diff(tmp_path, "slow.json", "fast.json", "--fail-on-regression")
    assert better.returncode == 0, better.stderr
    assert better.stderr.startswith("commscope: step time not significantly worse")
    ungated = run_diff(tmp_path, "fast.json", "slow.json")  # without the flag: 0, no verdict
    assert (ungated.returncode, ungated.stderr) == (0, "")


def test_another_tools_json_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_bytes(GOLDEN_JSON.read_bytes())
    (tmp_path / "meta.json").write_text('{"step": 100, "model": "llama3"}')
    done = run_diff(tmp_path, "a.json", "meta.json", "--fail-on-regression")
    assert done.returncode == 1
    assert done.stderr == (
        "commscope: error: meta.json: not a commscope JSON report "
        "(no schema_version, overlap, collectives, throughput, inputs)\n"
    )
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("steps_b", "world_b", "why"),
    [
        ([0.120], 8, "too few steps (3 needed on each side; got 4 and 1)"),
        (
            [0.120, 0.121, 0.119, 0.122],
            4,
            "A and B are not two runs of one job (they differ in world size)",
        ),
    ],
    ids=["one step on a side", "unrelated runs"],
)
def test_fail_on_regression_exits_7_when_it_cannot_test(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    steps_b: list[float],
    world_b: int,
    why: str,
) -> None:
    """The gate cannot decide: EXIT_UNTESTED with one line saying why (B is slower in both
    cases: a gate that said 0 here would pass what it never tested); without the flag, 0."""
    a = replace(run_report([0.100, 0.102, 0.098, 0.101], 0.4, 1e9, None), world_size=8)
    b = replace(run_report(steps_b, 0.4, 1e9, None), world_size=world_b)
    (tmp_path / "a.json").write_bytes(jsonreport.render(a))
    (tmp_path / "b.json").write_bytes(jsonreport.render(b))
    paths = [str(tmp_path / "a.json"), str(tmp_path / "b.json")]
    assert main(["diff", *paths, "--fail-on-regression"]) == EXIT_UNTESTED == 7
    assert capsys.readouterr().err == f"commscope: step time not tested, not gated: {why}\n"
    assert main(["diff", *paths]) == 0
    assert capsys.readouterr().err == ""
