"""Per-file work in a pool of processes (shell: starts processes).

`outcomes` runs `work(window, path)` for every file in worker processes (forkserver where the
platform has it, else spawn: never a plain fork of a process that may hold threads) and
hands the results back in the files' order, whatever order they finish in, so what is built
from them is the same as from one process. A result is a value the schema's structs make
(they pickle as they encode). A worker that dies (killed, out of memory) breaks the pool:
each file it left unfinished is parsed again alone in a fresh process, and a file whose
process dies again is reported failed, with that reason, instead of stopping the run.
"""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import os
import select
import signal
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Generic, Protocol, TypeVar

from commscope.pipeline import cgroup

PRELOAD: Final = "commscope.pipeline.offline"  # what the workers run: imported before forking
DIED: Final = "the parsing process died (killed, or out of memory?)"

R = TypeVar("R")


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
        """Run `indices` in one pool into `results`; the indices lost to a broken pool."""
        with pool(min(workers, len(indices)), PRELOAD) as workers_pool:
            pending = {
                workers_pool.submit(self.work, *self.files[index]): index for index in indices
            }
            for future in _finished(pending):
                self.results[pending[future]] = result = future.result()
                tell_done(self.progress, self.tally, result)
        return [index for index in indices if index not in self.results]


def _finished(pending: dict[Future[R], int]) -> Iterator[Future[R]]:
    """The futures as they finish, without those a dead worker took down."""
    for future in as_completed(pending):
        if not isinstance(future.exception(), BrokenProcessPool):
            yield future


def pool(workers: int, preload: str) -> ProcessPoolExecutor:
    """Worker processes: forkserver (its server importing `preload` once for every worker;
    never a plain fork of a process that may hold threads) where the platform has it, else
    spawn. Each worker ends itself, and its forkserver, once this process is gone: one killed
    with SIGKILL (the OOM killer, kill -9) would otherwise leave them running for ever."""
    return ProcessPoolExecutor(
        workers, mp_context=_context(preload), initializer=_outlive_not, initargs=(os.getpid(),)
    )


def _context(preload: str) -> multiprocessing.context.BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")  # pragma: no cover - not on Linux
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([preload])
    return context


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
