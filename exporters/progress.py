"""A one-line progress display for long runs (shell: writes to a terminal).

Shows files done, bytes parsed (scaled: KB, MB, GB) and events, redrawn at most every 0.2 s;
on a stream that is not a terminal it writes nothing at all.
"""

from __future__ import annotations

import time
from typing import TextIO

from commscope.model.units import size


class TerminalProgress:
    def __init__(self, stream: TextIO, interval_s: float = 0.2) -> None:
        self._stream = stream
        self._interval = interval_s
        self._files = self._done = 0
        self._total_bytes = self._bytes = self._events = 0
        self._last = 0.0
        self._width = 0  # the longest line drawn: a shorter one is padded over it

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
            f"commscope: files {self._done}/{self._files} · "
            f"{size(self._bytes)} parsed · {self._events:,} events"
        )
        self._width = max(self._width, len(line))
        self._stream.write("\r" + line.ljust(self._width))
        self._stream.flush()
