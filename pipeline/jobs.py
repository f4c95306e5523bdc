"""Telling jobs apart among trace files, and a report per job (pure).

A folder may hold the ranks of several jobs. Files whose world size, backend, GPU model or
time base cannot belong to one job are never matched or pooled together (DESIGN.md rulings).

- Kind: a file's world size, backend (lower case) and GPU model; a trace that only shows CPU
  work (gloo) has "no GPU", one that shows neither says nothing about it. Files of different
  kinds are different jobs. A file missing a value (no world size, no device) joins the one
  job it can belong to; when it could belong to several, the one that has a file in its
  window within `_GAP_NS` of it, else it is skipped with the reason.
- Time: a file starts at `baseTimeNanoseconds` + its earliest event when that lands after
  the year 2000 (Kineto writes epoch timestamps, or timestamps relative to a base it writes
  beside them); otherwise its time base is unknown and does not tell it apart. Within one
  window the ranks of one job start profiling within minutes of each other, so files of one
  kind more than `_GAP_NS` apart there are different runs. A run's windows may be days apart:
  windows are never split by time, each window's runs are linked to the nearest in time.

Jobs are numbered from 1 by start time. `reports` gives one report per job (the offline
command); `largest` picks the job with the most files, the others' files skipped with the
reason (the live aggregator serves one job, and `analyse` agrees with it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from datetime import UTC, datetime
from functools import partial
from itertools import groupby, pairwise
from operator import attrgetter
from typing import Final

from commscope.model.schema import JobInfo, Report, Skipped
from commscope.pipeline import ranks
from commscope.pipeline.accumulate import CPU
from commscope.pipeline.clocks import epoch_ns
from commscope.pipeline.ranks import Placement, Ranked
from commscope.pipeline.report import Options, ParsedFile, build_report
from commscope.pipeline.reuse import Kept
from msgspec.structs import replace

_GAP_NS: Final = 3600 * 10**9  # ranks of one job in one window start within this of each other
NO_GPU: Final = ""  # the GPU model of a CPU-only trace: known to be none

_Kind = tuple[int | None, str | None, str | None]  # world size, backend, GPU model


@dataclass(frozen=True)
class Job:
    files: tuple[ParsedFile, ...]
    world_size: int | None
    backend: str | None
    gpu_name: str | None  # NO_GPU: a CPU-only job; None: unknown
    start_ns: int | None
    placement: Placement[ParsedFile] | None = None  # its files at their ranks (`usable`)


@dataclass(frozen=True)
class Split:
    jobs: list[Job]
    skipped: list[Skipped]  # files that could belong to more than one job


@dataclass(frozen=True)
class Chosen:
    """The files one report covers, the files it leaves out, and the jobs they belong to."""

    files: list[ParsedFile]
    skipped: list[Skipped]
    job: int | None = None
    jobs: tuple[JobInfo, ...] = ()
    placement: Placement[ParsedFile] | None = None  # `files` at their ranks, when known


def kind(item: ParsedFile) -> _Kind:
    meta = item.meta
    gpu = (meta.gpu_name or "").strip() or None
    if gpu is None and item.result.evidence == {CPU}:
        gpu = NO_GPU
    return (meta.world_size or None, (meta.backend or "").lower() or None, gpu)


def start_time_ns(item: ParsedFile) -> int | None:
    """When the file's first event happened (ns since the epoch), if its time base says."""
    return epoch_ns(item.meta.base_time_ns, item.result.start_ns)


def split(files: Sequence[ParsedFile]) -> Split:
    """The jobs among `files` (given in window order), in order of start time."""
    kinds = [kind(item) for item in files]
    times = [start_time_ns(item) for item in files]
    groups, skipped = _by_kind(files, kinds, times)
    jobs = []
    for members in groups.values():
        runs, loose = _runs(members, files, times)
        skipped += loose
        jobs += [
            _job(
                [files[i] for i in run],
                Counter(kinds[i] for i in run),
                min((t for i in run if (t := times[i]) is not None), default=None),
            )
            for run in runs
        ]
    jobs.sort(key=lambda j: (j.start_ns is None, j.start_ns or 0, _kind_order(_kind(j))))
    return Split(jobs, skipped)


# ---------------------------------------------------------------- by kind


def _compatible(a: _Kind, b: _Kind) -> bool:
    return all(x is None or y is None or x == y for x, y in zip(a, b, strict=True))


def _kind_order(value: _Kind) -> tuple[int, tuple[tuple[bool, str], ...]]:
    """Most values known first, then by value."""
    known = sum(v is not None for v in value)
    return -known, tuple((v is None, str(v)) for v in value)


def _job_kinds(kinds: Iterable[_Kind]) -> list[_Kind]:
    """One kind per job: a kind that fits none found so far (most values known first)."""
    found: list[_Kind] = []
    for value in sorted(set(kinds), key=_kind_order):
        if not any(_compatible(value, k) for k in found):
            found.append(value)
    return found


def _by_kind(
    files: Sequence[ParsedFile], kinds: Sequence[_Kind], times: Sequence[int | None]
) -> tuple[dict[_Kind, list[int]], list[Skipped]]:
    """Each job kind's files (indices); a file that fits several joins the one with a file
    of its window near it in time, else it is skipped."""
    job_kinds = _job_kinds(kinds)
    groups: dict[_Kind, list[int]] = {k: [] for k in job_kinds}
    unsure = []
    fitting = {value: [k for k in job_kinds if _compatible(value, k)] for value in set(kinds)}
    for i, value in enumerate(kinds):
        fits = fitting[value]  # the job kinds each distinct kind fits, found once
        if len(fits) == 1:
            groups[fits[0]].append(i)
        else:
            unsure.append((i, fits))
    sure = {k: list(v) for k, v in groups.items()}  # the unsure are placed by these alone
    skipped = []
    for i, fits in unsure:
        near = [k for k in fits if _near(i, sure[k], files, times)]
        if len(near) == 1:
            groups[near[0]].append(i)
        else:
            skipped.append(Skipped(files[i].path, _unsure_reason(kinds[i], fits)))
    for members in groups.values():
        members.sort()
    return {k: v for k, v in groups.items() if v}, skipped


def _near(
    i: int, members: Sequence[int], files: Sequence[ParsedFile], times: Sequence[int | None]
) -> bool:
    mine = times[i]
    if mine is None:
        return False
    window = files[i].window
    return any(
        files[j].window == window and (t := times[j]) is not None and abs(t - mine) <= _GAP_NS
        for j in members
    )


def _unsure_reason(value: _Kind, fits: Sequence[_Kind]) -> str:
    missing = [
        n for n, v in zip(("world size", "backend", "GPU model"), value, strict=True) if v is None
    ]
    options = "; ".join(_kind_text(k) for k in fits)
    return (
        f"could belong to {len(fits)} jobs ({options}): the trace has no {' or '.join(missing)}"
        " and no file of those jobs in its window is within an hour of it"
    )


# ---------------------------------------------------------------- by time


@dataclass
class _Run:
    files: list[int]
    times: list[int]  # each linked window's first start


def _runs(
    members: Sequence[int], files: Sequence[ParsedFile], times: Sequence[int | None]
) -> tuple[list[list[int]], list[Skipped]]:
    """One kind's files as runs: split by time within each window, linked across windows."""
    by_window: dict[str, list[int]] = {}
    for i in members:
        by_window.setdefault(files[i].window, []).append(i)
    runs: list[_Run] = []
    skipped: list[Skipped] = []
    for indices in by_window.values():
        clusters, loose = _clusters(indices, times)
        if len(clusters) == 1:
            clusters[0].extend(loose)  # no time base, beside the one run of its window
        elif not clusters and len(runs) <= 1:
            _join_untimed(runs, loose)  # no time base in the window: the one run so far
        else:
            reason = _untimed_reason(len(clusters or runs))
            skipped += [Skipped(files[i].path, reason) for i in loose]
        _link(runs, clusters, times)
    order = {window: n for n, window in enumerate(by_window)}

    def place(i: int) -> tuple[int, str]:
        return order[files[i].window], files[i].path

    return [sorted(run.files, key=place) for run in runs], skipped


def _clusters(
    indices: Sequence[int], times: Sequence[int | None]
) -> tuple[list[list[int]], list[int]]:
    """A window's timed files in groups more than GAP_NS apart (in time order), and the rest."""
    timed = sorted((t, i) for i in indices if (t := times[i]) is not None)
    clusters: list[list[int]] = []
    last: int | None = None
    for t, i in timed:
        if last is None or t - last > _GAP_NS:
            clusters.append([])
        clusters[-1].append(i)
        last = t
    return clusters, [i for i in indices if times[i] is None]


def _join_untimed(runs: list[_Run], loose: list[int]) -> None:
    if runs:
        runs[0].files.extend(loose)
    else:
        runs.append(_Run(list(loose), []))


def _untimed_reason(count: int) -> str:
    return (
        f"no time base (baseTimeNanoseconds + first event is not a date), and {count} runs of "
        "its world size, backend and GPU model are told apart by time: which one is unknown"
    )


def _link(runs: list[_Run], clusters: Sequence[list[int]], times: Sequence[int | None]) -> None:
    """Each cluster of one window joins a different run, nearest in time first; the rest
    start runs of their own."""
    starts = [_first(c, times) for c in clusters]
    pairs = sorted(
        (_distance(start, run), c, r)
        for c, start in enumerate(starts)
        for r, run in enumerate(runs)
    )
    used_c: set[int] = set()
    used_r: set[int] = set()
    for _, c, r in pairs:
        if c not in used_c and r not in used_r:
            used_c.add(c)
            used_r.add(r)
            runs[r].files.extend(clusters[c])
            runs[r].times.append(starts[c])
    runs += [_Run(list(clusters[c]), [starts[c]]) for c in range(len(clusters)) if c not in used_c]


def _first(cluster: Sequence[int], times: Sequence[int | None]) -> int:
    return min(t for i in cluster if (t := times[i]) is not None)


def _distance(start: int, run: _Run) -> float:
    return min((abs(start - t) for t in run.times), default=float("inf"))


# ---------------------------------------------------------------- jobs and reports


def _job(files: Sequence[ParsedFile], kinds: Counter[_Kind], start_ns: int | None) -> Job:
    """The job of these files, of these kinds (counted), the first starting at `start_ns`."""
    world, backend, gpu = (_most_common(kinds, n) for n in range(3))
    return Job(
        files=tuple(files),
        world_size=world if isinstance(world, int) else None,
        backend=backend if isinstance(backend, str) else None,
        gpu_name=gpu if isinstance(gpu, str) else None,
        start_ns=start_ns,
    )


def _most_common(kinds: Counter[_Kind], n: int) -> int | str | None:
    """The value of the n-th part of the files' kinds most of them state."""
    counts: Counter[int | str] = Counter()
    for value, count in kinds.items():
        if (part := value[n]) is not None:
            counts[part] += count
    return max(counts, key=lambda v: (counts[v], str(v))) if counts else None


def _kind(job: Job) -> _Kind:
    return job.world_size, job.backend, job.gpu_name


def _utc(ns: int | None) -> str | None:
    """ISO 8601 UTC of a time in ns since the epoch."""
    if ns is None:
        return None
    return datetime.fromtimestamp(ns // 10**9, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _kind_text(value: _Kind) -> str:
    world, backend, gpu = value
    return ", ".join(
        [
            f"world {world}" if world is not None else "world size unknown",
            backend or "backend unknown",
            "no GPU" if gpu == NO_GPU else gpu or "GPU model unknown",
        ]
    )


def _describe(value: _Kind, start: int | None) -> str:
    started = _utc(start)
    when = started.replace("T", " ").replace("Z", " UTC") if started else "time unknown"
    return f"{_kind_text(value)}, started {when}"


def info(job: Job, number: int) -> JobInfo:
    return JobInfo(
        number=number,
        world_size=job.world_size,
        backend=job.backend,
        gpu_name=job.gpu_name,
        started_utc=_utc(job.start_ns),
        files=len(job.files),
        description=_describe(_kind(job), job.start_ns),
    )


def usable(
    files: Sequence[ParsedFile], memo: Memo | None = None
) -> tuple[list[Job], list[Skipped]]:
    """The jobs with a file placed at a rank, and the files left out: those that could
    belong to several jobs, and those of jobs where no file could be placed. `memo`: what was
    found of each window's files before (`Memo`)."""
    one = memo.one_job(files) if memo is not None else None
    if one is not None:
        job, placement = one
        if placement.placed:
            return [dataclass_replace(job, placement=placement)], []
        return [], list(placement.skipped)
    found = split(files)
    jobs, skipped = [], list(found.skipped)
    for job in found.jobs:
        placement = ranks.assign(job.files)
        if placement.placed:
            jobs.append(dataclass_replace(job, placement=placement))
        else:
            skipped += placement.skipped
    return jobs, skipped


def reports(
    windows: Sequence[str],
    parsed: Sequence[ParsedFile],
    skipped: Sequence[Skipped],
    options: Options,
    ignored: Sequence[str] = (),
) -> list[Report]:
    """One report per job (at least one, which may hold nothing but the skipped files)."""
    return job_reports(windows, usable(parsed), skipped, options, ignored)


def job_reports(
    windows: Sequence[str],
    usable_jobs: tuple[list[Job], list[Skipped]],
    skipped: Sequence[Skipped],
    options: Options,
    ignored: Sequence[str] = (),
) -> list[Report]:
    """`reports` over what `usable` found (`usable_jobs`), one a job, in their order."""
    jobs, left_out = usable_jobs
    common = [*skipped, *left_out]
    if len(jobs) <= 1:
        files = list(jobs[0].files) if jobs else []
        placement = jobs[0].placement if jobs else None
        found = build_report(windows, files, _scoped(options, common, placement))
        return [labelled(found, Chosen(files, []), ignored)]
    infos = tuple(info(job, n) for n, job in enumerate(jobs, start=1))
    return [
        labelled(
            build_report(windows, job.files, _scoped(options, common, job.placement)),
            Chosen(list(job.files), [], n, infos),
            ignored,
        )
        for n, job in enumerate(jobs, start=1)
    ]


def largest(parsed: Sequence[ParsedFile], memo: Memo | None = None) -> Chosen:
    """The job with the most files (the earliest on a tie); every other file is skipped.
    `memo`: as `usable`'s."""
    jobs, left_out = usable(parsed, memo)
    if not jobs:
        return Chosen([], left_out)
    if len(jobs) == 1:
        return Chosen(list(jobs[0].files), left_out, placement=jobs[0].placement)
    infos = tuple(info(job, n) for n, job in enumerate(jobs, start=1))
    best = max(range(len(jobs)), key=lambda n: (len(jobs[n].files), -n))
    reason = f"belongs to another job than the one reported (job {best + 1} of {len(jobs)}: "
    reason += infos[best].description + "): {}"
    others = [
        Skipped(item.path, reason.format(f"job {n + 1}: {infos[n].description}"))
        for n, job in enumerate(jobs)
        if n != best
        for item in job.files
    ]
    placement = jobs[best].placement
    return Chosen(list(jobs[best].files), [*left_out, *others], best + 1, infos, placement)


def _scoped(
    options: Options, skipped: Sequence[Skipped], placement: Placement[ParsedFile] | None
) -> Options:
    """`options` for the report over one job's files: those skipped, and their placement."""
    return dataclass_replace(options, skipped=skipped, placement=placement)


def labelled(report: Report, chosen: Chosen, ignored: Sequence[str] = ()) -> Report:
    """The report with the jobs it covers and leaves out, and the files ignored, said."""
    inputs = replace(report.inputs, ignored=sorted(ignored), job=chosen.job, jobs=list(chosen.jobs))
    return replace(report, inputs=inputs)


# ---------------------------------------------------------------- one job, window by window


@dataclass
class _Window:
    """What `Memo` keeps of one window's files."""

    files: tuple[ParsedFile, ...]
    kinds: Counter[_Kind]  # their kinds, counted
    clusters: int  # runs of its timed files more than GAP_NS apart (`_clusters`)
    start_ns: int | None  # the first start among them
    by_path: bool  # given in path order, no two paths alike (so in the order `split` gives)
    ranked: Ranked[ParsedFile] | None = field(default=None)  # at their ranks, once asked

    def at_ranks(self, name: str) -> Ranked[ParsedFile]:
        if self.ranked is None:
            self.ranked = ranks.ranked(name, self.files)
        return self.ranked


class Memo:
    """What `usable` found of each window's files, kept while they are the very same files
    (by identity): the live aggregator's reports come one after another over a run whose
    windows, once complete, do not change, so a report costs the windows that changed, not
    every window again. Only the usual case is taken from it: every file is of one job (one
    kind, each window's files within GAP_NS of each other), given window by window and by
    path within one, no two paths alike (as `split` then orders them); anything else is split
    anew."""

    def __init__(self) -> None:
        self._windows = Kept[_Window]()

    def one_job(self, files: Sequence[ParsedFile]) -> tuple[Job, Placement[ParsedFile]] | None:
        """The one job of `files` and its placement, as `split` and `ranks.assign` find them,
        when it is the usual case (else None); windows no longer given are forgotten."""
        groups = [(name, tuple(items)) for name, items in groupby(files, attrgetter("window"))]
        if len({name for name, _ in groups}) != len(groups):
            return None  # a window's files not together
        windows = [self._windows.get(items, partial(_window, items)) for _, items in groups]
        self._windows.keep()
        kinds: Counter[_Kind] = Counter()
        for window in windows:
            kinds.update(window.kinds)
        if len(_job_kinds(kinds)) != 1 or not all(w.clusters <= 1 and w.by_path for w in windows):
            return None
        starts = [w.start_ns for w in windows if w.start_ns is not None]
        job = _job(files, kinds, min(starts, default=None))
        ranked = [(name, w.at_ranks(name)) for (name, _), w in zip(groups, windows, strict=True)]
        return job, ranks.merged(ranked)


def _window(files: tuple[ParsedFile, ...]) -> _Window:
    times = [start_time_ns(item) for item in files]
    clusters, _ = _clusters(range(len(files)), times)
    paths = [item.path for item in files]
    return _Window(
        files=files,
        kinds=Counter(kind(item) for item in files),
        clusters=len(clusters),
        start_ns=min((t for t in times if t is not None), default=None),
        by_path=all(a < b for a, b in pairwise(paths)),
    )
