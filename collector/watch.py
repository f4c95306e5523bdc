"""Noticing trace files as they appear under a folder (shell: filesystem, inotify, clock).

A `Watcher` reports each `*.json` / `*.json.gz` regular file under its root once, when first
seen, and again only if the name comes to hold a different file (new device and inode, as
when a finished `.tmp` is renamed over it), or, for a file its source rewrites in place (a
Flight Recorder dump: `sources.is_rewritten`), once its size or modification time changes.
On Linux, inotify watches every folder; a full rescan still runs every `rescan_s` and after
an event-queue overflow, in case an event was missed. Without inotify (other systems, watch
limit reached, or `use_inotify=False`) it rescans every `poll_s`; a file deleted and
re-created with the same inode between two such rescans is then not seen as replaced. A root
that does not exist yet is waited for, polling every `poll_s`.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import math
import os
import select
import stat
import struct
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Final, Literal, NamedTuple

from commscope.collector.discover import is_trace_name
from commscope.collector.sources import is_rewritten

_log = logging.getLogger(__name__)

# <sys/inotify.h>
_IN_MODIFY: Final = 0x2
_IN_CLOSE_WRITE: Final = 0x8
_IN_MOVED_FROM: Final = 0x40
_IN_MOVED_TO: Final = 0x80
_IN_CREATE: Final = 0x100
_IN_DELETE: Final = 0x200
_IN_DELETE_SELF: Final = 0x400
_IN_MOVE_SELF: Final = 0x800
IN_Q_OVERFLOW: Final = 0x4000
_IN_IGNORED: Final = 0x8000
_IN_ONLYDIR: Final = 0x1000000
_IN_DONT_FOLLOW: Final = 0x2000000
_IN_ISDIR: Final = 0x40000000
_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = 0o2000000
_FOLDER_MASK: Final = (
    _IN_CREATE | _IN_MOVED_TO | _IN_CLOSE_WRITE | _IN_MODIFY | _IN_DELETE | _IN_MOVED_FROM
) | (_IN_DELETE_SELF | _IN_MOVE_SELF | _IN_ONLYDIR)
_EVENT: Final = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name
_READ_BYTES: Final = 64 * 1024
_OUT_OF_WATCHES: Final = frozenset({errno.ENOSPC, errno.ENOMEM})

_Identity = tuple[int, ...]  # (st_dev, st_ino), and of a file rewritten in place its size, mtime


class _Event(NamedTuple):
    wd: int
    mask: int
    name: str


def _events(data: bytes) -> Iterator[_Event]:
    """The `struct inotify_event` records packed in one read."""
    pos = 0
    while pos + _EVENT.size <= len(data):
        wd, mask, _, length = _EVENT.unpack_from(data, pos)
        name = data[pos + _EVENT.size : pos + _EVENT.size + length].split(b"\0", 1)[0]
        yield _Event(wd, mask, os.fsdecode(name))
        pos += _EVENT.size + length


class _Inotify:
    """One non-blocking inotify descriptor, through libc; OSError if unavailable."""

    def __init__(self) -> None:
        if not sys.platform.startswith("linux"):
            raise OSError(errno.ENOSYS, "inotify is Linux only")
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = int(self._libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC))
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self._poller = select.poll()
        self._poller.register(self._fd, select.POLLIN)

    def add(self, folder: Path, *, follow: bool) -> int:
        """The watch descriptor for `folder` (the same one if it is already watched)."""
        mask = _FOLDER_MASK if follow else _FOLDER_MASK | _IN_DONT_FOLLOW
        wd = int(self._libc.inotify_add_watch(self._fd, os.fsencode(folder), mask))
        if wd < 0:
            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), str(folder))
        return wd

    def remove(self, wd: int) -> None:
        self._libc.inotify_rm_watch(self._fd, wd)  # fails harmlessly if already gone

    def read(self, timeout_s: float) -> list[_Event]:
        """The events queued within `timeout_s` (at most one read's worth)."""
        if not self._poller.poll(math.ceil(max(timeout_s, 0.0) * 1000)):
            return []
        try:
            return list(_events(os.read(self._fd, _READ_BYTES)))
        except BlockingIOError:
            return []

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _inotify_or_none(wanted: bool) -> _Inotify | None:
    if not wanted:
        return None
    try:
        return _Inotify()
    except (OSError, AttributeError) as exc:  # AttributeError: libc without inotify
        _log.warning("inotify unavailable (%s); watching by polling", exc)
        return None


def _identity(path: Path) -> _Identity | None:
    """(st_dev, st_ino) of a regular file at `path` (and its size and st_mtime_ns when its
    source rewrites it in place), None if it is not one (or vanished)."""
    try:
        info = path.stat()
    except OSError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return None
    if is_rewritten(path.name):
        return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
    return (info.st_dev, info.st_ino)


class Watcher:
    """New and replaced trace files under `root`, reported by `poll`."""

    def __init__(
        self,
        root: Path,
        *,
        poll_s: float = 2.0,
        rescan_s: float = 30.0,
        use_inotify: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._root = root
        self._clock, self._sleep = clock, sleep
        self._poll_s, self._rescan_s = poll_s, rescan_s
        self._inotify = _inotify_or_none(use_inotify)
        self._folders: dict[int, Path] = {}  # watch descriptor -> folder
        self._seen: dict[Path, _Identity] = {}
        self._scanned_at = -math.inf

    @property
    def mode(self) -> Literal["inotify", "polling"]:
        return "polling" if self._inotify is None else "inotify"

    def poll(self, timeout_s: float) -> list[Path]:
        """Trace files new or replaced since the last call (all present ones on the first),
        sorted; waits up to `timeout_s` for one, then returns []."""
        deadline = self._clock() + timeout_s
        found = self._step(deadline)
        while not found and self._clock() < deadline:
            found = self._step(deadline)
        return sorted(found)

    def close(self) -> None:
        if self._inotify is not None:
            self._inotify.close()

    def __enter__(self) -> Watcher:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def _step(self, deadline: float) -> set[Path]:
        """One rescan if due, else wait for events (or sleep) until the deadline or rescan."""
        now, due = self._clock(), self._scanned_at + self._interval()
        if now >= due:
            return self._rescan()
        wait_s = min(deadline, due) - now
        if self._inotify is None:
            self._sleep(max(wait_s, 0.0))
            return set()
        return self._handle(self._inotify.read(wait_s))

    def _interval(self) -> float:
        watching = self._inotify is not None and self._root in self._folders.values()
        return self._rescan_s if watching else self._poll_s

    def _rescan(self) -> set[Path]:
        """Walk the whole tree: report what is new, forget what is gone, unwatch stale folders."""
        self._scanned_at = self._clock()
        folders, files = self._walk(self._root)
        self._seen = {path: seen for path, seen in self._seen.items() if path in files}
        for wd, folder in list(self._folders.items()):
            if folder not in folders:
                self._unwatch(wd)
        return {path for path in files if self._is_new(path)}

    def _scan(self, top: Path) -> set[Path]:
        return {path for path in self._walk(top)[1] if self._is_new(path)}

    def _walk(self, top: Path) -> tuple[set[Path], set[Path]]:
        """The folders and trace-named files under `top`; each folder is watched before it is
        listed, so a file is either listed or announced by an event. Vanished entries are
        skipped."""
        self._watch(top, follow=True)
        folders, files = {top}, set[Path]()
        for folder, subfolders, names in os.walk(top):
            for name in subfolders:  # symbolic links among them are neither walked nor watched
                self._watch(Path(folder, name), follow=False)
                folders.add(Path(folder, name))
            files.update(Path(folder, name) for name in names if is_trace_name(Path(name)))
        return folders, files

    def _is_new(self, path: Path) -> bool:
        """Whether `path` is a trace file not seen before under its current identity."""
        identity = _identity(path) if is_trace_name(path) else None
        if identity is None or self._seen.get(path) == identity:
            return False
        self._seen[path] = identity
        return True

    def _handle(self, events: list[_Event]) -> set[Path]:
        found: set[Path] = set()
        for event in events:
            if event.mask & IN_Q_OVERFLOW:
                self._scanned_at = -math.inf  # rescan at the next step
            else:
                found |= self._handle_one(event)
        return found

    def _handle_one(self, event: _Event) -> set[Path]:
        folder = self._folders.get(event.wd)
        if folder is None:
            return set()  # a watch already dropped
        if event.mask & _IN_IGNORED:
            del self._folders[event.wd]
            return set()
        if event.mask & (_IN_DELETE_SELF | _IN_MOVE_SELF):
            self._forget(folder)
            return set()
        return self._handle_entry(folder / event.name, event.mask)

    def _handle_entry(self, path: Path, mask: int) -> set[Path]:
        """An event about `path`, an entry of a watched folder."""
        gone, folder = mask & (_IN_DELETE | _IN_MOVED_FROM), mask & _IN_ISDIR
        if gone and folder:
            self._forget(path)
        elif gone:
            self._seen.pop(path, None)
        elif folder and mask & (_IN_CREATE | _IN_MOVED_TO):
            return self._scan(path)
        elif not folder and self._is_new(path):
            return {path}
        return set()

    def _forget(self, top: Path) -> None:
        """Drop the watches and seen files of `top` and everything under it."""
        for wd, folder in list(self._folders.items()):
            if folder.is_relative_to(top):
                self._unwatch(wd)
        self._seen = {
            path: seen for path, seen in self._seen.items() if not path.is_relative_to(top)
        }

    def _watch(self, folder: Path, *, follow: bool) -> None:
        if self._inotify is None:
            return
        try:
            self._folders[self._inotify.add(folder, follow=follow)] = folder
        except OSError as exc:  # vanished, not a folder, unreadable: skip; out of watches: poll
            if exc.errno in _OUT_OF_WATCHES:
                self._fall_back(exc)

    def _unwatch(self, wd: int) -> None:
        if self._inotify is not None:
            self._inotify.remove(wd)
        del self._folders[wd]

    def _fall_back(self, exc: OSError) -> None:
        _log.warning("%s: cannot add an inotify watch (%s); watching by polling", self._root, exc)
        self.close()
        self._inotify = None
        self._folders.clear()
