"""Per-file work in several processes at once (shell: starts processes and threads).

`outcomes` (`report --jobs N`) runs `work(window, path)` for every file in N processes, this
one and N - 1 workers, and hands the results back in the files' order, so what is built from
them is the same as from one process. Each next file goes to whoever is free: this process
between its own files; a worker through a thread of this process that sends it the file (and
the next one ahead while more files are left than processes parse them) and takes the result
off its pipe, so no worker waits while this process parses.

A worker is a plain interpreter over two pipes (`pipes`: one pickle a frame), never
multiprocessing: no resource tracker beside it, no semaphores, no file in /dev/shm or a
temporary folder. It imports what reading a file needs (`worker`), not the report's sections,
exporters or daemons. A worker that dies (killed, out of memory) loses the files it held, not
the run: a fresh worker takes its place, and each of those files is parsed again alone in a
fresh worker; one whose worker dies again is reported failed (DIED). A file that kills this
process ends the run, as with `--jobs 1`. Workers end as soon as their stdin does (this
process closed it, or is gone). Where none can start (no process or pipe to spare),
`WorkersError` says so in one line. Memory and time: tests/bench/tree_memory.py and
jobs_bench.py, docs/performance.md.

The collector daemon's pool of workers is `lasting`'s (multiprocessing), which this module's
report path never imports.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import queue
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Generic, Protocol, TypeVar

from commscope.model.errors import DIED, ConfigError
from commscope.service import cgroup, pipes

R = TypeVar("R")


class WorkersError(ConfigError):
    """Worker processes cannot start here (no process or pipe to spare): one line that says
    why and what to do. The workers are plain subprocesses over pipes: no file is involved
    unless the OSError names one (the interpreter it runs)."""

    def __init__(self, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        where = f"{exc.filename}: " if exc.filename else ""
        super().__init__(f"worker processes cannot start here ({where}{reason}); use --jobs 1")


class Progress(Protocol):
    """What the per-file runners (this pool, `pipeline.cluster`) tell as files finish."""

    def advance(self, nbytes: int) -> None: ...
    def file_done(self, events: int) -> None: ...


def tell_done(
    progress: Progress | None, tally: Callable[[R], tuple[int, int]] | None, result: R
) -> None:
    """One file finished with `result`: its bytes and events (`tally`) to the display."""
    if progress:
        nbytes, events = tally(result) if tally else (0, 0)
        progress.advance(nbytes)
        progress.file_done(events)


def cores(root: Path = Path("/")) -> int:
    """The CPUs this process may use (the default `--jobs`): its affinity mask, capped by its
    cgroup's CPU quota (a container's CPU limit) in whole CPUs, at least 1. `root`: where
    /proc and /sys are (a test's folder)."""
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without affinity (macOS)
        affinity = os.cpu_count() or 1

    def read(path: str) -> str | None:
        try:
            return (root / path.lstrip("/")).read_text(errors="replace")
        except OSError:
            return None

    own = [read(f"/proc/self/{name}") or "" for name in ("cgroup", "mountinfo")]
    return cgroup.usable(affinity, cgroup.quota(own[0], own[1], read))


def outcomes(
    files: list[tuple[str, Path]],
    jobs: int,
    work: Callable[[str, Path], R],
    failed: Callable[[str], R],
    *,
    progress: Progress | None = None,
    tally: Callable[[R], tuple[int, int]] | None = None,
    here: bool = True,
) -> list[R]:
    """`work` of every file in `jobs` processes, in the files' order; `failed(DIED)` for a
    file whose worker died twice. `here`: this process is one of the `jobs` (else all are
    workers); `tally(result)`: (bytes, events) for the progress display."""
    batch = _Batch(files, work, progress, tally)
    lost = batch.run(list(range(len(files))), jobs, here)
    for index in lost:  # alone, so a death is this file's
        if batch.run([index], 1, here=False):
            batch.results[index] = failed(DIED)
            if progress:
                progress.file_done(0)
    return [batch.results[index] for index in range(len(files))]


@dataclass
class _Batch(Generic[R]):
    files: list[tuple[str, Path]]
    work: Callable[[str, Path], R]
    progress: Progress | None
    tally: Callable[[R], tuple[int, int]] | None
    results: dict[int, R] = field(default_factory=dict)

    def run(self, indices: list[int], jobs: int, here: bool) -> list[int]:
        """Run `indices` into `results`, each next file to whoever is free (this process
        when `here`); the indices whose worker died (WorkersError when none can start)."""
        todo = deque(indices)
        processes = min(jobs, len(indices))
        with _Crew(todo, self._task, processes - here, processes) as crew:
            while here and (index := _next(todo)) is not None:
                self._keep(index, self.work(*self.files[index]))
                for done, result in crew.finished(wait=False):
                    self._keep(done, result)
            for done, result in crew.finished(wait=True):
                self._keep(done, result)
            return crew.lost

    def _task(self, index: int) -> tuple[Callable[[str, Path], R], tuple[str, Path]]:
        return self.work, self.files[index]

    def _keep(self, index: int, result: R) -> None:
        self.results[index] = result
        tell_done(self.progress, self.tally, result)


def _next(todo: deque[int]) -> int | None:
    """The next file to parse, taken by whoever asks first (this process or a worker's
    thread: a deque's popleft is atomic)."""
    try:
        return todo.popleft()
    except IndexError:
        return None


_GRACE_S: Final = 30.0
# (worker, files, what came): a file's result (a pickle); None: the worker's thread has ended
# (with files: the worker died holding them); an exception: a task its thread could not send
_Data = bytes | Exception | None
_Event = tuple[subprocess.Popen[bytes], tuple[int, ...], _Data]


class _Crew:
    """`size` worker processes over pipes, each driven by a thread of this process that
    takes the next file of `todo`, sends it and waits for its result, so a worker never
    waits on this process (parsing a file itself) for its next file or to hand a result."""

    def __init__(
        self, todo: deque[int], task: Callable[[int], object], size: int, processes: int
    ) -> None:
        self._todo, self._task = todo, task
        self._events: queue.SimpleQueue[_Event] = queue.SimpleQueue()
        self._workers: dict[subprocess.Popen[bytes], threading.Thread] = {}
        self.lost: list[int] = []  # the files of workers that died
        self._size, self._processes = size, processes

    def __enter__(self) -> _Crew:
        try:
            for _ in range(self._size):
                self._start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self._todo.clear()  # on an error: no thread takes another file
        for process in list(self._workers):
            self._end(process)

    def finished(self, *, wait: bool) -> Iterator[tuple[int, Any]]:
        """(file, result) of what the workers sent; with `wait`, until every worker's thread
        has ended (each wait ends with a result, or a worker's end: a pipe's end is sure)."""
        while event := self._next_event(wait and bool(self._workers)):
            yield from self._settled(*event)

    def _next_event(self, wait: bool) -> _Event | None:
        try:
            return self._events.get(block=wait)
        except queue.Empty:
            return None

    def _settled(
        self, process: subprocess.Popen[bytes], files: tuple[int, ...], data: _Data
    ) -> Iterator[tuple[int, Any]]:
        if isinstance(data, Exception):
            raise data
        if data is None:  # its thread ended: no file left, or the worker died with files
            self._end(process)
            self.lost.extend(files)
            if files and self._todo:  # a fresh worker in its place
                self._start()
            return
        done, value = pickle.loads(data)
        if not done:
            raise value
        yield files[0], value

    def _start(self) -> None:
        """A worker process, told this process's `sys.path`, and its thread."""
        command = [sys.executable, "-P", "-m", pipes.__name__]
        try:
            process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as exc:
            raise WorkersError(exc) from None
        _tell(process, sys.path)
        thread = threading.Thread(target=self._drive, args=(process,), daemon=True)
        self._workers[process] = thread
        thread.start()

    def _drive(self, process: subprocess.Popen[bytes]) -> None:
        """A worker's thread: the next files to it, their results onto `events`, until no
        file is left (or the worker is gone)."""
        assert process.stdout is not None
        sent: deque[int] = deque()  # the files it has, in order: the first it parses now
        end = None
        try:
            while self._sent(process, sent):
                data = pipes.frame(process.stdout)
                if data is None:
                    break
                self._events.put((process, (sent.popleft(),), data))
        except Exception as exc:  # a task that does not pickle: raised in this process
            end = exc
        finally:
            self._events.put((process, tuple(sent), end))

    def _sent(self, process: subprocess.Popen[bytes], sent: deque[int]) -> bool:
        """Whether the worker has a file: one, and the next sent ahead (so it never waits
        on this process's threads between two) while more files are left than processes
        parse them (so the last go each to whoever is free first)."""
        while len(sent) < 1 + (len(self._todo) > self._processes):
            index = _next(self._todo)
            if index is None:
                break
            _tell(process, self._task(index))
            sent.append(index)
        return bool(sent)

    def _end(self, process: subprocess.Popen[bytes]) -> None:
        """Close its stdin (it ends at once), wait for it (killed past `_GRACE_S`), its
        thread, and close its stdout."""
        _close(process.stdin)
        try:
            process.wait(_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(_GRACE_S)
        self._workers.pop(process).join(_GRACE_S)
        _close(process.stdout)


def _tell(process: subprocess.Popen[bytes], value: object) -> None:
    """Send a frame; a worker that is gone says so at its stdout's end."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: stdin closed (at an error)
        pipes.send(process.stdin, value)  # type: ignore[arg-type]


def _close(pipe: IO[bytes] | None) -> None:
    with contextlib.suppress(OSError):
        if pipe:
            pipe.close()
