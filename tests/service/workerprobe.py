"""What a worker process of `report --jobs` holds after reading a file (a helper of
test_worker.py, run in the worker: it imports nothing of commscope but `worker`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from commscope.service import worker


def modules_after_reading(
    window: str, path: Path
) -> tuple[worker.Parsed | worker.Failed, int, frozenset[str]]:
    """`worker.outcome` of the file, then this process's id and its commscope modules."""
    result = worker.outcome(window, path)
    return result, os.getpid(), frozenset(m for m in sys.modules if m.startswith("commscope"))
