"""Per-file work in a pool of processes (shell: starts processes).

`outcomes` runs `work(window, path)` for every file in worker processes and hands the
results back in the files' order, whatever order they finish in, so what is built from them
is the same as from one process. A result is a value the schema's structs make (they pickle
as they encode). A worker that dies (killed, out of memory) breaks the pool: each file it
left unfinished is parsed again alone in a fresh process, and a file whose process dies
again is reported failed, with that reason, instead of stopping the run.

`outcomes`' workers (`report --jobs`) start by spawn: each a fresh interpreter that imports
only what reading a file needs (`worker`, the module the work is pickled from, and this one),
not the report's sections, exporters or daemons the command itself holds. A forkserver would
add a process of its own as large as a worker for the one pool a report makes (measured by
tests/bench/tree_memory.py, docs/performance.md). The collector daemon's `LastingPool`,
which makes a pool again after a worker dies, starts them by forkserver (never a plain fork
of a process that may hold threads), whose server imports `preload` once for every worker
and listens on a socket in a temporary folder; where no folder for it can be made (a
read-only root without a writable /tmp: a Kubernetes sidecar with `readOnlyRootFilesystem`)
by spawn too, which needs no file at all (pipes only). Spawn, rather than pointing the socket
at a folder the caller owns: a socket path is limited to 107 bytes, and the temporary folder
is process-wide state. Either way the pool's locks are POSIX semaphores (/dev/shm); where
even those cannot be made, `WorkersError` says so in one line.

A spawned worker also imports the command's main module, as multiprocessing does, unless it
runs as a package's `__main__`: the `commscope` script's (`service.main`, no more than the
standard library) and `python -m commscope` keep it small; `python -m commscope.service.cli`
would make each worker import the whole command line.
"""

from __future__ import annotations

import contextlib
import errno
import io
import multiprocessing
import multiprocessing.util
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final, Generic, Protocol, TypeVar

from commscope.model.errors import DIED, ConfigError
from commscope.service import cgroup

PRELOAD: Final = "commscope.service.worker"  # what `outcomes`' workers import: a lean preload

R = TypeVar("R")


class WorkersError(ConfigError):
    """Worker processes cannot start here (no writable /dev/shm for their semaphores, no
    process to spare): one line that says why and what to do."""

    def __init__(self, exc: OSError) -> None:
        super().__init__(f"worker processes cannot start here ({_why(exc)}); use --jobs 1")


def _why(exc: OSError) -> str:
    """The reason, and where a file system refused (semaphores live in /dev/shm)."""
    reason = exc.strerror or str(exc)
    if exc.filename:
        return f"{exc.filename}: {reason}"
    return f"/dev/shm: {reason}" if exc.errno in _FILE_SYSTEM else reason


_FILE_SYSTEM: Final = frozenset({errno.EROFS, errno.EACCES, errno.ENOSPC})


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
    workers: int,
    work: Callable[[str, Path], R],
    failed: Callable[[str], R],
    *,
    progress: Progress | None = None,
    tally: Callable[[R], tuple[int, int]] | None = None,
) -> list[R]:
    """`work` of every file, in the files' order; `failed(DIED)` for a file whose process
    died twice. `tally(result)`: (bytes, events) for the progress display."""
    batch = _Batch(files, work, progress, tally)
    lost = batch.run(list(range(len(files))), workers)
    for index in lost:  # alone, so a death is this file's
        if batch.run([index], 1):
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

    def run(self, indices: list[int], workers: int) -> list[int]:
        """Run `indices` in one pool into `results`; the indices lost to a broken pool
        (WorkersError when no worker can start)."""
        with _started(min(workers, len(indices))) as workers_pool:
            pending = self._submitted(workers_pool, indices)
            for future in _finished(pending):
                self.results[pending[future]] = result = future.result()
                tell_done(self.progress, self.tally, result)
        return [index for index in indices if index not in self.results]

    def _submitted(self, to: ProcessPoolExecutor, indices: list[int]) -> dict[Future[R], int]:
        try:  # the workers start with the first task
            return {to.submit(self.work, *self.files[index]): index for index in indices}
        except OSError as exc:
            raise WorkersError(exc) from None


def _started(workers: int) -> ProcessPoolExecutor:
    try:
        return pool(workers, None)
    except OSError as exc:
        raise WorkersError(exc) from None


def _finished(pending: dict[Future[R], int]) -> Iterator[Future[R]]:
    """The futures as they finish, without those a dead worker took down."""
    for future in as_completed(pending):
        if not isinstance(future.exception(), BrokenProcessPool):
            yield future


def pool(workers: int, preload: str | None) -> ProcessPoolExecutor:
    """Worker processes: forkserver (its server importing `preload` once for every worker)
    where the platform has it and a folder for its socket can be made, else, or with no
    `preload`, spawn (see the module docstring); OSError when the pool's semaphores cannot
    be made. Each worker ends itself, and its forkserver, once this process is gone: one
    killed with SIGKILL (the OOM killer, kill -9) would otherwise leave them running for ever."""
    return ProcessPoolExecutor(
        workers, mp_context=_context(preload), initializer=_outlive_not, initargs=(os.getpid(),)
    )


class LastingPool:
    """The pool of a process that outlives its workers (the collector daemon): a worker's
    death breaks a `ProcessPoolExecutor` for good, so a task after one goes to a new pool
    (`renewed` counts them). OSError when a pool cannot be made (see `pool`)."""

    def __init__(self, workers: int, preload: str) -> None:
        self._made = partial(pool, workers, preload)
        self._pool = self._made()
        self._lock = threading.Lock()
        self._closed = False
        self.renewed = 0

    def submit(self, work: Callable[..., R], /, *args: Any) -> Future[R]:
        """`work(*args)` in a worker (RuntimeError once shut down)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the pool is shut down")
            try:
                return self._pool.submit(work, *args)
            except BrokenExecutor:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool, self.renewed = self._made(), self.renewed + 1
                return self._pool.submit(work, *args)

    def shutdown(self) -> None:
        with self._lock:
            self._closed = True
            self._pool.shutdown(wait=False, cancel_futures=True)


def start_method() -> str:
    """How workers start here: forkserver, or spawn where it cannot (module docstring)."""
    forkserver = "forkserver" in multiprocessing.get_all_start_methods()
    return "forkserver" if forkserver and _socket_folder() else "spawn"


def _context(preload: str | None) -> multiprocessing.context.BaseContext:
    if preload is None or start_method() == "spawn":
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([preload])
    return context


def _socket_folder() -> bool:
    """Whether the forkserver's socket folder can be made: the very call it makes (once per
    process; the folder is removed at exit), so a yes here is a yes there."""
    try:
        multiprocessing.util.get_temp_dir()
    except OSError:  # FileNotFoundError: "No usable temporary directory found in [...]"
        return False
    return True


def _outlive_not(owner: int) -> None:
    """A worker's start: a thread that ends the worker once `owner` is gone (and the worker's
    parent with it, when that is a forkserver rather than the owner itself)."""
    parent = os.getppid()
    threading.Thread(target=_watch_owner, args=(owner, parent), daemon=True).start()


def _watch_owner(owner: int, parent: int) -> None:
    try:
        with io.FileIO(os.pidfd_open(owner), closefd=True) as handle:
            select.select([handle], [], [])  # readable once the owner has exited
    except OSError:  # no pidfd (Linux < 5.3): ask every second
        while _alive(owner):
            time.sleep(1.0)
    if parent != owner and os.getppid() == parent:  # never a process that adopted us
        with contextlib.suppress(OSError):
            os.kill(parent, signal.SIGTERM)  # the forkserver: it would wait for ever
    os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process of that number: alive
    return True
