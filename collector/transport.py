"""How a collector's bytes reach the aggregator (shell: a ZeroMQ socket, or memory).

A `Transport` sends one payload without blocking (a payload it cannot send now is lost: the
session resends what stays unacknowledged), hands back the replies that have arrived, and
closes. `ZmqTransport` is a DEALER connected to the aggregator's ROUTER; a `configure` hook
sets socket options (CurveZMQ keys, say) before it connects. `MemoryTransport` delivers to an
in-process aggregator, like httpx's MockTransport: what is sent waits in `outbox` until
`deliver()` (or the next `receive()`) hands it over, so a test can drop, duplicate or reorder
messages, or put a new aggregator in place, between the two.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable
from typing import Protocol, cast

import zmq


class Transport(Protocol):
    def send(self, payload: bytes) -> None: ...

    def receive(self, timeout_s: float) -> list[bytes]:
        """The replies that arrive within `timeout_s` (0: only those already there)."""
        ...

    def close(self) -> None: ...


class ZmqTransport:
    """A DEALER socket to `endpoint`, named `node` (its routing id, unless `routing_id` is
    given); at most `queued` messages wait in it."""

    def __init__(
        self,
        endpoint: str,
        node: str,
        queued: int,
        configure: Callable[[zmq.Socket[bytes]], None] | None = None,
        routing_id: bytes | None = None,
    ) -> None:
        self._context = zmq.Context()
        self._socket: zmq.Socket[bytes] = self._context.socket(zmq.DEALER)
        try:
            self._socket.setsockopt(zmq.ROUTING_ID, routing_id or node.encode())
            self._socket.setsockopt(zmq.LINGER, 0)
            self._socket.setsockopt(zmq.IMMEDIATE, 1)
            self._socket.setsockopt(zmq.SNDHWM, queued)
            if configure is not None:
                configure(self._socket)
            self._socket.connect(endpoint)
        except BaseException:
            self.close()
            raise

    def send(self, payload: bytes) -> None:
        with contextlib.suppress(zmq.Again):  # no aggregator: stays unacknowledged, is resent
            self._socket.send(payload, zmq.NOBLOCK)

    def receive(self, timeout_s: float) -> list[bytes]:
        if not self._socket.poll(round(timeout_s * 1000)):
            return []
        replies = []
        while True:
            try:
                replies.append(self._socket.recv(zmq.NOBLOCK))
            except zmq.Again:
                return replies

    def close(self) -> None:
        self._socket.close(0)
        self._context.term()


class _Receiver(Protocol):
    """What `MemoryTransport` needs of an aggregator (`service.aggregate.Aggregator`)."""

    def receive(self, frames: list[bytes]) -> None: ...

    def commit(self) -> None: ...

    def _send(self, socket: zmq.Socket[bytes]) -> None: ...


class _Replies:
    """Stands in for the aggregator's ROUTER socket: keeps what it answers one peer."""

    def __init__(self, inbox: deque[bytes]) -> None:
        self.inbox = inbox

    def send_multipart(self, frames: list[bytes], flags: int = 0) -> None:
        self.inbox.append(frames[1])


class MemoryTransport:
    """Delivers to `aggregator` in this process, as peer `identity`."""

    def __init__(self, aggregator: _Receiver, identity: bytes) -> None:
        self.aggregator = aggregator
        self.identity = identity
        self.outbox: list[bytes] = []
        self.inbox: deque[bytes] = deque()
        self.closed = False

    def send(self, payload: bytes) -> None:
        self.outbox.append(payload)

    def deliver(self) -> None:
        """Hand what was sent to the aggregator, as its loop would, and keep its replies."""
        sent, self.outbox = self.outbox, []
        for payload in sent:
            self.aggregator.receive([self.identity, payload])
        self.aggregator.commit()
        self.aggregator._send(cast("zmq.Socket[bytes]", _Replies(self.inbox)))

    def receive(self, timeout_s: float) -> list[bytes]:
        self.deliver()
        replies, self.inbox = list(self.inbox), deque()
        return replies

    def close(self) -> None:
        self.closed = True
