"""What a worker process of `report --jobs` runs: one file read into its ranks (shell: reads
files).

`read` is the per-file half of the offline pipeline (`offline` is the rest): the source
that claims the file's name (`collector.sources`) reads it through the one loop
(`source.drain`), each rank it holds into its own `Accumulator`. A worker imports this
module alone (through the task `pipes` gives it), so it holds the readers and the reduction
but none of the report's sections, the exporters, the daemons or multiprocessing: each worker
stays small (tests/service/test_worker.py lists what a worker may import).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Generic, ParamSpec

from commscope.collector.discover import file_size, open_trace
from commscope.collector.inspector_file import DEFAULT_RULE
from commscope.collector.inspector_windows import WindowRule
from commscope.collector.source import File, Rank, ReadOptions, drain, finished
from commscope.collector.sources import reader_of
from commscope.model.errors import NotATraceError, TraceError
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.parsed import ParsedFile

if TYPE_CHECKING:
    from commscope.service.parallel import Progress


@dataclass(frozen=True)
class Failed:
    """Why a file cannot be used; `not_a_trace`: valid JSON that is no trace."""

    reason: str
    not_a_trace: bool = False


_P = ParamSpec("_P")
Parsed = tuple[ParsedFile, ...]  # the ranks one file holds (a Kineto trace: one)


def read(
    window: str,
    path: Path,
    progress: Progress | None = None,
    name: Path | None = None,
    rule: WindowRule = DEFAULT_RULE,
) -> Parsed:
    """One file's ranks, read by the source that claims its name (`sources`); TraceError when
    it cannot be used. `name`: what the report calls the file at `path` (default: `path`);
    `rule`: the windows of an NCCL Inspector log."""
    file = File(
        path=str(path),
        shown=str(path if name is None else name),
        open=partial(open_trace, path),
        window=window,
        size=file_size(path),
        on_chunk=progress.advance if progress else None,
        options=ReadOptions(inspector=rule),
    )
    try:
        ranks = drain(reader_of(path.name).read(file), Accumulator)
    except OSError as exc:
        raise TraceError(file.shown, f"unreadable ({exc.strerror or exc})") from None
    return tuple(_parsed(file, rank, accumulator) for rank, accumulator in ranks)


def _parsed(file: File, rank: Rank, accumulator: Accumulator) -> ParsedFile:
    return ParsedFile(
        window=rank.window or file.window,
        path=file.shown,
        name_rank=rank.name_rank,
        meta=rank.meta,
        result=finished(rank, accumulator.result([file.shown])),
        stats=rank.stats,
        note=rank.note,
        flight=rank.flight,
    )


class _Caught(Generic[_P]):
    """`read` that never raises TraceError: why a file cannot be used comes back as `Failed`
    (an instance, not a closure, so a pool of processes can pickle it)."""

    def __init__(self, work: Callable[_P, Parsed]) -> None:
        self._work = work

    def __call__(self, *args: _P.args, **kwargs: _P.kwargs) -> Parsed | Failed:
        try:
            return self._work(*args, **kwargs)
        except TraceError as exc:
            return Failed(exc.reason, isinstance(exc, NotATraceError))


outcome = _Caught(read)  # one file's ranks, or why it cannot be used (the arguments of `read`)
