"""The aggregator's door (`service.door`): connections in their handshake capped, the oldest
shut; the open-file limit raised. By hand, then thousands of connections that never finish
their handshake against a real aggregator beside a real collector."""

from __future__ import annotations

import contextlib
import resource
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from commscope.service import door

from service.flood import flood, raise_open_files, rss_bytes
from service.harness import (
    Aggregate,
    Processes,
    collector_args,
    free_port,
    normalised,
    offline,
    sample_value,
)
from service.test_curve import keys_cli

pytestmark = pytest.mark.timeout(300)
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"
MB = 10**6


def test_within_the_cap_no_connection_is_shut() -> None:
    pending = door.Pending(2, timeout_s=5.0)
    assert [pending.accepted(fd, f"p{fd}", 0.0) for fd in (7, 8)] == [None, None]
    assert len(pending) == 2


def test_over_the_cap_the_oldest_in_its_handshake_is_shut() -> None:
    pending = door.Pending(2, timeout_s=5.0)
    pending.accepted(7, "p7", 0.0)
    pending.accepted(8, "p8", 0.1)
    pending.settled(7)  # it spoke: its handshake is done
    pending.accepted(9, "p9", 0.2)
    assert pending.accepted(10, "p10", 0.3) == (8, "p8")
    assert len(pending) == 2


def test_a_connection_still_open_past_the_handshake_timeout_is_through_it() -> None:
    """libzmq closes a connection whose handshake outlasts HANDSHAKE_IVL: one still open
    then is through it, and no longer counts against the cap."""
    pending = door.Pending(1, timeout_s=5.0)
    pending.accepted(7, "p7", 0.0)
    assert pending.accepted(8, "p8", 5.0) is None
    assert pending.accepted(9, "p9", 5.1) == (8, "p8")


def test_a_descriptor_given_to_another_connection_is_never_shut() -> None:
    """`shut` acts only on the connection of the peer it was told (an fd may be reused)."""
    with contextlib.ExitStack() as stack:
        listener = stack.enter_context(socket.create_server(("127.0.0.1", 0)))
        client = stack.enter_context(socket.create_connection(listener.getsockname()))
        accepted = stack.enter_context(listener.accept()[0])
        endpoint = f"tcp://127.0.0.1:{listener.getsockname()[1]}".encode()
        addresses = door.address(accepted.fileno(), endpoint)
        assert addresses == (accepted.getsockname(), accepted.getpeername())
        assert door.address(accepted.fileno(), b"tcp://127.0.0.1:1") is None  # not the ROUTER's
        door.shut(accepted.fileno(), (accepted.getsockname(), ("127.0.0.1", 1)))
        client.setblocking(False)
        with pytest.raises(BlockingIOError):
            client.recv(1)  # still open
        door.shut(accepted.fileno(), addresses)
        client.setblocking(True)
        assert client.recv(1) == b""  # shut: the peer sees the end


def test_a_descriptor_that_is_no_connection_is_nothing_to_shut(tmp_path: Path) -> None:
    """A descriptor closed and reused for a file (the journal, say): left alone."""
    with (tmp_path / "journal").open("wb") as journal:
        assert door.address(journal.fileno(), b"tcp://127.0.0.1:1") is None
        door.shut(journal.fileno(), (("127.0.0.1", 1), ("127.0.0.1", 2)))  # nothing raised
        journal.write(b"still open")


def test_the_open_file_limit_is_raised_to_the_hard_limit() -> None:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        if before[1] != resource.RLIM_INFINITY:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, before[1]), before[1]))
            assert door.open_files()[1] == before[1]
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


# ---------------------------------------------------------------- a real flood
@pytest.fixture
def ring(tmp_path: Path) -> Path:
    ring = tmp_path / "keys"
    for name in ("aggregator", "n1"):
        keys_cli(ring / name, name)
    (ring / "allow").mkdir()
    shutil.copy(ring / "n1" / "n1.key", ring / "allow" / "n1.key")
    return ring


@pytest.fixture
def open_files() -> Iterator[None]:
    """The test process's own soft limit raised (it opens thousands of sockets)."""
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    raise_open_files()
    yield
    resource.setrlimit(resource.RLIMIT_NOFILE, before)


@pytest.mark.usefixtures("open_files")
def test_thousands_of_connections_never_finishing_their_handshake_change_nothing(
    procs: Processes, tmp_path: Path, ring: Path
) -> None:
    """3,000 connections at once (half send nothing, half a Curve greeting and a frame of
    almost 4 MiB), each closed one replaced, for 8 s (/metrics answers throughout), then on
    while n1's collector runs: the aggregator's memory stays within its bound (16 in their
    handshake x 4 MiB: here under 200 MB above its start), the report is exactly `commscope
    report` of n1's files and the aggregator exits 0."""
    security = ("--keys", str(ring / "aggregator"), "--allow", str(ring / "allow"))
    aggregate = Aggregate(
        procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "1"), security=security
    )
    server = aggregate.start()
    base = peak = rss_bytes(server.popen.pid)
    answered = 0

    def probe() -> None:
        nonlocal peak, answered
        peak = max(peak, rss_bytes(server.popen.pid))
        answered += aggregate.metrics_text(server) is not None

    attack = flood(("127.0.0.1", aggregate.listen_port), 3000, 8.0, probe)
    try:
        text = aggregate.metrics_text(server) or ""
        shut = sample_value(
            text, "commscope_aggregator_refused_connections_total", reason="too_many_handshakes"
        )
        assert attack.closed > 0 and answered > 0 and shut is not None and shut > 0
        watch = tmp_path / "watch"
        shutil.copytree(SAMPLE, watch)
        client = ("--keys", str(ring / "n1"), "--server-key")
        client += (str(ring / "aggregator" / "aggregator.key"),)
        args = collector_args(
            watch, aggregate.endpoint, "n1", tmp_path / "st", "--once", security=client
        )
        collector = procs.start("n1", *args)
        for _ in range(100_000):  # the flood goes on while n1 runs (a pass takes ms)
            if collector.popen.poll() is not None:
                break
            attack.pump()
            with contextlib.suppress(LookupError, OSError):  # it may have ended its run
                peak = max(peak, rss_bytes(server.popen.pid))
    finally:
        attack.close()
    assert peak - base < 200 * MB, f"{base / MB:.0f} MB at start, {peak / MB:.0f} MB peak"
    assert collector.wait(120) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    assert normalised(aggregate.report()) == normalised(offline(watch))
