"""The Python API (`commscope`, service/api.py, model/frames.py): the same report as the
CLI, exact JSON round trips, DataFrames that hold the report's rows, a cheap import, and
docs/api.md's examples run as they are written."""

from __future__ import annotations

import doctest
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from builders import rank_trace, write
from commscope.model import frames as frames_module
from commscope.service import api
from commscope.service.cli import main
from tools import needs_shared, require_module, shared_traces

import commscope

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "gloo_ddp_2rank"
SAMPLE_CONFIG = ROOT / "samples" / "mlp_ddp.toml"
DLRM = shared_traces("kineto", "dlrm_8rank_v100")


@pytest.fixture
def window(tmp_path: Path) -> Path:
    """One window of two ranks (tests/builders.py): compute [0,100) ∪ [150,300) µs, an
    AllReduce [50,200) µs of 1e6 B, ProfilerStep#10 of 1000 + 500 x rank µs."""
    root = tmp_path / "traces"
    for rank in (0, 1):
        write(root / "iteration_10" / f"rank{rank}_trace.json", rank_trace(rank, 2))
    return root


def cli_json(capsys: pytest.CaptureFixture[str], *args: str | Path) -> Any:
    """What `commscope report ... --format json` prints, provenance left out."""
    assert main(["report", *map(str, args), "--format", "json", "--jobs", "1"]) == 0
    document = json.loads(capsys.readouterr().out)
    document.pop("provenance")
    return document


def document(report: commscope.Report) -> Any:
    found = json.loads(commscope.report_json(report))
    assert found.pop("provenance") is None  # built in process: no provenance (the shell's)
    return found


# ---------------------------------------------------------------- the same report as the CLI


def test_analyse_gives_the_report_the_cli_writes(
    window: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = cli_json(capsys, window, "--out", tmp_path / "out", "--peak-bandwidth", "100")
    report = commscope.analyse(window, peak_bandwidth=100)
    assert document(report) == expected
    assert report.network.peak_bandwidth_Bps == 100e9


def test_analyse_on_the_bundled_sample_with_its_config(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = (SAMPLE, "--config", SAMPLE_CONFIG, "--batch-size", "8", "--out", tmp_path / "out")
    expected = cli_json(capsys, *args)
    report = commscope.analyse(SAMPLE, config=SAMPLE_CONFIG, batch_size=8)
    assert document(report) == expected
    assert commscope.analyse_jobs(SAMPLE, config=SAMPLE_CONFIG, batch_size=8) == [report]


def test_options_built_once_serve_as_the_keywords_do(window: Path) -> None:
    options = commscope.options(peak_bandwidth=100, hosts="0=a,1=b")
    assert commscope.analyse(window, options=options) == commscope.analyse(
        window, peak_bandwidth=100, hosts="0=a,1=b"
    )


def test_options_are_checked_as_the_flags_are(window: Path) -> None:
    with pytest.raises(commscope.ConfigError, match="--batch-size must be a whole number"):
        commscope.analyse(window, batch_size="7.5")
    with pytest.raises(commscope.ConfigError, match="--peak-bandwidth must be positive"):
        commscope.options(peak_bandwidth=0)
    with pytest.raises(commscope.ConfigError, match="not both"):
        commscope.analyse(window, options=commscope.options(), net_peak=50)
    with pytest.raises(commscope.ConfigError, match="workers must be at least 1"):
        commscope.analyse(window, workers=0)
    assert commscope.options(params="7.5e9").params == 7_500_000_000


def test_a_misspelt_keyword_is_refused_as_a_signature_refuses_it(window: Path) -> None:
    """One set of keywords for the three calls (and `options`' own): none is ignored."""
    with pytest.raises(TypeError, match="unexpected keyword argument 'peak_bandwith'"):
        commscope.analyse(window, peak_bandwith=100)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'worker'"):
        commscope.analyse_jobs(window, worker=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'workers'"):
        commscope.options(workers=2)  # type: ignore[call-arg]


def test_analyse_jobs_is_the_analysis_reports(window: Path) -> None:
    found = api.analysis(window, peak_bandwidth=100, inspector_window=5)
    assert commscope.analyse_jobs(window, peak_bandwidth=100, inspector_window=5) == found.reports
    assert [len(job.files) for job in found.jobs] == [2]


# ---------------------------------------------------------------- reading a report back


def test_load_report_reads_back_the_written_report_exactly(window: Path, tmp_path: Path) -> None:
    report = commscope.analyse(window)
    text_path, json_path, html_path = commscope.write_reports(report, tmp_path / "out", "w")
    assert commscope.load_report(json_path) == report
    assert text_path.read_text() == commscope.report_text(report)
    assert html_path.read_text() == commscope.report_html(report)
    assert json_path.read_bytes() == commscope.report_json(report)


def test_load_report_reads_what_the_cli_wrote_with_its_provenance(
    window: Path, tmp_path: Path
) -> None:
    assert main(["report", str(window), "--out", str(tmp_path / "out"), "--jobs", "1"]) == 0
    (json_path,) = (tmp_path / "out").glob("*.json")
    loaded = commscope.load_report(json_path)
    assert loaded.provenance is not None and loaded.provenance.inputs == [str(window.resolve())]
    assert msgspec.structs.replace(loaded, provenance=None) == commscope.analyse(window)


def test_load_report_refuses_what_is_not_a_report(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    path.write_text('{"traceEvents": []}')
    with pytest.raises(commscope.ConfigError, match="a profiler trace"):
        commscope.load_report(path)
    with pytest.raises(commscope.ConfigError, match="cannot read"):
        commscope.load_report(tmp_path / "missing.json")


@needs_shared("kineto", "dlrm_8rank_v100")
def test_dlrm_report_round_trips_exactly(tmp_path: Path) -> None:
    report = commscope.analyse(DLRM)
    path = tmp_path / "dlrm.json"
    path.write_bytes(commscope.report_json(report))
    assert commscope.load_report(path) == report


# ---------------------------------------------------------------- DataFrames


def test_frames_hold_the_hand_worked_rows(window: Path) -> None:
    require_module("pandas", frames_module.INSTALL)
    found = commscope.frames(commscope.analyse(window))
    ranks = found.ranks.set_index("rank")
    # C = [50,200) = 150 µs, P = [0,100) ∪ [150,300) = 250 µs, C ∩ P = 100 µs: ratio 2/3
    assert ranks.loc[0, "overlap_ratio"] == pytest.approx(2 / 3)
    assert ranks.loc[0, "exposed_comm_time_s"] == pytest.approx(50e-6)
    assert ranks.loc[1, "compute_time_s"] == pytest.approx(250e-6)
    assert list(ranks["step_mean_s"]) == pytest.approx([1000e-6, 1500e-6])
    # S = 1e6 B in 150 µs, F = 2(2-1)/2 = 1: busbw = 1e6 / 150e-6 B/s
    assert list(ranks["bus_bandwidth_Bps"]) == pytest.approx([1e6 / 150e-6] * 2)
    (allreduce,) = found.collectives.to_dict("records")
    assert (allreduce["collective"], allreduce["count"], allreduce["message_bytes"]) == (
        "AllReduce",
        2,
        2_000_000,
    )
    assert allreduce["instances"] == 1 and allreduce["skew_max_s"] == 0.0
    # GEMM: 2 kernels a rank, 100 + 150 µs; the AllReduce: 1 a rank, 150 µs
    kernels = found.kernels.set_index("communication")
    assert (kernels.loc[False, "count"], kernels.loc[False, "time_s"]) == (4, pytest.approx(5e-4))
    assert (kernels.loc[True, "count"], kernels.loc[True, "share"]) == (2, 0.375)
    assert list(found.windows["window"]) == ["iteration_10"] * 2
    assert list(found.rank_kernels["rank"]) == [0, 0, 1, 1]


def frame_checks(report: commscope.Report) -> None:
    """Every frame has its columns, in order, and one row per row of the report."""
    found = commscope.frames(report)
    for name, columns in frames_module.COLUMNS.items():
        assert list(getattr(found, name).columns) == list(columns), name
    assert len(found.ranks) == len(report.ranks)
    assert len(found.collectives) == len(report.collectives.all_ranks)
    assert len(found.rank_collectives) == sum(map(len, report.collectives.per_rank.values()))
    assert len(found.instances) == sum(len(i.skew_s) for i in report.skew.instances.values())
    assert len(found.kernels) == len(report.top_kernels.all_ranks)
    assert len(found.rank_kernels) == sum(map(len, report.top_kernels.per_rank.values()))
    assert len(found.windows) == sum(len(w.ranks) for w in report.windows)
    for frame in (found.ranks, found.windows, found.rank_collectives, found.rank_kernels):
        assert str(frame["rank"].dtype) == "int64"
    exposed = dict(zip(found.ranks["rank"], found.ranks["exposed_comm_time_s"], strict=True))
    assert exposed == {int(r): o.exposed_comm_time_s for r, o in report.overlap.per_rank.items()}


def test_frames_of_the_bundled_sample() -> None:
    require_module("pandas", frames_module.INSTALL)
    report = commscope.analyse(SAMPLE, config=SAMPLE_CONFIG)
    frame_checks(report)
    assert len(commscope.frames(report).instances) > 0
    method, function = report.frames(), commscope.frames(report)
    for name in frames_module.COLUMNS:
        assert getattr(method, name).equals(getattr(function, name)), name


@needs_shared("kineto", "dlrm_8rank_v100")
def test_frames_of_the_dlrm_traces() -> None:
    require_module("pandas", frames_module.INSTALL)
    report = commscope.analyse(DLRM)
    frame_checks(report)
    assert len(commscope.frames(report).kernels) > 0


def test_frames_without_pandas_names_the_extra(
    window: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = commscope.analyse(window)
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` raises ImportError
    with pytest.raises(ImportError, match=re.escape("pip install 'commscope[pandas]'")):
        commscope.frames(report)


def test_tables_need_no_pandas(window: Path) -> None:
    tables = frames_module.tables(commscope.analyse(window))
    assert set(tables) == set(frames_module.COLUMNS)
    for name, rows in tables.items():
        assert all(list(row) == list(frames_module.COLUMNS[name]) for row in rows), name


# ---------------------------------------------------------------- the public surface


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_a_worker_importing_the_collector_loads_no_service_nor_pipeline() -> None:
    result = python(
        "import sys, commscope.collector.kineto\n"
        "print(sorted(m for m in sys.modules if m.startswith("
        "('commscope.service', 'commscope.pipeline', 'commscope.exporters'))))"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_importing_commscope_loads_nothing_until_a_name_is_asked_for() -> None:
    result = python(
        "import sys, commscope\n"
        "print(sorted(m for m in sys.modules if m.startswith('commscope')))\n"
        "commscope.analyse\n"
        "print('commscope.service.api' in sys.modules)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["['commscope']", "True"]


def test_every_public_name_resolves_and_nothing_else_does() -> None:
    for name in commscope.__all__:
        assert getattr(commscope, name) is not None, name
    assert set(commscope.__all__) <= set(dir(commscope))
    with pytest.raises(AttributeError, match="no attribute 'build_report'"):
        _ = commscope.build_report


# ---------------------------------------------------------------- docs/api.md runs as written


def doc_blocks() -> list[str]:
    """The ```python blocks of docs/api.md, in order."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_docs_api_examples_run_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each block is a doctest run from the repository's root, in one namespace (a block
    that reads ../shared/traces runs only where they are)."""
    require_module("pandas", frames_module.INSTALL)
    monkeypatch.chdir(ROOT)
    names: dict[str, Any] = {}
    parser, runner = doctest.DocTestParser(), doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    blocks = doc_blocks()
    assert len(blocks) >= 3
    for i, block in enumerate(blocks):
        if "../shared/traces" in block and not DLRM.exists():
            continue
        test = parser.get_doctest(block, names, f"docs/api.md block {i + 1}", "docs/api.md", 0)
        runner.run(test, clear_globs=False)
        names = test.globs  # the next block sees what this one defined
    assert runner.summarize(verbose=False).failed == 0
