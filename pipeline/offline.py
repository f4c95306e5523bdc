"""The offline pipeline: trace files on disk → report document (shell: reads files).

The same collector and pipeline code the live service runs, in one process: each file is
streamed through `TraceReader` into its own `Accumulator`, so a file that turns out to be
damaged is dropped whole (events read before the damage do not count) and the rest is
reported. Progress goes to an optional observer.
"""

from __future__ import annotations

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
from commscope.collector.names import looks_like_trace
from commscope.collector.schema import Report, Skipped
from commscope.pipeline import jobs
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.report import Options, ParsedFile, build_report


class Progress(Protocol):
    def begin(self, files: int, total_bytes: int) -> None: ...
    def advance(self, nbytes: int) -> None: ...
    def file_done(self, events: int) -> None: ...
    def end(self) -> None: ...


def parse_file(window: str, path: Path, progress: Progress | None = None) -> ParsedFile:
    """One rank file → its per-window result; raises TraceError when it cannot be used."""
    accumulator = Accumulator()
    try:
        with open_trace(path) as stream:
            reader = TraceReader(stream, str(path), progress.advance if progress else None)
            for batch in reader.batches():
                accumulator.add_all(batch)
    except OSError as exc:
        raise TraceError(str(path), f"unreadable ({exc.strerror or exc})") from None
    return ParsedFile(
        window=window,
        path=str(path),
        name_rank=rank_from_name(path),
        meta=reader.meta,
        result=accumulator.result([str(path)]),
        stats=reader.stats,
    )


def analyse(root: Path, options: Options, progress: Progress | None = None) -> Report:
    """The report for the job under `root` with the most files, as the live aggregator makes
    it: files of any other job are skipped with the reason (ConfigError if there is no trace)."""
    windows = find_windows(root)
    parsed, skipped, ignored = parse_windows(windows, progress)
    chosen = jobs.largest(parsed)
    report = build_report(
        [w.name for w in windows], chosen.files, [*skipped, *chosen.skipped], options
    )
    return jobs.labelled(report, chosen, ignored)


def analyse_jobs(root: Path, options: Options, progress: Progress | None = None) -> list[Report]:
    """One report per job under `root` (ConfigError if there is no trace)."""
    windows = find_windows(root)
    parsed, skipped, ignored = parse_windows(windows, progress)
    return jobs.reports([w.name for w in windows], parsed, skipped, options, ignored)


def parse_windows(
    windows: list[WindowFiles], progress: Progress | None = None
) -> tuple[list[ParsedFile], list[Skipped], list[str]]:
    """The files parsed; those skipped, with the reason; and those ignored: valid JSON that is
    not a trace, under a name that does not say it should be one (`looks_like_trace`)."""
    files = [(w.name, f) for w in windows for f in w.files]
    if progress:
        progress.begin(len(files), sum(file_size(f) for _, f in files))
    parsed, skipped, ignored = [], [], []
    for window, path in files:
        try:
            item = parse_file(window, path, progress)
        except TraceError as exc:
            if isinstance(exc, NotATraceError) and not looks_like_trace(str(path)):
                ignored.append(str(path))
            else:
                skipped.append(Skipped(str(path), exc.reason))
            events = 0
        else:
            parsed.append(item)
            events = item.stats.events
        if progress:
            progress.file_done(events)
    if progress:
        progress.end()
    return parsed, skipped, ignored
