"""What the benchmark scripts read of the machine: the line they print (CPU count and model,
Python version), and a process's own peak RSS."""

from __future__ import annotations

import os
import platform
import resource
from pathlib import Path

MB = 1_000_000


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


def peak_rss_mb() -> float:
    """This process's own high-water RSS (VmHWM, which starts afresh at exec; `ru_maxrss`
    carries the parent's high-water mark over fork and exec, so a child started by a big
    process never reads below it)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / MB
    return ru_maxrss_mb()


def ru_maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB  # KiB on Linux
