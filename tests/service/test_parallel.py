"""`report --jobs`: files parsed in worker processes give the report one process gives."""

from __future__ import annotations

import errno
import io
import multiprocessing.util
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import NoReturn

import pytest
from builders import rank_trace, write
from commscope.exporters import jsonreport
from commscope.model.errors import DIED
from commscope.pipeline.report import Options
from commscope.service import lasting, parallel
from commscope.service.cli import main
from commscope.service.offline import Failed, analyse, analysis
from tools import needs_shared, shared_traces

TRACES = shared_traces("kineto")
SAMPLE = Path("samples/gloo_ddp_2rank")


def documents(root: Path, workers: int) -> list[dict[str, object]]:
    return [jsonreport.to_document(r) for r in analysis(root, Options(), workers=workers).reports]


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
    # a.json, crash.json, b.json in two workers: the worker of crash.json dies, the others go
    # on; crash.json runs again alone in a fresh worker, dies again and gets the reason.
    files = [("w", tmp_path / name) for name in ("a.json", "crash.json", "b.json")]
    got = parallel.outcomes(files, 2, crash_on_named, Failed, here=False)
    assert got == ["w/a.json", Failed(DIED), "w/b.json"]


def test_every_file_a_dead_worker_held_is_parsed_again(tmp_path: Path) -> None:
    # one worker, six files: it holds crash.json and a.json (sent ahead) when it dies; a
    # fresh worker parses the rest, then each of the two alone: a.json's result, crash's death
    names = ("crash.json", "a.json", "b.json", "c.json", "d.json", "e.json")
    files = [("w", tmp_path / name) for name in names]
    got = parallel.outcomes(files, 1, crash_on_named, Failed, here=False)
    assert got == [Failed(DIED), *(f"w/{name}" for name in names[1:])]


def crash_once(window: str, path: Path) -> str:
    """A worker that dies on crash* files the first time (it leaves a mark); else the name."""
    mark = path.with_suffix(".died")
    if path.name.startswith("crash") and not mark.exists():
        mark.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return f"{window}/{path.name}"


def test_a_file_whose_worker_dies_once_is_parsed_again(tmp_path: Path) -> None:
    files = [("w", tmp_path / name) for name in ("a.json", "crash_once.json", "b.json")]
    got = parallel.outcomes(files, 2, crash_once, Failed, here=False)
    assert got == ["w/a.json", "w/crash_once.json", "w/b.json"]


def where(window: str, path: Path) -> int:
    return os.getpid()


def meet(window: str, path: Path) -> int:
    """This process's id, once another process is in here too (each leaves its id in the
    folder; bounded wait)."""
    (path.parent / str(os.getpid())).touch()
    deadline = time.monotonic() + 120
    while {p.name for p in path.parent.iterdir()} <= {str(os.getpid()), "a.json", "b.json"}:
        assert time.monotonic() < deadline, "no other process parsed meanwhile"
        time.sleep(0.01)
    return os.getpid()


def test_the_command_parses_a_share_itself(tmp_path: Path) -> None:
    """--jobs 2 on two files: one is parsed here while the one worker parses the other."""
    files = [("w", tmp_path / name) for name in ("a.json", "b.json")]
    got = parallel.outcomes(files, 2, meet, Failed)
    assert os.getpid() in got and len(set(got)) == 2


def test_jobs_1_starts_no_worker(tmp_path: Path) -> None:
    files = [("w", tmp_path / name) for name in ("a.json", "b.json", "c.json")]
    assert parallel.outcomes(files, 1, where, Failed) == [os.getpid()] * 3


def refuse(window: str, path: Path) -> str:
    raise ValueError(f"no {path.name}")


def test_an_error_in_a_worker_is_raised_here(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"no a\.json"):
        parallel.outcomes([("w", tmp_path / "a.json")], 1, refuse, Failed, here=False)


def test_workers_end_once_the_command_is_gone() -> None:
    """A command killed (SIGKILL) while its worker parses: the worker ends too (its stdin
    ends), though its task would wait ten minutes."""
    script = (
        "from pathlib import Path; from commscope.service import parallel; "
        "from service.workerprobe import hang; "
        "parallel.outcomes([('w', Path('x'))], 1, hang, str, here=False)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = subprocess.Popen(
        [sys.executable, "-P", "-c", script], stderr=subprocess.PIPE, env=env
    )
    assert command.stderr is not None
    try:
        ready, _, _ = select.select([command.stderr], [], [], 120)  # the worker's own line
        assert ready, "no worker started"
        worker = int(command.stderr.readline().split()[-1])
        pidfd = os.pidfd_open(worker)
    finally:
        command.kill()
        command.wait(60)
        command.stderr.close()
    with io.FileIO(pidfd) as handle:  # readable once the worker has ended
        assert select.select([handle], [], [], 60)[0], f"worker {worker} still running"


def test_without_a_folder_for_the_forkserver_socket_a_lasting_pool_starts_by_spawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No usable temporary folder (a read-only root, no /tmp): spawn, which needs no file."""

    def no_folder() -> str:
        raise FileNotFoundError(errno.ENOENT, "No usable temporary directory found in ['/tmp']")

    monkeypatch.setattr(multiprocessing.util, "get_temp_dir", no_folder)
    assert lasting.start_method() == "spawn"


def no_process(*args: object, **kwargs: object) -> NoReturn:
    raise OSError(errno.EAGAIN, "Resource temporarily unavailable")  # as fork says at a limit


def test_workers_that_cannot_start_are_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(parallel.subprocess, "Popen", no_process)
    with pytest.raises(parallel.WorkersError):
        documents(SAMPLE, 2)
    assert main(["report", str(SAMPLE), "--out", str(tmp_path), "--jobs", "2"]) == 1
    assert capsys.readouterr().err == (
        "commscope: error: worker processes cannot start here "
        "(Resource temporarily unavailable); use --jobs 1\n"
    )
    assert not list(tmp_path.iterdir())


def test_the_report_path_names_no_folder_its_workers_do_not_use() -> None:
    """Its workers are subprocesses over pipes: a refusal names only the file it names."""
    refused = OSError(errno.EROFS, "Read-only file system")
    assert str(parallel.WorkersError(refused)) == (
        "worker processes cannot start here (Read-only file system); use --jobs 1"
    )
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "/opt/py/bin/python")
    assert str(parallel.WorkersError(missing)) == (
        "worker processes cannot start here "
        "(/opt/py/bin/python: No such file or directory); use --jobs 1"
    )


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (OSError(errno.EROFS, "Read-only file system"), "/dev/shm: Read-only file system"),
        (OSError(errno.ENOSPC, "No space left on device"), "/dev/shm: No space left on device"),
        (OSError(errno.EACCES, "Permission denied", "/x"), "/x: Permission denied"),
        (OSError(errno.EAGAIN, "Resource temporarily unavailable"),
         "Resource temporarily unavailable"),
    ],
)  # fmt: skip
def test_the_lasting_pool_names_dev_shm_where_its_semaphores_live(
    exc: OSError, reason: str
) -> None:
    assert lasting.reason(exc) == reason


def test_a_lasting_pool_replaces_the_pool_a_dead_worker_broke(tmp_path: Path) -> None:
    kept = lasting.LastingPool(1, "commscope.service.worker")
    try:
        killed = kept.submit(crash_on_named, "w", tmp_path / "crash.json")
        with pytest.raises(BrokenProcessPool):
            killed.result(timeout=60)
        fine = kept.submit(crash_on_named, "w", tmp_path / "a.json")
        assert (fine.result(timeout=60), kept.renewed) == ("w/a.json", 1)
    finally:
        kept.shutdown()
    with pytest.raises(RuntimeError, match="shut down"):
        kept.submit(crash_on_named, "w", tmp_path / "a.json")


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
