"""Hand-made Nsight Systems SQLite exports for tests: the tables and columns of a real export
(Nsight Systems 2026.2, export schema 3.25: `../shared/traces/nsys`), or an older layout
(`CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`, kernel names in `shortName` only, NVTX text without
`textId` or payload blobs), holding only what a test puts in. Times in ns on the export's clock.

NCCL's payloads are its C structs packed as NCCL declares them (`Layout`: one per struct and
NCCL version, citing the header), behind the 32-byte blob header Nsight Systems writes, with
the schema tables (NVTX_PAYLOAD_SCHEMAS, NVTX_PAYLOAD_SCHEMA_ENTRIES) of the chosen version
(`Export.nccl`); or as the JSON object `--include-json=true` writes (`Export.nvtx(json=...)`).
"""

from __future__ import annotations

import random
import sqlite3
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

_STATIC: Final = 1 << 24  # NVTX_PAYLOAD_ENTRY_TYPE_SCHEMA_ID_STATIC_START (nvToolsExtPayload.h)
_INT, _UINT64, _SIZE = 5, 18, 22  # NVTX_PAYLOAD_ENTRY_TYPE_INT, _UINT64, _SIZE
_COMM, _BYTES = "NCCL communicator ID", "Message size [bytes]"


@dataclass(frozen=True)
class Layout:
    """One of NCCL's payload structs: its schema id (1 << 24 + NVTX_SID_*, `nvtx.h`), its C
    layout as a little-endian struct format (padding written out: x86-64, int 4 bytes, size_t
    and uint64_t 8, a struct padded to its largest member), the keyword of each member in
    order, and its schema entries as the export lists them (name, NVTX entry type, offset;
    None for 0, as the real export writes the first)."""

    schema: int
    fmt: str
    members: tuple[str, ...]
    entries: tuple[tuple[str, int, int | None], ...]

    @property
    def size(self) -> int:
        return struct.calcsize(self.fmt)


# NCCL 2.27.3, src/include/nvtx_payload_schemas.h (NVIDIA/nccl @ 1708736f), ids from its
# src/include/nvtx.h (NVTX_SID_CommInitRank 0, AllGather 4, AllReduce 5, Send 9, Recv 10,
# CommSplit 13; NVTX_PAYLOAD_ENTRY_NCCL_REDOP 16): what the real export's schema tables hold.
# NcclNvtxParamsCommInitRank {uint64_t newcomm; int nranks; int myrank; int cudaDev;}:
# 8 + 3 x 4 = 20 bytes, padded to 24.
INIT = Layout(_STATIC + 0, "<Qiii4x", ("comm", "ranks", "rank", "device"),
              ((_COMM, _UINT64, None), ("No. of ranks", _INT, 8), ("Rank", _INT, 12),
               ("CUDA device", _INT, 16)))  # fmt: skip
# NcclNvtxParamsCommSplit {uint64_t newcomm; uint64_t parentcomm; int nranks; int myrank;
# int cudaDev; int color; int key;}: 16 + 5 x 4 = 36 bytes, padded to 40.
SPLIT = Layout(_STATIC + 13, "<QQiiiii4x",
               ("comm", "parent", "ranks", "rank", "device", "color", "key"),
               ((_COMM, _UINT64, None), ("Parent NCCL communicator ID", _UINT64, 8),
                ("No. of ranks", _INT, 16), ("Rank", _INT, 20), ("CUDA device", _INT, 24),
                ("Color", _INT, 28), ("Key", _INT, 32)))  # fmt: skip
# NcclNvtxParamsAllGather {uint64_t comm; size_t bytes;}: 16 bytes (bytes: the send count).
ALLGATHER = Layout(_STATIC + 4, "<QQ", ("comm", "size"),
                   ((_COMM, _UINT64, None), (_BYTES, _SIZE, 8)))  # fmt: skip
# NcclNvtxParamsAllReduce {uint64_t comm; size_t bytes; ncclRedOp_t op;}: 20, padded to 24.
COLL = Layout(_STATIC + 5, "<QQi4x", ("comm", "size", "op"),
              ((_COMM, _UINT64, None), (_BYTES, _SIZE, 8),
               ("Reduction operation", _STATIC + 16, 16)))  # fmt: skip
# NcclNvtxParamsSendRecv {uint64_t comm; size_t bytes; int peer;}: 20, padded to 24; the
# same struct for ncclSend (schema NVTX_SID_Send) and ncclRecv (NVTX_SID_Recv).
_SENDRECV: Final = ((_COMM, _UINT64, None), (_BYTES, _SIZE, 8), ("Peer rank", _INT, 16))
P2P = Layout(_STATIC + 9, "<QQi4x", ("comm", "size", "peer"), _SENDRECV)
RECV = Layout(_STATIC + 10, "<QQi4x", ("comm", "size", "peer"), _SENDRECV)
NCCL_2_27: Final = (INIT, SPLIT, ALLGATHER, COLL, P2P, RECV)
# NCCL 2.28+ adds ncclAlltoAll: NcclNvtxParamsAlltoAll {uint64_t comm; size_t bytes;}
# (bytes per peer), NVTX_SID_AlltoAll 16 (the reduction op's enum id moves to 24; unread).
ALLTOALL = Layout(_STATIC + 16, "<QQ", ("comm", "size"),
                  ((_COMM, _UINT64, None), (_BYTES, _SIZE, 8)))  # fmt: skip
NCCL_2_28: Final = (INIT, ALLGATHER, COLL, P2P, RECV, ALLTOALL)

# NCCL 2.22.3 (NVIDIA/nccl @ 178b6b75; the same in 2.16.2's src/collectives/*.cc): schemas
# inline in src/init.cc and src/collectives.cc, no communicator; ids from its nvtx.h
# (CommInitRank 0, AllGather 4, AllReduce 5, Broadcast 6, Send 9, Recv 10; REDOP 11).
# struct NvtxParamsCommInitRank {int rank; int nranks; int cudaDev;}: 12 bytes.
OLD_INIT = Layout(_STATIC + 0, "<iii", ("rank", "ranks", "device"),
                  (("Rank", _INT, None), ("No. of ranks", _INT, 4),
                   ("CUDA device", _INT, 8)))  # fmt: skip
# ncclAllGather: the payload is `size_t msgsize` itself (8 bytes).
OLD_ALLGATHER = Layout(_STATIC + 4, "<Q", ("size",), ((_BYTES, _SIZE, None),))
# struct NvtxParamsAllReduce {size_t bytes; ncclRedOp_t op;}: 12, padded to 16.
OLD_ALLREDUCE = Layout(_STATIC + 5, "<Qi4x", ("size", "op"),
                       ((_BYTES, _SIZE, None),
                        ("Reduction operation", _STATIC + 11, 8)))  # fmt: skip
# struct NvtxParamsBroadcast {size_t bytes; int root;}: 16; its size entry is named "Bytes".
OLD_BROADCAST = Layout(_STATIC + 6, "<Qi4x", ("size", "root"),
                       (("Bytes", _SIZE, None), ("Root", _INT, 8)))  # fmt: skip
# struct NvtxParamsSendRecv {size_t bytes; int peer;}: 16; "Bytes" too.
_OLD_SENDRECV: Final = (("Bytes", _SIZE, None), ("Peer rank", _INT, 8))
OLD_P2P = Layout(_STATIC + 9, "<Qi4x", ("size", "peer"), _OLD_SENDRECV)
OLD_RECV = Layout(_STATIC + 10, "<Qi4x", ("size", "peer"), _OLD_SENDRECV)
NCCL_2_22: Final = (OLD_INIT, OLD_ALLGATHER, OLD_ALLREDUCE, OLD_BROADCAST, OLD_P2P, OLD_RECV)

SESSION_UTC_NS: Final = 1_779_782_330_176_752_435  # TARGET_INFO_SESSION_START_TIME of the real one
SESSION_CLOCK_NS: Final = 28_254_349_605
DOMAIN: Final = 1  # NCCL's NVTX domain in the real export


def gpid(pid: int) -> int:
    """A serialized global process id (VM 1, as in the real export)."""
    return (1 << 48) | (pid << 24)


def gtid(pid: int, tid: int) -> int:
    return gpid(pid) + tid


def schema_rows(
    layouts: tuple[Layout, ...],
) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    """The layouts' NVTX_PAYLOAD_SCHEMA_ENTRIES rows (domainId, schemaId, idx, name, type,
    offset) and NVTX_PAYLOAD_SCHEMAS rows (domainId, schemaId, payloadSize)."""
    entries: list[tuple[object, ...]] = [
        (DOMAIN, x.schema, idx, name, kind, offset)
        for x in layouts
        for idx, (name, kind, offset) in enumerate(x.entries)
    ]
    return entries, [(DOMAIN, x.schema, x.size) for x in layouts]


def blob(layout: Layout, *, header: bool = True, **values: int) -> bytes:
    """An NCCL payload: the struct with `values` by member keyword (0 for those not given),
    behind the header Nsight Systems writes (domain, 0, schema id, 0 as 32-bit words, then
    the payload size and the blob size as 64-bit: as GindaChen/nsys-ai reads real exports)."""
    body = struct.pack(layout.fmt, *(values.get(m, 0) for m in layout.members))
    if not header:
        return body
    return struct.pack("<IIIIQQ", DOMAIN, 0, layout.schema, 0, len(body), 32 + len(body)) + body


@dataclass
class Export:
    kernel_table: str = "CUPTI_ACTIVITY_KIND_KERNEL"
    older: bool = False  # shortName only, NVTX text only (no textId, no binaryData)
    session: bool = True
    gpus: dict[int, str] = field(default_factory=dict)  # TARGET_INFO_GPU: device -> name
    # TARGET_INFO_SYSTEM_ENV's Hostname rows: globalVid -> host (VM 1's is 1 << 48)
    hosts: dict[int, str] = field(default_factory=dict)
    # TARGET_INFO_NIC_INFO's rows as (vendorId, deviceId), e.g. (0x15B3, 0x1021): ConnectX-7
    nics: list[tuple[object, object]] = field(default_factory=list)
    kernels: list[tuple[object, ...]] = field(default_factory=list)
    copies: list[tuple[str, int, int, int, int, int | None]] = field(default_factory=list)
    launches: list[tuple[int, int, int, int]] = field(default_factory=list)
    calls: list[tuple[int, int, int, int, str]] = field(default_factory=list)  # named calls
    graph_ids: dict[int, int] = field(default_factory=dict)  # kernel row -> its graphId
    ranges: list[tuple[int, int, int, str, object, str | None]] = field(default_factory=list)
    nccl: tuple[Layout, ...] = NCCL_2_27  # the payload schemas the export lists
    strings: dict[str, int] = field(default_factory=dict)

    def string(self, value: str) -> int:
        return self.strings.setdefault(value, len(self.strings) + 1000)

    def kernel(
        self,
        pid: int,
        device: int,
        start: int,
        end: int,
        name: str,
        *,
        corr: int | None = None,
        graph: int | None = None,
    ) -> None:
        """A kernel; `graph`: its graphId (the column is NULL on kernels without one)."""
        if graph is not None:
            self.graph_ids[len(self.kernels)] = graph
        self.kernels.append((start, end, device, gpid(pid), corr, self.string(name)))

    def call(self, pid: int, tid: int, span: tuple[int, int], *, corr: int, name: str) -> None:
        """A runtime or driver API call of this name (cudaGraphLaunch_v10000, ...)."""
        self.calls.append((span[0], span[1], gtid(pid, tid), corr, name))

    def launched(
        self, pid: int, tid: int, at: int, *, corr: int, kernel: tuple[int, int, int, str]
    ) -> None:
        """A kernel (device, start, end, name) launched at `at` by thread `tid` of `pid`."""
        device, start, end, name = kernel
        self.launch(pid, tid, at, corr)
        self.kernel(pid, device, start, end, name, corr=corr)

    def copy(
        self, kind: str, pid: int, device: int, start: int, end: int, *, corr: int | None = None
    ) -> None:
        self.copies.append((kind, start, end, device, gpid(pid), corr))

    def launch(self, pid: int, tid: int, start: int, corr: int) -> None:
        self.launches.append((start, start + 5, gtid(pid, tid), corr))

    def nvtx(
        self,
        pid: int,
        tid: int,
        start: int,
        end: int,
        name: str,
        *,
        payload: object = None,
        json: str | None = None,
    ) -> None:
        """A range; `payload`: its binaryData, `json`: its jsonText."""
        self.ranges.append((start, end, gtid(pid, tid), name, payload, json))

    def write(self, path: Path, seed: int | None = None) -> Path:
        """The export as an SQLite file; `seed`: rows in a shuffled order."""
        path.parent.mkdir(parents=True, exist_ok=True)
        shuffle = random.Random(seed).shuffle if seed is not None else (lambda rows: None)
        with sqlite3.connect(path) as db:
            self._kernels(db, shuffle)
            self._copies(db, shuffle)
            self._runtime(db, shuffle)
            self._nvtx(db, shuffle)
            self._targets(db)
            self._strings(db)  # last: the tables above register their strings
        return path

    def _strings(self, db: sqlite3.Connection) -> None:
        db.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
        db.executemany(
            "INSERT INTO StringIds VALUES (?, ?)", [(i, v) for v, i in self.strings.items()]
        )

    def _kernels(self, db: sqlite3.Connection, shuffle: object) -> None:
        names = (
            "shortName INTEGER NOT NULL"
            if self.older
            else ("demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL")
        )
        db.execute(
            f"CREATE TABLE {self.kernel_table} (start INTEGER NOT NULL, end INTEGER NOT NULL, "
            "deviceId INTEGER NOT NULL, contextId INTEGER, streamId INTEGER, correlationId "
            f"INTEGER, globalPid INTEGER, {names}, gridX INTEGER, graphNodeId INTEGER, "
            "graphId INTEGER)"
        )
        rows = [(*row, self.graph_ids.get(i)) for i, row in enumerate(self.kernels)]
        shuffle(rows)  # type: ignore[operator]
        named = "shortName" if self.older else "demangledName, shortName"
        columns = f"start, end, deviceId, globalPid, correlationId, graphId, {named}"
        marks = ", ".join("?" * (7 if self.older else 8))
        values = [(s, e, d, g, c, i, n) if self.older else (s, e, d, g, c, i, n, n)
                  for s, e, d, g, c, n, i in rows]  # fmt: skip
        db.executemany(f"INSERT INTO {self.kernel_table} ({columns}) VALUES ({marks})", values)

    def _copies(self, db: sqlite3.Connection, shuffle: object) -> None:
        for kind in ("MEMCPY", "MEMSET"):
            table = f"CUPTI_ACTIVITY_KIND_{kind}"
            db.execute(
                f"CREATE TABLE {table} (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId "
                "INTEGER NOT NULL, streamId INTEGER, globalPid INTEGER, bytes INTEGER, "
                "correlationId INTEGER)"
            )
            rows = [c[1:] for c in self.copies if c[0] == kind.lower()]
            shuffle(rows)  # type: ignore[operator]
            db.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, 7, ?, 64, ?)", rows)

    def _runtime(self, db: sqlite3.Connection, shuffle: object) -> None:
        db.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT "
            "NULL, eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER "
            "NOT NULL, returnValue INTEGER)"
        )
        launch = self.string("cudaLaunchKernel_v7000")
        rows = [(*row, launch) for row in self.launches]
        rows += [(s, e, t, c, self.string(n)) for s, e, t, c, n in self.calls]
        shuffle(rows)  # type: ignore[operator]
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0)", rows)

    def _nvtx(self, db: sqlite3.Connection, shuffle: object) -> None:
        rows = list(self.ranges)
        shuffle(rows)  # type: ignore[operator]
        if self.older:
            db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, "
                       "eventType INTEGER NOT NULL, text TEXT, globalTid INTEGER)")  # fmt: skip
            db.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?)",
                           [(s, e, n, t) for s, e, t, n, _, _ in rows])  # fmt: skip
            return
        db.execute(
            "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER "
            "NOT NULL, text TEXT, globalTid INTEGER, textId INTEGER, domainId INTEGER, "
            "jsonTextId INTEGER, jsonText TEXT, binaryData TEXT)"
        )
        db.executemany(  # NCCL's ranges name a registered string (textId), PyTorch's use text
            "INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, ?, ?, NULL, ?, ?)",
            [(s, e, None, t, self.string(n), DOMAIN, j, b) if n.startswith("nccl") and ":" not in n
             else (s, e, n, t, None, 0, j, b) for s, e, t, n, b, j in rows],
        )  # fmt: skip
        self._schemas(db)

    def _schemas(self, db: sqlite3.Connection) -> None:
        """The chosen NCCL version's schemas, in the real export's columns, written twice
        (the real export writes them once per process)."""
        db.execute(
            "CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INTEGER, schemaId INTEGER, name TEXT, "
            "type INTEGER, flags INTEGER, numEntries INTEGER, payloadSize INTEGER, "
            "alignTo INTEGER)"
        )
        db.execute(
            "CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER NOT NULL, schemaId "
            "INTEGER NOT NULL, idx INTEGER NOT NULL, flags INTEGER, type INTEGER, name TEXT, "
            "description TEXT, arrayOrUnionDetail INTEGER, offset INTEGER)"
        )
        entries, sizes = schema_rows(self.nccl)
        db.executemany(  # type 1: NVTX_PAYLOAD_SCHEMA_TYPE_STATIC
            "INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (?, ?, NULL, 1, NULL, NULL, ?, NULL)",
            sizes + sizes,
        )
        db.executemany(  # entries as (domain, schema, idx, name, type, offset)
            "INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId, schemaId, idx, name, type, "
            "offset) VALUES (?, ?, ?, ?, ?, ?)",
            entries + entries,
        )

    def _targets(self, db: sqlite3.Connection) -> None:
        if self.session:
            db.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, "
                       "utcTime TEXT, localTime TEXT, systemClockNs INTEGER)")  # fmt: skip
            db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '', ?)",
                       (SESSION_UTC_NS, SESSION_CLOCK_NS))  # fmt: skip
        if self.hosts:
            db.execute("CREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName "
                       "TEXT, name TEXT, nameEnum INTEGER, value TEXT)")  # fmt: skip
            rows = [(vid, "Local (CLI)", "Hostname", 619, h) for vid, h in self.hosts.items()]
            rows.append((1 << 48, "Local (CLI)", "CpuCores", 1, "18"))
            db.executemany("INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (?, ?, ?, ?, ?)", rows)
        if self.nics:
            db.execute("CREATE TABLE TARGET_INFO_NIC_INFO (GUID INTEGER, nicId INTEGER, "
                       "name TEXT, deviceId INTEGER, vendorId INTEGER)")  # fmt: skip
            rows = [(i, i, f"mlx5_{i}", d, v) for i, (v, d) in enumerate(self.nics)]
            db.executemany("INSERT INTO TARGET_INFO_NIC_INFO VALUES (?, ?, ?, ?, ?)", rows)
        if self.gpus:
            db.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, cudaId INTEGER, name TEXT)")
            db.executemany("INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?)",
                           [(d, d, n) for d, n in self.gpus.items()])  # fmt: skip
