"""A real torchrun gloo job writes its traces while a collector watches the folder (which does
not exist yet when the collector starts). The aggregator's final report is the one
`commscope report` gives for the same files once the job is done."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gloo_job.launch import torchrun

from service.harness import (
    Aggregate,
    Processes,
    collector_args,
    free_port,
    normalised,
    offline,
    sample_value,
    wait_for,
)

if not os.environ.get("CI"):
    pytest.importorskip("torch", reason="torch (CPU) is installed by scripts/test.sh")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_collector_follows_a_live_torchrun_job(procs: Processes, tmp_path: Path) -> None:
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "1"))
    server = aggregate.start()
    traces = tmp_path / "profile_trace"
    collector = procs.start(
        "collector", *collector_args(traces, aggregate.endpoint, "node0", tmp_path / "st")
    )
    torchrun(traces, "--gzip")
    wait_for("both windows", lambda: _windows(aggregate) == 2.0, 60)
    collector.terminate()  # the job is over: as a pod's end or a Slurm epilog would
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    live = normalised(aggregate.report())
    assert live == normalised(offline(traces))
    assert live["world_size"] == 2
    assert [w["name"] for w in live["windows"]] == ["iteration_4", "iteration_8"]
    assert live["inputs"]["skipped"] == []


def _windows(aggregate: Aggregate) -> float | None:
    return sample_value(aggregate.metrics_text() or "", "commscope_windows_completed_total")
