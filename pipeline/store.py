"""The aggregator's durable state (shell: files, fsync).

- `open/<stream>.log`: the records of a stream that has not ended, as received (a 4-byte
  length, then the msgpack bytes), appended and fsynced before they are acknowledged. A
  record torn by a crash was never acknowledged: replay stops there and cuts it off.
- `done/<stream>.msgpack`: a finished file's result, written atomically (temp file + fsync +
  rename); its log is deleted afterwards.
- `nodes.msgpack`: the collectors seen and whether each has sent end-of-run.

A restart replays `done/` and the logs: nothing acknowledged is lost, nothing is applied twice.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Final

import msgspec
from commscope.collector.atomic import write_atomic
from commscope.collector.discover import file_size
from commscope.collector.schema import FinishedFile
from commscope.pipeline.stats import add_sample

_LENGTH: Final = struct.Struct("<I")
_DECODER: Final = msgspec.msgpack.Decoder(FinishedFile)
_SAMPLES: Final = ("algbw_Bps", "busbw_Bps")


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._open = root / "open"
        self._done = root / "done"
        for folder in (self._open, self._done):
            folder.mkdir(parents=True, exist_ok=True)
        self._logs: dict[str, BinaryIO] = {}
        self._dirty: set[str] = set()

    # ---- reading back
    def finished(self) -> Iterator[FinishedFile]:
        for path in sorted(self._done.glob("*.msgpack")):
            yield _decode(path.read_bytes())

    def load(self, stream: str) -> FinishedFile | None:
        """One finished file as stored (None if it is not)."""
        path = self._done / f"{stream}.msgpack"
        if not path.exists():
            return None
        return _decode(path.read_bytes())

    def logs(self) -> Iterator[tuple[str, Iterator[bytes]]]:
        """Each open stream's records (read each iterator to its end: it mends a torn tail)."""
        for path in sorted(self._open.glob("*.log")):
            yield path.stem, _frames(path)

    def nodes(self) -> dict[str, bool]:
        path = self.root / "nodes.msgpack"
        if not path.exists():
            return {}
        return msgspec.msgpack.decode(path.read_bytes(), type=dict[str, bool])

    # ---- writing
    def append(self, stream: str, payload: bytes) -> None:
        log = self._logs.get(stream)
        if log is None:
            log = self._logs[stream] = (self._open / f"{stream}.log").open("ab")
        log.write(_LENGTH.pack(len(payload)))
        log.write(payload)
        self._dirty.add(stream)

    def sync(self) -> None:
        """Make every appended record durable (before acknowledging them)."""
        for stream in sorted(self._dirty):
            log = self._logs[stream]
            log.flush()
            os.fsync(log.fileno())
        self._dirty.clear()

    def finish(self, item: FinishedFile) -> None:
        write_atomic(self._done / f"{item.stream}.msgpack", msgspec.msgpack.encode(item))
        self.forget(item.stream, keep_done=True)

    def forget(self, stream: str, keep_done: bool = False) -> None:
        """Remove a stream's log (and, for a superseded stream, its result)."""
        log = self._logs.pop(stream, None)
        if log is not None:
            log.close()
        self._dirty.discard(stream)
        (self._open / f"{stream}.log").unlink(missing_ok=True)
        if not keep_done:
            (self._done / f"{stream}.msgpack").unlink(missing_ok=True)

    def retired(self) -> list[str]:
        path = self.root / "retired.msgpack"
        if not path.exists():
            return []
        return msgspec.msgpack.decode(path.read_bytes(), type=list[str])

    def save_retired(self, streams: set[str]) -> None:
        write_atomic(self.root / "retired.msgpack", msgspec.msgpack.encode(sorted(streams)))

    def save_nodes(self, nodes: dict[str, bool]) -> None:
        write_atomic(self.root / "nodes.msgpack", msgspec.msgpack.encode(nodes))

    def log_bytes(self) -> int:
        return sum(file_size(p) for p in self._open.glob("*.log"))

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()


def _decode(data: bytes) -> FinishedFile:
    """A stored finished file; one written before bandwidth samples were packed (lists of
    floats) is read as it was and its samples packed."""
    try:
        return _DECODER.decode(data)
    except msgspec.ValidationError:
        raw = msgspec.msgpack.decode(data)
        result = raw.get("result") if isinstance(raw, dict) else None
        for tally in (result or {}).get("ops", {}).values():
            for key in _SAMPLES:
                if isinstance(tally.get(key), list):
                    tally[key] = _packed(tally[key])
        return msgspec.convert(raw, FinishedFile)


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
