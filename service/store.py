"""The aggregator's durable state (shell: files, fsync).

- `journal/<n>.log`: one append-only journal in segments of about `_SEGMENT_BYTES`, of frames
  (a 4-byte length, then a msgpack `JournalEntry`): each record of a stream that has not
  ended, as received; each finished file's result; and a mark when a stream's records (and
  result) are dropped. `sync` makes all that was appended since the last one durable with
  ONE fsync (and one of the folder when it began a segment): the aggregator calls it once a
  drain, before that drain's acknowledgements go out. A frame torn by a crash was never
  acknowledged: reading stops there and cuts it off.
- Opening the store reads the journal once into an index (where each open stream's records
  and each finished result are); results are read back from their segment when asked for.
  A segment is deleted, oldest first, once nothing in it is live (a record of an open
  stream, a result not dropped); the records of finished streams in a segment that still
  holds results stay on disk until the folder is removed (they are the wire's bytes: ~0.5%
  of the traces').
- `nodes.msgpack`: the collectors seen and whether each has sent end-of-run; `ended_by.msgpack`
  which collector instance ended each (absent in folders written before it: none known);
  `retired.msgpack` the superseded streams; `ended.msgpack` (a `RunEnd`) once the final
  reports are written (each written atomically: temp file + fsync + rename).
- `version.msgpack`: the format of the folder (`schema.STORE_VERSION`). A folder without it
  is version 1 (a log and a result file per stream, samples as lists of floats); versions 1
  to 3 are migrated in place, explicitly, one version at a time (3 to 4: drop reasons keyed);
  a folder from a newer commscope is refused. A stored result that does not fit its format is
  logged and dropped (a whole file of version 1 or 2 is moved to `rejected/`), never fatal.

A restart replays the results and the open streams' records: nothing acknowledged is lost,
nothing is applied twice.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import struct
import threading
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, NamedTuple, TypeVar

import msgspec
from commscope.collector.atomic import write_atomic
from commscope.model.errors import ProtocolError
from commscope.model.schema import (
    STORE_VERSION,
    EndedBy,
    FinishedFile,
    JournalEntry,
    JournalKind,
    Nodes,
    Retired,
    RunEnd,
    StateVersion,
)
from commscope.pipeline.oldreasons import upgrade_stats
from commscope.pipeline.stats import add_sample
from msgspec.structs import replace

log = logging.getLogger("commscope.store")

_LENGTH: Final = struct.Struct("<I")
_DECODER: Final = msgspec.msgpack.Decoder(FinishedFile)
_ENTRY: Final = msgspec.msgpack.Decoder(JournalEntry)
_ENCODER: Final = msgspec.msgpack.Encoder()
_SAMPLES: Final = ("algbw_Bps", "busbw_Bps")
_SEGMENT_BYTES: Final = 64 * 2**20
ENDED: Final = "ended.msgpack"
T = TypeVar("T")


class At(NamedTuple):
    """Where an entry's frame is: its segment, the offset of its body, the body's length."""

    segment: int
    offset: int
    length: int


class Store:
    def __init__(self, root: Path, segment_bytes: int = _SEGMENT_BYTES) -> None:
        self.root = root
        self._journal = root / "journal"
        self.migrated_from = _migrate(root)
        self._segment_bytes = segment_bytes
        self._results: dict[str, At] = {}
        self._records: dict[str, list[At]] = {}
        self._live: Counter[int] = Counter()  # live entries a segment
        self._segments: list[int] = []  # on disk, oldest first
        self._handle: BinaryIO | None = None  # the last segment, open for appending
        self._dirty = self._created = False  # appended / a segment begun since the last sync
        # `load` is also called from the thread building a report: a read is never beside a
        # write, a segment's close or deletion, or a change of the index.
        self._lock = threading.Lock()
        for segment in _segment_numbers(self._journal):
            self._index(segment)

    # ---- reading back
    def finished(self) -> Iterator[FinishedFile]:
        for stream in sorted(self._results):
            item = self.load(stream)
            if item is not None:
                yield item

    def load(self, stream: str) -> FinishedFile | None:
        """One finished file as stored (None if it is not, or it does not decode: dropped)."""
        with self._lock:
            at = self._results.get(stream)
            if at is None:
                return None
            try:
                return _DECODER.decode(_entry(self._read(at)).data)
            except msgspec.DecodeError as exc:  # ValidationError included
                log.warning("stored result dropped", extra={"stream": stream, "reason": str(exc)})
                self._kill_result(stream)
                return None

    def logs(self) -> Iterator[tuple[str, Iterator[bytes]]]:
        """Each open stream's records, in the order they were appended, by stream id."""
        for stream in sorted(self._records):
            places = list(self._records[stream])
            yield stream, (self._record(at) for at in places)

    def _record(self, at: At) -> bytes:
        with self._lock:
            return _entry(self._read(at)).data

    def _read(self, at: At) -> bytes:
        if self._handle is not None and at.segment == self._segments[-1]:
            self._handle.flush()
        with self._path(at.segment).open("rb") as handle:
            handle.seek(at.offset)
            return handle.read(at.length)

    def nodes(self) -> Nodes:
        path = self.root / "nodes.msgpack"
        if not path.exists():
            return {}
        return _read_file(path, self.root, msgspec.msgpack.Decoder(Nodes).decode) or {}

    def retired(self) -> Retired:
        path = self.root / "retired.msgpack"
        if not path.exists():
            return []
        return _read_file(path, self.root, msgspec.msgpack.Decoder(Retired).decode) or []

    def log_bytes(self) -> int:
        """The journal's frames of the records of streams still open."""
        return sum(_LENGTH.size + at.length for places in self._records.values() for at in places)

    def open_handles(self) -> int:
        return 0 if self._handle is None else 1

    # ---- writing (durable at the next `sync`)
    def append(self, stream: str, payload: bytes) -> None:
        self._write(JournalEntry(kind="record", stream=stream, data=payload))

    def finish(self, item: FinishedFile) -> None:
        """A stream's result; its records are dropped with it."""
        self._write(JournalEntry(kind="finished", stream=item.stream, data=_ENCODER.encode(item)))

    def forget(self, stream: str, keep_done: bool = False) -> None:
        """Drop a stream's records (and, for a superseded stream, its result)."""
        if stream in self._records or (not keep_done and stream in self._results):
            self._write(JournalEntry(kind="forget_log" if keep_done else "forget", stream=stream))

    def _write(self, entry: JournalEntry) -> None:
        body = _ENCODER.encode(entry)
        with self._lock:
            handle = self._appending()
            handle.write(_LENGTH.pack(len(body)))
            self._apply(entry, At(self._segments[-1], handle.tell(), len(body)))
            handle.write(body)
            self._dirty = True

    def _appending(self) -> BinaryIO:
        """The last segment, open for appending (a new one once it has `segment_bytes`)."""
        if self._handle is not None and self._handle.tell() < self._segment_bytes:
            return self._handle
        if self._handle is not None:
            self._close_segment()
        self._segments.append(self._segments[-1] + 1 if self._segments else 0)
        self._handle = self._path(self._segments[-1]).open("ab")
        self._created = True
        return self._handle

    def sync(self) -> None:
        """Make every entry written so far durable (before acknowledging what they hold): one
        fsync of the journal, and one of its folder if a segment was begun since the last."""
        if self._dirty and self._handle is not None:
            with self._lock:
                self._handle.flush()
            os.fsync(self._handle.fileno())
        if self._created:
            _fsync_folder(self._journal)
        self._dirty = self._created = False
        with self._lock:
            self._delete_dead()

    def _close_segment(self) -> None:
        """Close the last segment, durable first (its successor must not be durable alone)."""
        assert self._handle is not None
        if self._dirty:
            self._handle.flush()
            os.fsync(self._handle.fileno())
        self._handle.close()
        self._handle = None

    def _delete_dead(self) -> None:
        """Delete segments, oldest first, with nothing live in them (never the last one)."""
        while len(self._segments) > 1 and not self._live[self._segments[0]]:
            self._path(self._segments.pop(0)).unlink(missing_ok=True)

    def save_retired(self, streams: set[str]) -> None:
        write_atomic(self.root / "retired.msgpack", msgspec.msgpack.encode(sorted(streams)))

    def save_nodes(self, nodes: dict[str, bool], ended_by: dict[str, str] | None = None) -> None:
        """The nodes seen and whether each ended; with `ended_by`, also which collector
        instance ended each (so a resent Hello of that instance is known after a restart)."""
        write_atomic(self.root / "nodes.msgpack", msgspec.msgpack.encode(nodes))
        if ended_by is not None:
            write_atomic(self.root / "ended_by.msgpack", msgspec.msgpack.encode(ended_by))

    def save_end(self, end: RunEnd) -> None:
        """The run is over, its final reports written (`run_end` reads it back)."""
        write_atomic(self.root / ENDED, msgspec.msgpack.encode(end))

    def ended_by(self) -> EndedBy:
        path = self.root / "ended_by.msgpack"
        if not path.exists():
            return {}
        return _read_file(path, self.root, msgspec.msgpack.Decoder(EndedBy).decode) or {}

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None

    # ---- the index
    def _index(self, segment: int) -> None:
        """Read one segment into the index (a torn or undecodable tail is cut off)."""
        self._segments.append(segment)
        for at, entry in _entries(self._path(segment), segment):
            self._apply(entry, at)

    def _apply(self, entry: JournalEntry, at: At) -> None:
        kind: JournalKind = entry.kind
        if kind == "record":
            self._records.setdefault(entry.stream, []).append(at)
            self._live[at.segment] += 1
            return
        for place in self._records.pop(entry.stream, ()):
            self._live[place.segment] -= 1
        if kind in ("finished", "forget"):
            self._kill_result(entry.stream)
        if kind == "finished":
            self._results[entry.stream] = at
            self._live[at.segment] += 1

    def _kill_result(self, stream: str) -> None:
        old = self._results.pop(stream, None)
        if old is not None:
            self._live[old.segment] -= 1

    def _path(self, segment: int) -> Path:
        return self._journal / f"{segment:08d}.log"


def _segment_numbers(journal: Path) -> list[int]:
    return sorted(int(p.stem) for p in journal.glob("*.log") if p.stem.isdigit())


def _entries(path: Path, segment: int) -> Iterator[tuple[At, JournalEntry]]:
    """A segment's entries in order; the file is cut at the first frame torn or undecodable."""
    offset = 0
    frames = _frames(path)
    for body in frames:
        try:
            entry = _ENTRY.decode(body)
        except msgspec.DecodeError as exc:
            frames.close()
            log.warning("journal cut", extra={"segment": str(path), "reason": str(exc)})
            with path.open("r+b") as handle:
                handle.truncate(offset)
            return
        yield At(segment, offset + _LENGTH.size, len(body)), entry
        offset += _LENGTH.size + len(body)


def _entry(body: bytes) -> JournalEntry:
    return _ENTRY.decode(body)


def run_end(root: Path) -> RunEnd | None:
    """The run whose state folder is `root` is over (its final reports written), or None:
    read without opening the journal."""
    path = root / ENDED
    if not path.exists():
        return None
    return _read_file(path, root, msgspec.msgpack.Decoder(RunEnd).decode)


def _fsync_folder(folder: Path) -> None:
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _read_file(path: Path, root: Path, decode: Callable[[bytes], T]) -> T | None:
    """A stored file decoded; one that does not decode is moved to `rejected/`."""
    try:
        return decode(path.read_bytes())
    except msgspec.DecodeError as exc:  # ValidationError included
        _reject(path, root / "rejected", str(exc))
        return None


# ---------------------------------------------------------------- versions and migrations


def _migrate(root: Path) -> int | None:
    """Bring the state folder to STORE_VERSION (a new one starts there); the version it was
    found at when it had to be migrated, else None."""
    found = state_version(root)
    (root / "journal").mkdir(parents=True, exist_ok=True)
    if found == 0:
        _write_version(root, STORE_VERSION)
        return None
    for version in range(found, STORE_VERSION):
        _MIGRATIONS[version](root)
        _write_version(root, version + 1)
    for folder in ("open", "done"):  # version 2's, once version 3 is written
        shutil.rmtree(root / folder, ignore_errors=True)
    if found == STORE_VERSION:
        return None
    log.warning("state migrated", extra={"state": str(root), "from": found, "to": STORE_VERSION})
    return found


def _write_version(root: Path, version: int) -> None:
    write_atomic(root / "version.msgpack", msgspec.msgpack.encode(StateVersion(version=version)))


def state_version(root: Path) -> int:
    """The folder's format: 0 for an empty or new folder, 1 for one without `version.msgpack`."""
    path = root / "version.msgpack"
    if path.exists():
        try:
            version = msgspec.msgpack.decode(path.read_bytes(), type=StateVersion).version
        except msgspec.DecodeError as exc:
            raise ProtocolError(f"{path}: not a state version ({exc})") from None
        if not 1 <= version <= STORE_VERSION:
            raise ProtocolError(
                f"{root}: state version {version} (this commscope reads 1 to {STORE_VERSION})"
            )
        return version
    if not root.exists() or not any(root.iterdir()):
        return 0
    return 1


def _v1_to_v2(root: Path) -> None:
    """Version 1 → 2: samples packed; every file checked against the bounded schema (a file
    that does not fit is moved to `rejected/`, a node name or stream id that does not fit
    is dropped, each logged)."""
    rejected = root / "rejected"
    for path in sorted((root / "done").glob("*.msgpack")):
        _rewrite(path, rejected, _v1_finished)
    for name, kind in (("nodes.msgpack", Nodes), ("retired.msgpack", Retired)):
        path = root / name
        if path.exists():
            _rewrite(path, rejected, functools.partial(_fitting, kind=kind))


def _v2_to_v3(root: Path) -> None:
    """Version 2 → 3: each `done/<stream>.msgpack` and `open/<stream>.log` into one journal
    segment, made durable before the version is written (the old files are deleted after
    it; a migration cut short starts again from them)."""
    journal = root / "journal"
    shutil.rmtree(journal, ignore_errors=True)
    journal.mkdir()
    with (journal / f"{0:08d}.log").open("wb") as handle:
        for path in sorted((root / "done").glob("*.msgpack")):
            if _fits([path.stem], Retired) and _read_file(path, root, _keyed_result) is not None:
                _put(
                    handle, JournalEntry(kind="finished", stream=path.stem, data=path.read_bytes())
                )
        for path in sorted((root / "open").glob("*.log")):
            for frame in _frames(path) if _fits([path.stem], Retired) else ():
                _put(handle, JournalEntry(kind="record", stream=path.stem, data=frame))
        handle.flush()
        os.fsync(handle.fileno())
    _fsync_folder(journal)


def _v3_to_v4(root: Path) -> None:
    """Version 3 → 4: the drop reasons of every result and end record in the journal under
    their snake_case keys (`oldreasons`); a segment holding one is rewritten atomically."""
    journal = root / "journal"
    for segment in _segment_numbers(journal):
        path = journal / f"{segment:08d}.log"
        entries = [entry for _, entry in _entries(path, segment)]
        keyed = [replace(entry, data=_keyed(entry.data)) for entry in entries]
        if keyed != entries:
            write_atomic(path, b"".join(_framed(entry) for entry in keyed))


def _keyed(body: bytes) -> bytes:
    """A stored result or record (msgpack) with its old drop reasons under their keys; as it
    was when it has none (or is not msgpack: the journal's reader judges it)."""
    try:
        raw = msgspec.msgpack.decode(body)
    except msgspec.DecodeError:
        return body
    return msgspec.msgpack.encode(raw) if upgrade_stats(raw) else body


def _keyed_result(body: bytes) -> FinishedFile:
    return _DECODER.decode(_keyed(body))


def _put(handle: BinaryIO, entry: JournalEntry) -> None:
    handle.write(_framed(entry))


def _framed(entry: JournalEntry) -> bytes:
    body = _ENCODER.encode(entry)
    return _LENGTH.pack(len(body)) + body


def _rewrite(path: Path, rejected: Path, convert: Callable[[Any], Any]) -> None:
    try:
        item = convert(msgspec.msgpack.decode(path.read_bytes()))
    except msgspec.DecodeError as exc:  # ValidationError included
        _reject(path, rejected, str(exc))
        return
    write_atomic(path, msgspec.msgpack.encode(item))


def _v1_finished(raw: Any) -> FinishedFile:
    """A version-1 finished file: bandwidth samples were lists of floats, now packed."""
    result = raw.get("result") if isinstance(raw, dict) else None
    ops = result.get("ops") if isinstance(result, dict) else None
    for tally in ops.values() if isinstance(ops, dict) else ():
        for key in _SAMPLES if isinstance(tally, dict) else ():
            if isinstance(tally.get(key), list):
                tally[key] = _packed(tally[key])
    upgrade_stats(raw)
    return msgspec.convert(raw, FinishedFile)


def _fitting(raw: Any, kind: Any) -> Any:
    """The entries of a version-1 node map or stream list that fit the bounded types."""
    if kind is Nodes and isinstance(raw, dict):
        raw = {k: v for k, v in raw.items() if _fits(k, Nodes)}
    if kind is Retired and isinstance(raw, list):
        raw = [s for s in raw if _fits([s], Retired)]
    return msgspec.convert(raw, kind)


def _fits(value: Any, kind: Any) -> bool:
    probe = {value: True} if kind is Nodes else value
    try:
        msgspec.convert(probe, kind)
    except msgspec.ValidationError:
        log.warning("state entry dropped", extra={"entry": repr(value)[:200]})
        return False
    return True


def _reject(path: Path, rejected: Path, reason: str) -> None:
    rejected.mkdir(exist_ok=True)
    os.replace(path, rejected / path.name)
    log.warning("state file rejected", extra={"path": str(path), "reason": reason[:500]})


_MIGRATIONS: Final[dict[int, Callable[[Path], None]]] = {
    1: _v1_to_v2,
    2: _v2_to_v3,
    3: _v3_to_v4,
}


def _packed(values: list[float]) -> bytearray:
    packed = bytearray()
    for value in values:
        add_sample(packed, value)
    return packed


def _frames(path: Path) -> Generator[bytes, None, None]:
    """The whole records of a log, in order; a torn last record is cut off the file."""
    with path.open("r+b") as handle:
        good = 0
        while True:
            head = handle.read(_LENGTH.size)
            body = handle.read(_LENGTH.unpack(head)[0]) if len(head) == _LENGTH.size else b""
            if len(head) < _LENGTH.size or len(body) < _LENGTH.unpack(head)[0]:
                break
            good += _LENGTH.size + len(body)
            yield body
        handle.truncate(good)
