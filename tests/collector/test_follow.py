"""follow.py: reading a trace file while it is still being written, plain or gzip."""

from __future__ import annotations

import gzip
import math
import os
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import ijson
import pytest
from commscope.collector.follow import Follower, open_followed
from hypothesis import given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.timeout(30)

DOC = b'{"traceEvents": [{"ph": "X", "name": "nccl:all_reduce", "dur": 12}], "traceName": "t"}'


class FakeTime:
    """A clock that moves only when slept on; `on_sleep(n)` runs after the n-th sleep."""

    def __init__(self, on_sleep: Callable[[int], None] | None = None) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self._on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        if self._on_sleep is not None:
            self._on_sleep(len(self.sleeps))


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as out:
        out.write(data)


def appender(path: Path, chunks: list[bytes]) -> Callable[[int], None]:
    """An on_sleep hook appending chunks[n - 1] on the n-th sleep."""

    def on_sleep(n: int) -> None:
        if n <= len(chunks):
            append(path, chunks[n - 1])

    return on_sleep


def follower(path: Path, fake: FakeTime, idle_s: float = 1.0) -> Follower:
    return Follower(path, idle_s=idle_s, poll_s=0.25, clock=fake.clock, sleep=fake.sleep)


# ------------------------------------------------------------------ Follower: end of file


def test_end_of_file_once_the_file_has_not_grown_for_idle_s(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"abc")
    fake = FakeTime()
    with follower(path, fake) as stream:
        assert stream.readall() == b"abc"
        assert stream.bytes_read == 3
    assert fake.sleeps == [0.25] * 4


def test_growth_restarts_the_idle_wait(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"abc")
    fake = FakeTime(appender(path, [b"", b"def"]))  # grows at t=0.5, so ends at t=1.5
    with follower(path, fake) as stream:
        assert stream.readall() == b"abcdef"
    assert fake.now == 1.5


def test_idle_s_zero_ends_a_complete_file_without_waiting(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(DOC)
    fake = FakeTime()
    with follower(path, fake, idle_s=0.0) as stream:
        assert stream.readall() == DOC
    assert fake.sleeps == []


def test_stop_gives_end_of_file(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"abc")
    fake = FakeTime()
    stream = Follower(
        path,
        idle_s=math.inf,
        poll_s=0.25,
        stop=lambda: len(fake.sleeps) >= 3,
        clock=fake.clock,
        sleep=fake.sleep,
    )
    with stream:
        assert stream.readall() == b"abc"
    assert fake.sleeps == [0.25] * 3


def test_stop_never_drops_bytes_written_before_it_said_stop(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"abc")
    calls: list[None] = []

    def write_then_stop() -> bool:  # the writer's last bytes land just before it says "done"
        if not calls:
            append(path, b"def")
        calls.append(None)
        return True

    fake = FakeTime()
    stream = Follower(
        path, idle_s=math.inf, stop=write_then_stop, clock=fake.clock, sleep=fake.sleep
    )
    with stream:
        assert stream.readall() == b"abcdef"
    assert fake.sleeps == []


def test_a_file_shrinking_under_the_reader_raises_oserror(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"0123456789")
    with follower(path, FakeTime()) as stream:
        assert stream.read(10) == b"0123456789"
        os.truncate(path, 4)
        with pytest.raises(OSError, match="shrank to 4 bytes after 10 were read"):
            stream.read(10)


def test_a_missing_file_raises_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_followed(tmp_path / "absent.json", idle_s=0.0)


# ------------------------------------------------------------------ Follower: another writer


@pytest.fixture
def polled() -> threading.Event:
    """Set each time the reader finds itself at the end of the file."""
    return threading.Event()


def polling_sleep(polled: threading.Event) -> Callable[[float], None]:
    def sleep(seconds: float) -> None:
        polled.set()
        time.sleep(seconds)

    return sleep


def write_when_polled(
    write: Callable[[bytes], object], chunks: list[bytes], polled: threading.Event
) -> None:
    """Write each chunk only once the reader has caught up and is waiting for more."""
    for chunk in chunks:
        if not polled.wait(10):
            return
        polled.clear()
        write(chunk)


@pytest.fixture
def writer_threads() -> Iterator[list[threading.Thread]]:
    threads: list[threading.Thread] = []
    yield threads
    for thread in threads:
        thread.join(10)


def test_follower_returns_bytes_another_thread_writes_later(
    tmp_path: Path, polled: threading.Event, writer_threads: list[threading.Thread]
) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"")
    chunks = [DOC[:10], DOC[10:40], DOC[40:]]
    done = threading.Event()

    def writer() -> None:
        with path.open("ab", buffering=0) as out:
            write_when_polled(out.write, chunks, polled)
        done.set()

    writer_threads.append(threading.Thread(target=writer))
    writer_threads[0].start()
    sleep = polling_sleep(polled)
    with Follower(path, idle_s=20.0, poll_s=0.005, stop=done.is_set, sleep=sleep) as stream:
        assert stream.readall() == DOC


def test_gzip_written_in_place_in_several_flushes_decompresses_fully(
    tmp_path: Path, polled: threading.Event, writer_threads: list[threading.Thread]
) -> None:
    path = tmp_path / "t.json.gz"
    packed = gzip.GzipFile(path, "wb")
    chunks = [DOC[:10], DOC[10:40], DOC[40:]]
    done = threading.Event()

    def write(chunk: bytes) -> None:
        packed.write(chunk)
        packed.flush()  # a sync flush: everything so far can be decompressed

    def writer() -> None:
        with packed:
            write_when_polled(write, chunks, polled)
        done.set()

    writer_threads.append(threading.Thread(target=writer))
    writer_threads[0].start()
    sleep = polling_sleep(polled)
    with open_followed(path, idle_s=20.0, poll_s=0.005, stop=done.is_set, sleep=sleep) as stream:
        assert stream.read() == DOC


# ------------------------------------------------------------------ open_followed


def test_the_two_bytes_read_to_detect_gzip_are_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"{")  # one byte so far: detection waits for the second
    fake = FakeTime(appender(path, [b'"a": 1}']))
    with open_followed(path, idle_s=1.0, poll_s=0.25, clock=fake.clock, sleep=fake.sleep) as s:
        assert s.read() == b'{"a": 1}'


def test_a_one_byte_document_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(b"7")
    with open_followed(path, idle_s=0.0) as stream:
        assert stream.read() == b"7"


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_complete_document_parses_with_ijson(tmp_path: Path, packed: bool) -> None:
    path = tmp_path / ("t.json.gz" if packed else "t.json")
    path.write_bytes(gzip.compress(DOC) if packed else DOC)
    with open_followed(path, idle_s=0.0) as stream:
        events = list(ijson.items(stream, "traceEvents.item"))
    assert events == [{"ph": "X", "name": "nccl:all_reduce", "dur": 12}]


def test_an_unfinished_gzip_that_goes_idle_raises_eof_error(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    packed = gzip.compress(DOC * 50)
    path.write_bytes(packed[: len(packed) // 2])
    with open_followed(path, idle_s=0.0) as stream, pytest.raises(EOFError):
        stream.read()


def open_paths() -> list[str]:
    fds = Path("/proc/self/fd")
    return [os.readlink(fds / fd) for fd in os.listdir(fds) if (fds / fd).is_symlink()]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_closing_the_stream_closes_the_file(tmp_path: Path, packed: bool) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(gzip.compress(DOC) if packed else DOC)
    stream = open_followed(path, idle_s=0.0)
    assert str(path) in open_paths()
    stream.close()
    assert str(path) not in open_paths()


# ------------------------------------------------------------------ any growth pattern


def cuts(data: bytes) -> st.SearchStrategy[list[bytes]]:
    """`data` split at arbitrary points, empty pieces included (a poll that found nothing)."""
    points = st.lists(st.integers(0, len(data)), max_size=12).map(sorted)
    return points.map(lambda p: [data[a:b] for a, b in zip([0, *p], [*p, len(data)], strict=True)])


@settings(max_examples=60, deadline=None)
@given(st.data())
@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_any_growth_pattern_reads_the_whole_document(packed: bool, data: st.DataObject) -> None:
    # one document of 20 events (no shorter prefix closes it, so only its end ends the read)
    body = DOC.replace(b"[", b"[" + b'{"ph": "i", "name": "x"}, ' * 19)
    encoded = flushed_gzip(body) if packed else body
    chunks = data.draw(cuts(encoded))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "t.json")
        path.write_bytes(chunks[0])
        fake = FakeTime(appender(path, chunks[1:]))
        # idle_s outlasts the longest run of empty pieces (12 polls of 0.25 s)
        with open_followed(path, idle_s=10.0, poll_s=0.25, clock=fake.clock, sleep=fake.sleep) as s:
            assert s.read() == body


def flushed_gzip(body: bytes) -> bytes:
    """A gzip member written in four sync-flushed pieces, as a live writer produces."""
    compressor = zlib.compressobj(wbits=31)
    step = len(body) // 4 + 1
    pieces = [
        compressor.compress(body[i : i + step]) + compressor.flush(zlib.Z_SYNC_FLUSH)
        for i in range(0, len(body), step)
    ]
    return b"".join(pieces) + compressor.flush()


# ------------------------------------------------- a document that has ended is not waited for


def followed(path: Path, fake: FakeTime) -> IO[bytes]:
    return open_followed(path, idle_s=1.0, poll_s=0.25, clock=fake.clock, sleep=fake.sleep)


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gzip"])
def test_a_complete_document_ends_without_the_idle_wait(tmp_path: Path, packed: bool) -> None:
    # the top-level object closes after traceEvents (plain) / the gzip trailer is read and
    # no byte follows (gzip): end of file at once, the fake clock never slept (idle_s is 1 s)
    path = tmp_path / "t.json"
    path.write_bytes(gzip.compress(DOC) if packed else DOC)
    fake = FakeTime()
    with followed(path, fake) as stream:
        assert stream.read() == DOC
    assert fake.sleeps == []


def test_a_plain_document_cut_short_still_waits_idle_s(tmp_path: Path) -> None:
    # the last byte is the "}" of an event, not of the document: 4 polls of 0.25 s = idle_s
    path = tmp_path / "t.json"
    cut = DOC[: DOC.index(b"}") + 1]
    path.write_bytes(cut)
    fake = FakeTime()
    with followed(path, fake) as stream:
        assert stream.read() == cut
    assert fake.sleeps == [0.25] * 4


def test_json_of_another_shape_still_waits_idle_s(tmp_path: Path) -> None:
    # a whole object without traceEvents: the follower cannot tell, so it waits as before
    path = tmp_path / "t.json"
    path.write_bytes(b'{"a": [1]}')
    fake = FakeTime()
    with followed(path, fake) as stream:
        assert stream.read() == b'{"a": [1]}'
    assert fake.sleeps == [0.25] * 4


def test_a_gzip_cut_short_still_waits_idle_s_then_raises_eof_error(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    packed = gzip.compress(DOC * 50)
    path.write_bytes(packed[: len(packed) // 2])
    fake = FakeTime()
    with followed(path, fake) as stream, pytest.raises(EOFError):
        stream.read()
    assert fake.sleeps == [0.25] * 4


def test_a_document_that_closes_while_followed_ends_when_it_closes(tmp_path: Path) -> None:
    # written in three pieces, one per poll: the end comes with the last piece, not idle_s later
    path = tmp_path / "t.json"
    pieces = [DOC[:20], DOC[20:50], DOC[50:]]
    path.write_bytes(pieces[0])
    fake = FakeTime(appender(path, pieces[1:]))
    with followed(path, fake) as stream:
        assert stream.read() == DOC
    assert fake.sleeps == [0.25] * 2


def test_gzip_members_one_after_another_read_as_one_stream(tmp_path: Path) -> None:
    # as GzipFile reads them (zero padding after the last member is allowed)
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(DOC[:30]) + gzip.compress(DOC[30:]) + b"\0\0")
    with open_followed(path, idle_s=0.0) as stream:
        assert stream.read() == DOC


def test_a_gzip_stream_read_again_from_its_start_gives_the_same_bytes(tmp_path: Path) -> None:
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(DOC))
    with open_followed(path, idle_s=0.0) as stream:
        first = stream.read()
        stream.seek(0)
        assert stream.read() == first == DOC
