"""The offline pipeline: trace files on disk → report document (shell: reads files).

The same collector and pipeline code the live service runs, in one process: each file is
streamed through `TraceReader` into its own `Accumulator`, so a file that turns out to be
damaged is dropped whole (events read before the damage do not count) and the rest is
reported. A file's kind (its name: `names.input_kind`) picks its reader: a Kineto trace is one
rank, an Nsight Systems export one rank per profiled process (`read_nsys`); a reader gives
every rank it found (`Parsed`), the runners pass them on whatever the reader. Progress goes to
an optional observer. With `jobs` > 1 the per-file work runs in a
pool of processes (`parallel`), or with a Dask scheduler's address on its cluster (`cluster`);
the results are combined in the same order, so the report is the same as with one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial
from itertools import accumulate
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol

from commscope.collector import inspector_file as inspector
from commscope.collector.discover import (
    WindowFiles,
    file_size,
    find_windows,
    open_trace,
    rank_from_name,
)
from commscope.collector.errors import NotATraceError, TraceError
from commscope.collector.inspector_windows import WindowRule
from commscope.collector.kineto import TraceReader
from commscope.collector.names import input_kind, looks_like_trace, window_order
from commscope.collector.nsys import CAPTURE_STEP
from commscope.collector.schema import INSPECTOR_LOGS, RankResult, Report, Skipped
from commscope.pipeline import cluster as dask_cluster
from commscope.pipeline import inspector_beside, inspector_sources, jobs, parallel
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.report import Options, ParsedFile, build_report
from msgspec.structs import replace as struct_replace

if TYPE_CHECKING:
    from commscope.collector import nsysdb


@dataclass(frozen=True)
class Failed:
    """Why a file cannot be used; `not_a_trace`: valid JSON that is no trace."""

    reason: str
    not_a_trace: bool = False


class Progress(parallel.Progress, Protocol):
    def begin(self, files: int, total_bytes: int) -> None: ...
    def end(self) -> None: ...


Parsed = tuple[ParsedFile, ...]  # the ranks one file holds (a Kineto trace: one)
Reader = Callable[[str, Path, "Progress | None", "Path | None"], Parsed]
EXPORT_FIRST: Final = (
    "an Nsight Systems report, not an export: run `nsys export --type sqlite FILE` and give "
    "the .sqlite"
)


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
            for batch in reader.trace_batches():
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


def read_kineto(
    window: str, path: Path, progress: Progress | None = None, name: Path | None = None
) -> Parsed:
    return (parse_file(window, path, progress, name),)


def read_nsys(
    window: str, path: Path, progress: Progress | None = None, name: Path | None = None
) -> Parsed:
    """One rank per profiled process of an Nsight Systems export (`nsysdb`); the file's
    bytes count once, with its first rank."""
    # imported here: the daemons import this module through the CLI and never read exports
    from commscope.collector.nsysdb import Export  # noqa: PLC0415

    shown = str(path if name is None else name)
    export = Export(path, shown)
    accumulators: dict[int, Accumulator] = {}
    try:
        for pid, batch in export.read():
            accumulators.setdefault(pid, Accumulator()).add_all(batch)
    finally:
        export.close()
    size = file_size(path)
    if progress:
        progress.advance(size)
    order = sorted(export.meta, key=lambda pid: export.ranks[pid])
    for pid in order[:1]:
        export.stats[pid].bytes_read = size
    return tuple(_ranked(window, shown, export, accumulators, pid) for pid in order)


def _ranked(
    window: str, shown: str, export: nsysdb.Export, accumulators: dict[int, Accumulator], pid: int
) -> ParsedFile:
    result = accumulators.get(pid, Accumulator()).result([shown])
    if export.capture_span:
        result = captured(result)
    meta, stats = export.meta[pid], export.stats[pid]
    return ParsedFile(window, shown, None, meta, result, stats, export.note)


def captured(result: RankResult) -> RankResult:
    """The result of a rank whose one step is its export's capture span (`nsys.capture_step`):
    the step clipped the in-step figures; it moves from `steps` (training steps) to
    `capture_ns`."""
    steps = dict(result.steps)
    span = steps.pop(CAPTURE_STEP, 0)
    return struct_replace(result, steps=steps, capture_ns=span)


def _not_exported(
    window: str, path: Path, progress: Progress | None = None, name: Path | None = None
) -> Parsed:
    raise TraceError(str(path if name is None else name), EXPORT_FIRST)


def read_inspector(
    window: str,
    path: Path,
    progress: Progress | None = None,
    name: Path | None = None,
    rule: WindowRule = inspector.DEFAULT_RULE,
) -> Parsed:
    """An NCCL Inspector log: a rank per GPU it reports on in each of its windows
    (`inspector.read`)."""
    found = tuple(inspector.read(window, path, rule))
    if progress:
        progress.advance(file_size(path))
    return found


READERS: Final[dict[str, Reader]] = {
    "kineto": read_kineto,
    "nsys": read_nsys,
    "nsys-rep": _not_exported,
    "inspector": read_inspector,
}


def analyse(
    root: Path,
    options: Options,
    progress: Progress | None = None,
    workers: int = 1,
    rule: WindowRule = inspector.DEFAULT_RULE,
) -> Report:
    """The report for the job under `root` with the most files, as the live aggregator makes
    it: files of any other job are skipped with the reason (ConfigError if there is no trace).
    `workers`: processes parsing files at once (1: in this process); `rule`: the windows of
    NCCL Inspector logs."""
    windows = find_windows(root)
    parsed, skipped, ignored = parse_windows(windows, progress, workers, rule=rule)
    names = window_list(windows, parsed, rule)
    parsed, apart = inspector_sources.split(parsed)
    chosen = jobs.largest(parsed)
    report = build_report(names, chosen.files, [*skipped, *chosen.skipped], options)
    return inspector_beside.beside(jobs.labelled(report, chosen, ignored), apart, options)


def analyse_jobs(
    root: Path,
    options: Options,
    progress: Progress | None = None,
    workers: int = 1,
    cluster: dask_cluster.Cluster | None = None,
    *,
    rule: WindowRule = inspector.DEFAULT_RULE,
) -> list[Report]:
    """One report per job under `root` (ConfigError if there is no trace). `cluster`: a Dask
    scheduler whose workers parse the files (`workers` is then unused); `rule`: the windows
    of NCCL Inspector logs."""
    windows = find_windows(root)
    parsed, skipped, ignored = parse_windows(windows, progress, workers, cluster, rule)
    names = window_list(windows, parsed, rule)
    parsed, apart = inspector_sources.split(parsed)
    reports = jobs.reports(names, parsed, skipped, options, ignored)
    return [inspector_beside.beside(report, apart, options) for report in reports]


def parse_windows(
    windows: list[WindowFiles],
    progress: Progress | None = None,
    workers: int = 1,
    cluster: dask_cluster.Cluster | None = None,
    rule: WindowRule = inspector.DEFAULT_RULE,
) -> tuple[list[ParsedFile], list[Skipped], list[str]]:
    """The files parsed; those skipped, with the reason; and those ignored: valid JSON that is
    not a trace, under a name that does not say it should be one (`looks_like_trace`)."""
    files = [(w.name, f) for w in windows for f in w.files]
    if progress:
        progress.begin(len(files), sum(file_size(f) for _, f in files))
    outcomes: Iterable[Parsed | Failed]
    work = outcome if rule == inspector.DEFAULT_RULE else partial(outcome, rule=rule)
    if cluster is not None:
        outcomes = dask_cluster.outcomes(
            files, cluster, work, Failed, progress=progress, tally=_tally
        )
    elif workers > 1 and len(files) > 1:
        outcomes = parallel.outcomes(files, workers, work, Failed, progress=progress, tally=_tally)
    else:
        outcomes = (_observed(window, path, progress, rule) for window, path in files)
    parsed: list[ParsedFile] = []
    skipped: list[Skipped] = []
    ignored: list[str] = []
    for (_, path), result in zip(files, outcomes, strict=True):
        if isinstance(result, tuple):
            parsed.extend(result)
        elif result.not_a_trace and not looks_like_trace(str(path)):
            ignored.append(str(path))
        else:
            skipped.append(Skipped(str(path), result.reason))
    if progress:
        progress.end()
    return node_major(parsed), skipped, ignored


def window_list(
    windows: list[WindowFiles], parsed: Iterable[ParsedFile], rule: WindowRule
) -> list[str]:
    """The report's windows: the folders', but those holding NCCL Inspector logs alone are
    the logs' windows instead (`inspector_windows`; the live aggregator names them alike)."""
    kept = [w.name for w in windows if rule.whole or not all(map(_is_log, w.files))]
    return sorted({*kept, *(p.window for p in parsed)}, key=window_order)


def _is_log(path: Path) -> bool:
    return input_kind(path.name) == INSPECTOR_LOGS


def node_major(parsed: list[ParsedFile]) -> list[ParsedFile]:
    """Several Nsight Systems exports of one window whose ranks were assumed (no NCCL rank in
    them, each numbered from 0): each export's ranks follow the previous one's, in name order
    (one export per node), said in their notes."""
    files: dict[str, dict[str, int]] = {}  # window -> path -> ranks it holds
    for item in parsed:
        if item.meta.source == "nsys" and item.note:
            counts = files.setdefault(item.window, {})
            counts[item.path] = counts.get(item.path, 0) + 1
    shift: dict[tuple[str, str], int] = {}
    for window, counts in files.items():
        if len(counts) > 1:
            paths = sorted(counts)
            starts = accumulate(counts[path] for path in paths)
            shift |= {(window, p): n for p, n in zip(paths, (0, *starts), strict=False)}
    return [_shifted(item, shift[key]) if (key := (item.window, item.path)) in shift
            else item for item in parsed]  # fmt: skip


def _shifted(item: ParsedFile, offset: int) -> ParsedFile:
    rank = (item.meta.rank or 0) + offset
    note = (
        f"{item.note}; ranks numbered on across its window's exports in name order: from {offset}"
    )
    return replace(item, meta=struct_replace(item.meta, rank=rank), note=note)


def outcome(
    window: str,
    path: Path,
    progress: Progress | None = None,
    name: Path | None = None,
    rule: WindowRule = inspector.DEFAULT_RULE,
) -> Parsed | Failed:
    """One file's ranks, read by the reader of its kind, or why it cannot be used (never
    raises TraceError); `rule`: the windows of an NCCL Inspector log."""
    kind = input_kind(path.name) or "kineto"
    try:
        if kind == "inspector":
            return read_inspector(window, path, progress, name, rule)
        return READERS[kind](window, path, progress, name)
    except TraceError as exc:
        return Failed(exc.reason, isinstance(exc, NotATraceError))


def _tally(result: Parsed | Failed) -> tuple[int, int]:
    """Bytes and events read, for the progress display (none for a file that failed)."""
    if isinstance(result, tuple):
        return sum(p.stats.bytes_read for p in result), sum(p.stats.events for p in result)
    return 0, 0


def _observed(
    window: str, path: Path, progress: Progress | None, rule: WindowRule
) -> Parsed | Failed:
    result = outcome(window, path, progress, rule=rule)
    if progress:
        progress.file_done(_tally(result)[1])
    return result
