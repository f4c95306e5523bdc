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
from commscope.collector.errors import TraceError
from commscope.collector.kineto import TraceReader
from commscope.collector.schema import Report, Skipped
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
    """The report for every window under `root` (ConfigError if there is no trace)."""
    windows = find_windows(root)
    parsed, skipped = parse_windows(windows, progress)
    return build_report([w.name for w in windows], parsed, skipped, options)


def parse_windows(
    windows: list[WindowFiles], progress: Progress | None = None
) -> tuple[list[ParsedFile], list[Skipped]]:
    files = [(w.name, f) for w in windows for f in w.files]
    if progress:
        progress.begin(len(files), sum(file_size(f) for _, f in files))
    parsed, skipped = [], []
    for window, path in files:
        try:
            item = parse_file(window, path, progress)
        except TraceError as exc:
            skipped.append(Skipped(str(path), exc.reason))
            events = 0
        else:
            parsed.append(item)
            events = item.stats.events
        if progress:
            progress.file_done(events)
    if progress:
        progress.end()
    return parsed, skipped
