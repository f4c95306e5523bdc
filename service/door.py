"""The aggregator's door: connections still in their handshake, capped (shell: the ROUTER's
monitor on a thread of its own, file descriptors, the open-file limit).

libzmq has no cap on connections, and before a handshake is done each connection may hold a
frame of up to MAXMSGSIZE. The ROUTER's monitor reports each connection accepted (its file
descriptor), each handshake done or failed and each connection closed; when one is accepted
while `cap` others are still in their handshake, the oldest of those is shut down (libzmq
then closes it: idle connections make way for new ones, which on a healthy link finish their
handshake in a millisecond), and libzmq closes one whose handshake takes longer than
HANDSHAKE_IVL. So at most `cap`
connections are ever unauthenticated: memory before authentication is at most `cap` x
MAXMSGSIZE, whatever the number of connections. Counted: connections closed (`disconnected`)
and connections shut at the cap (`too_many_handshakes`); failed handshakes go to the Curve
gate. At start the aggregator raises its open-file limit to the hard limit (`open_files`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Final

import zmq
from commscope.service.curve import HANDSHAKE_EVENTS, Listener
from commscope.service.logs import sparse
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger("commscope.aggregate")

EVENTS: Final = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | HANDSHAKE_EVENTS
MAX_OPEN_FILES: Final = 1 << 20  # the soft limit sought when the hard one is unlimited


class Pending:
    """The connections (by file descriptor, oldest first) accepted and not yet through their
    handshake (pure): at most `cap`."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._fds: dict[int, object] = {}  # fd -> its peer's address

    def accepted(self, fd: int, peer: object) -> tuple[int, object] | None:
        """A connection was accepted; the oldest one (fd, peer) to shut to stay within the
        cap, if any."""
        self._fds.pop(fd, None)
        self._fds[fd] = peer
        if len(self._fds) <= self.cap:
            return None
        oldest = next(iter(self._fds))
        return oldest, self._fds.pop(oldest)

    def settled(self, fd: int) -> None:
        """Its handshake is done, or it is closed."""
        self._fds.pop(fd, None)

    def __len__(self) -> int:
        return len(self._fds)


class Door:
    """Reads the ROUTER's monitor (`EVENTS`) on its own thread until `close()`; a failed
    handshake is handed to `handshake` (the Curve gate)."""

    def __init__(
        self,
        monitor: zmq.Socket[bytes],
        cap: int,
        handshake: Callable[[Mapping[str, object]], None] | None = None,
    ) -> None:
        self.pending = Pending(cap)
        self._handshake = handshake
        self._lock = threading.Lock()
        self._counts = {"disconnected": 0, "too_many_handshakes": 0}
        self._listener = Listener(monitor, recv_monitor_message, self.handle, "commscope-door")

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def close(self) -> None:
        self._listener.close()

    def handle(self, event: Mapping[str, object]) -> None:
        kind, value = event["event"], event["value"]
        if kind == zmq.EVENT_ACCEPTED and isinstance(value, int):
            if (oldest := self.pending.accepted(value, address(value))) is not None:
                shut(*oldest)
                self._count("too_many_handshakes", "connection shut: too many in their handshake")
        elif kind in (zmq.EVENT_HANDSHAKE_SUCCEEDED, zmq.EVENT_DISCONNECTED):
            self.pending.settled(int(value))  # type: ignore[call-overload]
            if kind == zmq.EVENT_DISCONNECTED:
                self._count("disconnected", "connection dropped")
        elif self._handshake is not None:
            self._handshake(event)

    def _count(self, reason: str, what: str) -> None:
        with self._lock:
            self._counts[reason] += 1
            count = self._counts[reason]
        if sparse(count):
            log.warning(what, extra={"reason": reason, "count": count, "cap": self.pending.cap})


def address(fd: int) -> object:
    """The peer address of connection `fd` (None: gone, or not a connection)."""
    with _borrowed(fd) as connection:
        if connection is not None:
            return connection.getpeername()
    return None


def shut(fd: int, peer: object) -> None:
    """Shut a connection libzmq holds down (it sees the end and closes it), if `fd` is still
    the connection of `peer` (not a descriptor closed and given to another meanwhile)."""
    with _borrowed(fd) as connection:
        if connection is not None and peer is not None and connection.getpeername() == peer:
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
    target = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    after = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    log.info("open-file limit", extra={"soft_before": soft, "soft": after, "hard": hard})
    return soft, after
