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

import multiprocessing
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Generic, Protocol, TypeVar

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


def cores() -> int:
    """The cores this process may run on (the default `--jobs`)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # pragma: no cover - platforms without affinity (macOS)
        return os.cpu_count() or 1


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
        with ProcessPoolExecutor(min(workers, len(indices)), mp_context=_context()) as pool:
            pending = {pool.submit(self.work, *self.files[index]): index for index in indices}
            for future in _finished(pending):
                self.results[pending[future]] = result = future.result()
                tell_done(self.progress, self.tally, result)
        return [index for index in indices if index not in self.results]


def _finished(pending: dict[Future[R], int]) -> Iterator[Future[R]]:
    """The futures as they finish, without those a dead worker took down."""
    for future in as_completed(pending):
        if not isinstance(future.exception(), BrokenProcessPool):
            yield future


def _context() -> multiprocessing.context.BaseContext:
    """Forkserver, its server importing the work's module once for every worker."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")  # pragma: no cover - not on Linux
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([PRELOAD])
    return context
