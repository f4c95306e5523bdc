"""`commscope collect --jobs N` as processes: files whose document has ended are reduced in
worker processes (the collector's log says how many), the report is `commscope report`'s;
`--jobs 1` reduces every file in the collector itself. Every wait is bounded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from tools import needs_shared, shared_traces

from service.harness import (
    Aggregate,
    Processes,
    collector_args,
    free_port,
    normalised,
    offline,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)
DLRM = shared_traces("kineto", "dlrm_8rank_v100")


def files_in_workers(lines: list[dict[str, object]]) -> object:
    (end,) = [line for line in lines if line.get("msg") == "end of run acknowledged"]
    return end.get("files_in_workers")


@needs_shared("kineto", "dlrm_8rank_v100")
@pytest.mark.parametrize(("jobs", "in_workers"), [("2", 8), ("1", 0)])
def test_whole_files_are_reduced_in_workers_with_the_offline_report(
    procs: Processes, tmp_path: Path, jobs: str, in_workers: int
) -> None:
    """The 8 DLRM ranks, complete before the collector starts: with --jobs 2 each is reduced
    in a worker, with --jobs 1 none; either way the report is the offline one."""
    watch = tmp_path / "traces"
    shutil.copytree(DLRM, watch)
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "1"))
    server = aggregate.start()
    args = collector_args(watch, aggregate.endpoint, "n1", tmp_path / "st", "--once")
    collector = procs.start("collector", *args, "--jobs", jobs)
    assert collector.wait(120) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    assert files_in_workers(collector.lines()) == in_workers
    assert normalised(aggregate.report()) == normalised(offline(watch))


def children(pid: int) -> set[int]:
    """The live processes whose parent is `pid`."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists() and "State:\tZ" not in _status(pid)


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""


@needs_shared("kineto", "dlrm_8rank_v100")
def test_a_collector_killed_leaves_no_worker_or_forkserver_behind(
    procs: Processes, tmp_path: Path
) -> None:
    """SIGKILL (no cleanup runs in the collector): its forkserver and file workers end too,
    within a bounded wait, instead of waiting for ever on a parent that is gone."""
    watch = tmp_path / "traces"
    shutil.copytree(DLRM, watch)
    port = free_port()  # no aggregator: the collector reduces the files and waits to send them
    args = collector_args(watch, f"tcp://127.0.0.1:{port}", "n1", tmp_path / "st")
    collector = procs.start("collector", *args, "--jobs", "2")
    pid = collector.popen.pid
    workers = wait_for("the forkserver's workers", lambda: _workers(pid), 60)
    collector.kill()
    left = {pid for pid in workers if alive(pid)}
    wait_for("the workers and forkserver to end", lambda: not any(map(alive, left)) or None, 30)


def _workers(collector: int) -> set[int] | None:
    """The collector's forkserver and its workers, once both workers are up."""
    for server in children(collector):
        if len(workers := children(server)) == 2:
            return {server, *workers}
    return None
