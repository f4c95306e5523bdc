"""Reading an Nsight Systems SQLite export with cursors (shell: sqlite3, the file system).

`Export(path)` checks the file (an SQLite database holding an nsys export's kernel table and
`StringIds`), reads the small tables whole (processes, payload schemas, the session start)
and the NCCL/PyTorch NVTX ranges and launches of communication kernels (bounded by the number
of collective calls, as the Kineto reader's call index is), then streams the kernel, memcpy
and memset tables row by row into per-process batches (`batches`), each process's kernel
names at the end, and its kernel launch calls with the kernels joined to them in SQL. Rows may
come in any order: accumulation is order-free, and NVTX ranges are sorted per thread where
order matters.
The mapping itself is `nsys` (pure). A file that cannot be read raises TraceError with the
reason; nothing here raises anything else for a bad file. `NSYS` is the source
(`collector.source`) of exports: one rank per profiled process, read offline only.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from commscope.collector import nsys
from commscope.collector.graphs import GraphJoin, graph_id, is_graph_launch
from commscope.collector.launches import KernelNames, LaunchJoin, is_launch_call
from commscope.collector.normalize import (
    LOOKALIKE_NAMES,
    CallIndex,
    CommCall,
    kernel_kind,
    longest,
)
from commscope.collector.source import File, Live, Rank, Reading
from commscope.model.errors import TraceError
from commscope.model.schema import MAX_LABEL, CommOp, Event, FileStats, RankResult, TraceMeta
from commscope.model.schema import Source as SourceKind
from msgspec.structs import replace

BATCH: Final = 4096
EXPORT_FIRST: Final = (
    "an Nsight Systems report, not an export: run `nsys export --type sqlite FILE` and give "
    "the .sqlite"
)
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_BAD_SPAN: Final = "bad_span"
_LAUNCHES: Final = (  # a runtime table's kernel launch calls (`launches.is_launch_call` then)
    "JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE '%LaunchKernel%' OR s.value LIKE "
    "'%LaunchCooperativeKernel%'"
)
_LAUNCH, _KERNEL, _COPY = range(3)  # the rows of `_graph_query`, launches first
_GRAPH_LAUNCHES: Final = "JOIN StringIds s ON s.id = r.nameId WHERE s.value LIKE '%GraphLaunch%'"
_COMM_NAMES: Final = " OR ".join(f"s.value LIKE '{p}%'" for p in ("nccl", "rccl", "hccl", "xccl"))
_NVTX_NAMES: Final = (
    "name LIKE 'nccl%' OR name LIKE 'c10d::%' OR name LIKE '_c10d_functional%' OR name LIKE "
    "'record_param_comms%' OR name LIKE 'gloo:%' OR name LIKE 'ProfilerStep#%' OR name LIKE "
    "'%step%' OR name LIKE 'iteration%'"
)


class Export:
    """One export's processes as ranks, their metadata, and their events in batches."""

    def __init__(self, path: Path, shown: str) -> None:
        self.path, self.shown = path, shown
        self._db = _connect(path, shown)
        try:
            self._tables = self._names()
            self._kernels = self._kernel_table()
            self._name = self._name_column()
            self._processes = self._find_processes()
        except sqlite3.Error as exc:
            self._db.close()
            raise TraceError(shown, f"corrupt SQLite database ({exc})") from None
        self.stats = {p.global_pid: FileStats() for p in self._processes}
        self.ranks: dict[int, int] = {}
        self.note: str | None = None
        self.meta: dict[int, TraceMeta] = {}
        self._unread: dict[str, int] = {}  # NCCL payloads not read, by reason
        self._gpu_span: tuple[int, int] | None = None  # first start, last end of GPU rows
        # True once read, when the export had no NVTX step range: each rank's one step is
        # the export's capture span (`nsys.capture_step`)
        self.capture_span = False

    def close(self) -> None:
        self._db.close()

    def read(self) -> Iterator[tuple[int, list[Event]]]:
        """(process, events) batches of every rank; `ranks`, `meta`, `stats` are set once
        the calls are read (before the first batch)."""
        try:
            yield from self._read()
        except sqlite3.Error as exc:
            raise TraceError(self.shown, f"corrupt SQLite database ({exc})") from None

    # ------------------------------------------------------------ the file and its tables

    def _names(self) -> set[str]:
        rows = self._db.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')")
        return {name for (name,) in rows}

    def _kernel_table(self) -> str:
        table = nsys.pick_table(self._tables, nsys.KERNEL_TABLES)
        if table is None or "StringIds" not in self._tables:
            missing = "StringIds" if table is not None else "CUPTI_ACTIVITY_KIND_KERNEL"
            raise TraceError(
                self.shown,
                f"an SQLite database but not an Nsight Systems export with CUDA kernels "
                f"(no {missing} table; export with `nsys export --type sqlite` from a report "
                "profiled with `-t cuda`)",
            )
        return table

    def _columns(self, table: str) -> set[str]:
        return {row[1] for row in self._db.execute(f"PRAGMA table_info('{table}')")}

    def _name_column(self) -> str:
        columns = self._columns(self._kernels)
        missing = {"start", "end", "deviceId"} - columns
        name = next((c for c in nsys.NAME_COLUMNS if c in columns), None)
        if missing or name is None:
            lacks = ", ".join(sorted(missing) or ["a kernel name column"])
            raise TraceError(self.shown, f"{self._kernels} has no {lacks}")
        self._pid = "globalPid" if "globalPid" in columns else "deviceId"
        self._correlation = "correlationId" if "correlationId" in columns else "NULL"
        return name

    def _find_processes(self) -> list[nsys.Process]:
        devices: dict[int, list[int]] = {}
        query = f"SELECT DISTINCT {self._pid}, deviceId FROM {self._kernels}"
        for pid, device in self._db.execute(query):
            if isinstance(pid, int) and isinstance(device, int):
                devices.setdefault(pid, []).append(device)
        if not devices:
            raise TraceError(self.shown, f"no GPU kernels in the export ({self._kernels} empty)")
        return [nsys.Process(pid, tuple(sorted(d))) for pid, d in sorted(devices.items())]

    # ------------------------------------------------------------ reading

    def _read(self) -> Iterator[tuple[int, list[Event]]]:
        pids = {p.global_pid for p in self._processes}
        calls, steps = self._ranges(pids)
        index = _index(calls, {p.global_pid: p.comms for p in self._processes})
        launches = self._launches(pids)
        self._set_ranks()
        yield from self._kernel_batches(index, launches)
        yield from self._launch_parts(pids)
        yield from self._graph_parts(pids)
        for table, kind in ((nsys.MEMCPY_TABLE, "memcpy"), (nsys.MEMSET_TABLE, "memset")):
            found = nsys.pick_table(self._tables, (table,))
            if found is not None:
                yield from self._copies(found, kind)
        yield from self._steps(steps)

    def _steps(self, steps: dict[int, list[nsys.StepRange]]) -> Iterator[tuple[int, list[Event]]]:
        """Each process's steps from its step ranges; with none in the export, its capture
        span as one step of every process."""
        if any(steps.values()):
            for pid, ranges in steps.items():
                yield pid, list(nsys.steps_of(ranges))
            return
        step = nsys.capture_step(self._gpu_span)
        self.capture_span = step is not None
        if step is not None:
            for process in self._processes:
                yield process.global_pid, [step]

    def _set_ranks(self) -> None:
        self.ranks, note = nsys.ranks_of(self._processes)
        self.note = nsys.export_note(note, self._unread)
        world = nsys.world_of(self._processes)
        base = self._base_time()
        gpus = self._gpu_names()
        hosts = self._hostnames()
        nics = self._nics()
        for process in self._processes:
            self.meta[process.global_pid] = TraceMeta(
                rank=self.ranks[process.global_pid],
                world_size=world,
                gpu_name=(gpus.get(process.devices[0]) or None) if process.devices else None,
                base_time_ns=base,
                source="nsys",
                host=nsys.host_of(process.global_pid, hosts),
                nics=nics,
            )

    def _ranges(
        self, pids: set[int]
    ) -> tuple[
        dict[int, list[nsys.ApiCall | tuple[int, CommCall]]], dict[int, list[nsys.StepRange]]
    ]:
        """NCCL API calls and PyTorch comm calls per process, and the step ranges."""
        calls: dict[int, list[nsys.ApiCall | tuple[int, CommCall]]] = {p: [] for p in pids}
        steps: dict[int, list[nsys.StepRange]] = {}
        if nsys.NVTX_TABLE not in self._tables:
            return calls, steps
        comms = {p.global_pid: p.comms for p in self._processes}
        schemas = self._schemas()
        for start, end, tid, text, blob, json_text, domain in self._db.execute(self._nvtx_query()):
            if not (_ints(start, end, tid) and end >= start and isinstance(text, str)):
                continue
            pid, name = nsys.global_pid(tid), nsys.call_name(text)
            if nsys.is_nccl_api(name):
                payload, problem = nsys.read_payload(blob, json_text, schemas, domain)
                if problem is not None:
                    self._unread[problem] = self._unread.get(problem, 0) + 1
                if pid in comms:
                    comms[pid].add(payload)
                calls.get(pid, []).append(nsys.ApiCall(tid, start, end, name, payload))
            elif nsys.is_pytorch_call(name):
                calls.get(pid, []).append((tid, CommCall(name, start, end)))
            elif (step := nsys.step_range(name)) is not None and pid in pids:
                steps.setdefault(pid, []).append((step[0], start, end, step[1], tid))
        return calls, steps

    def _nvtx_query(self) -> str:
        """Ranges with their payload columns (those the export lacks as NULL)."""
        columns = self._columns(nsys.NVTX_TABLE)
        payload = ", ".join(
            f"e.{c}" if c in columns else "NULL" for c in ("binaryData", "jsonText", "domainId")
        )
        named = "COALESCE(e.text, s.value)" if "textId" in columns else "e.text"
        join = "LEFT JOIN StringIds s ON s.id = e.textId" if "textId" in columns else ""
        return (
            f"SELECT * FROM (SELECT e.start, e.end, e.globalTid, {named} AS name, {payload} "
            f"FROM {nsys.NVTX_TABLE} e {join}) WHERE {_NVTX_NAMES}"
        )

    def _schemas(self) -> nsys.Schemas:
        """The payload schemas (small tables: a few rows per schema and process)."""
        if "NVTX_PAYLOAD_SCHEMA_ENTRIES" not in self._tables:
            return {}
        entry = ("domainId", "schemaId", "idx", "name", "type", "offset")
        entries = self._db.execute(self._select("NVTX_PAYLOAD_SCHEMA_ENTRIES", entry))
        sizes: list[tuple[object, ...]] = []
        if "NVTX_PAYLOAD_SCHEMAS" in self._tables:
            size = ("domainId", "schemaId", "payloadSize")
            sizes = self._db.execute(self._select("NVTX_PAYLOAD_SCHEMAS", size)).fetchall()
        return nsys.schemas_from(entries, sizes)

    def _select(self, table: str, wanted: tuple[str, ...]) -> str:
        """The columns of `table`, NULL for one it lacks (`idx`: the row order)."""
        columns = self._columns(table)
        absent = {"idx": "rowid"}
        picked = (f'"{c}"' if c in columns else absent.get(c, "NULL") for c in wanted)
        return f"SELECT {', '.join(picked)} FROM {table}"

    def _launches(self, pids: set[int]) -> dict[tuple[int, int], tuple[int, int]]:
        """(process, correlation) -> (thread, time) of the launches of communication kernels."""
        runtime = nsys.pick_table(self._tables, (nsys.RUNTIME_TABLE,))
        if runtime is None or self._correlation == "NULL" or self._pid != "globalPid":
            return {}
        query = (
            f"SELECT r.correlationId, r.globalTid, r.start FROM {runtime} r WHERE r.correlationId "
            f"IN (SELECT k.correlationId FROM {self._kernels} k JOIN StringIds s "
            f"ON s.id = k.{self._name} WHERE {_COMM_NAMES})"
        )
        found = {}
        for correlation, tid, start in self._db.execute(query):
            if _ints(correlation, tid, start) and nsys.global_pid(tid) in pids:
                found[nsys.global_pid(tid), correlation] = (tid, start)
        return found

    def _launch_parts(self, pids: set[int]) -> Iterator[tuple[int, list[Event]]]:
        """Each process's kernel launch calls (CUPTI runtime and driver API records), and its
        kernels joined to them by correlation id within the process (`collector.launches`)."""
        runtime = nsys.pick_table(self._tables, (nsys.RUNTIME_TABLE,))
        if runtime is None or self._correlation == "NULL" or self._pid != "globalPid":
            return
        joins = {pid: LaunchJoin() for pid in pids}
        out: dict[int, list[Event]] = {pid: [] for pid in pids}
        query = f"SELECT r.globalTid, r.start, r.end, s.value FROM {runtime} r {_LAUNCHES}"
        for tid, start, end, name in self._db.execute(query):
            if _ints(tid, start, end) and _launch(name) and nsys.global_pid(tid) in joins:
                joins[nsys.global_pid(tid)].counted(end - start)
        for pid, k_start, k_end, start, end, name in self._db.execute(self._joined_query(runtime)):
            if pid in joins and _ints(k_start, k_end, start, end) and _launch(name):
                joins[pid].joined(out[pid], (start, end - start), (k_start, k_end - k_start))
        for pid, join in joins.items():
            join.finish(out[pid])
            yield pid, out[pid]

    def _joined_query(self, runtime: str) -> str:
        """Kernels with the launch call of their correlation id in the same process."""
        return (
            f"SELECT k.globalPid, k.start, k.end, r.start, r.end, s.value FROM {self._kernels} k "
            f"JOIN {runtime} r ON r.correlationId = k.correlationId "
            f"AND (r.globalTid >> {nsys.TID_BITS}) << {nsys.TID_BITS} = k.globalPid "
            f"{_LAUNCHES}"
        )

    def _graph_parts(self, pids: set[int]) -> Iterator[tuple[int, list[Event]]]:
        """Each process's CUDA graph launches, the kernels of their correlation id or of a graph
        id, and the memcpy and memset nodes of their correlation id (`collector.graphs`), in
        one pass by correlation id: a launch comes before what it replays."""
        runtime = nsys.pick_table(self._tables, (nsys.RUNTIME_TABLE,))
        if runtime is None or self._correlation == "NULL" or self._pid != "globalPid":
            return
        joins = {pid: GraphJoin() for pid in pids}
        for kind, pid, corr, start, end, name, graph in self._db.execute(
            self._graph_query(runtime)
        ):
            join = joins.get(pid)
            if join is None or not _ints(corr, start, end):
                continue
            if kind == _LAUNCH and end >= start and _graph(name):
                join.launch(corr, end - start)
            elif kind == _KERNEL and isinstance(name, str):
                join.kernel(corr, end - start, kernel_kind(name) is None, graph_id(graph))
            elif kind == _COPY:
                join.copy(corr, None)
        for pid, join in joins.items():
            if (tally := join.finish()) is not None:
                yield pid, [tally]

    def _graph_query(self, runtime: str) -> str:
        """Graph launches (kind 0); kernels with a graph id or a graph launch of their
        correlation id in the same process (1); memcpy and memset records of such a
        correlation id (2): by correlation id, launches first."""
        graph = "k.graphId" if "graphId" in self._columns(self._kernels) else "NULL"
        pid = f"(r.globalTid >> {nsys.TID_BITS}) << {nsys.TID_BITS}"
        launched = (
            f"SELECT DISTINCT r.correlationId AS c, {pid} AS p FROM {runtime} r {_GRAPH_LAUNCHES}"
        )
        parts = [
            f"SELECT {_LAUNCH}, {pid}, r.correlationId, r.start, r.end, s.value, NULL "
            f"FROM {runtime} r {_GRAPH_LAUNCHES}",
            f"SELECT {_KERNEL}, k.globalPid, k.correlationId, k.start, k.end, s.value, {graph} "
            f"FROM {self._kernels} k JOIN StringIds s ON s.id = k.{self._name} "
            f"LEFT JOIN ({launched}) g ON g.c = k.correlationId AND g.p = k.globalPid "
            f"WHERE g.c IS NOT NULL OR {graph} > 0",
            *(f"SELECT {_COPY}, c.globalPid, c.correlationId, c.start, c.end, NULL, NULL "
              f"FROM {table} c JOIN ({launched}) g ON g.c = c.correlationId AND g.p = c.globalPid"
              for table in self._copy_tables()),
        ]  # fmt: skip
        return " UNION ALL ".join(parts) + " ORDER BY 3, 1"

    def _copy_tables(self) -> list[str]:
        """The memcpy and memset tables whose records carry a process and a correlation id."""
        found = (
            nsys.pick_table(self._tables, (t,)) for t in (nsys.MEMCPY_TABLE, nsys.MEMSET_TABLE)
        )
        return [t for t in found if t and {"globalPid", "correlationId"} <= self._columns(t)]

    def _kernel_batches(
        self, index: dict[int, CallIndex], launches: dict[tuple[int, int], tuple[int, int]]
    ) -> Iterator[tuple[int, list[Event]]]:
        query = (
            f"SELECT k.{self._pid}, k.start, k.end, k.{self._correlation}, s.value "
            f"FROM {self._kernels} k LEFT JOIN StringIds s ON s.id = k.{self._name}"
        )
        tallies = {pid: nsys.Tally() for pid in self.stats}
        worlds = {pid: meta.world_size for pid, meta in self.meta.items()}
        batches: dict[int, list[Event]] = {}
        names = {pid: KernelNames() for pid in self.stats}
        for pid, start, end, correlation, name in self._db.execute(query):
            if pid not in tallies or not self._span(pid, start, end) or not isinstance(name, str):
                continue
            launch = launches.get((pid, correlation)) if isinstance(correlation, int) else None
            calls = nsys.enclosing(index[pid], launch)
            event = nsys.kernel_event(
                name, start, end, calls, world=worlds[pid], tally=tallies[pid]
            )
            names[pid].add(name, end - start, type(event) is CommOp)
            yield from _add(batches, pid, event)
        yield from batches.items()
        for pid, kept in names.items():
            yield pid, list(kept.events())
        for pid, tally in tallies.items():
            stats = self.stats[pid]
            stats.comm_kernels, stats.no_launch = tally.comm_kernels, tally.no_launch
            stats.sizes_unknown = tally.sizes_unknown
            stats.lookalike_ns = tally.lookalike_ns
            stats.lookalikes = longest(tally.lookalikes, LOOKALIKE_NAMES)
        self._set_backend()

    def _set_backend(self) -> None:
        for pid, meta in self.meta.items():
            if self.stats[pid].comm_kernels and meta.backend is None:
                self.meta[pid] = replace(meta, backend="nccl")

    def _copies(self, table: str, kind: str) -> Iterator[tuple[int, list[Event]]]:
        columns = self._columns(table)
        pid = "globalPid" if "globalPid" in columns else "deviceId"
        if not {"start", "end", pid} <= columns:
            return
        batches: dict[int, list[Event]] = {}
        for owner, start, end in self._db.execute(f"SELECT {pid}, start, end FROM {table}"):
            if owner in self.stats and self._span(owner, start, end):
                yield from _add(batches, owner, nsys.gpu_op(kind, start, end))
        yield from batches.items()

    def _span(self, pid: int, start: object, end: object) -> bool:
        stats = self.stats[pid]
        stats.events += 1
        if type(start) is int and type(end) is int and end - start >= 0 and abs(start) < 2**62:
            self._gpu_span = _widened(self._gpu_span, start, end)
            return True
        stats.dropped[_BAD_SPAN] = stats.dropped.get(_BAD_SPAN, 0) + 1
        return False

    def _base_time(self) -> int | None:
        if "TARGET_INFO_SESSION_START_TIME" not in self._tables:
            return None
        query = "SELECT utcEpochNs, systemClockNs FROM TARGET_INFO_SESSION_START_TIME"
        row = self._db.execute(query).fetchone()
        return nsys.base_time_ns(*row) if row else None

    def _hostnames(self) -> dict[int, str]:
        """Each target's Hostname in TARGET_INFO_SYSTEM_ENV (globalVid -> name), when there."""
        if "TARGET_INFO_SYSTEM_ENV" not in self._tables:
            return {}
        if not {"globalVid", "name", "value"} <= self._columns("TARGET_INFO_SYSTEM_ENV"):
            return {}
        query = "SELECT globalVid, value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname'"
        return {
            vid: value
            for vid, value in self._db.execute(query)
            if type(vid) is int and isinstance(value, str)
        }

    def _nics(self) -> list[str]:
        """The PCI ids of the NICs TARGET_INFO_NIC_INFO lists (`nsys.nic_ids`), when there."""
        table = "TARGET_INFO_NIC_INFO"
        if table not in self._tables or not {"vendorId", "deviceId"} <= self._columns(table):
            return []
        return nsys.nic_ids(self._db.execute(f"SELECT vendorId, deviceId FROM {table}"))

    def _gpu_names(self) -> dict[int, str]:
        """Each CUDA device's name in TARGET_INFO_GPU, when there (read once for every
        process: a process is named by its lowest device)."""
        if "TARGET_INFO_GPU" not in self._tables:
            return {}
        columns = self._columns("TARGET_INFO_GPU")
        key = "cudaId" if "cudaId" in columns else "id" if "id" in columns else None
        if key is None or "name" not in columns:
            return {}
        names: dict[int, str] = {}  # a device's first row, as a lookup by device would find
        for device, name in self._db.execute(f"SELECT {key}, name FROM TARGET_INFO_GPU"):
            names.setdefault(device, name.strip()[:MAX_LABEL] if isinstance(name, str) else "")
        return names


def _connect(path: Path, shown: str) -> sqlite3.Connection:
    try:
        with path.open("rb") as raw:
            head = raw.read(len(_SQLITE_MAGIC))
    except OSError as exc:
        raise TraceError(shown, f"unreadable ({exc.strerror or exc})") from None
    if head != _SQLITE_MAGIC:
        raise TraceError(shown, "not an SQLite database (no SQLite header): not an nsys export")
    uri = path.absolute().as_uri() + "?mode=ro&immutable=1"
    try:
        return sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise TraceError(shown, f"unreadable SQLite database ({exc})") from None


def _index(
    calls: dict[int, list[nsys.ApiCall | tuple[int, CommCall]]], comms: dict[int, nsys.Comms]
) -> dict[int, CallIndex]:
    """Per process: the launching calls (NCCL API, grouped) and PyTorch's comm calls, by
    thread."""
    found = {}
    for pid, items in calls.items():
        index = CallIndex()
        api = [c for c in items if isinstance(c, nsys.ApiCall)]
        by_thread: dict[int, list[nsys.ApiCall]] = {}
        for call in api:
            by_thread.setdefault(call.tid, []).append(call)
        for thread in by_thread.values():
            for tid, launcher in nsys.launchers(thread, comms[pid]):
                index.add(tid, launcher)
        for item in items:
            if isinstance(item, tuple):
                index.add(*item)
        found[pid] = index
    return found


def _add(
    batches: dict[int, list[Event]], pid: int, event: Event
) -> Iterator[tuple[int, list[Event]]]:
    batch = batches.setdefault(pid, [])
    batch.append(event)
    if len(batch) >= BATCH:
        yield pid, batches.pop(pid)


def _widened(span: tuple[int, int] | None, start: int, end: int) -> tuple[int, int]:
    return (start, end) if span is None else (min(span[0], start), max(span[1], end))


def _launch(name: object) -> bool:
    return isinstance(name, str) and is_launch_call(name)


def _graph(name: object) -> bool:
    return isinstance(name, str) and is_graph_launch(name)


def _ints(*values: object) -> bool:
    return all(type(v) is int for v in values)


# ---------------------------------------------------------------- the source


@dataclass(frozen=True)
class _Nsys:
    """Nsight Systems SQLite exports; a report (`.nsys-rep`) is claimed to say it must be
    exported first."""

    kind: SourceKind = "nsys"
    live: Live | None = None
    lacks: Mapping[str, str] = field(default_factory=dict)
    suffixes: tuple[str, ...] = (".sqlite",)
    reports: tuple[str, ...] = (".nsys-rep", ".qdrep")

    def claims(self, name: str) -> bool:
        return name.endswith((*self.suffixes, *self.reports))

    def read(self, file: File) -> Reading:
        return _Exported(file, self.reports)


class _Exported:
    """One read of an export: a rank per profiled process (keyed by it), in rank order; the
    file's bytes count once, with its first rank."""

    def __init__(self, file: File, reports: tuple[str, ...]) -> None:
        self.file, self.reports = file, reports
        self.export: Export | None = None

    def batches(self) -> Iterator[tuple[Hashable, list[Event]]]:
        file = self.file
        if Path(file.path).name.endswith(self.reports):
            raise TraceError(file.shown, EXPORT_FIRST)
        self.export = export = Export(Path(file.path), file.shown)
        try:
            yield from export.read()
        finally:
            export.close()
        if file.on_chunk is not None:
            file.on_chunk(file.size)

    def ranks(self) -> list[Rank]:
        export = self.export
        if export is None:
            return []
        order = sorted(export.meta, key=lambda pid: export.ranks[pid])
        for pid in order[:1]:
            export.stats[pid].bytes_read = self.file.size
        finish = _captured if export.capture_span else None
        return [
            Rank(pid, export.meta[pid], export.stats[pid], note=export.note, finish=finish)
            for pid in order
        ]


def _captured(result: RankResult) -> RankResult:
    """The result of a rank whose one step is its export's capture span (`nsys.capture_step`):
    the step clipped the in-step figures; it moves from `steps` (training steps) to
    `capture_ns`."""
    steps = dict(result.steps)
    span = steps.pop(nsys.CAPTURE_STEP, 0)
    return replace(result, steps=steps, capture_ns=span)


NSYS: Final = _Nsys()
