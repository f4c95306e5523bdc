"""`commscope report` as a user runs it: a real process, real files, exit codes, both reports."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from builders import rank_trace, write
from commscope.exporters import text
from commscope.model.schema import Report
from commscope.service.cli import main

REQUIRED = {
    "schema_version",
    "world_size",
    "windows",
    "overlap",
    "collectives",
    "network",
    "traffic",
    "throughput",
    "inputs",
}


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "commscope.service.cli", "report", *map(str, args)]
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def reports(out: Path) -> tuple[str, dict[str, Any]]:
    (text_path,) = out.glob("*.txt")
    (json_path,) = out.glob("*.json")
    assert json_path.stem == text_path.stem
    return text_path.read_text(), json.loads(json_path.read_text())


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """Two windows of two ranks each, TorchTitan layout, one window gzipped."""
    root = tmp_path / "profile_trace"
    for window, gz in (("iteration_10", False), ("iteration_20", True)):
        for rank in (0, 1):
            name = f"rank{rank}_trace.json" + (".gz" if gz else "")
            write(root / window / name, rank_trace(rank, 2), gz=gz)
    return root


def test_run_folder_reports_every_window_and_the_whole_run(run_dir: Path, tmp_path: Path) -> None:
    result = run(run_dir, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text, doc = reports(tmp_path / "out")
    assert set(doc) >= REQUIRED
    assert [w["name"] for w in doc["windows"]] == ["iteration_10", "iteration_20"]
    assert [w["ranks"] for w in doc["windows"]] == [[0, 1], [0, 1]]
    # C = [50,200) = 150 µs, P = [0,100) ∪ [150,300): C ∩ P = 50 + 50 = 100 µs → 2/3
    rank0 = doc["overlap"]["per_rank"]["0"]
    assert rank0["ratio"] == pytest.approx(2 / 3)
    assert rank0["exposed_comm_time_s"] == pytest.approx(2 * 50e-6)  # two windows
    allreduce = doc["collectives"]["per_rank"]["1"]["AllReduce"]
    # S = 250000 floats x 4 B = 1e6 B per op; 2 ops; F = 2(2-1)/2 = 1
    assert (allreduce["count"], allreduce["message_bytes"], allreduce["bus_bytes"]) == (
        2,
        2_000_000,
        2_000_000,
    )
    assert set(allreduce["busbw_Bps"]) == {"mean", "median", "min", "max", "p95", "relative_error"}
    assert allreduce["busbw_Bps"]["relative_error"] == 0.01  # two windows: quantiles sketched
    assert doc["network"]["peak_bandwidth_Bps"] == 450e9
    assert doc["inputs"] == {**doc["inputs"], "files": 4, "skipped": []}
    for heading in (
        "1. THROUGHPUT",
        "2. COMMUNICATION-COMPUTATION OVERLAP",
        "3. NETWORK LOAD",
        "4. TRAFFIC DISTRIBUTION",
        "5. EXPOSED COMMUNICATION",
        "8. DIAGNOSIS",
        "11. COLLECTIVES MATCHED ACROSS RANKS, CLOCK OFFSETS",
        "14. TRACE HEALTH",
        "15. INPUTS",
    ):
        assert heading in text
    assert "Average Overlap: 66.67%" in text
    assert re.fullmatch(
        r"\d{8}_\d{6}_profile_trace_gpu2", next((tmp_path / "out").glob("*.txt")).stem
    )


def test_config_gives_throughput_and_the_file_name(run_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "llama3_8b.toml"
    config.write_text(
        '[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 4\n'
        "seq_len = 2048\n[parallelism]\ndata_parallel_shard_degree = -1\n"
    )
    result = run(run_dir, "--config", config, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    _, doc = reports(tmp_path / "out")
    stem = next((tmp_path / "out").glob("*.json")).stem
    assert stem.endswith("_llama3_8B_dp1x2_tp1_gpu2")
    # steps: rank0 1000 µs, rank1 1500 µs each window → iteration = 1.25 ms
    # global batch = 4 x 1 x 2 = 8; tokens/s = 8 x 2048 / 1.25e-3
    t = doc["throughput"]
    assert t["iteration_time_s"] == pytest.approx(1.25e-3)
    assert t["tokens_per_second"] == pytest.approx(8 * 2048 / 1.25e-3)
    assert t["tokens_per_second_per_gpu"] == pytest.approx(8 * 2048 / 1.25e-3 / 2)


def test_flags_stand_in_for_a_config(run_dir: Path, tmp_path: Path) -> None:
    result = run(
        run_dir, "--batch-size", "2", "--seq-len", "100", "--out", tmp_path / "o", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    _, doc = reports(tmp_path / "o")
    # no config: TorchTitan's default parallelism assumed, and said: every rank data-parallel,
    # global batch = 2 x 2 ranks = 4 → 4 x 100 / 1.25e-3
    assert doc["throughput"]["tokens_per_second"] == pytest.approx(4 * 100 / 1.25e-3)
    assert "commscope: warning: no --config: TorchTitan's default parallelism" in result.stderr
    # the assumed degrees are not put in the file name
    assert "_dp" not in next((tmp_path / "o").glob("*.json")).stem


def test_the_2024_config_layout_gives_throughput(run_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "llama2_7b.toml"
    config.write_text(
        "[training]\nbatch_size = 4\nseq_len = 2048\ndata_parallel_degree = -1\n"
        "tensor_parallel_degree = 1\n[experimental]\npipeline_parallel_degree = 1\n"
    )
    result = run(run_dir, "--config", config, "--out", tmp_path / "out", cwd=tmp_path)
    assert (result.returncode, result.stderr.count("warning")) == (0, 0), result.stderr
    text, doc = reports(tmp_path / "out")
    # data_parallel_degree -1 = 2 ranks: global batch 4 x 2 = 8 → 8 x 2048 / 1.25e-3
    assert doc["throughput"]["tokens_per_second"] == pytest.approx(8 * 2048 / 1.25e-3)
    assert "  data_parallel_shard_degree: 2  ([training] data_parallel_degree -1: world 2 / 1)" in (
        text.splitlines()
    )


def test_degrees_that_do_not_match_the_world_give_no_tokens_per_second(
    run_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "x.toml"
    config.write_text(
        "[training]\nlocal_batch_size = 4\nseq_len = 2048\nlocal_batchsize = 1\n"
        "[parallelism]\ndata_parallel_shard_degree = 1\n"
    )
    result = run(run_dir, "--config", config, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text, doc = reports(tmp_path / "out")
    issue = (
        "the config's parallel degrees do not match the traces: dp_replicate 1 x dp_shard 1 x "
        "tp 1 x pp 1 x cp 1 = 1, but the traces show a world size of 2"
    )
    assert doc["throughput"]["tokens_per_second"] is None
    assert doc["throughput"]["na_reason"] == issue
    assert f"commscope: warning: {issue}" in result.stderr
    assert (
        "commscope: warning: config: [training] keys commscope does not know, ignored: "
        "local_batchsize" in result.stderr
    )
    assert f"Tokens per Second: n/a ({issue})" in text
    assert "_dp" not in next((tmp_path / "out").glob("*.json")).stem


@pytest.mark.parametrize(("value", "expected"), [("7.5e9", 7_500_000_000), ("8e9", 8 * 10**9),
                                                 ("1_000", 1000)])  # fmt: skip
def test_integer_options_take_the_forms_people_write(
    run_dir: Path, tmp_path: Path, value: str, expected: int
) -> None:
    result = run(run_dir, "--params", value, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    _, doc = reports(tmp_path / "out")
    assert doc["utilization"]["flops_per_token"] == 6 * expected  # 6·N, no model shape


@pytest.mark.parametrize("value", ["7.5", "1e-3", "lots", "inf"])
def test_a_non_integral_integer_option_is_one_clear_error(
    run_dir: Path, tmp_path: Path, value: str
) -> None:
    result = run(run_dir, "--params", value, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == f"commscope: error: --params must be a whole number, got {value!r}\n"


def test_bad_inputs_are_named_and_the_rest_is_reported(run_dir: Path, tmp_path: Path) -> None:
    window = run_dir / "iteration_10"
    good = rank_trace(2, 4)
    (window / "rank2_trace.json").write_bytes(good[: len(good) // 2])  # truncated
    (window / "rank3_trace.json.gz").write_bytes(gzip.compress(good)[:-20])  # truncated gzip
    (window / "rank4_trace.json").write_bytes(b"\x00\x01garbage\xff" * 10)  # corrupt
    (window / "rank5_trace.json").write_text('{"hello": "world"}')  # not a trace
    (window / "rank6_trace.json.tmp").write_bytes(good)  # still being written: ignored
    write(window / "copy_of_rank1.json", rank_trace(1, 2))  # claims rank 1 too
    result = run(run_dir, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 3
    assert "Traceback" not in result.stderr
    _, doc = reports(tmp_path / "out")
    reasons = {Path(s["path"]).name: s["reason"] for s in doc["inputs"]["skipped"]}
    assert "truncated" in reasons["rank2_trace.json"]
    assert "truncated gzip" in reasons["rank3_trace.json.gz"]
    assert (
        "not valid JSON" in reasons["rank4_trace.json"] or "corrupt" in reasons["rank4_trace.json"]
    )
    assert "not a Kineto trace" in reasons["rank5_trace.json"]
    assert "rank6_trace.json.tmp" not in reasons
    assert "rank1_trace.json" in reasons["copy_of_rank1.json"]
    assert "copy_of_rank1.json" in reasons["rank1_trace.json"]
    # the other window is untouched, and rank 0 of the damaged one still counts
    assert [w["ranks"] for w in doc["windows"]] == [[0], [0, 1]]
    assert doc["inputs"]["files"] == 9


def test_missing_folder_fails_at_start_with_one_line(tmp_path: Path) -> None:
    result = run(tmp_path / "nope", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.strip().count("\n") == 0
    assert "no such file or folder" in result.stderr


def test_bad_config_fails_before_reading_traces(run_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[training]\nseq_len = 'long'\n")
    result = run(run_dir, "--config", config, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 1
    assert "seq_len must be an integer" in result.stderr
    assert not (tmp_path / "out").exists()


def test_bad_flag_values_fail_at_start(run_dir: Path, tmp_path: Path) -> None:
    result = run(run_dir, "--peak-bandwidth", "-3", cwd=tmp_path)
    assert (result.returncode, "--peak-bandwidth must be positive" in result.stderr) == (1, True)


def test_missing_ijson_c_backend_fails_at_start_with_a_clear_message(
    run_dir: Path, tmp_path: Path
) -> None:
    code = (
        "import sys; sys.modules['ijson.backends.yajl2_c'] = None\n"
        "from commscope.service.cli import main\n"
        f"sys.exit(main(['report', {str(run_dir)!r}, '--out', {str(tmp_path / 'o')!r}]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 1
    assert "ijson's C backend (yajl2_c) is not available" in result.stderr
    assert "Traceback" not in result.stderr


def test_print_shows_the_text_report_rendered_once_for_every_use(
    run_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    rendered: list[str] = []
    render = text.render

    def counted(report: Report) -> str:
        rendered.append(render(report))
        return rendered[-1]

    monkeypatch.setattr(text, "render", counted)
    argv = ["report", str(run_dir), "--out", str(tmp_path / "o"), "--print", "--jobs", "1"]
    assert main(argv) == 0
    shown, _ = reports(tmp_path / "o")
    assert len(rendered) == 1  # the .txt, the HTML's folded copy and stdout share it
    assert capsys.readouterr().out.startswith(shown)
