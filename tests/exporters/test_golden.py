"""The text and JSON reports of a fixed two-rank, two-window run, against reviewed golden files.

Regenerate on purpose with COMMSCOPE_REGEN_GOLDEN=1 and review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from commscope.exporters import jsonreport, text
from commscope.model.schema import (
    CommOp,
    Event,
    FileStats,
    GpuOp,
    MemoryPeak,
    Report,
    Skipped,
    Step,
    TraceMeta,
)
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.config import JobConfig
from commscope.pipeline.merge import combine
from commscope.pipeline.report import Options, ParsedFile, build_report

GOLDEN = Path(__file__).resolve().parent / "golden"
US = 1000
ARG = "Group size arg"  # where the group sizes below come from


def events(rank: int, window: int) -> list[Event]:
    shift = 40 * rank + 10 * window  # µs: ranks and windows differ a little
    seq = 2 * window + 1
    return [
        Step(10 * window + 1, 0, (2000 + shift) * US, 1),
        GpuOp("compute", 0, 400 * US, "gemm"),
        GpuOp("compute", 600 * US, (300 + shift) * US, "attention"),
        GpuOp("compute", 1000 * US, 100 * US, "elementwise"),
        GpuOp("memcpy", 0, 20 * US),
        CommOp("AllGather", 100 * US, 200 * US, 64 * 2**20, 8, True, "0", 2 * window, ARG),
        CommOp("ReduceScatter", (700 + shift) * US, 500 * US, 128 * 2**20, 8, True, "0", seq, ARG),
        CommOp("AllReduce", (1500 + 3 * shift) * US, 50 * US, 4096, 8, True, "1", window, ARG),
        CommOp("SendRecv", 1800 * US, 30 * US, None, 2, True, "2", None, ARG),
        MemoryPeak(0, (30 + rank) * 2**30, 40 * 2**30),
    ]


def report(ranks: tuple[int, ...] = (0, 1)) -> Report:
    files = []
    for window in (1, 2):
        for rank in ranks:
            accumulator = Accumulator()
            accumulator.add_all(events(rank, window))
            meta = TraceMeta(
                rank=rank, world_size=8, backend="nccl", gpu_name="NVIDIA H100 80GB HBM3"
            )
            path = f"profile_trace/iteration_{10 * window}/rank{rank}_trace.json"
            files.append(
                ParsedFile(
                    f"iteration_{10 * window}",
                    path,
                    rank,
                    meta,
                    accumulator.result([path]),
                    FileStats(events=100),
                )
            )
    config = JobConfig(
        model="llama3",
        flavor="debugmodel",
        local_batch_size=2,
        seq_len=2048,
        parallelism={"data_parallel_shard_degree": -1, "tensor_parallel_degree": 2},
    )
    skipped = [
        Skipped("profile_trace/iteration_20/rank2_trace.json", "truncated: the JSON ends early")
    ]
    return build_report(
        ["iteration_10", "iteration_20"],
        files,
        skipped,
        Options(config=config, config_path="llama3_8b.toml"),
    )


@pytest.mark.parametrize(
    ("name", "render"),
    [("report.txt", lambda r: text.render(r).encode()), ("report.json", jsonreport.render)],
)
def test_report_matches_golden(name: str, render) -> None:  # type: ignore[no-untyped-def]
    produced = render(report())
    path = GOLDEN / name
    if os.environ.get("COMMSCOPE_REGEN_GOLDEN"):
        path.write_bytes(produced)
    assert produced.decode() == path.read_text()


def test_merged_report_matches_golden() -> None:
    """The same run as two shards of one rank each, merged (`commscope merge`)."""
    merged = combine([("shard_b.json", report((1,))), ("shard_a.json", report((0,)))])
    produced = text.render(merged)
    path = GOLDEN / "merged.txt"
    if os.environ.get("COMMSCOPE_REGEN_GOLDEN"):
        path.write_text(produced)
    assert produced == path.read_text()
