"""The machine line the benchmark scripts print (CPU count and model, Python version)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_and_python() -> str:
    cpus = len(os.sched_getaffinity(0))
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    return f"machine: nproc {cpus} ({model}), Python {platform.python_version()}"
