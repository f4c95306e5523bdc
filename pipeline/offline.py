"""The offline pipeline: trace files on disk → report document (shell: reads files).

The same collector and pipeline code the live service runs, in one process: each file is
streamed through `TraceReader` into its own `Accumulator`, so a file that turns out to be
damaged is dropped whole (events read before the damage do not count) and the rest is
reported. Progress goes to an optional observer. With `jobs` > 1 the per-file work runs in a
pool of processes (`parallel`), or with a Dask scheduler's address on its cluster (`cluster`);
the results are combined in the same order, so the report is the same as with one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from commscope.collector.discover import (
    WindowFiles,
    file_size,
    find_windows,
    open_trace,
    rank_from_name,
)
from commscope.collector.errors import NotATraceError, TraceError
from commscope.collector.kineto import TraceReader
from commscope.collector.names import is_inspector_name, looks_like_trace
from commscope.collector.schema import Report, Skipped
from commscope.pipeline import cluster as dask_cluster
from commscope.pipeline import inspector, inspector_beside, inspector_sources, jobs, parallel
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.report import Options, ParsedFile, build_report


@dataclass(frozen=True)
class Failed:
    """Why a file cannot be used; `not_a_trace`: valid JSON that is no trace."""

    reason: str
    not_a_trace: bool = False


class Progress(parallel.Progress, Protocol):
    def begin(self, files: int, total_bytes: int) -> None: ...
    def end(self) -> None: ...


def parse_file(
    window: str, path: Path, progress: Progress | None = None, name: Path | None = None
) -> ParsedFile:
    """One rank file → its per-window result; raises TraceError when it cannot be used.
    `name`: what the report calls the file at `path` (default: `path`)."""
    shown = path if name is None else name
    accumulator = Accumulator()
    try:
        with open_trace(path) as stream:
            reader = TraceReader(stream, str(shown), progress.advance if progress else None)
            for batch in reader.batches():
                accumulator.add_all(batch)
    except OSError as exc:
        raise TraceError(str(shown), f"unreadable ({exc.strerror or exc})") from None
    return ParsedFile(
        window=window,
        path=str(shown),
        name_rank=rank_from_name(shown),
        meta=reader.meta,
        result=accumulator.result([str(shown)]),
        stats=reader.stats,
    )


def analyse(
    root: Path, options: Options, progress: Progress | None = None, workers: int = 1
) -> Report:
    """The report for the job under `root` with the most files, as the live aggregator makes
    it: files of any other job are skipped with the reason (ConfigError if there is no trace).
    `workers`: processes parsing files at once (1: in this process)."""
    windows = find_windows(root)
    parsed, skipped, ignored = parse_windows(windows, progress, workers)
    parsed, apart = inspector_sources.split(parsed)
    chosen = jobs.largest(parsed)
    report = build_report(
        [w.name for w in windows], chosen.files, [*skipped, *chosen.skipped], options
    )
    return inspector_beside.beside(jobs.labelled(report, chosen, ignored), apart, options)


def analyse_jobs(
    root: Path,
    options: Options,
    progress: Progress | None = None,
    workers: int = 1,
    cluster: dask_cluster.Cluster | None = None,
) -> list[Report]:
    """One report per job under `root` (ConfigError if there is no trace). `cluster`: a Dask
    scheduler whose workers parse the files (`workers` is then unused)."""
    windows = find_windows(root)
    parsed, skipped, ignored = parse_windows(windows, progress, workers, cluster)
    parsed, apart = inspector_sources.split(parsed)
    reports = jobs.reports([w.name for w in windows], parsed, skipped, options, ignored)
    return [inspector_beside.beside(report, apart, options) for report in reports]


def parse_windows(
    windows: list[WindowFiles],
    progress: Progress | None = None,
    workers: int = 1,
    cluster: dask_cluster.Cluster | None = None,
) -> tuple[list[ParsedFile], list[Skipped], list[str]]:
    """The files parsed; those skipped, with the reason; and those ignored: valid JSON that is
    not a trace, under a name that does not say it should be one (`looks_like_trace`)."""
    files = [(w.name, f) for w in windows for f in w.files]
    if progress:
        progress.begin(len(files), sum(file_size(f) for _, f in files))
    outcomes: Iterable[ParsedFile | list[ParsedFile] | Failed]
    if cluster is not None:
        outcomes = dask_cluster.outcomes(
            files, cluster, outcome, Failed, progress=progress, tally=_tally
        )
    elif workers > 1 and len(files) > 1:
        outcomes = parallel.outcomes(
            files, workers, outcome, Failed, progress=progress, tally=_tally
        )
    else:
        outcomes = (_observed(window, path, progress) for window, path in files)
    parsed, skipped, ignored = [], [], []
    for (_, path), result in zip(files, outcomes, strict=True):
        if isinstance(result, ParsedFile):
            parsed.append(result)
        elif isinstance(result, list):  # a reader of a file holding several ranks
            parsed.extend(result)
        elif result.not_a_trace and not looks_like_trace(str(path)):
            ignored.append(str(path))
        else:
            skipped.append(Skipped(str(path), result.reason))
    if progress:
        progress.end()
    return parsed, skipped, ignored


def outcome(
    window: str, path: Path, progress: Progress | None = None, name: Path | None = None
) -> ParsedFile | list[ParsedFile] | Failed:
    """One file parsed, or why it cannot be used (never raises TraceError)."""
    try:
        if is_inspector_name(path.name):
            return inspector.read(window, path)
        return parse_file(window, path, progress, name)
    except TraceError as exc:
        return Failed(exc.reason, isinstance(exc, NotATraceError))


def _tally(result: ParsedFile | list[ParsedFile] | Failed) -> tuple[int, int]:
    """Bytes and events read, for the progress display (none for a file that failed)."""
    if isinstance(result, ParsedFile):
        return result.stats.bytes_read, result.stats.events
    if isinstance(result, list):
        return sum(p.stats.bytes_read for p in result), sum(p.stats.events for p in result)
    return 0, 0


def _observed(
    window: str, path: Path, progress: Progress | None
) -> ParsedFile | list[ParsedFile] | Failed:
    result = outcome(window, path, progress)
    if progress:
        progress.file_done(_tally(result)[1])
    return result
