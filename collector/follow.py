"""Reading a trace file while it may still be being written (shell: files and a clock).

A `Follower` is a raw binary stream over one file that treats reaching the end as "not yet":
it polls until more bytes arrive, `stop()` says to give up, or the file has not grown for
`idle_s` seconds, and only then reports end of file. `open_followed` puts a gzip decoder
(detected by the magic bytes, waited for) or a buffer on top, so a JSON parser reads the
document as it grows. The follower cannot tell a finished file from a paused writer: every
reader pays one `idle_s` wait at the end, so pass a small `idle_s` (0 is fine) for files known
to be complete, such as Kineto's, which appear under their final name only once written.
"""

from __future__ import annotations

import gzip
import io
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final, cast

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

_GZIP_MAGIC: Final = b"\x1f\x8b"


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
        return size < wanted and not stopping and self._clock() - self._grown_at < self._idle_s


class _OwningGzipFile(gzip.GzipFile):
    """A GzipFile that closes the stream it decompresses (GzipFile leaves a given one open)."""

    def __init__(self, source: Follower) -> None:
        super().__init__(fileobj=source, mode="rb")
        self._source = source

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
        stream = _OwningGzipFile(follower) if gzipped else io.BufferedReader(follower)
    except BaseException:
        follower.close()
        raise
    return cast(IO[bytes], stream)
