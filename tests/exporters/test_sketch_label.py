"""The text report marks whole-run quantiles that come from the sketch, and only those."""

from __future__ import annotations

from commscope.exporters import text
from commscope.model.schema import CommOp, FileStats, Report, TraceMeta
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.report import Options, ParsedFile, build_report

NOTE = "~ = quantile of the whole run from a mergeable log-bucket sketch, within 1%"


def run(windows: list[str]) -> Report:
    """One rank, one 1 MB AllReduce of 10 µs (algbw 100 GB/s) in each window."""
    files = []
    for name in windows:
        accumulator = Accumulator()
        accumulator.add(CommOp("AllReduce", 0, 10_000, 1_000_000, 2, True))
        path = f"{name}/rank0_trace.json"
        meta = TraceMeta(rank=0, world_size=1)
        result = accumulator.result([path])
        files.append(ParsedFile(name, path, 0, meta, result, FileStats(events=1)))
    return build_report(windows, files, [], Options())


def test_a_one_window_run_has_exact_quantiles_and_no_mark() -> None:
    found = run(["w1"])
    assert found.collectives.all_ranks["AllReduce"].algbw_Bps.relative_error is None
    assert NOTE not in text.render(found) and "~100 GB/s" not in text.render(found)


def test_a_run_over_two_windows_marks_its_quantiles_and_says_why() -> None:
    found = run(["w1", "w2"])
    rendered = text.render(found)
    assert found.collectives.all_ranks["AllReduce"].algbw_Bps.relative_error == 0.01
    assert found.windows[0].collectives.all_ranks["AllReduce"].algbw_Bps.relative_error is None
    assert NOTE in rendered
    assert "~100 GB/s" in rendered  # two equal values: min = max, so the estimate is exact
    assert "(~ median, p95: sketched, within 1%)" in rendered
