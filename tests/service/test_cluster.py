"""`commscope report --dask`: the per-file work on a dask.distributed cluster (on loopback)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from builders import rank_trace, write
from commscope.exporters import jsonreport, text
from commscope.model.errors import ClusterError
from commscope.pipeline.report import Options
from commscope.service.cluster import Cluster, _check_workers, own_version
from commscope.service.offline import analysis
from tools import require_module

distributed = require_module("distributed", "the dask extra: pip install 'commscope[dask]'")


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """Two worker processes of one thread each, on loopback; the scheduler's address."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=":0"
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """Two windows of two ranks each, and a truncated third rank in the second (skipped)."""
    root = tmp_path / "profile_trace"
    for window in ("iteration_10", "iteration_20"):
        for rank in (0, 1):
            write(root / window / f"rank{rank}_trace.json", rank_trace(rank, 3))
    write(root / "iteration_20" / "rank2_trace.json", rank_trace(2, 3)[:300])
    return root


class Counted:
    """A progress observer that counts what it is told."""

    def __init__(self) -> None:
        self.files, self.nbytes = 0, 0

    def begin(self, files: int, total_bytes: int) -> None: ...

    def advance(self, nbytes: int) -> None:
        self.nbytes += nbytes

    def file_done(self, events: int) -> None:
        self.files += 1

    def end(self) -> None: ...


def test_the_report_made_on_a_cluster_is_the_local_one(run_dir: Path, scheduler: str) -> None:
    local = analysis(run_dir, Options(), workers=1).reports
    progress = Counted()
    remote = analysis(run_dir, Options(), progress, cluster=Cluster(scheduler)).reports
    assert [jsonreport.render(r) for r in remote] == [jsonreport.render(r) for r in local]
    assert [text.render(r) for r in remote] == [text.render(r) for r in local]
    assert len(remote[0].inputs.skipped) == 1  # the truncated file, with its reason
    assert progress.files == 5
    assert progress.nbytes == remote[0].inputs.bytes_read  # the skipped file counts no bytes


def test_the_command_on_a_cluster_writes_the_local_reports(
    run_dir: Path, scheduler: str, tmp_path: Path
) -> None:
    relative = run_dir.relative_to(tmp_path)  # the workers' working folder is not this one
    for out, flags in (("local", ["--jobs", "1"]), ("remote", ["--dask", scheduler])):
        result = commscope("report", relative, "--out", tmp_path / out, *flags, cwd=tmp_path)
        assert result.returncode == 3, result.stderr  # written, one input skipped
    (local,), (remote,) = (list((tmp_path / d).glob("*.json")) for d in ("local", "remote"))
    # equal but for who wrote them when with which command line (`--dask` against `--jobs`)
    found = [json.loads(path.read_bytes()) for path in (local, remote)]
    commands = [document.pop("provenance")["command"] for document in found]
    assert found[0] == found[1]
    assert commands[1][-2:] == ["--dask", scheduler]


def commscope(
    *args: str | Path, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "commscope.service.cli", *map(str, args)]
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False, env=env
    )


def test_a_scheduler_that_does_not_answer_is_one_line(run_dir: Path, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    result = commscope("report", run_dir, "--dask", address, "--dask-timeout", "1", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"commscope: error: no Dask scheduler answered at {address} within 1 s ("
    )
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "trace_analysis").exists()


def test_without_the_extra_the_option_is_one_line(run_dir: Path, tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "distributed"  # an install without distributed
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named distributed')\n")
    env = {**os.environ, "PYTHONPATH": str(shadow.parent)}
    result = commscope("report", run_dir, "--dask", "tcp://127.0.0.1:8786", cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert result.stderr == (
        "commscope: error: --dask needs the dask extra (pip install 'commscope[dask]'): "
        "No module named distributed\n"
    )


class FakeClient:
    def __init__(self, versions: dict[str, str]) -> None:
        self.versions = versions

    def run(self, function: Any) -> dict[str, str]:
        return self.versions


def test_workers_running_another_commscope_are_refused() -> None:
    ours = own_version()
    _check_workers(FakeClient({"tcp://a": ours, "tcp://b": ours}), "tcp://s")  # same: no error
    with pytest.raises(ClusterError, match=r"run commscope 0\.0\.1 \(schema 1\), this is"):
        _check_workers(FakeClient({"tcp://a": ours, "tcp://b": "0.0.1 (schema 1)"}), "tcp://s")
    with pytest.raises(ClusterError, match="has no workers"):
        _check_workers(FakeClient({}), "tcp://s")
