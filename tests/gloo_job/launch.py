"""Launching tests/gloo_job/train.py (or another job script) under torchrun: 2 processes
(or `nproc`), gloo on loopback; `report_on_job` runs a job and `commscope report` on its traces."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TRAIN = Path(__file__).resolve().parent / "train.py"
MOE = Path(__file__).resolve().parent / "moe.py"
PIPELINE = Path(__file__).resolve().parent / "pipeline_train.py"


def torchrun(out: Path, *extra: str, script: Path = TRAIN, nproc: int = 2) -> None:
    env = {**os.environ, "MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        str(nproc),
        str(script),
        "--out",
        str(out),
        *extra,
    ]
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]


def report_on_job(
    root: Path,
    *job: str,
    script: Path = TRAIN,
    nproc: int = 2,
    options: tuple[str, ...] = (),
    timeout_s: float = 180,
) -> Path:
    """Run the job (`job`: its flags) into root/profile_trace, then `commscope report` (a real
    process, with `options`) on it into root/trace_analysis; that folder."""
    traces, out = root / "profile_trace", root / "trace_analysis"
    torchrun(traces, *job, script=script, nproc=nproc)
    command = [sys.executable, "-m", "commscope.service.cli", "report", str(traces),
               "--out", str(out), *options]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    assert result.returncode == 0, result.stderr
    return out


def only(out: Path, pattern: str) -> str:
    """The text of the one file in `out` that matches `pattern`."""
    (path,) = out.glob(pattern)
    return path.read_text()
