"""The collector daemon's pool of worker processes (shell: starts processes).

The collector daemon's `LastingPool`, which makes a pool again after a worker dies, starts its
workers by multiprocessing's forkserver (never a plain fork of a process that may hold threads),
whose server imports `preload` once for every worker and listens on a socket in a temporary
folder; where no folder for it can be made (a read-only root without a writable /tmp: a
Kubernetes sidecar with `readOnlyRootFilesystem`) by spawn, which needs no file at all. Spawn,
rather than pointing the socket at a folder the caller owns: a socket path is limited to 107
bytes, and the temporary folder is process-wide state. Either way the pool's locks are POSIX
semaphores (/dev/shm); where even those cannot be made, the OSError goes to the caller (the
daemon says so in one line, with `reason`'s wording). A spawned worker also imports the
command's main module unless it runs as a package's `__main__` (the `commscope` script's,
`python -m commscope`).
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
from collections.abc import Callable
from concurrent.futures import BrokenExecutor, Future, ProcessPoolExecutor
from functools import partial
from typing import Any, Final, TypeVar

R = TypeVar("R")
_FILE_SYSTEM: Final = frozenset({errno.EROFS, errno.EACCES, errno.ENOSPC})


def pool(workers: int, preload: str | None) -> ProcessPoolExecutor:
    """Worker processes: forkserver (its server importing `preload` once for every worker)
    where the platform has it and a folder for its socket can be made, else, or with no
    `preload`, spawn (see the module docstring); OSError when the pool's semaphores cannot
    be made. Each worker ends itself, and its forkserver, once this process is gone: one
    killed with SIGKILL (the OOM killer, kill -9) would otherwise leave them running for ever."""
    return ProcessPoolExecutor(
        workers, mp_context=_context(preload), initializer=_outlive_not, initargs=(os.getpid(),)
    )


def reason(exc: OSError) -> str:
    """Why a pool could not be made, in one phrase: a file system's refusal without a file
    named is the semaphores' folder (/dev/shm), where multiprocessing makes its locks."""
    said = exc.strerror or str(exc)
    if exc.filename:
        return f"{exc.filename}: {said}"
    return f"/dev/shm: {said}" if exc.errno in _FILE_SYSTEM else said


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
