"""A worker of `report --jobs` imports only what reading a file needs, and the reports it
makes are byte for byte those of one process (their provenance aside)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from builders import rank_trace, write
from commscope.service import parallel, worker
from commscope.service.cli import main

from service.workerprobe import modules_after_reading

# The commscope modules a worker may hold: the model, the readers (collector/), the
# reduction of a file to its result (pipeline's accumulate and what it imports, parsed), and
# of service/ the per-file read (`pipes`, the worker's entry, runs as __main__).
_REDUCTION = (
    "accumulate",
    "graphs",
    "intervals",
    "parsed",
    "sketch",
    "stats",
    "tail",
    "topkernels",
)
READING: frozenset[str] = frozenset(
    {
        "commscope",
        "commscope.model",
        "commscope.collector",
        "commscope.pipeline",
        *(f"commscope.pipeline.{name}" for name in _REDUCTION),
        "commscope.service",
        "commscope.service.worker",
    }
)
# What drives a pool of processes: a worker over pipes holds none of it.
POOLS = frozenset({"multiprocessing", "concurrent.futures", "subprocess", "asyncio"})


def allowed(module: str) -> bool:
    return module in READING or module.startswith(("commscope.model.", "commscope.collector."))


def folder(root: Path) -> Path:
    """Three ranks of a hand-made job, a fourth cut in half (truncated), one not JSON."""
    for rank in range(3):
        write(root / f"rank{rank}_trace.json", rank_trace(rank, 4))
    whole = rank_trace(3, 4)
    write(root / "rank3_trace.json", whole[: len(whole) // 2])
    write(root / "rank4_trace.json", b"<html>not json</html>")
    return root


def test_a_worker_imports_no_report_exporter_daemon_or_pool_module(tmp_path: Path) -> None:
    files = [("w", path) for path in sorted(folder(tmp_path).iterdir())]
    got = parallel.outcomes(files, 2, modules_after_reading, worker.Failed, here=False)
    assert [result for result, _, _ in got] == [worker.outcome(*file) for file in files]
    assert os.getpid() not in {pid for _, pid, _ in got}  # read in other processes
    held = frozenset().union(*(modules for _, _, modules in got))
    ours = {m for m in held if m.startswith("commscope")}
    assert {m for m in ours if not allowed(m)} == set()
    assert "commscope.service.worker" in ours
    assert any(m.startswith("commscope.collector.") for m in ours)
    assert POOLS & held == set()


_PROVENANCE = re.compile(
    rb'\n *"generated_utc": [^\n]*|"command": \[[^\]]*\]|\n(Generated|Command): [^\n]*'
)


def reports(root: Path, out: Path, jobs: int) -> tuple[int, dict[str, bytes]]:
    """`report --jobs jobs`'s exit code (3: files skipped) and its text and JSON files
    without when and how it was run."""
    code = main(["report", str(root), "--out", str(out), "--jobs", str(jobs), "--no-progress"])
    return code, {p.suffix: _PROVENANCE.sub(b"", p.read_bytes()) for p in out.iterdir()
                  if p.suffix in {".json", ".txt"}}  # fmt: skip


@pytest.mark.parametrize("jobs", [2, 3])
def test_jobs_n_writes_the_bytes_jobs_1_writes(tmp_path: Path, jobs: int) -> None:
    root = folder(tmp_path / "run")
    one, many = reports(root, tmp_path / "one", 1), reports(root, tmp_path / "many", jobs)
    assert (one[0], sorted(one[1])) == (3, [".json", ".txt"])
    assert many == one


def test_the_command_imports_the_daemons_only_when_one_runs() -> None:
    """`commscope report` waits on its workers holding the CLI: not the daemons, zmq or
    prometheus_client (the collector's and the aggregator's imports, loaded when one runs)."""
    probe = (
        "import sys, commscope.service.cli; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'zmq', 'prometheus_client'}"
        " or m in {'commscope.service.aggregate', 'commscope.service.collect'}))"
    )
    found = subprocess.run([sys.executable, "-P", "-c", probe], capture_output=True, text=True,
                           check=True, timeout=120)  # fmt: skip
    assert found.stdout.strip() == "[]"
