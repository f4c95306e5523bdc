"""Connections that never finish their handshake, for the door tests (and by hand:
`python tests/service/flood.py HOST:PORT PID`, which prints the aggregator's peak RSS).

Each connection either sends nothing, or sends a ZMTP 3.0 greeting asking for CURVE and then
a command frame announcing almost MAXMSGSIZE bytes, and as many of those bytes as the socket
takes: before authentication libzmq holds such a frame in memory. A connection closed by the
aggregator is replaced by a new one, so the pressure lasts as long as the flood.
"""

from __future__ import annotations

import contextlib
import errno
import resource
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

GREETING = (
    b"\xff" + b"\0" * 8 + b"\x7f" + b"\x03\x00" + b"CURVE".ljust(20, b"\0") + b"\0" + b"\0" * 31
)
FRAME = 4 * 2**20 - 64  # under the aggregator's MAXMSGSIZE (4 MiB)
HEAD = GREETING + b"\x06" + struct.pack(">Q", FRAME)  # a long command frame
CHUNK = b"\0" * 65536


def rss_bytes(pid: int) -> int:
    """A process's resident memory (VmRSS)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise LookupError(f"no VmRSS for {pid}")


def raise_open_files() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


@dataclass
class Peer:
    sock: socket.socket
    large: bool  # sends a greeting and a large frame (else nothing at all)
    sent: int = 0


@dataclass
class Flood:
    address: tuple[str, int]
    peers: list[Peer] = field(default_factory=list)
    opened: int = 0
    closed: int = 0  # by the other side

    def open(self, count: int) -> None:
        for _ in range(count):
            self._connect(large=self.opened % 2 == 0)

    def pump(self) -> None:
        """One pass: each large sender sends what its socket takes; a closed one replaced."""
        for n, peer in enumerate(self.peers):
            if peer.large and not self._push(peer):
                peer.sock.close()
                self.closed += 1
                self.peers[n] = self._make(large=True)

    def close(self) -> None:
        for peer in self.peers:
            peer.sock.close()
        self.peers.clear()

    def _connect(self, large: bool) -> None:
        self.peers.append(self._make(large))

    def _make(self, large: bool) -> Peer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        sock.connect_ex(self.address)
        self.opened += 1
        return Peer(sock, large)

    def _push(self, peer: Peer) -> bool:
        """Send what the socket takes; False once the other side closed it."""
        try:
            while peer.sent < len(HEAD) + FRAME:
                data = HEAD[peer.sent :] if peer.sent < len(HEAD) else CHUNK
                peer.sent += peer.sock.send(data)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError as exc:
            return exc.errno == errno.ENOTCONN  # still connecting
        return True


def flood(address: tuple[str, int], count: int, seconds: float, probe: Callable[[], None]) -> Flood:
    """`count` connections, half of them large senders, pumped for `seconds`, `probe()`
    called after each pass."""
    attack = Flood(address)
    try:
        attack.open(count)
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            attack.pump()
            probe()
    except BaseException:
        attack.close()
        raise
    return attack


def main(argv: list[str]) -> None:
    host, _, port = argv[0].rpartition(":")
    pid = int(argv[1])
    raise_open_files()
    base = peak = rss_bytes(pid)

    def watch() -> None:
        nonlocal peak
        with contextlib.suppress(LookupError, OSError):
            peak = max(peak, rss_bytes(pid))

    done = flood((host, int(port)), int(argv[2]) if len(argv) > 2 else 3000, 10.0, watch)
    print(f"base {base / 1e6:.0f} MB, peak {peak / 1e6:.0f} MB, {done.opened} opened")
    done.close()


if __name__ == "__main__":
    main(sys.argv[1:])
