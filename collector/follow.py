"""Reading a trace file while it may still be being written (shell: files and a clock).

A `Follower` is a raw binary stream over one file that treats reaching the end as "not yet":
it polls until more bytes arrive, `stop()` says to give up, or the file has not grown for
`idle_s` seconds, and only then reports end of file. `open_followed` puts a gzip decoder
(detected by the magic bytes, waited for) or a buffer on top, so a JSON parser reads the
document as it grows. A document that has visibly ended is not waited for: a gzip stream
whose end-of-stream marker and trailer were read (and no byte follows), or plain JSON whose
last bytes close the top-level object after the `traceEvents` array (`document_closed`).
Anything else at the end of the data — a file cut short, or JSON of another shape — waits
`idle_s` as before, since the follower cannot tell it from a paused writer.
"""

from __future__ import annotations

import io
import os
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final, cast

from commscope.collector.jsonstream import TAIL_BYTES, document_closed

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_GZIP_MAGIC: Final = b"\x1f\x8b"
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
_CHUNK: Final = 64 * 1024


def _never() -> bool:
    return False


class Follower(io.RawIOBase):
    """The bytes of `path` as they are written; end of file once the writer looks done.

    `stop()` is asked at the end of the data, before the file's size is checked, so bytes
    written before it returned True are still read. A file found shorter than what was read
    raises OSError.
    """

    def __init__(
        self,
        path: Path,
        *,
        idle_s: float,
        poll_s: float = 0.2,
        stop: Callable[[], bool] = _never,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__()
        try:
            self._file = path.open("rb", buffering=0)
        except BaseException:
            super().close()  # nothing to release: keep the finaliser from calling self.close
            raise
        self.name = str(path)
        self.bytes_read = 0
        self._idle_s, self._poll_s = idle_s, poll_s
        self._stop, self._clock, self._sleep = stop, clock, sleep
        self._size_seen = self._size()
        self._grown_at = clock()
        self.ends_json = False  # the data is plain JSON: its visible end ends the wait
        self._closed_at: tuple[int, bool] = (-1, False)  # (size, document_closed) last seen

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        """Go back to an absolute position (a reader starting the document again)."""
        if whence != os.SEEK_SET or offset < 0:
            raise OSError("a followed file seeks only to an absolute position")
        self.bytes_read = self._file.seek(offset)
        return self.bytes_read

    def tell(self) -> int:
        return self.bytes_read

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        while not (count := self._file.readinto(buffer)) and self._waiting(self.bytes_read + 1):
            self._sleep(self._poll_s)
        count = count or self._file.readinto(buffer)  # the bytes that ended the wait, if any
        self.bytes_read += count
        return count

    def head(self, size: int) -> bytes:
        """The file's first `size` bytes (fewer if it ends first), waited for as `readinto` does;
        the read position does not move."""
        while self._waiting(size):
            self._sleep(self._poll_s)
        return os.pread(self._file.fileno(), size, 0)

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._file.close()

    def unread(self) -> bool:
        """Whether the file holds bytes not read yet (asked without waiting)."""
        return self._size() > self.bytes_read

    def _size(self) -> int:
        return os.fstat(self._file.fileno()).st_size

    def _waiting(self, wanted: int) -> bool:
        """Whether to wait for the file to reach `wanted` bytes: it has not, stop() is false, and
        it grew within idle_s. OSError if it is now shorter than what was read."""
        stopping = self._stop()  # asked first, so all written before it said so gets read
        size = self._size()
        if size < self.bytes_read:
            raise OSError(
                f"{self.name}: shrank to {size} bytes after {self.bytes_read} were read "
                "(truncated or rewritten while being followed)"
            )
        if size > self._size_seen:
            self._size_seen, self._grown_at = size, self._clock()
        if size >= wanted or stopping or self._json_ended(size):
            return False
        return self._clock() - self._grown_at < self._idle_s

    def _json_ended(self, size: int) -> bool:
        """Whether the file's `size` bytes are a whole JSON trace document (checked once per
        size: the poll loop asks again and again)."""
        if not self.ends_json:
            return False
        if self._closed_at[0] != size:
            tail = os.pread(self._file.fileno(), TAIL_BYTES, max(0, size - TAIL_BYTES))
            self._closed_at = (size, document_closed(tail))
        return self._closed_at[1]


class _GzipMembers(io.RawIOBase):
    """The decompressed bytes of the gzip member(s) in `source`, ending at once when a member
    ends and the file holds no more bytes (the gzip trailer is checked by zlib). Closing it
    closes `source`; it seeks back only to the start (a reader starting again)."""

    def __init__(self, source: Follower) -> None:
        super().__init__()
        self.name = source.name
        self._source = source
        self._inflater = zlib.decompressobj(_GZIP_WBITS)
        self._input = b""
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = os.SEEK_SET, /) -> int:
        if (offset, whence) != (0, os.SEEK_SET):
            raise OSError("a followed gzip stream seeks only to its start")
        self._source.seek(0)
        self._inflater, self._input, self._position = zlib.decompressobj(_GZIP_WBITS), b"", 0
        return 0

    def tell(self) -> int:
        return self._position

    def readinto(self, buffer: WriteableBuffer, /) -> int:
        view = memoryview(buffer).cast("B")
        while (data := self._inflate(len(view))) == b"":
            pass
        if data is None:
            return 0
        view[: len(data)] = data
        self._position += len(data)
        return len(data)

    def _inflate(self, size: int) -> bytes | None:
        """Up to `size` decompressed bytes (b"" when more input is needed first), None once
        the last member has ended; EOFError when the file ends inside a member."""
        if self._inflater.eof:
            rest = self._inflater.unused_data.lstrip(b"\0")  # gzip allows zero padding
            if not rest and not self._source.unread():
                return None
            self._inflater, self._input = zlib.decompressobj(_GZIP_WBITS), rest
            return b""
        if not self._input:
            self._input = self._source.read(_CHUNK) or b""
            if not self._input:
                raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        data = self._inflater.decompress(self._input, size)
        self._input = self._inflater.unconsumed_tail
        return data

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._source.close()


def open_followed(
    path: Path,
    *,
    idle_s: float,
    poll_s: float = 0.2,
    stop: Callable[[], bool] = _never,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> IO[bytes]:
    """The document in `path` as a binary stream that follows the file as it grows.

    Gzip (magic bytes, waited for) is decompressed as it arrives; a gzip stream that ends
    unfinished raises EOFError. `read(n)` returns `n` bytes unless the document ends first.
    Closing the stream closes the file. The arguments are the `Follower`'s.
    """
    follower = Follower(path, idle_s=idle_s, poll_s=poll_s, stop=stop, clock=clock, sleep=sleep)
    try:
        gzipped = follower.head(2) == _GZIP_MAGIC
        follower.ends_json = not gzipped
        stream = io.BufferedReader(_GzipMembers(follower) if gzipped else follower)
    except BaseException:
        follower.close()
        raise
    return cast(IO[bytes], stream)
