"""The text report's header says what the devices were, from what ran on them (issue 9 #8)."""

from __future__ import annotations

from pathlib import Path

from builders import write
from commscope.exporters import diff, text
from commscope.pipeline import compare
from commscope.pipeline.report import Options
from commscope.service.offline import analyse
from kineto_builder import cpu_op, dist_head, kernel, trace


def header(tmp_path: Path, head: dict[str, object], events: list[dict[str, object]]) -> str:
    write(tmp_path / "rank0_trace.json", trace(events, head))
    return text.render(analyse(tmp_path, Options())).splitlines()[4]


def test_a_device_with_an_empty_name_that_runs_kernels_is_a_gpu(tmp_path: Path) -> None:
    head = {"deviceProperties": [{"id": 0, "name": ""}], **dist_head(world_size=1)}
    line = header(tmp_path, head, [kernel("gemm", 0, 10)])
    assert line == "Configuration: 1 GPUs (GPU unnamed in the traces, nccl), 0 iterations"


def test_a_trace_without_kernels_has_no_gpu(tmp_path: Path) -> None:
    line = header(tmp_path, dist_head(world_size=1, backend="gloo"), [cpu_op("aten::mm", 1, 2)])
    assert line == "Configuration: 1 ranks (no GPU in the traces, gloo), 0 iterations"


def test_diff_names_the_device_as_the_header_does(tmp_path: Path) -> None:
    head = {"deviceProperties": [{"id": 0, "name": ""}], **dist_head(world_size=1)}
    write(tmp_path / "rank0_trace.json", trace([kernel("gemm", 0, 10)], head))
    report = analyse(tmp_path, Options())
    shown = diff.render(report, report, ("a", "b"), compare.compare(report, report))
    assert "Same setup: 1 ranks (GPU unnamed in the traces, nccl), model n/a" in shown


def test_a_cpu_run_counts_tokens_per_rank_not_per_gpu(tmp_path: Path) -> None:
    events = [cpu_op("aten::mm", 1, 2)]  # a trace with no event would be skipped
    write(tmp_path / "rank0_trace.json", trace(events, dist_head(world_size=1, backend="gloo")))
    rendered = text.render(analyse(tmp_path, Options()))
    assert "Tokens per Second per rank: n/a" in rendered
    assert "Tokens per Second per GPU" not in rendered
