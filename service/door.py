"""The aggregator's door: a cap on connections still in their handshake (shell).

It uses the ROUTER's monitor on a thread of its own, file descriptors and the open-file limit.
libzmq has no cap on connections, and before a handshake is done each connection may hold a
frame of up to MAXMSGSIZE. The ROUTER's monitor reports each connection accepted and each
connection closed, by file descriptor (a handshake's success carries none); a message received
names its descriptor (ZMQ_SRCFD), and libzmq closes a connection whose handshake takes longer
than HANDSHAKE_IVL. So a connection is in its handshake from its acceptance until it is closed,
a message arrives from it, or HANDSHAKE_IVL has passed (still open, its handshake is done).

When one is accepted while `cap` others are in their handshake, the oldest of those is shut
down (libzmq then closes it: idle connections make way for new ones, which on a healthy link
finish their handshake and speak within milliseconds). So at most `cap` connections stay
unauthenticated (beyond those accepted since the monitor's last events were read): memory
before authentication is about `cap` x MAXMSGSIZE, whatever the number of connections.

Counted: connections closed (`disconnected`) and connections shut at the cap
(`too_many_handshakes`); failed handshakes go to the Curve gate. At start the aggregator raises
its open-file limit to the hard limit (`open_files`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Final

import zmq
from commscope.service.curve import HANDSHAKE_EVENTS, Listener
from commscope.service.logs import sparse
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger("commscope.aggregate")

EVENTS: Final = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | HANDSHAKE_EVENTS
_MAX_OPEN_FILES: Final = 1 << 20  # the soft limit sought when the hard one is unlimited


class Pending:
    """The connections (by file descriptor, oldest first) accepted and not yet through their
    handshake (pure: time is a parameter): at most `cap`, none older than `timeout_s`."""

    def __init__(self, cap: int, timeout_s: float) -> None:
        self.cap = cap
        self.timeout_s = timeout_s
        self._fds: dict[int, tuple[object, float]] = {}  # fd -> (its peer's address, accepted)

    def accepted(self, fd: int, peer: object, now: float) -> tuple[int, object] | None:
        """A connection was accepted at `now`; the oldest one (fd, peer) to shut to stay
        within the cap, if any."""
        self._expire(now)
        self._fds.pop(fd, None)
        self._fds[fd] = (peer, now)
        if len(self._fds) <= self.cap:
            return None
        oldest = next(iter(self._fds))
        return oldest, self._fds.pop(oldest)[0]

    def settled(self, fd: int) -> None:
        """It spoke (its handshake is done), or it is closed."""
        self._fds.pop(fd, None)

    def _expire(self, now: float) -> None:
        """Past `timeout_s` a connection still open is through its handshake (libzmq closes
        the others)."""
        while self._fds:
            fd, (_, at) = next(iter(self._fds.items()))
            if now - at < self.timeout_s:
                return
            del self._fds[fd]

    def __len__(self) -> int:
        return len(self._fds)


class Door:
    """Reads the ROUTER's monitor (`EVENTS`) on its own thread until `close()`; a failed
    handshake is handed to `handshake` (the Curve gate)."""

    def __init__(
        self,
        monitor: zmq.Socket[bytes],
        pending: Pending,
        handshake: Callable[[Mapping[str, object]], None] | None = None,
    ) -> None:
        self.pending = pending
        self._handshake = handshake
        self._lock = threading.Lock()
        self._counts = {"disconnected": 0, "too_many_handshakes": 0}
        self._listener = Listener(monitor, recv_monitor_message, self.handle, "commscope-door")

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def close(self) -> None:
        self._listener.close()

    def spoke(self, fd: int) -> None:
        """A message came from connection `fd` (ZMQ_SRCFD): its handshake is done."""
        with self._lock:
            self.pending.settled(fd)

    def handle(self, event: Mapping[str, object]) -> None:
        kind, value = event["event"], event["value"]
        if kind == zmq.EVENT_ACCEPTED and isinstance(value, int):
            peer = address(value, bytes(event["endpoint"]))  # type: ignore[call-overload]
            with self._lock:
                oldest = self.pending.accepted(value, peer, time.monotonic())
            if oldest is not None:
                shut(*oldest)
                self._count("too_many_handshakes", "connection shut: too many in their handshake")
        elif kind == zmq.EVENT_DISCONNECTED and isinstance(value, int):
            with self._lock:
                self.pending.settled(value)
            self._count("disconnected", "connection dropped")
        elif kind != zmq.EVENT_HANDSHAKE_SUCCEEDED and self._handshake is not None:
            self._handshake(event)

    def _count(self, reason: str, what: str) -> None:
        with self._lock:
            self._counts[reason] += 1
            count = self._counts[reason]
        if sparse(count):
            log.warning(what, extra={"reason": reason, "count": count, "cap": self.pending.cap})


def address(fd: int, endpoint: bytes) -> object:
    """Connection `fd`'s (local, peer) addresses, if it was accepted on `endpoint` (the
    ROUTER's, as its monitor names it); None: gone, or another descriptor now (/metrics'
    own connections, a file)."""
    with _borrowed(fd) as connection:
        if connection is not None and _on(connection.getsockname(), endpoint.decode()):
            return connection.getsockname(), connection.getpeername()
    return None


def _on(local: object, endpoint: str) -> bool:
    """Whether a socket's local address is `endpoint` (tcp://HOST:PORT, ipc://PATH)."""
    if isinstance(local, tuple):
        return endpoint.startswith("tcp://") and endpoint.endswith(f":{local[1]}")
    return endpoint == f"ipc://{local}"


def shut(fd: int, addresses: object) -> None:
    """Shut a connection libzmq holds down (it sees the end and closes it), if `fd` is still
    the connection of `addresses` (not a descriptor closed and given to another meanwhile)."""
    with _borrowed(fd) as connection:
        if connection is None or addresses is None:
            return
        if (connection.getsockname(), connection.getpeername()) == addresses:
            connection.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def _borrowed(fd: int) -> Iterator[socket.socket | None]:
    """A socket over a copy of `fd` (None: not an open socket); OSError stays inside."""
    try:
        copy = os.dup(fd)
    except OSError:
        yield None
        return
    try:
        connection = socket.socket(fileno=copy)
    except OSError:
        os.close(copy)
        yield None
        return
    with connection, contextlib.suppress(OSError):
        yield connection


def open_files() -> tuple[int, int]:
    """Raise the soft open-file limit to the hard one (said once); (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = _MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    after = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    log.info("open-file limit", extra={"soft_before": soft, "soft": after, "hard": hard})
    return soft, after
