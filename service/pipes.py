"""A worker process of `report --jobs` and the frames it speaks over its pipes (shell: reads
and writes pipes).

`parallel.outcomes` starts each worker as `python -P -m commscope.service.pipes`, with its
stdin and stdout pipes of its own (stderr inherited). Every message either way is one frame:
its length (8 bytes, big-endian) then a pickle. The command sends first its `sys.path` (so a
task's function imports as it does in the command), then tasks `(work, args)`, one at a time;
the worker answers each with `(True, work(*args))`, or `(False, exception)` when `work`
raised. Until a task names its function (`worker.outcome`: the readers and the reduction of a
file), a worker holds nothing but the standard library's pickle, queue and threading, never
multiprocessing. A thread reads the tasks, so the worker ends at once, even in the middle of a
task, when its stdin ends: the command closed it, or is gone (killed, out of memory). A task's
prints go to stderr, never into the frames; SIGINT is ignored (the command ends its workers).
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import struct
import sys
import threading
from typing import IO, Final

_LENGTH: Final = struct.Struct(">Q")


def send(stream: IO[bytes], value: object) -> None:
    """`value` pickled into one frame on `stream` (BrokenPipeError when its reader is gone)."""
    _write(stream, pickle.dumps(value, pickle.HIGHEST_PROTOCOL))


def frame(stream: IO[bytes]) -> bytes | None:
    """The next frame's pickle from `stream`; None at its end (or a frame cut short by it)."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    return data if len(data) == size else None


def _write(stream: IO[bytes], data: bytes) -> None:
    stream.write(_LENGTH.pack(len(data)))
    stream.write(data)
    stream.flush()


def _serve() -> None:
    """The worker: tasks from stdin, their outcomes to stdout, until stdin ends."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    results = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # fd 1 (print, a C library's output) is stderr from here on
    tasks = sys.stdin.buffer
    path = frame(tasks)
    if path is None:
        return
    sys.path[:] = pickle.loads(path)
    inbox: queue.SimpleQueue[bytes] = queue.SimpleQueue()
    threading.Thread(target=_feed, args=(tasks, inbox), daemon=True).start()
    while True:
        _write(results, _outcome(inbox.get()))


def _feed(tasks: IO[bytes], inbox: queue.SimpleQueue[bytes]) -> None:
    while (task := frame(tasks)) is not None:
        inbox.put(task)
    os._exit(0)  # the command closed stdin or is gone: nobody waits for what runs


def _outcome(task: bytes) -> bytes:
    """The pickled `(True, result)` of a task, or `(False, exception)`; an exception or a
    result that does not pickle becomes a RuntimeError that says what it was."""
    try:
        work, args = pickle.loads(task)
        value: tuple[bool, object] = (True, work(*args))
    except Exception as exc:
        value = (False, exc)
    try:
        return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        unsent = RuntimeError(f"a worker's outcome does not pickle: {exc!r} ({value[1]!r:.200})")
        return pickle.dumps((False, unsent), pickle.HIGHEST_PROTOCOL)


if __name__ == "__main__":
    _serve()
