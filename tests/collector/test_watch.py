"""watch.py: trace files reported as they appear, by inotify and by polling alike."""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from commscope.collector import watch
from commscope.collector.watch import Watcher

pytestmark = pytest.mark.timeout(30)

QUIET_S = 0.3  # how long to listen for a report that must not come


@pytest.fixture(params=["inotify", "polling"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "traces"
    folder.mkdir()
    return folder


@pytest.fixture
def watcher(root: Path, mode: str) -> Iterator[Watcher]:
    with open_watcher(root, mode) as opened:
        yield opened


def open_watcher(root: Path, mode: str) -> Watcher:
    """Inotify mode never rescans on a timer here, so only its events can report new files."""
    opened = Watcher(root, poll_s=0.05, rescan_s=3600.0, use_inotify=mode == "inotify")
    if opened.mode != mode:
        opened.close()
        pytest.skip("inotify is unavailable here")
    return opened


def write(path: Path, data: bytes = b"{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def collect(watcher: Watcher, wanted: set[Path], timeout_s: float = 10.0) -> list[Path]:
    """Everything reported until all of `wanted` has been (or the time is up)."""
    reported: list[Path] = []
    deadline = time.monotonic() + timeout_s
    while not wanted <= set(reported) and time.monotonic() < deadline:
        reported += watcher.poll(0.1)
    return reported


def expect(watcher: Watcher, wanted: set[Path]) -> None:
    """`wanted` is reported, each path once, and nothing else follows."""
    assert sorted(collect(watcher, wanted)) == sorted(wanted)
    assert watcher.poll(QUIET_S) == []


# ------------------------------------------------------------------ start-up


def test_the_first_poll_reports_every_trace_already_there_sorted(root: Path, mode: str) -> None:
    files = [write(root / name) for name in ("rank1.json", "rank0.json.gz", "a/rank0.json")]
    with open_watcher(root, mode) as watcher:
        assert watcher.poll(0) == sorted(files)
        assert watcher.poll(QUIET_S) == []


def test_names_that_are_not_traces_are_ignored(root: Path, mode: str) -> None:
    for name in ("notes.txt", "rank0.json.tmp", "rank0.jsonl", "rank0.json.gz.tmp"):
        write(root / name)
    (root / "folder.json").mkdir()
    trace = write(root / "rank0.json")
    with open_watcher(root, mode) as watcher:
        assert watcher.poll(0) == [trace]
        write(root / "more.txt")
        write(root / "later.json.tmp")
        (root / "later.json").mkdir()
        assert watcher.poll(QUIET_S) == []


def test_the_mode_names_the_mechanism(root: Path, mode: str, watcher: Watcher) -> None:
    assert watcher.mode == mode


# ------------------------------------------------------------------ new files


def test_a_new_file_is_reported_once(root: Path, watcher: Watcher) -> None:
    assert watcher.poll(0) == []
    trace = write(root / "rank0.json")
    with trace.open("ab") as out:  # still being written: more data is not a new file
        out.write(b"  ")
    expect(watcher, {trace})


def test_a_tmp_renamed_to_its_final_name_is_reported_once(root: Path, watcher: Watcher) -> None:
    assert watcher.poll(0) == []
    temporary = write(root / "iteration_1" / "rank0_trace.json.tmp", b'{"traceEvents": [')
    with temporary.open("ab") as out:
        out.write(b"]}")
    final = temporary.rename(root / "iteration_1" / "rank0_trace.json")
    expect(watcher, {final})


def test_files_in_new_nested_iteration_folders_are_reported(root: Path, watcher: Watcher) -> None:
    assert watcher.poll(0) == []
    wanted = {write(root / "iteration_1" / f"rank{rank}_trace.json") for rank in range(3)}
    wanted |= {write(root / "run" / "iteration_2" / f"rank{rank}.json.gz") for rank in range(3)}
    expect(watcher, wanted)
    later = write(root / "run" / "iteration_2" / "rank3.json.gz")  # in a folder seen by now
    expect(watcher, {later})


def test_a_folder_moved_in_whole_is_reported(tmp_path: Path, root: Path, watcher: Watcher) -> None:
    assert watcher.poll(0) == []
    outside = tmp_path / "staging" / "iteration_5"
    write(outside / "rank0.json")
    write(outside / "deeper" / "rank1.json")
    shutil.move(outside, root / "iteration_5")
    expect(watcher, {root / "iteration_5" / "rank0.json", root / "iteration_5/deeper/rank1.json"})


# ------------------------------------------------------------------ replaced files


def test_a_file_replaced_by_a_rename_is_reported_again(root: Path, watcher: Watcher) -> None:
    trace = write(root / "rank0.json")
    assert watcher.poll(0) == [trace]
    os.replace(write(root / "rank0.json.tmp", b'{"traceEvents": []}'), trace)
    expect(watcher, {trace})


def test_a_deleted_file_that_comes_back_is_reported_again(root: Path, watcher: Watcher) -> None:
    trace = write(root / "rank0.json")
    assert watcher.poll(0) == [trace]
    trace.unlink()
    assert watcher.poll(QUIET_S) == []  # in polling mode, a rescan sees it gone
    write(trace)
    expect(watcher, {trace})


# ------------------------------------------------------------------ the root folder


def test_a_root_created_after_the_watcher_starts_is_waited_for(tmp_path: Path, mode: str) -> None:
    root = tmp_path / "not" / "yet"
    with open_watcher(root, mode) as watcher:
        assert watcher.poll(0) == []
        assert watcher.poll(0.1) == []
        trace = write(root / "iteration_1" / "rank0.json")
        expect(watcher, {trace})
        later = write(root / "iteration_2" / "rank0.json")
        expect(watcher, {later})


def test_a_root_removed_and_created_again_is_watched_again(root: Path, watcher: Watcher) -> None:
    assert watcher.poll(0) == []
    shutil.rmtree(root)
    assert watcher.poll(QUIET_S) == []
    trace = write(root / "rank0.json")
    expect(watcher, {trace})


def test_files_and_folders_vanishing_while_watched_do_no_harm(root: Path, watcher: Watcher) -> None:
    assert watcher.poll(0) == []
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            folder = root / "churn"
            for rank in range(20):
                write(folder / f"rank{rank}.json")
            shutil.rmtree(folder, ignore_errors=True)

    thread = threading.Thread(target=churn)
    thread.start()
    try:
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            watcher.poll(0.02)
    finally:
        stop.set()
        thread.join(10)
    trace = write(root / "steady" / "rank0.json")
    assert trace in collect(watcher, {trace})


# ------------------------------------------------------------------ inotify's limits


def test_a_full_watch_table_falls_back_to_polling(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(self: object, folder: Path, *, follow: bool) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(watch._Inotify, "add", full)
    trace = write(root / "iteration_1" / "rank0.json")
    with Watcher(root, poll_s=0.05) as watcher:
        assert watcher.poll(0) == [trace]
        assert watcher.mode == "polling"
        later = write(root / "iteration_2" / "rank0.json")
        expect(watcher, {later})


def test_without_inotify_it_polls(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable(self: object) -> None:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(watch._Inotify, "__init__", unavailable)
    with Watcher(root, poll_s=0.05) as watcher:
        assert watcher.mode == "polling"
        assert watcher.poll(0) == []
        trace = write(root / "rank0.json")
        expect(watcher, {trace})


def test_files_whose_events_were_lost_to_a_queue_overflow_are_found(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = watch._Inotify.read

    def overflowing(self: watch._Inotify, timeout_s: float) -> list[watch._Event]:
        lost = read(self, timeout_s)
        return [watch._Event(-1, watch.IN_Q_OVERFLOW, "")] if lost else []

    with open_watcher(root, "inotify") as watcher:
        assert watcher.poll(0) == []
        monkeypatch.setattr(watch._Inotify, "read", overflowing)
        trace = write(root / "iteration_1" / "rank0.json")
        expect(watcher, {trace})


def test_polling_rescans_every_poll_s_of_its_clock_without_sleeping(root: Path) -> None:
    """poll_s 2 on a fake clock: a file written after the first scan is reported by the
    rescan due at t=2, after the watcher slept 1 + 1 fake seconds; no real time passes."""
    now, slept = [0.0], []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    with Watcher(root, poll_s=2.0, use_inotify=False, clock=lambda: now[0], sleep=sleep) as w:
        assert w.poll(0) == []
        new = write(root / "rank0.json")
        assert (w.poll(1.0), w.poll(1.0)) == ([], [])
        assert w.poll(1.0) == [new]
    assert (now[0], slept) == (2.0, [1.0, 1.0])
