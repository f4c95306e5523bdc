"""A one-line progress display for long runs (shell: writes to a terminal).

Shows files done, MB parsed and events, redrawn at most every 0.2 s; on a stream that is not
a terminal it writes nothing at all.
"""

from __future__ import annotations

import time
from typing import TextIO


class TerminalProgress:
    def __init__(self, stream: TextIO, interval_s: float = 0.2) -> None:
        self._stream = stream
        self._interval = interval_s
        self._files = self._done = 0
        self._total_bytes = self._bytes = self._events = 0
        self._last = 0.0

    def begin(self, files: int, total_bytes: int) -> None:
        self._files, self._total_bytes = files, total_bytes

    def advance(self, nbytes: int) -> None:
        self._bytes += nbytes
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            self._draw()

    def file_done(self, events: int) -> None:
        self._done += 1
        self._events += events
        self._draw()

    def end(self) -> None:
        self._draw()
        self._stream.write("\n")
        self._stream.flush()

    def _draw(self) -> None:
        line = (
            f"\rcommscope: files {self._done}/{self._files} · "
            f"{self._bytes / 1e6:,.1f} MB parsed · {self._events:,} events"
        )
        self._stream.write(line)
        self._stream.flush()
