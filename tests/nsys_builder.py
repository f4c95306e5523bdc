"""Hand-made Nsight Systems SQLite exports for tests: the tables and columns of a real export
(Nsight Systems 2026.2, export schema 3.25: `../shared/traces/nsys`), or an older layout
(`CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL`, kernel names in `shortName` only, NVTX text without
`textId` or payload blobs), holding only what a test puts in. Times in ns on the export's clock.

NCCL's payloads are written as Nsight Systems exports them with `--include-blobs`: a 32-byte
header (schema id at byte 8) and the fields at their schema entries' offsets; the schemas are
NCCL's (`nvtx_payload_schemas.h`): INIT (communicator, rank count, rank, device), COLL
(communicator, message size, reduction op), P2P (communicator, message size, peer).
"""

from __future__ import annotations

import random
import sqlite3
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

INIT, COLL, P2P = 16777218, 16777223, 16777226
_SCHEMAS: Final = {
    INIT: (24, [("NCCL communicator ID", 18, None), ("No. of ranks", 5, 8), ("Rank", 5, 12),
                ("CUDA device", 5, 16)]),
    COLL: (24, [("NCCL communicator ID", 18, None), ("Message size [bytes]", 22, 8),
                ("Reduction operation", 16777232, 16)]),
    P2P: (24, [("NCCL communicator ID", 18, None), ("Message size [bytes]", 22, 8),
               ("Peer rank", 5, 16)]),
}  # fmt: skip
_FORMATS: Final = {18: "<Q", 22: "<Q", 5: "<i", 16777232: "<i"}
SESSION_UTC_NS: Final = 1_779_782_330_176_752_435  # TARGET_INFO_SESSION_START_TIME of the real one
SESSION_CLOCK_NS: Final = 28_254_349_605


def gpid(pid: int) -> int:
    """A serialized global process id (VM 1, as in the real export)."""
    return (1 << 48) | (pid << 24)


def gtid(pid: int, tid: int) -> int:
    return gpid(pid) + tid


def blob(schema: int, **values: int) -> bytes:
    """An NCCL payload of `schema` holding `values` (keyword names: `comm`, `ranks`, `rank`,
    `size`, `peer`)."""
    names = {"comm": "NCCL communicator ID", "ranks": "No. of ranks", "rank": "Rank",
             "size": "Message size [bytes]", "peer": "Peer rank"}  # fmt: skip
    size, entries = _SCHEMAS[schema]
    body = bytearray(size)
    for name, kind, offset in entries:
        key = next((k for k, v in names.items() if v == name), None)
        if key in values:
            struct.pack_into(_FORMATS[kind], body, offset or 0, values[key])
    return struct.pack("<IIIIQQ", 1, 0, schema, 0, size, 32 + size) + bytes(body)


@dataclass
class Export:
    kernel_table: str = "CUPTI_ACTIVITY_KIND_KERNEL"
    older: bool = False  # shortName only, NVTX text only (no textId, no binaryData)
    session: bool = True
    gpus: dict[int, str] = field(default_factory=dict)  # TARGET_INFO_GPU: device -> name
    kernels: list[tuple[object, ...]] = field(default_factory=list)
    copies: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    launches: list[tuple[int, int, int, int]] = field(default_factory=list)
    ranges: list[tuple[int, int, int, str, bytes | None]] = field(default_factory=list)
    strings: dict[str, int] = field(default_factory=dict)

    def string(self, value: str) -> int:
        return self.strings.setdefault(value, len(self.strings) + 1000)

    def kernel(
        self, pid: int, device: int, start: int, end: int, name: str, *, corr: int | None = None
    ) -> None:
        self.kernels.append((start, end, device, gpid(pid), corr, self.string(name)))

    def launched(
        self, pid: int, tid: int, at: int, *, corr: int, kernel: tuple[int, int, int, str]
    ) -> None:
        """A kernel (device, start, end, name) launched at `at` by thread `tid` of `pid`."""
        device, start, end, name = kernel
        self.launch(pid, tid, at, corr)
        self.kernel(pid, device, start, end, name, corr=corr)

    def copy(self, kind: str, pid: int, device: int, start: int, end: int) -> None:
        self.copies.append((kind, start, end, device, gpid(pid)))

    def launch(self, pid: int, tid: int, start: int, corr: int) -> None:
        self.launches.append((start, start + 5, gtid(pid, tid), corr))

    def nvtx(
        self, pid: int, tid: int, start: int, end: int, name: str, *, payload: bytes | None = None
    ) -> None:
        self.ranges.append((start, end, gtid(pid, tid), name, payload))

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
            f"INTEGER, globalPid INTEGER, {names}, gridX INTEGER)"
        )
        rows = list(self.kernels)
        shuffle(rows)  # type: ignore[operator]
        named = "shortName" if self.older else "demangledName, shortName"
        columns = f"start, end, deviceId, globalPid, correlationId, {named}"
        marks = ", ".join("?" * (6 if self.older else 7))
        values = [(s, e, d, g, c, n) if self.older else (s, e, d, g, c, n, n)
                  for s, e, d, g, c, n in rows]  # fmt: skip
        db.executemany(f"INSERT INTO {self.kernel_table} ({columns}) VALUES ({marks})", values)

    def _copies(self, db: sqlite3.Connection, shuffle: object) -> None:
        for kind in ("MEMCPY", "MEMSET"):
            table = f"CUPTI_ACTIVITY_KIND_{kind}"
            db.execute(
                f"CREATE TABLE {table} (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId "
                "INTEGER NOT NULL, streamId INTEGER, globalPid INTEGER, bytes INTEGER)"
            )
            rows = [c[1:] for c in self.copies if c[0] == kind.lower()]
            shuffle(rows)  # type: ignore[operator]
            db.executemany(f"INSERT INTO {table} VALUES (?, ?, ?, 7, ?, 64)", rows)

    def _runtime(self, db: sqlite3.Connection, shuffle: object) -> None:
        db.execute(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT "
            "NULL, eventClass INTEGER, globalTid INTEGER, correlationId INTEGER, nameId INTEGER "
            "NOT NULL, returnValue INTEGER)"
        )
        launch = self.string("cudaLaunchKernel_v7000")
        rows = [(*row, launch) for row in self.launches]
        shuffle(rows)  # type: ignore[operator]
        db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0)", rows)

    def _nvtx(self, db: sqlite3.Connection, shuffle: object) -> None:
        rows = list(self.ranges)
        shuffle(rows)  # type: ignore[operator]
        if self.older:
            db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, "
                       "eventType INTEGER NOT NULL, text TEXT, globalTid INTEGER)")  # fmt: skip
            db.executemany("INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?)",
                           [(s, e, n, t) for s, e, t, n, _ in rows])  # fmt: skip
            return
        db.execute(
            "CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER "
            "NOT NULL, text TEXT, globalTid INTEGER, textId INTEGER, domainId INTEGER, "
            "binaryData TEXT)"
        )
        db.executemany(  # NCCL's ranges name a registered string (textId), PyTorch's use text
            "INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, ?, ?, ?, ?, ?)",
            [(s, e, None, t, self.string(n), 1, b) if n.startswith("nccl") and ":" not in n
             else (s, e, n, t, None, 0, b) for s, e, t, n, b in rows],
        )  # fmt: skip
        self._schemas(db)

    def _schemas(self, db: sqlite3.Connection) -> None:
        db.execute(
            "CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER NOT NULL, schemaId "
            "INTEGER NOT NULL, idx INTEGER NOT NULL, flags INTEGER, type INTEGER, name TEXT, "
            "description TEXT, arrayOrUnionDetail INTEGER, offset INTEGER)"
        )
        rows = [(1, schema, idx, kind, name, offset)
                for schema, (_, entries) in _SCHEMAS.items()
                for idx, (name, kind, offset) in enumerate(entries)]  # fmt: skip
        db.executemany(  # written twice, as the real export does
            "INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES (?, ?, ?, NULL, ?, ?, NULL, NULL, ?)",
            rows + rows,
        )

    def _targets(self, db: sqlite3.Connection) -> None:
        if self.session:
            db.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, "
                       "utcTime TEXT, localTime TEXT, systemClockNs INTEGER)")  # fmt: skip
            db.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '', ?)",
                       (SESSION_UTC_NS, SESSION_CLOCK_NS))  # fmt: skip
        if self.gpus:
            db.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, cudaId INTEGER, name TEXT)")
            db.executemany("INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?)",
                           [(d, d, n) for d, n in self.gpus.items()])  # fmt: skip
