"""The aggregator's durable state (shell: files, fsync).

- `open/<stream>.log`: the records of a stream that has not ended, as received (a 4-byte
  length, then the msgpack bytes), appended and fsynced before they are acknowledged. A
  record torn by a crash was never acknowledged: replay stops there and cuts it off.
- `done/<stream>.msgpack`: a finished file's result, written atomically (temp file + fsync +
  rename); its log is deleted afterwards.
- `nodes.msgpack`: the collectors seen and whether each has sent end-of-run.
- `version.msgpack`: the format of the folder (`schema.STATE_VERSION`). A folder without it
  is version 1 (the same files, unchecked, samples as lists of floats) and is migrated in
  place, explicitly, one version at a time; a folder from a newer commscope is refused. A
  stored file that does not fit its format is moved to `rejected/` and logged, never fatal.

A restart replays `done/` and the logs: nothing acknowledged is lost, nothing is applied twice.
At most `max_handles` logs are open at once (least recently used closed first, fsynced if
dirty), however many streams are open.
"""

from __future__ import annotations

import functools
import logging
import os
import struct
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Final, TypeVar

import msgspec
from commscope.collector.atomic import write_atomic
from commscope.collector.discover import file_size
from commscope.collector.errors import ProtocolError
from commscope.collector.schema import (
    STATE_VERSION,
    FinishedFile,
    Nodes,
    Retired,
    StateVersion,
)
from commscope.pipeline.stats import add_sample

log = logging.getLogger("commscope.store")

_LENGTH: Final = struct.Struct("<I")
_DECODER: Final = msgspec.msgpack.Decoder(FinishedFile)
_SAMPLES: Final = ("algbw_Bps", "busbw_Bps")
MAX_HANDLES: Final = 64
T = TypeVar("T")


class Store:
    def __init__(self, root: Path, max_handles: int = MAX_HANDLES) -> None:
        self.root = root
        self._open = root / "open"
        self._done = root / "done"
        self._rejected = root / "rejected"
        self.migrated_from = migrate(root)
        self._logs: OrderedDict[str, BinaryIO] = OrderedDict()
        self._max_handles = max_handles
        self._dirty: set[str] = set()

    # ---- reading back
    def finished(self) -> Iterator[FinishedFile]:
        for path in sorted(self._done.glob("*.msgpack")):
            item = self._read(path, _DECODER.decode)
            if item is not None:
                yield item

    def load(self, stream: str) -> FinishedFile | None:
        """One finished file as stored (None if it is not)."""
        path = self._done / f"{stream}.msgpack"
        if not path.exists():
            return None
        return self._read(path, _DECODER.decode)

    def _read(self, path: Path, decode: Callable[[bytes], T]) -> T | None:
        """A stored file decoded; one that does not decode is moved to `rejected/`."""
        try:
            return decode(path.read_bytes())
        except msgspec.DecodeError as exc:  # ValidationError included
            _reject(path, self._rejected, str(exc))
            return None

    def logs(self) -> Iterator[tuple[str, Iterator[bytes]]]:
        """Each open stream's records (read each iterator to its end: it mends a torn tail)."""
        for path in sorted(self._open.glob("*.log")):
            yield path.stem, _frames(path)

    def nodes(self) -> Nodes:
        path = self.root / "nodes.msgpack"
        if not path.exists():
            return {}
        return self._read(path, msgspec.msgpack.Decoder(Nodes).decode) or {}

    # ---- writing
    def append(self, stream: str, payload: bytes) -> None:
        handle = self._handle(stream)
        handle.write(_LENGTH.pack(len(payload)))
        handle.write(payload)
        self._dirty.add(stream)

    def _handle(self, stream: str) -> BinaryIO:
        """The stream's log, open for appending; the least recently used one is closed (made
        durable first) when more than `max_handles` would be open."""
        handle = self._logs.get(stream)
        if handle is not None:
            self._logs.move_to_end(stream)
            return handle
        while len(self._logs) >= self._max_handles:
            self._close(next(iter(self._logs)))
        handle = self._logs[stream] = (self._open / f"{stream}.log").open("ab")
        return handle

    def _close(self, stream: str) -> None:
        handle = self._logs.pop(stream, None)
        if handle is None:
            return
        if stream in self._dirty:
            handle.flush()
            os.fsync(handle.fileno())
            self._dirty.discard(stream)
        handle.close()

    def open_handles(self) -> int:
        return len(self._logs)

    def sync(self) -> None:
        """Make every appended record durable (before acknowledging them)."""
        for stream in sorted(self._dirty):
            handle = self._logs[stream]
            handle.flush()
            os.fsync(handle.fileno())
        self._dirty.clear()

    def finish(self, item: FinishedFile) -> None:
        write_atomic(self._done / f"{item.stream}.msgpack", msgspec.msgpack.encode(item))
        self.forget(item.stream, keep_done=True)

    def forget(self, stream: str, keep_done: bool = False) -> None:
        """Remove a stream's log (and, for a superseded stream, its result)."""
        handle = self._logs.pop(stream, None)
        if handle is not None:
            handle.close()
        self._dirty.discard(stream)
        (self._open / f"{stream}.log").unlink(missing_ok=True)
        if not keep_done:
            (self._done / f"{stream}.msgpack").unlink(missing_ok=True)

    def retired(self) -> Retired:
        path = self.root / "retired.msgpack"
        if not path.exists():
            return []
        return self._read(path, msgspec.msgpack.Decoder(Retired).decode) or []

    def save_retired(self, streams: set[str]) -> None:
        write_atomic(self.root / "retired.msgpack", msgspec.msgpack.encode(sorted(streams)))

    def save_nodes(self, nodes: dict[str, bool]) -> None:
        write_atomic(self.root / "nodes.msgpack", msgspec.msgpack.encode(nodes))

    def log_bytes(self) -> int:
        return sum(file_size(p) for p in self._open.glob("*.log"))

    def close(self) -> None:
        for handle in self._logs.values():
            handle.close()
        self._logs.clear()


# ---------------------------------------------------------------- versions and migrations


def migrate(root: Path) -> int | None:
    """Bring the state folder to STATE_VERSION (a new one starts there); the version it was
    found at when it had to be migrated, else None."""
    found = state_version(root)
    for folder in ("open", "done"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    if found == 0:
        _write_version(root, STATE_VERSION)
        return None
    for version in range(found, STATE_VERSION):
        MIGRATIONS[version](root)
        _write_version(root, version + 1)
    if found == STATE_VERSION:
        return None
    log.warning("state migrated", extra={"state": str(root), "from": found, "to": STATE_VERSION})
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
        if not 1 <= version <= STATE_VERSION:
            raise ProtocolError(
                f"{root}: state version {version} (this commscope reads 1 to {STATE_VERSION})"
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


MIGRATIONS: Final[dict[int, Callable[[Path], None]]] = {1: _v1_to_v2}


def _packed(values: list[float]) -> bytearray:
    packed = bytearray()
    for value in values:
        add_sample(packed, value)
    return packed


def _frames(path: Path) -> Iterator[bytes]:
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
