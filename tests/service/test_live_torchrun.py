"""A real torchrun gloo job writes its traces while a collector watches the folder (which does
not exist yet when the collector starts). The aggregator's final report is the one
`commscope report` gives for the same files once the job is done."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from gloo_job.launch import torchrun

from service.harness import Aggregate, Live, sample_value, wait_for

if not os.environ.get("CI"):
    pytest.importorskip("torch", reason="torch (CPU) is installed by scripts/test.sh")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_collector_follows_a_live_torchrun_job(live: Callable[..., Live], tmp_path: Path) -> None:
    run = live("--expect-nodes", "1")
    traces = tmp_path / "profile_trace"
    run.collect(traces, node="node0")
    torchrun(traces, "--gzip")
    wait_for("both windows", lambda: _windows(run.aggregate) == 2.0, 60)
    found, reference = run.end(stop=True)  # the job is over: as a pod's end or a Slurm epilog
    assert found == reference
    assert found["world_size"] == 2
    assert [w["name"] for w in found["windows"]] == ["iteration_4", "iteration_8"]
    assert found["inputs"]["skipped"] == []


def _windows(aggregate: Aggregate) -> float | None:
    return sample_value(aggregate.metrics_text() or "", "commscope_windows_completed_total")
