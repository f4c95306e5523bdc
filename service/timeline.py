"""`commscope timeline`: a job's Kineto traces as one Chrome/Perfetto trace on aligned clocks
(shell: reads the trace files, writes one file).

From an analysis (`offline.analysis`: what `commscope report` made its reports of, with the
same options) the job with the most Kineto files, its placement and its report give each
window's matched instances, clock offsets and each member's waiting and transfer
(`crossrank.drawn`), each rank's host and the rank the others wait for. Then each rank file is
read once more, one at a time, rank after rank, and its events are written as they are read
(`exporters.timeline`), to a temporary file renamed when whole. The origin is the earliest
time written, down to a second: first guessed from the earliest kept start; when something
written precedes it (a profiler span before the first kept event), the document is moved to
the lower origin line by line (its own lines: the traces are not read again). Memory: the
reduced results and one mark per member of each instance, never a file's events. Only Kineto
traces have events to write: other sources' files are left out, said in the trailer.
"""

from __future__ import annotations

import gzip
import itertools
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, cast

import ijson
import msgspec
from commscope.collector.discover import open_trace
from commscope.collector.jsonstream import Tap, trace_items
from commscope.exporters.files import check_file
from commscope.exporters.timeline import Mark, Placed, Timeline, moved, origin
from commscope.model.errors import ConfigError
from commscope.model.names import window_order
from commscope.model.schema import Report, Skipped
from commscope.pipeline import clocks, crossrank, jobs
from commscope.pipeline.report import ParsedFile, rank_infos
from commscope.service.offline import Analysis

_BATCH: Final = 4096  # items converted and written at a time
_MENDED: Final = "value_mended"  # the reader's count of values it mended (`collector.kineto`)
_KINETO: Final = "kineto"
_NOT_KINETO: Final = "not a Kineto trace: a timeline holds Kineto traces only"
_Key = tuple[str, int]  # (window, rank)


@dataclass(frozen=True)
class _Written:
    """What `write` wrote: the file, its ranks and events, and the inputs left out."""

    path: Path
    ranks: int
    files: int
    events: int
    skipped: list[Skipped]
    dropped: dict[str, int]


@dataclass(frozen=True)
class _Job:
    """The chosen job's Kineto files at their places, its report, and what was left out."""

    placed: dict[_Key, ParsedFile]
    report: Report
    skipped: list[Skipped]


def write(found: Analysis, out: Path, *, compress: bool | None = None) -> _Written:
    """The timeline of the job of `found` with the most Kineto files, to `out` (gzip when
    `compress`, or when None and `out` ends in .gz); ConfigError if there is none."""
    check_file(out)
    job = _job(found)
    places = _places(job.placed)
    guess = _guess(job.placed, places)
    zipped = out.name.endswith(".gz") if compress is None else compress
    timeline = _document(job, places, guess, (out, zipped))
    if timeline.earliest_ns < 0:  # something written precedes the guess: from a lower origin
        lower = origin([guess + timeline.earliest_ns])
        head = Timeline(lower).head({"commscope": _other(job.report, places, lower)})
        _move(out, zipped, head, guess - lower)
    ranks_written = len({rank for _, rank in job.placed})
    return _Written(out, ranks_written, len(job.placed), timeline.written, job.skipped,
                   dict(timeline.dropped))  # fmt: skip


def _guess(placed: Mapping[_Key, ParsedFile], places: _Places) -> int:
    """The origin the earliest kept start gives (aligned, down to a second)."""
    return origin(
        start + place.shift_ns
        for key, (place, _) in places.items()
        if (start := placed[key].result.start_ns) is not None
    )


def _document(job: _Job, found: _Places, origin_ns: int, to: tuple[Path, bool]) -> Timeline:
    """The whole document from `origin_ns`, written to `to` (the file, whether gzipped)."""
    timeline = Timeline(origin_ns)
    places = _rebased(found, origin_ns)
    with _output(*to) as sink:
        sink.write(timeline.head({"commscope": _other(job.report, places, origin_ns)}))
        for rank in sorted({rank for _, rank in job.placed}):
            sink.write(timeline.process(rank, _name(rank, job), _labels(rank, job, places)))
            for key in _in_order(k for k in job.placed if k[1] == rank):
                _stream(sink, timeline, job.placed[key], places[key][0])
        left = [{"path": s.path, "reason": s.reason} for s in job.skipped]
        sink.write(timeline.tail({"commscopeDropped": timeline.dropped, "commscopeSkipped": left}))
    return timeline


def _move(out: Path, zipped: bool, head: bytes, later_ns: int) -> None:
    """The document at `out` with `head`, every time in it `later_ns` later (`moved`)."""
    with gzip.open(out) if zipped else out.open("rb") as written, _output(out, zipped) as sink:
        next(written)  # its head
        sink.write(head)
        for line in written:
            sink.write(moved(line, later_ns))


def _job(found: Analysis) -> _Job:
    """The job with the most Kineto files (the earliest on a tie), its Kineto files placed,
    its report, and every file left out with the reason."""
    counts = [len(_kineto(job)) for job in found.jobs]
    if not any(counts):
        raise ConfigError("no Kineto trace to put on a timeline")
    best = max(range(len(counts)), key=lambda n: (counts[n], -n))
    report = found.reports[best]
    others = [Skipped(p.path, _NOT_KINETO) for p in found.parsed if p.meta.source != _KINETO]
    left = [*report.inputs.skipped, *others, *_elsewhere(found.jobs, best)]
    return _Job(_kineto(found.jobs[best]), report, list(dict.fromkeys(left)))


def _kineto(job: jobs.Job) -> dict[_Key, ParsedFile]:
    placed = job.placement.placed if job.placement is not None else {}
    return {key: item for key, item in placed.items() if item.meta.source == _KINETO}


def _elsewhere(found: Sequence[jobs.Job], best: int) -> list[Skipped]:
    """The files of the jobs other than the one on the timeline, each with its job."""
    shown = [jobs.info(job, n).description for n, job in enumerate(found, start=1)]
    on = f"not to job {best + 1} on the timeline ({shown[best]})"
    return [
        Skipped(item.path, f"belongs to job {n + 1} of {len(found)} ({shown[n]}), {on}")
        for n, job in enumerate(found)
        if n != best
        for item in job.files
    ]


def _in_order(keys: Iterator[_Key]) -> list[_Key]:
    return sorted(keys, key=lambda key: window_order(key[0]))


_Places = dict[_Key, tuple[Placed, tuple[float, float | None, int] | None]]


def _places(placed: Mapping[_Key, ParsedFile]) -> _Places:
    """Each rank file's place (shifted by base - offset: the origin comes later) and clock
    offset."""
    found: _Places = {}
    by_window: dict[str, dict[int, ParsedFile]] = {}
    for (window, rank), item in placed.items():
        by_window.setdefault(window, {})[rank] = item
    for window in sorted(by_window, key=window_order):
        found |= _window_places(window, by_window[window], len(found))
    return found


def _window_places(window: str, items: dict[int, ParsedFile], scope: int) -> _Places:
    """One window's files: shifted by base - offset (the origin comes later), their flow
    scopes after `scope`, and their calls' marks."""
    infos = rank_infos(items)
    drawn, found = crossrank.drawn({r: item.result for r, item in items.items()}, infos)
    marks = _marks(window, drawn, {rank: info.base_ns for rank, info in infos.items()})
    places: _Places = {}
    for n, rank in enumerate(sorted(items)):
        offset = round(found[rank][0]) if rank in found else 0
        place = Placed(rank, infos[rank].base_ns - offset, scope + n + 1, marks.get(rank, {}))
        places[(window, rank)] = (place, found.get(rank))
    return places


def _rebased(places: _Places, origin_ns: int) -> _Places:
    """`places` on the timeline from `origin_ns`, each with its marks (taken as met) anew."""
    return {key: (Placed(p.rank, p.shift_ns - origin_ns, p.scope, dict(p.marks)), offset)
            for key, (p, offset) in places.items()}  # fmt: skip


def _marks(
    window: str, drawn: Sequence[crossrank.Drawn], bases: Mapping[int, int]
) -> dict[int, dict[tuple[int, int], Mark]]:
    """Each rank's marks by (start, duration) of its call, on its own clock."""
    found: dict[int, dict[tuple[int, int], Mark]] = {}
    for number, item in enumerate(drawn):
        instance = item.instance
        for rank, (wait, move) in item.pieces.items():
            base = bases.get(rank, 0)
            call = (instance.starts[rank] - base, instance.durations[rank])
            found.setdefault(rank, {})[call] = Mark(
                instance=f"{window}:{number}",
                collective=instance.collective,
                group=instance.group,
                position=instance.position,
                waiting=(wait[0] - base, wait[1] - base),
                transfer=(move[0] - base, move[1] - base),
                last=item.last,
                members=len(instance.starts),
            )
    return found


def _name(rank: int, job: _Job) -> str:
    """`rank R`, with its host where the report knows it (`--hosts`, its traces, its files'
    names)."""
    host = _host(rank, job.report)
    return f"rank {rank} ({host[0]})" if host is not None else f"rank {rank}"


def _host(rank: int, report: Report) -> tuple[str, str] | None:
    """The rank's host in the report, and what gave it (None: unknown)."""
    links = report.links
    host = links.hosts.get(str(rank)) if links is not None else None
    if links is None or host is None:
        return None
    return host, links.host_sources.get(str(rank), "")


def _labels(rank: int, job: _Job, places: _Places) -> dict[str, Any]:
    """The process_labels args: a "labels" text (host, offsets, the rank the others wait
    for) and the offsets per window."""
    offsets = {w: _offset(found) for (w, r), (_, found) in places.items() if r == rank}
    host = _host(rank, job.report)
    texts = [f"host {host[0]} (from {host[1]})"] if host is not None else []
    texts += [f"clock offset {o['text']} ({w})" for w, o in offsets.items()]
    awaited = job.report.skew.waited_for_rank == rank
    if awaited:
        texts.append("the rank the others wait for")
    return {"labels": "; ".join(texts), "clock_offsets": offsets, "waited_for": awaited}


def _offset(found: tuple[float, float | None, int] | None) -> dict[str, Any]:
    """A rank's offset in a window: seconds, uncertainty, samples, what was applied (ns)."""
    if found is None:
        return {"offset_s": None, "uncertainty_s": None, "samples": 0, "applied_ns": 0,
                "text": "none (no matched collective links it): not shifted"}  # fmt: skip
    offset, error, samples = found
    spread = f" ± {error / 1000:.3f} µs" if error is not None else " (uncertainty unknown)"
    return {"offset_s": offset * 1e-9, "uncertainty_s": None if error is None else error * 1e-9,
            "samples": samples, "applied_ns": round(offset),
            "text": f"{offset / 1000:.3f} µs{spread}"}  # fmt: skip


def _other(report: Report, places: _Places, origin_ns: int) -> dict[str, Any]:
    """The top-level metadata: time convention, clocks per window, the awaited rank."""
    windows: dict[str, dict[int, tuple[float, float | None, int]]] = {}
    for (window, rank), (_, found) in places.items():
        if found is not None:
            windows.setdefault(window, {})[rank] = found
    return {
        "time": "ts and dur in µs with ns kept (3 decimals), after origin_ns",
        "origin_ns": origin_ns,
        "clocks": {w: msgspec.to_builtins(clocks.clocks(f)) for w, f in windows.items()},
        "waited_for_rank": report.skew.waited_for_rank,
        "waited_for_evidence": report.skew.evidence,
    }


def _stream(sink: IO[bytes], timeline: Timeline, item: ParsedFile, place: Placed) -> None:
    """One rank file's events, read again and written batch by batch."""
    mended = item.stats.dropped.get(_MENDED, 0) > 0
    with open_trace(Path(item.path)) as stream:
        items = trace_items(Tap(stream, mend=mended))
        try:
            while batch := list(itertools.islice(items, _BATCH)):
                sink.write(timeline.events(batch, place))
        except ijson.JSONError as exc:
            raise ConfigError(f"{item.path}: changed since it was read ({exc})") from None


@contextmanager
def _output(out: Path, zipped: bool) -> Iterator[IO[bytes]]:
    """`out` written through a temporary file beside it, renamed when whole (gzipped: no name
    and no time in the header, so the bytes are the same whatever the name)."""
    tmp = out.with_name(out.name + ".tmp")
    try:
        raw = tmp.open("wb")
    except OSError as exc:
        raise ConfigError(f"{out}: cannot be written ({exc.strerror or exc})") from None
    try:
        with raw:
            if zipped:
                with gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as packed:
                    yield cast(IO[bytes], packed)
            else:
                yield raw
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
