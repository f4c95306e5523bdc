"""Report file names carry what the traces show: the GPU ranks traced (of the job's world), a
CPU run as such, and a clean name for a single trace file."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from commscope.exporters.naming import basename, clean_name, numbered
from commscope.model.schema import Inputs, JobInfo, Kernels, RankKernels, Report, RunConfig

NOW = datetime(2026, 11, 24, 12, 0, 5, tzinfo=UTC)
GPU = RunConfig(gpu_name="NVIDIA H100 80GB HBM3")
BUSY = Kernels(per_rank={"0": RankKernels(busy_s=1.0)})


def name(report: Report, fallback: str = "run") -> str:
    return basename(report, fallback, NOW)


def test_every_rank_of_a_gpu_job_traced() -> None:
    report = Report(world_size=8, ranks=list(range(8)), config=GPU)
    assert name(report) == "20261124_120005_run_gpu8"


def test_two_traced_ranks_of_128_are_not_gpu128() -> None:
    report = Report(world_size=128, ranks=[0, 1], kernels=BUSY)  # GPU activity, no GPU name
    assert name(report) == "20261124_120005_run_gpu2of128"


def test_a_cpu_gloo_run_is_not_a_gpu_run() -> None:
    report = Report(world_size=2, ranks=[0, 1], config=RunConfig(backend="gloo"))
    assert name(report) == "20261124_120005_run_cpu2"


def test_one_rank_of_a_job_without_a_world_size() -> None:
    assert name(Report(ranks=[0], config=GPU)) == "20261124_120005_run_gpu1"


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("a100_nccl_args_rank0.json.gz", "a100_nccl_args_rank0"),
        ("worker0_step_12.1694128201545.pt.trace.json", "worker0_step_12.1694128201545"),
        ("rank1_trace.json", "rank1_trace"),
        ("iteration_10", "iteration_10"),
        (".json", ".json"),  # nothing would be left: the name stays
        ("h100x2_alltoall.sqlite", "h100x2_alltoall"),  # an Nsight Systems export
        ("node1-pid7.log", "node1-pid7"),  # NCCL Inspector logs
        ("node1-pid7.jsonl.gz", "node1-pid7"),
    ],
)
def test_a_single_trace_file_gives_a_clean_name(given: str, expected: str) -> None:
    assert clean_name(given) == expected


def test_the_file_name_and_the_job_part() -> None:
    jobs = [JobInfo(number=1), JobInfo(number=2)]
    report = Report(world_size=2, ranks=[0, 1], config=GPU, inputs=Inputs(job=2, jobs=jobs))
    assert name(report, "b200_rank0.json.gz") == "20261124_120005_b200_rank0_gpu2_job2of2"


def test_a_second_report_of_one_name_is_numbered() -> None:
    assert [numbered("20261124_120005_run_gpu8", n) for n in (1, 2, 3)] == [
        "20261124_120005_run_gpu8",
        "20261124_120005_run_gpu8-2",
        "20261124_120005_run_gpu8-3",
    ]
