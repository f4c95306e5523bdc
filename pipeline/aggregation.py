"""The live aggregation (pure): wire records in, finished files and positions out.

Each trace file arrives as a stream of records numbered from 0 (`StreamStart`, the `Facts` its
collector reduced it to, `StreamEnd`). `verdict()` says what to do with a record: apply it
(the next one expected), acknowledge it again (a duplicate), or leave it (ahead of a gap, or
of a stream never started: the collector resends from the acknowledged position). `apply()`
absorbs the facts into one `Accumulator` per open stream (`pipeline.edge`: the interval
structures are kept per (window, rank) here, and overlap computed from them); a stream's end
turns it into a `FinishedFile`, the same result the offline run makes of the same file. One
stream per (node, path, folder): a new fingerprint for a path supersedes the old stream (the
file was rewritten; each window of a tailed NCCL Inspector log is a stream of its own, the
log's path in a folder of its own).

The report is `build_report` over the finished files, exactly as `commscope report` builds
it; streams still open when the run ends are listed as skipped, never half-counted.
A Flight Recorder dump's stream carries the dump in parts (`Facts.flight`); once it ends the
dump is kept, one per rank (a later dump of a rank supersedes the earlier one: `_Dumps`),
beside the trace files, and each report gets its section (`flight.beside`).

Memory: what of the finished files' results is held is `residency.Residency`'s; the reports
reuse the work of earlier ones (`reuse.WindowCache`, `Residency.cache`).
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from dataclasses import replace as dataclass_replace
from typing import Final

import msgspec
from commscope.model.errors import NOT_A_TRACE
from commscope.model.flight import MAX_FLIGHT_BYTES, FlightDump
from commscope.model.inspector import is_window
from commscope.model.names import looks_like_trace, window_names, window_order
from commscope.model.schema import (
    INSPECTOR_LOGS,
    Facts,
    FinishedFile,
    RankResult,
    Record,
    Report,
    Skipped,
    StreamEnd,
    StreamStart,
)
from commscope.pipeline import (
    flight,
    inspector_beside,
    inspector_live,
    inspector_sources,
    jobs,
    straddle,
)
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.crossrank import CrossRank
from commscope.pipeline.edge import absorb
from commscope.pipeline.report import (
    Chain,
    Options,
    ParsedFile,
    by_rank,
)
from commscope.pipeline.residency import Residency, affected

RETIRED_SEQ: Final = 2**62  # the position of a superseded stream: everything is behind it
_DUMP: Final = msgspec.msgpack.Decoder(FlightDump)
_BAD_DUMP: Final = "a Flight Recorder dump that does not decode"


class Verdict(enum.Enum):
    APPLY = "apply"
    DUPLICATE = "duplicate"
    AHEAD = "ahead"  # a gap before it, or its stream's start was never received


@dataclass
class _OpenStream:
    start: StreamStart
    next_seq: int = 1
    accumulator: Accumulator = field(default_factory=Accumulator)
    tailed: bool = False  # a tailed Inspector log: its ops are fed live (`inspector_live`)
    dump: bytearray = field(default_factory=bytearray)  # a Flight Recorder dump's parts


@dataclass(frozen=True)
class Applied:
    """What applying one record changed: a stream finished (`events`: those its collector
    read, when it is usable), streams superseded; of a tailed Inspector log, the busbw
    samples (B/s) per collective type its record added, and whether it was fed live."""

    finished: FinishedFile | None = None
    superseded: tuple[str, ...] = ()
    events: int = 0
    busbw: dict[str, list[float]] = field(default_factory=dict)
    tailed: bool = False


@dataclass(frozen=True)
class Prepared:
    """A report as set out by `Aggregation.prepare`: its windows, the job's files chosen,
    the files skipped and those ignored, and the NCCL Inspector logs reported apart."""

    windows: list[str]
    chosen: jobs.Chosen
    skipped: list[Skipped]
    ignored: list[str]
    options: Options
    apart: list[ParsedFile]
    waiting: frozenset[str] = frozenset()  # open windows, their cross-rank sections left out
    metrics_only: bool = False  # for the live /metrics alone (`build_report`)
    dumps: tuple[FlightDump, ...] = ()  # the Flight Recorder dumps, one per rank


class Aggregation:
    """Every stream of a run, open or finished; see the module docstring."""

    def __init__(
        self,
        load: Callable[[str], FinishedFile | None] | None = None,
        owned: frozenset[int] | None = None,
    ) -> None:
        self.owned = owned  # a shard's ranks (None: every rank of the job)
        self.open: dict[str, _OpenStream] = {}
        self._open_by_node: Counter[str] = Counter()  # each node's streams in `open`
        self.finished: dict[str, FinishedFile] = {}
        self.retired: set[str] = set()  # superseded streams: whatever comes of them is stale
        # (node, path, folder) -> its stream: a tailed Inspector log's windows share its path
        self._by_path: dict[tuple[str, str, str], str] = {}
        self._windows = _Windows()  # each folder's ranks, kept as files finish and go
        self._index = _Index()  # the finished files by folder, kept as they finish and go
        self._jobs = jobs.Memo()  # each window's files as the last report split them
        self._dumps = _Dumps()  # the finished Flight Recorder dumps, one per rank
        # what of the results memory holds (`load`: a finished file as stored; without it no
        # call list is dropped), and the reports' reuse of earlier work
        self.residency = Residency(self.finished, self._index.stream_of, load)
        self.cache = self.residency.cache

    def restore(self, finished: Iterable[FinishedFile], retired: Iterable[str] = ()) -> None:
        """Take back the stored finished files. Given a loader, each file's call list is
        dropped as it is read, and each window's are loaded again only to match it: memory
        never holds more than one window's calls."""
        self.retired.update(retired)
        for item in finished:
            self.retired.update(self._add(item))
            self._by_path[(item.node, item.path, item.folder)] = item.stream
            self.residency.restored(item.stream)
        if self.residency.load is not None:
            names = self._index.names()
            chain = self._chain(names)
            chained = {folder for folder, name in names.items() if name in frozenset(chain)}
            for folder, streams in self._folders().items():
                if folder not in chained:
                    self._prime(folder, streams)
            self._prime_chain(chain, names)

    def _prime(
        self, folder: str, streams: Set[str], chain: Chain | None = None
    ) -> CrossRank | None:
        """Match one restored window (`Residency.prime`)."""
        files = [self.finished[s] for s in sorted(streams)]
        return self.residency.prime(folder, streams, _parsed(files, {folder: folder}), chain)

    def _prime_chain(self, chain: list[str], names: dict[str, str]) -> None:
        """Match the restored NCCL Inspector windows in order, each with its neighbours as a
        report does (`straddle`; two windows' calls at a time); those that must wait keep
        their calls, to be matched once they settle."""
        folders, by_name = self._folders(), {name: folder for folder, name in names.items()}
        complete = {names[f] for f in self.complete_windows() if f in names}
        waiting = straddle.waiting(chain, complete, {n for n in chain if n not in complete})
        after, before = straddle.successors(chain), None
        for name in chain:
            if name in waiting:
                for stream in folders[by_name[name]]:
                    self.residency.reload(stream)
                before = None
                continue
            nxt = after[name]
            following = folders[by_name[nxt]] if nxt else set()
            for stream in following:
                self.residency.reload(stream)
            items = by_rank(_parsed([self.finished[s] for s in sorted(following)], names))
            found = self._prime(by_name[name], folders[by_name[name]], Chain(before, items))
            before = found if nxt else None

    def position(self, stream: str) -> tuple[int, bool]:
        """(next expected seq, whether the stream has ended)."""
        if stream in self.retired:
            return RETIRED_SEQ, True
        if stream in self.finished:
            return self.finished[stream].next_seq, True
        current = self.open.get(stream)
        return (current.next_seq if current else 0), False

    def verdict(self, record: Record) -> Verdict:
        return self.verdict_at(record.stream, record.seq, isinstance(record, StreamStart))

    def verdict_at(self, stream: str, seq: int, start: bool) -> Verdict:
        """The verdict on record `seq` of `stream` (`start`: it is a StreamStart), known from
        its head alone: a record is decoded whole only to be applied."""
        expected, done = self.position(stream)
        if done or seq < expected:
            return Verdict.DUPLICATE
        if seq > expected or (expected == 0) != start:
            return Verdict.AHEAD
        return Verdict.APPLY

    def owner(self, stream: str) -> str | None:
        """The node whose stream it is (None: not started, or retired)."""
        current = self.open.get(stream)
        if current is not None:
            return current.start.node
        done = self.finished.get(stream)
        return done.node if done is not None else None

    def open_streams(self, node: str) -> int:
        return self._open_by_node[node]

    def apply(self, record: Record) -> Applied:
        """Apply a record whose verdict is APPLY."""
        if isinstance(record, StreamStart):
            return self._start(record)
        stream = self.open[record.stream]
        if isinstance(record, Facts):
            stream.next_seq += record.covers
            if record.flight:
                _take_part(stream, record.flight)
                return Applied()
            if stream.tailed:
                busbw = inspector_live.absorbed(stream.accumulator, record)
                return Applied(busbw=busbw, tailed=True)
            absorb(stream.accumulator, record)
            return Applied()
        stream.next_seq += 1
        del self.open[record.stream]
        self._open_by_node[stream.start.node] -= 1
        finished = _finish(stream, record)
        superseded = self._add(finished)
        self.retired.update(superseded)
        events = finished.stats.events if finished.result is not None else 0
        return Applied(
            finished=finished, superseded=superseded, events=events, tailed=stream.tailed
        )

    def _start(self, start: StreamStart) -> Applied:
        key = (start.node, start.path, start.folder)
        old = self._by_path.get(key)
        superseded: tuple[str, ...] = ()
        if old is not None and old != start.stream:
            if (gone_open := self.open.pop(old, None)) is not None:
                self._open_by_node[gone_open.start.node] -= 1
            gone = self.finished.pop(old, None)
            if gone is not None and not self._dumps.remove(gone):
                self._windows.remove(gone)
                self._index.remove(gone)
            self.retired.add(old)
            self.residency.renewed(old)
            superseded = (old,)
        self._by_path[key] = start.stream
        self.open[start.stream] = _OpenStream(start, tailed=inspector_live.tailed(start.path))
        self._open_by_node[start.node] += 1
        return Applied(superseded=superseded)

    def _add(self, item: FinishedFile) -> tuple[str, ...]:
        """A finished file taken in; the streams it supersedes (a dump: its rank's earlier)."""
        if item.flight is not None:
            self.finished[item.stream] = item
            gone = self._dumps.add(item.flight.rank, item.stream)
            for stream in gone:
                del self.finished[stream]
            return gone
        old = self.finished.get(item.stream)
        if old is not None:
            self._windows.remove(old)
        self.finished[item.stream] = item
        self._windows.add(item)
        self._index.add(item, old)
        self.residency.renewed(item.stream)
        return ()

    def complete_windows(self) -> list[str]:
        """Folders whose every rank (0 … world-1, or each rank `owned` when set: a shard's)
        has a finished, usable file (judged anew only for the folders whose files changed)."""
        return self._windows.complete(self.owned)

    def progress(self) -> int:
        """How far the open windows' ranks have come, summed over them: a quarter of a window's
        ranks arriving adds one (a window of unknown world size: its ranks doubling). A report
        mid-window is worth building when this grew (`service/pacing.py`)."""
        return self._windows.progress(self.owned)

    def report(self, options: Options, final: bool = False, metrics_only: bool = False) -> Report:
        """The report over the finished files; `final`: open streams are listed as skipped;
        `metrics_only`: of the run, only what the live /metrics reads (`build_report`)."""
        return self.build(self.prepare(options, final, metrics_only))

    def prepare(
        self, options: Options, final: bool = False, metrics_only: bool = False
    ) -> Prepared:
        """What the report is built from, as things stand: `build` reads only that, the cache
        and the store, so records may be applied meanwhile (from another thread too; but
        `shed`, `restore` and another report wait until the build is over)."""
        names = self._index.names()
        kept, apart = inspector_sources.split(self._index.parsed(names))
        chosen = jobs.largest(kept, self._jobs)
        failed = self._index.failed()
        ignored = [f.path for f in failed if _ignorable(f)]
        skipped = [Skipped(f.path, f.error or "") for f in failed if not _ignorable(f)]
        if final:
            skipped.extend(_unfinished(s) for s in self.open.values())
        windows = sorted(set(names.values()), key=window_order)
        chain = self._chain(names)
        waiting = frozenset() if final else self._open_windows(names, chain)
        held = {folder for folder, name in names.items() if name in waiting}
        self.residency.reported(
            self._used(chosen.files), held, lambda changed: affected(changed, names, chain)
        )
        skipped += chosen.skipped
        dumps = self._dumps.dumps(self.finished)
        return Prepared(
            windows, chosen, skipped, ignored, options, apart, waiting, metrics_only, dumps
        )

    def _open_windows(self, names: dict[str, str], chain: list[str]) -> frozenset[str]:
        """The windows (by name) a report mid-run gives without cross-rank sections: those
        of folders not yet complete (`complete_windows`), as their ranks are still arriving
        (matching them anew each report would cost as much as the window's reduction), and
        NCCL Inspector windows whose next window is not complete (`straddle.waiting`: their
        matching takes members from it); their files keep their calls until then (`shed`)."""
        complete = set(self.complete_windows())
        waiting = {name for folder, name in names.items() if folder not in complete}
        done = {names[folder] for folder in complete if folder in names}
        return frozenset(waiting | straddle.waiting(chain, done, waiting))

    def _chain(self, names: dict[str, str]) -> list[str]:
        """The NCCL Inspector windows' names in order (`straddle`: each matched with its
        neighbours)."""
        logs = self._index.inspector_folders()
        return sorted(
            (names[f] for f in logs if f in names and is_window(names[f])), key=window_order
        )

    def build(self, prepared: Prepared) -> Report:
        """The report `prepare` set out (see there)."""
        chosen = prepared.chosen
        options = dataclass_replace(
            prepared.options,
            skipped=prepared.skipped,
            waiting=prepared.waiting,
            metrics_only=prepared.metrics_only,
            placement=chosen.placement,
        )
        report = self.cache.build(prepared.windows, chosen.files, options)
        labelled = jobs.labelled(report, chosen, prepared.ignored)
        beside = inspector_beside.beside(labelled, prepared.apart, prepared.options)
        return flight.beside(beside, prepared.dumps)

    def _used(self, chosen: Iterable[ParsedFile]) -> dict[str, set[str]]:
        """Each folder's streams a report over `chosen` uses: its files of the job reported,
        and those that hold no result (a file of another job is left out)."""
        results = {id(item.result) for item in chosen}
        if len(results) == self._index.results():  # every file with a result: the usual case
            return {folder: set(streams) for folder, streams in self._folders().items()}
        return {
            folder: {s for s in streams if self._in_report(s, results)}
            for folder, streams in self._folders().items()
        }

    def _in_report(self, stream: str, results: set[int]) -> bool:
        result = self.finished[stream].result
        return result is None or id(result) in results

    def shed(self) -> int:
        """`Residency.shed` over the complete windows."""
        return self.residency.shed(self.complete_windows(), self._folders())

    def _folders(self) -> dict[str, Set[str]]:
        """Each folder's finished streams."""
        return self._index.streams()


class _Dumps:
    """The finished Flight Recorder dumps' streams, one per rank: the latest to finish."""

    def __init__(self) -> None:
        self._by_rank: dict[int, str] = {}

    def add(self, rank: int, stream: str) -> tuple[str, ...]:
        """Take a finished dump; the stream it supersedes (its rank's earlier dump), if any."""
        old = self._by_rank.get(rank)
        self._by_rank[rank] = stream
        return () if old is None or old == stream else (old,)

    def remove(self, item: FinishedFile) -> bool:
        """Forget a superseded stream if it is a dump's (whether it was)."""
        if item.flight is None:
            return False
        if self._by_rank.get(item.flight.rank) == item.stream:
            del self._by_rank[item.flight.rank]
        return True

    def dumps(self, finished: Mapping[str, FinishedFile]) -> tuple[FlightDump, ...]:
        """The dumps by rank."""
        found = (finished[stream].flight for _, stream in sorted(self._by_rank.items()))
        return tuple(dump for dump in found if dump is not None)


class _Windows:
    """Each folder's ranks with a finished, usable file and the world sizes they state
    (counted, as files finish and are superseded), and which folders are complete."""

    def __init__(self) -> None:
        self.ranks: dict[str, Counter[int]] = {}
        self.worlds: dict[str, Counter[int]] = {}
        self.whole: dict[str, bool] = {}
        self.steps: dict[str, int] = {}  # how far each folder's ranks have come (`_steps`)
        self.changed: set[str] = set()

    def add(self, item: FinishedFile, by: int = 1) -> None:
        rank = item.meta.rank if item.meta.rank is not None else item.name_rank
        if item.result is None or rank is None:
            return
        for counts, key in ((self.ranks, rank), (self.worlds, item.meta.world_size or 0)):
            found = counts.setdefault(item.folder, Counter())
            found[key] += by
            if found[key] <= 0:
                del found[key]
        self.changed.add(item.folder)

    def remove(self, item: FinishedFile) -> None:
        self.add(item, by=-1)

    def complete(self, owned: frozenset[int] | None) -> list[str]:
        self._judge(owned)
        return sorted(folder for folder, whole in self.whole.items() if whole)

    def progress(self, owned: frozenset[int] | None) -> int:
        """The open folders' steps (`_steps`) summed: it grows as their ranks arrive."""
        self._judge(owned)
        return sum(n for folder, n in self.steps.items() if not self.whole[folder])

    def _judge(self, owned: frozenset[int] | None) -> None:
        """Whether each folder whose files changed is whole, and how far it has come."""
        for folder in self.changed:
            seen, worlds = self.ranks[folder], self.worlds[folder]
            self.whole[folder] = bool(seen) and _whole(seen.keys(), max(worlds), owned)
            self.steps[folder] = _steps(seen.keys(), max(worlds, default=0), owned)
        self.changed.clear()


class _Index:
    """The finished files by folder, kept as they finish and go (in `Aggregation.finished`'s
    order), and what a report reads of each folder, found again only once its files changed:
    a report then costs the files that changed, not every file of the run again."""

    def __init__(self) -> None:
        self._files: dict[str, dict[str, FinishedFile]] = {}  # folder -> stream -> file
        self._roots: Counter[str] = Counter()
        self._results: dict[int, str] = {}  # each finished file's result -> its stream
        self._failed: dict[str, FinishedFile] = {}  # the finished files without a result
        # folder -> (its window's name, its usable files as the report takes them, by path)
        self._parsed: dict[str, tuple[str, list[ParsedFile]]] = {}
        self._logs_only: dict[str, bool] = {}  # folder -> it holds NCCL Inspector logs alone

    def add(self, item: FinishedFile, old: FinishedFile | None = None) -> None:
        """A file finished (`old`: the stream's file it replaces, which keeps its place)."""
        if old is not None and old.folder != item.folder:
            self.remove(old)
        elif old is not None:
            self._forget(old)
        self._files.setdefault(item.folder, {})[item.stream] = item
        self._roots[item.root_name] += 1
        if item.result is not None:
            self._results[id(item.result)] = item.stream
        else:
            self._failed[item.stream] = item
        self._changed(item.folder)

    def remove(self, item: FinishedFile) -> None:
        self._forget(item)
        files = self._files[item.folder]
        del files[item.stream]
        if not files:
            del self._files[item.folder]
        self._changed(item.folder)

    def _forget(self, item: FinishedFile) -> None:
        self._roots[item.root_name] -= 1
        if self._roots[item.root_name] <= 0:
            del self._roots[item.root_name]
        if item.result is not None:
            self._results.pop(id(item.result), None)
        self._failed.pop(item.stream, None)

    def _changed(self, folder: str) -> None:
        self._parsed.pop(folder, None)
        self._logs_only.pop(folder, None)

    def streams(self) -> dict[str, Set[str]]:
        """Each folder's finished streams (live views: they change as files finish)."""
        return {folder: files.keys() for folder, files in self._files.items()}

    def stream_of(self, result: RankResult) -> str:
        """A finished file's stream by its result (KeyError: the file is gone, superseded)."""
        return self._results[id(result)]

    def results(self) -> int:
        """How many finished files hold a result."""
        return len(self._results)

    def names(self) -> dict[str, str]:
        """Each folder's window name (`window_names`)."""
        folders = sorted(self._files)
        root = min(self._roots, default=".")
        return dict(zip(folders, window_names(root, folders), strict=True))

    def parsed(self, names: dict[str, str]) -> list[ParsedFile]:
        """The usable files as the report takes them, each in the window its folder is named,
        in window order and by path within a window."""
        folders = sorted(names, key=lambda folder: window_order(names[folder]))
        return [item for folder in folders for item in self._folder(folder, names[folder])]

    def _folder(self, folder: str, name: str) -> list[ParsedFile]:
        found = self._parsed.get(folder)
        if found is None or found[0] != name:
            files = sorted(self._files[folder].values(), key=lambda f: f.path)
            found = self._parsed[folder] = (name, _parsed(files, {folder: name}))
        return found[1]

    def failed(self) -> list[FinishedFile]:
        """The finished files that hold no result, by path."""
        return sorted(self._failed.values(), key=lambda f: f.path)

    def inspector_folders(self) -> set[str]:
        """The folders that hold NCCL Inspector logs and nothing else."""
        return {folder for folder in self._files if self._logs(folder)}

    def _logs(self, folder: str) -> bool:
        found = self._logs_only.get(folder)
        if found is None:
            files = self._files[folder].values()
            found = self._logs_only[folder] = all(f.meta.source == INSPECTOR_LOGS for f in files)
        return found


def _whole(seen: Set[int], world: int, owned: frozenset[int] | None) -> bool:
    if owned is None:
        return _every_rank(seen, world)
    return world > max(owned, default=-1) and owned <= seen


def _steps(seen: Set[int], world: int, owned: frozenset[int] | None) -> int:
    """How far a folder's ranks have come: quarters of the ranks it needs (`_whole`) seen, 0 to
    3 (4 is complete); of a world not stated, the times its ranks seen have doubled."""
    needed = world if owned is None else sum(1 for rank in owned if rank < world)
    if needed <= 0:
        return max(len(seen), 1).bit_length() - 1
    inside = seen if owned is None else seen & owned
    return min(3, 4 * sum(1 for rank in inside if 0 <= rank < world) // needed)


def _every_rank(seen: Set[int], world: int) -> bool:
    """Whether `seen` holds every rank 0 … world-1 (never building that range: `world` is
    what a peer says)."""
    return world > 0 and sum(1 for rank in seen if 0 <= rank < world) == world


def _take_part(stream: _OpenStream, part: bytes) -> None:
    """A part of a Flight Recorder dump (beyond `MAX_FLIGHT_BYTES`: the dump is refused)."""
    if len(stream.dump) <= MAX_FLIGHT_BYTES:
        stream.dump += part


def _with_dump(found: FinishedFile, data: bytes) -> FinishedFile:
    """A Flight Recorder dump's finished file: the dump decoded, or why it is refused."""
    try:
        if len(data) > MAX_FLIGHT_BYTES:
            raise msgspec.ValidationError(f"over {MAX_FLIGHT_BYTES} bytes")
        return msgspec.structs.replace(found, flight=_DUMP.decode(data))
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        return msgspec.structs.replace(found, error=f"{_BAD_DUMP} ({exc})"[:500])


def _finish(stream: _OpenStream, end: StreamEnd) -> FinishedFile:
    start, dump = stream.start, end.error is None and bool(stream.dump)
    result = None if end.error is not None or dump else stream.accumulator.result([start.path])
    result = inspector_live.finished(result, end.meta)
    found = FinishedFile(
        stream=start.stream,
        node=start.node,
        path=start.path,
        folder=start.folder,
        root_name=start.root_name,
        name_rank=start.name_rank,
        next_seq=end.seq + 1,
        size_bytes=end.size_bytes,
        meta=end.meta,
        stats=end.stats,
        result=result,
        error=end.error,
        lost=end.lost,
    )
    return _with_dump(found, bytes(stream.dump)) if dump else found


def _parsed(files: Iterable[FinishedFile], names: dict[str, str]) -> list[ParsedFile]:
    """The usable files as the report takes them, each in the window its folder is named."""
    return [
        ParsedFile(names[f.folder], f.path, f.name_rank, f.meta, f.result, f.stats)
        for f in files
        if f.result is not None
    ]


def _ignorable(item: FinishedFile) -> bool:
    """Valid JSON that is not a trace, under a name that does not say it should be one."""
    return item.error == NOT_A_TRACE and not looks_like_trace(item.path)


def _unfinished(stream: _OpenStream) -> Skipped:
    reason = (
        f"unfinished when the run ended ({stream.next_seq} records received; the file never ended)"
    )
    return Skipped(stream.start.path, reason)
