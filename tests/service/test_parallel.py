"""`report --jobs`: files parsed in worker processes give the report one process gives."""

from __future__ import annotations

import errno
import multiprocessing.util
import os
import shutil
import signal
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import NoReturn

import pytest
from builders import rank_trace, write
from commscope.exporters import jsonreport
from commscope.model.errors import DIED
from commscope.pipeline.report import Options
from commscope.service import parallel
from commscope.service.cli import main
from commscope.service.offline import Failed, analyse, analyse_jobs
from tools import needs_shared, shared_traces

TRACES = shared_traces("kineto")
SAMPLE = Path("samples/gloo_ddp_2rank")


def documents(root: Path, workers: int) -> list[dict[str, object]]:
    return [jsonreport.to_document(r) for r in analyse_jobs(root, Options(), workers=workers)]


@needs_shared("kineto", "dlrm_8rank_v100")
def test_real_dlrm_traces_give_the_same_report_with_two_processes() -> None:
    root = TRACES / "dlrm_8rank_v100"
    assert documents(root, 2) == documents(root, 1)


def test_bundled_sample_gives_the_same_report_with_two_processes() -> None:
    assert documents(SAMPLE, 2) == documents(SAMPLE, 1)


def test_damaged_files_are_skipped_with_the_same_reasons(tmp_path: Path) -> None:
    # rank 0 whole; rank 1 cut in half (truncated); rank 2 not JSON; notes.json valid JSON
    # but no trace and not named like one (ignored): the same lists from 1 and 3 processes.
    whole = rank_trace(1, 3)
    write(tmp_path / "rank0_trace.json", rank_trace(0, 3))
    write(tmp_path / "rank1_trace.json", whole[: len(whole) // 2])
    write(tmp_path / "rank2_trace.json", b"<html>not json</html>")
    write(tmp_path / "notes.json", b'{"a": 1}')
    one, three = documents(tmp_path, 1), documents(tmp_path, 3)
    assert three == one
    inputs = analyse(tmp_path, Options(), workers=3).inputs
    assert [s.path for s in inputs.skipped] == [
        str(tmp_path / "rank1_trace.json"),
        str(tmp_path / "rank2_trace.json"),
    ]
    assert inputs.skipped[0].reason.startswith("truncated")
    assert inputs.ignored == [str(tmp_path / "notes.json")]


def crash_on_named(window: str, path: Path) -> str:
    """A worker that dies (SIGKILL) on files named crash*; else the name."""
    if path.name.startswith("crash"):
        os.kill(os.getpid(), signal.SIGKILL)
    return f"{window}/{path.name}"


def test_a_worker_killed_fails_its_file_only(tmp_path: Path) -> None:
    # a.json, crash.json, b.json: the pool breaks on crash.json; each unfinished file runs
    # again alone, crash.json dies again and gets the reason, the others their results.
    files = [("w", tmp_path / name) for name in ("a.json", "crash.json", "b.json")]
    got = parallel.outcomes(files, 2, crash_on_named, Failed)
    assert got == ["w/a.json", Failed(DIED), "w/b.json"]


def test_without_a_folder_for_the_forkserver_socket_workers_start_by_spawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No usable temporary folder (a read-only root, no /tmp): spawn, which needs no file,
    and the same report."""

    def no_folder() -> str:
        raise FileNotFoundError(errno.ENOENT, "No usable temporary directory found in ['/tmp']")

    monkeypatch.setattr(multiprocessing.util, "get_temp_dir", no_folder)
    assert parallel.start_method() == "spawn"
    assert documents(SAMPLE, 2) == documents(SAMPLE, 1)


def refuse_semaphores(workers: int, preload: str) -> NoReturn:
    raise OSError(
        errno.EROFS, "Read-only file system"
    )  # as SemLock says under a read-only /dev/shm


def test_workers_that_cannot_start_are_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(parallel, "pool", refuse_semaphores)
    with pytest.raises(parallel.WorkersError):
        documents(SAMPLE, 2)
    assert main(["report", str(SAMPLE), "--out", str(tmp_path), "--jobs", "2"]) == 1
    assert capsys.readouterr().err == (
        "commscope: error: worker processes cannot start here "
        "(/dev/shm: Read-only file system); use --jobs 1\n"
    )
    assert not list(tmp_path.iterdir())


def test_a_lasting_pool_replaces_the_pool_a_dead_worker_broke(tmp_path: Path) -> None:
    lasting = parallel.LastingPool(1, parallel.PRELOAD)
    try:
        killed = lasting.submit(crash_on_named, "w", tmp_path / "crash.json")
        with pytest.raises(BrokenProcessPool):
            killed.result(timeout=60)
        fine = lasting.submit(crash_on_named, "w", tmp_path / "a.json")
        assert (fine.result(timeout=60), lasting.renewed) == ("w/a.json", 1)
    finally:
        lasting.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        lasting.submit(crash_on_named, "w", tmp_path / "a.json")


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def begin(self, files: int, total_bytes: int) -> None:
        self.calls.append(("begin", files))

    def advance(self, nbytes: int) -> None:
        self.calls.append(("advance", nbytes))

    def file_done(self, events: int) -> None:
        self.calls.append(("file_done", events))

    def end(self) -> None:
        self.calls.append(("end", 0))


def done(calls: list[tuple[str, int]]) -> tuple[int, int]:
    """(files done, events) as the progress display sums them; bytes advanced."""
    events = [n for kind, n in calls if kind == "file_done"]
    return len(events), sum(events)


def test_progress_sees_every_file_and_the_same_totals(tmp_path: Path) -> None:
    # 4 files of the sample: files done, events and bytes advanced add up as in one process
    for source in sorted(SAMPLE.rglob("*.json*")):
        shutil.copy(source, tmp_path / f"{source.parent.name}_{source.name}")
    one, two = Recorder(), Recorder()
    analyse(tmp_path, Options(), one, workers=1)
    analyse(tmp_path, Options(), two, workers=2)
    assert two.calls[0] == one.calls[0] and two.calls[-1] == one.calls[-1] == ("end", 0)
    assert done(two.calls) == done(one.calls)
    advanced = [sum(n for kind, n in r.calls if kind == "advance") for r in (one, two)]
    assert advanced[0] == advanced[1] > 0


def test_jobs_below_one_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(SAMPLE), "--out", str(tmp_path), "--jobs", "0"]) == 1
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err
