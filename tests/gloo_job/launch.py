"""Launching tests/gloo_job/train.py (or another job script) under torchrun: 2 processes
(or `nproc`), gloo on loopback."""

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
