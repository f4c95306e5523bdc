"""Nsight Systems exports judged (`commscope report` on a folder of exports): steps from NVTX
step ranges, else the capture span as one step, said; the verdict and the diagnosis as for
Kineto; the report naming the export's tables, not Kineto's keys. Hand-made exports
(`nsys_builder`), and the real one in ../shared/traces/nsys when it is there."""

from __future__ import annotations

from html import escape
from pathlib import Path

import pytest
from commscope.exporters import html, text
from commscope.model.fields import CAPTURE_ONLY
from commscope.model.schema import Report
from commscope.pipeline.report import Options
from commscope.service.offline import analyse
from nsys_builder import Export
from tools import needs_shared, shared_traces

MS = 1_000_000  # ns
GEMM = "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
KINETO_KEYS = ("deviceProperties", "record_param_comms", "pg_config", "Process Group Name",
               "baseTimeNanoseconds", "Input Dims", "[memory]")  # fmt: skip
CAPTURED = "step time is the capture span on 2 of 2 ranks: their Nsight Systems exports have"


def job(steps: str | None = None) -> Export:
    """Two processes (GPUs 0, 1), no NCCL payloads, no TARGET_INFO_GPU: each a GEMM at
    [0, 9.5 ms] then an all-reduce kernel at [9.5, 10 ms] (its launch not in the export):
    compute 95%, exposed communication 5%, GPU idle 0 of the 10 ms. `steps`: a range of
    that name on each process's thread 1 around [0, 10 ms]."""
    export = Export()
    for pid, device in ((100, 0), (200, 1)):
        export.kernel(pid, device, 0, 9_500_000, GEMM)
        export.kernel(pid, device, 9_500_000, 10 * MS, ALLREDUCE)
        if steps is not None:
            export.nvtx(pid, 1, 0, 10 * MS, steps)
    return export


def report_of(export: Export, folder: Path) -> Report:
    export.write(folder / "job" / "node0.sqlite")
    return analyse(folder / "job", Options())


def test_without_step_ranges_the_capture_span_is_judged_and_said(tmp_path: Path) -> None:
    report = report_of(job(), tmp_path)
    d = report.diagnosis
    assert d.verdict == "compute-bound"
    assert (d.figures["compute_fraction"], d.figures["exposed_comm_fraction"]) == (0.95, 0.05)
    assert d.figures["gpu_busy_fraction"] == 1.0
    assert d.assumptions[0].startswith(CAPTURED)
    for rank in ("0", "1"):
        steps = report.steps[rank]
        assert (steps.count, steps.capture_span, steps.span_s) == (0, True, 0.01)
        assert steps.mean_s is None  # no training step: no step time
    t = report.throughput
    assert (t.iterations, t.iteration_time_s, t.na_reason) == (0, None, CAPTURE_ONLY)
    health = {issue.key: (issue.count, issue.total) for issue in report.health.issues}
    assert health["capture_step"] == (2, 2)
    assert "steps" not in health  # a capture span is a step for the diagnosis


def test_train_step_ranges_are_steps_and_no_assumption_is_said(tmp_path: Path) -> None:
    report = report_of(job("train_step"), tmp_path)
    d = report.diagnosis
    assert d.verdict == "compute-bound"
    assert d.figures["compute_fraction"] == 0.95
    assert not any(a.startswith("step time is the capture span") for a in d.assumptions)
    assert report.throughput.iterations == 1
    assert report.throughput.iteration_time_s == pytest.approx(0.01, abs=1e-15)
    assert [s.capture_span for s in report.steps.values()] == [False, False]
    assert "capture_step" not in {issue.key for issue in report.health.issues}


def test_an_nsys_reports_reasons_name_the_exports_tables_not_kinetos_keys(
    tmp_path: Path,
) -> None:
    report = report_of(job(), tmp_path)
    written = text.render(report)
    for key in KINETO_KEYS:
        assert key not in written, key
    assert "Peak Bandwidth (per direction): n/a (GPU unknown (no TARGET_INFO_GPU table" in written
    assert "ranks 0-1: S is the export's capture span, assumed one step" in written
    assert escape(f"No step times to plot: {CAPTURE_ONLY}.") in html.render(report)


SHARED = shared_traces("nsys")


@needs_shared("nsys", "h100x2_alltoall.sqlite")
def test_the_real_export_is_judged_on_its_capture_span() -> None:
    """../shared/traces/nsys/h100x2_alltoall.sqlite: no step range in NVTX_EVENTS, two
    H100s busy for 0.3 s: one step per rank from the first to the last GPU activity."""
    report = analyse(SHARED / "h100x2_alltoall.sqlite", Options())
    d = report.diagnosis
    assert d.verdict == "compute-bound"
    assert d.assumptions[0].startswith(CAPTURED)
    # first start to last end of the export's kernels, memcpys and memsets (sqlite3)
    spans = [report.steps[r].span_s for r in ("0", "1")]
    assert spans == [pytest.approx(0.299877006, abs=1e-9)] * 2
    assert report.throughput.na_reason == CAPTURE_ONLY
    written = text.render(report)
    for key in KINETO_KEYS:
        assert key not in written, key


def test_a_process_without_step_ranges_beside_one_with_is_a_rank_without_steps(
    tmp_path: Path,
) -> None:
    export = job()
    export.nvtx(200, 1, 0, 10 * MS, "iteration 7")  # the second process (rank 1) only
    report = report_of(export, tmp_path)
    assert [(s.count, s.capture_span) for s in report.steps.values()] == [(0, False), (1, False)]
    steps = next(issue for issue in report.health.issues if issue.key == "steps")
    assert (steps.missing, steps.count, steps.total) == ("NVTX step range spans", 1, 2)
    assert report.diagnosis.left_out == [  # rank 0's 0.5 ms and 9.5 ms: half of each total
        "outside the profiled steps (summed over ranks): 500 µs of communication (50.0% of "
        "it) and 9.50 ms of compute (50.0% of it)",
        "ranks without a profiled step: 0",
    ]


def test_a_capture_window_beside_kineto_windows_keeps_their_iterations(tmp_path: Path) -> None:
    from builders import GPU, rank_trace, write
    from nsys_builder import INIT, blob

    root = tmp_path / "run"
    for rank in (0, 1):
        write(root / "iteration_10" / f"rank{rank}_trace.json", rank_trace(rank, 2))
    kineto = analyse(root, Options())
    export = Export(gpus={0: GPU, 1: GPU})
    for pid, device in ((10, 0), (11, 1)):
        export.nvtx(
            pid, 1, 0, 5, "ncclCommInitRank", payload=blob(INIT, comm=1, ranks=2, rank=device)
        )
        export.kernel(pid, device, 10, 20, "ampere_sgemm_128x64_tn")
    export.write(root / "nsys" / "job.sqlite")
    both = analyse(root, Options())
    assert [w.name for w in both.windows] == ["iteration_10", "nsys"]
    assert both.throughput.iteration_time_s == kineto.throughput.iteration_time_s is not None
    assert both.throughput.iterations == kineto.throughput.iterations
    assert both.windows[1].throughput.na_reason == CAPTURE_ONLY
    assert both.diagnosis.assumptions[0].startswith("step time is the capture span on 2 of 2")
    assert [s.span_s for s in both.windows[1].steps.values()] == [1e-08, 1e-08]
