"""The offline pipeline: trace files on disk → report document (shell: reads files).

The same collector and pipeline code the live service runs, in one process: each file read
into its ranks by `worker.read` (the source that claims its name reads it through the one
loop, each rank into its own `Accumulator`), so a file that turns out to be damaged is
dropped whole (events read before the damage do not count) and the rest is reported. A
Kineto trace is one rank, an Nsight Systems export one per profiled process, an NCCL
Inspector log one per rank in each of its windows (`Parsed`). Progress goes to an optional
observer. With `jobs` > 1 the per-file work runs in this process and `jobs` - 1 workers
(`parallel`), or with a Dask scheduler's address on its cluster (`cluster`); the results are
combined in the same order, so the report is the same as with one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial
from itertools import accumulate
from pathlib import Path
from typing import Protocol

from commscope.collector.discover import WindowFiles, file_size, find_windows
from commscope.collector.inspector_file import DEFAULT_RULE
from commscope.collector.inspector_windows import WindowRule
from commscope.collector.sources import reader_of
from commscope.model.names import looks_like_trace, window_order
from commscope.model.schema import INSPECTOR_LOGS, Report, Skipped
from commscope.pipeline import flight, inspector_beside, inspector_sources, jobs
from commscope.pipeline.report import Options, ParsedFile, build_report
from commscope.service import cluster as dask_cluster
from commscope.service import parallel
from commscope.service.worker import Failed, Parsed, outcome, read
from msgspec.structs import replace as struct_replace


class Progress(parallel.Progress, Protocol):
    def begin(self, files: int, total_bytes: int) -> None: ...
    def end(self) -> None: ...


def parse_file(
    window: str, path: Path, progress: Progress | None = None, name: Path | None = None
) -> ParsedFile:
    """One rank file (a Kineto trace) -> its per-window result (`read`)."""
    return read(window, path, progress, name)[0]


def analyse(
    root: Path,
    options: Options,
    progress: Progress | None = None,
    workers: int = 1,
    rule: WindowRule = DEFAULT_RULE,
    *,
    cluster: dask_cluster.Cluster | None = None,
) -> Report:
    """The report for the job under `root` with the most files, as the live aggregator makes
    it: files of any other job are skipped with the reason (ConfigError if there is no trace).
    `workers`: processes parsing files at once (1: in this process); `rule`: the windows of
    NCCL Inspector logs; `cluster`: a Dask scheduler whose workers parse the files."""
    windows = find_windows(root)
    parsed, skipped, ignored = parse_windows(windows, progress, workers, cluster, rule)
    names = _window_list(windows, parsed, rule)
    parsed, dumps = flight.split(parsed)
    parsed, apart = inspector_sources.split(parsed)
    chosen = jobs.largest(parsed)
    report = build_report(
        names, chosen.files, replace(options, skipped=[*skipped, *chosen.skipped])
    )
    report = inspector_beside.beside(jobs.labelled(report, chosen, ignored), apart, options)
    return flight.beside(report, dumps)


@dataclass(frozen=True)
class Analysis:
    """One report per job (`analysis`) and what they were made of: every file parsed, and the jobs
    the reports cover, each with its placement, in the reports' order (none: one report of
    nothing but the files left out)."""

    reports: list[Report]
    parsed: list[ParsedFile]
    jobs: list[jobs.Job]


def analysis(
    root: Path,
    options: Options,
    progress: Progress | None = None,
    workers: int = 1,
    cluster: dask_cluster.Cluster | None = None,
    *,
    rule: WindowRule = DEFAULT_RULE,
) -> Analysis:
    """One report per job under `root` (ConfigError if there is no trace), with the files and
    jobs they were made of. `cluster`: a Dask scheduler whose workers parse the files (`workers`
    is then unused); `rule`: the windows of NCCL Inspector logs."""
    windows = find_windows(root)
    parsed, skipped, ignored = parse_windows(windows, progress, workers, cluster, rule)
    names = _window_list(windows, parsed, rule)
    traces, dumps = flight.split(parsed)
    traces, apart = inspector_sources.split(traces)
    found = jobs.usable(traces)
    reports = jobs.job_reports(names, found, skipped, options, ignored)
    reports = [flight.beside(inspector_beside.beside(r, apart, options), dumps) for r in reports]
    return Analysis(reports, parsed, found[0])


def parse_windows(
    windows: list[WindowFiles],
    progress: Progress | None = None,
    workers: int = 1,
    cluster: dask_cluster.Cluster | None = None,
    rule: WindowRule = DEFAULT_RULE,
) -> tuple[list[ParsedFile], list[Skipped], list[str]]:
    """The files parsed; those skipped, with the reason; and those ignored: valid JSON that is
    not a trace, under a name that does not say it should be one (`looks_like_trace`)."""
    files = [(w.name, f) for w in windows for f in w.files]
    if progress:
        progress.begin(len(files), sum(file_size(f) for _, f in files))
    outcomes: Iterable[Parsed | Failed]
    work = outcome if rule == DEFAULT_RULE else partial(outcome, rule=rule)
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
    return _node_major(parsed), skipped, ignored


def _window_list(
    windows: list[WindowFiles], parsed: Iterable[ParsedFile], rule: WindowRule
) -> list[str]:
    """The report's windows: the folders', but those holding NCCL Inspector logs alone are
    the logs' windows instead (`inspector_windows`; the live aggregator names them alike)."""
    kept = [w.name for w in windows if rule.whole or not all(map(_is_log, w.files))]
    return sorted({*kept, *(p.window for p in parsed)}, key=window_order)


def _is_log(path: Path) -> bool:
    return reader_of(path.name).kind == INSPECTOR_LOGS


def _node_major(parsed: list[ParsedFile]) -> list[ParsedFile]:
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
