"""A job traced by PyTorch 1.8-1.10 (string tids, capitalised categories, ProfilerStep#N as an
`Operator`) gets the report it would get in today's layout (issue 24 item 5): hand-worked on
a small 2-rank job, and on the real 8-rank DLRM traces of ../shared rewritten into that
layout (skipped when ../shared is absent)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from commscope.model.schema import Report
from commscope.pipeline.report import Options
from commscope.service.offline import analyse
from kineto_builder import cpu_op, dims_args, dist_head, kernel, launch, legacy_event, trace
from tools import needs_shared, shared_traces

MAIN = 4242
DLRM = shared_traces("kineto", "dlrm_8rank_v100")
NCCL = "ncclAllReduceRingLLKernel_sum_f32(CollectiveArgs)"


def rank_events() -> list[dict[str, Any]]:
    """Steps 3 [0, 500) and 4 [500, 1000) µs; gemms [200, 300) and [600, 700); the all-reduce
    (1024 floats) [250, 330), launched inside its nccl: op: 50 µs of it under the gemm."""
    step = {"cat": "user_annotation"}
    return [
        {**cpu_op("ProfilerStep#3", 0, 500, MAIN), **step},
        cpu_op("nccl:all_reduce", 100, 40, MAIN, dims_args([[1024]], ["float"])),
        launch(6, 20, MAIN),
        launch(7, 110, MAIN),
        kernel("volta_sgemm_128x64_nn", 200, 100, {"correlation": 6}),
        kernel(NCCL, 250, 80, {"correlation": 7}),
        {**cpu_op("ProfilerStep#4", 500, 500, MAIN), **step},
        kernel("volta_sgemm_128x64_nn", 600, 100),
    ]


def job(root: Path, thread: str | None) -> Path:
    """Ranks 0 and 1 of 2 in one folder: today's layout, or 1.8's with `thread` for tids."""
    folder = root / "iteration_4"
    folder.mkdir(parents=True)
    for rank in range(2):
        events = rank_events()
        if thread is not None:
            events = [legacy_event(e, thread) for e in events]
        doc = trace(events, dist_head(rank=rank, world_size=2))
        (folder / f"rank{rank}_trace.json").write_bytes(doc)
    return root


@pytest.mark.parametrize("thread", ["{}", "thread {}"], ids=["numbered", "named"])
def test_a_legacy_job_has_its_steps_overlap_and_traffic(tmp_path: Path, thread: str) -> None:
    report = analyse(job(tmp_path, thread), Options())
    assert (report.throughput.iterations, report.throughput.iteration_time_s) == (2, 500e-6)
    for rank in ("0", "1"):
        overlap = report.overlap.per_rank[rank]
        # |C| = 80 µs, |C ∩ P| = [250, 300) = 50 µs, |P| = 100 + 100 µs
        assert overlap.ratio == 50 / 80
        assert (overlap.comm_time_s, overlap.overlapped_time_s) == (80e-6, 50e-6)
        assert (overlap.exposed_comm_time_s, overlap.compute_time_s) == (30e-6, 200e-6)
    allreduce = report.collectives.all_ranks["AllReduce"]
    # 4096 B a rank; n = 2: F = 2(n-1)/n = 1
    assert (allreduce.count, allreduce.message_bytes, allreduce.bus_bytes) == (2, 8192, 8192)
    assert report.inputs.dropped_events == {}


def test_a_legacy_job_reports_as_the_same_job_in_todays_layout(tmp_path: Path) -> None:
    now = analyse(job(tmp_path / "now", None), Options())
    then = analyse(job(tmp_path / "then", "{}"), Options())
    assert comparable(then) == comparable(now)


@needs_shared("kineto", "dlrm_8rank_v100")
def test_the_real_dlrm_job_rewritten_as_pytorch_1_8_wrote_it_reports_the_same(
    tmp_path: Path,
) -> None:
    legacy = tmp_path / DLRM.name
    legacy.mkdir()
    for path in sorted(DLRM.glob("*.json")):
        doc = json.loads(path.read_bytes())
        doc["traceEvents"] = [legacy_event(e) for e in doc["traceEvents"]]
        (legacy / path.name).write_text(json.dumps(doc, indent=1))
    now, then = analyse(DLRM, Options()), analyse(legacy, Options())
    assert then.throughput.iterations == 1
    assert comparable(then) == comparable(now)


def comparable(report: Report) -> dict[str, Any]:
    """The report but for its inputs and the bytes each file held (the layouts' lengths
    differ)."""
    document = msgspec.to_builtins(report)
    assert isinstance(document, dict)
    document.pop("inputs")
    for window in document["windows"]:
        window.pop("inputs", None)
        for facts in window["facts"].values():
            facts["stats"].pop("bytes_read")
    return document
