"""A real torch (CPU, gloo) job whose traces `torch.profiler.tensorboard_trace_handler` names
`<hostname>_<pid>.<time_ns>.pt.trace.json`: with no `--hosts`, the report takes each rank's host
from its file's name and places the job's groups on one node."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from commscope.model.names import host_in_name
from commscope.pipeline.hosts import FILE_NAME, INTRA
from gloo_job.launch import torchrun

if not os.environ.get("CI"):
    pytest.importorskip("torch", reason="torch (CPU) is installed by scripts/test.sh")

pytestmark = pytest.mark.slow
HOST = socket.gethostname()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    if host_in_name(f"{HOST}_1.2.pt.trace.json") != HOST:
        pytest.skip(f"this machine's host name {HOST!r} is not one a file name can carry")
    root = tmp_path_factory.mktemp("gloo_hosts")
    torchrun(root / "profile_trace", "--handler", "tensorboard")
    out = root / "trace_analysis"
    command = [sys.executable, "-m", "commscope.service.cli", "report"]
    command += [str(root / "profile_trace"), "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    (path,) = out.glob("*.json")
    return {"report": json.loads(path.read_text()), "files": _files(root / "profile_trace")}


def _files(root: Path) -> list[str]:
    return sorted(p.name.split("_", 1)[0] for p in root.rglob("*.pt.trace.json"))


def test_the_job_wrote_tensorboard_trace_handler_names(report: dict) -> None:
    assert report["files"] == [HOST] * 4  # 2 ranks x 2 windows


def test_each_ranks_host_comes_from_its_file_name(report: dict) -> None:
    links = report["report"]["links"]
    assert links["hosts"] == {"0": HOST, "1": HOST}
    assert links["host_sources"] == {"0": FILE_NAME, "1": FILE_NAME}
    assert set(links["groups"].values()) == {INTRA}
    assert links["na_reason"] is None
    assert links["intra_node"]["collectives"]["AllReduce"]["instances"] == 8  # 2 a step, 4 steps
