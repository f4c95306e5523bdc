"""What a worker process of `report --jobs` holds after reading a file (a helper of
test_worker.py, run in the worker: it imports nothing of commscope but `worker`)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from commscope.service import worker


def modules_after_reading(
    window: str, path: Path
) -> tuple[worker.Parsed | worker.Failed, int, frozenset[str]]:
    """`worker.outcome` of the file, then this process's id and the modules it holds."""
    result = worker.outcome(window, path)
    return result, os.getpid(), frozenset(sys.modules)


def hang(window: str, path: Path) -> str:
    """Says this process's id on stderr, then waits ten minutes (for a test to kill its
    command)."""
    print(f"worker {os.getpid()}", file=sys.stderr, flush=True)
    threading.Event().wait(600)
    return path.name
