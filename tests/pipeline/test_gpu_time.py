"""GPU time by kernel category, idle time, memory peak and MFU, worked out by hand (µs)."""

from __future__ import annotations

import pytest
from commscope.model.schema import (
    CommOp,
    Event,
    FileStats,
    GpuOp,
    MemoryPeak,
    Report,
    Step,
    TraceMeta,
)
from commscope.pipeline.accumulate import Accumulator, merge_results
from commscope.pipeline.config import JobConfig
from commscope.pipeline.report import Options, ParsedFile, build_report

US = 1000
GB = 10**9

EVENTS: list[Event] = [
    GpuOp("compute", 0, 100 * US, "gemm"),  # [0,100)
    GpuOp("compute", 50 * US, 100 * US, "attention"),  # [50,150): another stream
    GpuOp("compute", 300 * US, 50 * US, "elementwise"),  # [300,350)
    GpuOp("memcpy", 400 * US, 20 * US),  # [400,420)
    CommOp("AllReduce", 500 * US, 100 * US, 4096, 2, True, "0", 0),  # [500,600)
    MemoryPeak(0, 5 * GB, 6 * GB),
    MemoryPeak(1, 7 * GB, None),
    Step(1, 0, 1_000_000 * US, 1),  # 1 s
]


def result() -> Accumulator:
    accumulator = Accumulator()
    accumulator.add_all(EVENTS)
    return accumulator


def test_time_per_category_is_the_sum_of_durations() -> None:
    # streams overlap ([50,100) counts for gemm and attention): 100 + 100 + 50 + 20 + 100
    assert result().result().kernel_ns == {
        "attention": 100 * US,
        "communication": 100 * US,
        "elementwise": 50 * US,
        "gemm": 100 * US,
        "memcpy": 20 * US,
    }


def test_idle_is_the_span_minus_the_union_of_all_gpu_activity() -> None:
    # union [0,150) + [300,350) + [400,420) + [500,600) = 320; span [0,600) = 600
    found = result().result()
    assert (found.gpu_busy_ns, found.gpu_span_ns) == (320 * US, 600 * US)


def test_memory_peak_is_the_highest_over_the_ranks_gpus() -> None:
    found = result().result()
    assert (found.memory_peak_bytes, found.memory_reserved_peak_bytes) == (7 * GB, 6 * GB)


def test_windows_merge_by_summing_times_and_keeping_the_highest_peak() -> None:
    one = result().result()
    other = Accumulator()
    other.add_all([GpuOp("compute", 0, 10 * US, "gemm"), MemoryPeak(0, 9 * GB, 1 * GB)])
    merged = merge_results([one, other.result()])
    assert merged.kernel_ns["gemm"] == 110 * US
    assert (merged.gpu_busy_ns, merged.gpu_span_ns) == (330 * US, 610 * US)
    assert (merged.memory_peak_bytes, merged.memory_reserved_peak_bytes) == (9 * GB, 6 * GB)
    assert merged.calls == []


@pytest.fixture(scope="module")
def report() -> Report:
    meta = TraceMeta(world_size=2, gpu_name="NVIDIA H100 80GB HBM3")
    files = [
        ParsedFile("w", f"rank{rank}.json", rank, meta, result().result(), FileStats())
        for rank in (0, 1)
    ]
    config = JobConfig(model="llama3", flavor="8B", local_batch_size=1, seq_len=4096,
                       parallelism={"data_parallel_shard_degree": -1},
                       activation_checkpoint="full")  # fmt: skip
    return build_report(["w"], files, [], Options(config=config))


def test_kernel_section(report: Report) -> None:
    kernels = report.kernels
    # all ranks: 2 x (100 gemm + 100 attention + 50 elementwise + 100 comm + 20 memcpy) = 740
    assert kernels.time_s["gemm"] == pytest.approx(200e-6)
    assert kernels.share["gemm"] == pytest.approx(200 / 740)
    assert kernels.share["reduction"] == 0
    rank = kernels.per_rank["0"]
    assert (rank.busy_s, rank.span_s, rank.idle_s) == pytest.approx((320e-6, 600e-6, 280e-6))
    assert rank.idle_ratio == pytest.approx(280 / 600)
    assert kernels.idle_ratio_mean == pytest.approx(280 / 600)
    assert rank.memory_peak_bytes == 7 * GB


def test_mfu_and_hfu(report: Report) -> None:
    # llama3 8B: N = 7,504,924,672 (no embedding), L = 32, D = 4096, T = 4096
    # FLOPs/token = 6N + 12·32·4096·4096 = 45,029,548,032 + 6,442,450,944 = 51,471,998,976
    # global batch 1 x 2 ranks (dp_shard -1), 1 s steps: 8192 tokens/s, 4096 per GPU
    u = report.utilization
    assert u.flops_per_token == 51_471_998_976
    assert u.model_flops_per_second_per_gpu == pytest.approx(4096 * 51_471_998_976)
    assert u.mfu == pytest.approx(4096 * 51_471_998_976 / 989e12)
    assert u.hfu == pytest.approx(u.mfu * 4 / 3)  # full activation checkpointing
    assert (u.na_reason, u.warning) == (None, None)


def test_mfu_is_na_with_the_reason_when_the_model_is_unknown() -> None:
    files = [ParsedFile("w", "r0.json", 0, TraceMeta(world_size=1), result().result(), FileStats())]
    u = build_report(
        ["w"], files, [], Options(config=JobConfig(local_batch_size=1, seq_len=8))
    ).utilization
    assert u.mfu is None
    assert u.na_reason == "no model in the config; give --params or --flops-per-token"


def test_an_impossible_mfu_is_flagged() -> None:
    files = [ParsedFile("w", "r0.json", 0, TraceMeta(world_size=1, gpu_name="A100"),
                        result().result(), FileStats())]  # fmt: skip
    options = Options(config=JobConfig(local_batch_size=1, seq_len=8), flops_per_token=1e15)
    u = build_report(["w"], files, [], options).utilization
    assert u.mfu is not None and u.mfu > 1
    assert u.warning is not None and u.warning.startswith("above 100%")


def hfu_report(config: JobConfig, config_path: str | None) -> Report:
    """One A100 rank of 1 s steps with MFU known (--flops-per-token 1e12): tokens/s 8."""
    meta = TraceMeta(world_size=1, gpu_name="NVIDIA A100-SXM4-80GB")
    files = [ParsedFile("w", "r0.json", 0, meta, result().result(), FileStats())]
    options = Options(config=config, config_path=config_path, flops_per_token=1e12)
    return build_report(["w"], files, [], options)


def test_without_any_config_hfu_is_na_not_torchtitans_default() -> None:
    # --batch-size/--seq-len alone make a JobConfig but no config file: checkpointing unknown
    u = hfu_report(JobConfig(local_batch_size=1, seq_len=8), None).utilization
    assert u.mfu == pytest.approx(8 * 1e12 / 312e12)
    assert (u.hfu, u.hfu_factor) == (None, None)
    assert u.hfu_reason == "activation checkpointing unknown without a config (give --config)"


def test_a_config_without_the_section_assumes_torchtitans_default_and_says_so() -> None:
    report = hfu_report(JobConfig(local_batch_size=1, seq_len=8), "job.toml")
    u = report.utilization
    assert u.hfu == pytest.approx(u.mfu * 7 / 6)  # selective, every 2nd layer
    assert u.hfu_reason is not None and u.hfu_reason.startswith("assumed: the config gives no")
    assert f"HFU: {u.hfu_reason}" in report.diagnosis.assumptions
