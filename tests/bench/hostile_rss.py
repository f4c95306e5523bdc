"""The aggregator's peak RSS under hostile traffic (the figure docs/service.md quotes).

A real `commscope aggregate` on loopback; from this process, DEALER sockets send, in order:
random bytes, Hellos nested 1,000 deep, six 200 MB frames (over MAXMSGSIZE: libzmq drops the
connection), fifty 1.9 MB well-formed Batches of a stream never started (under the message
limit: judged on their head, never decoded), messages over the limit, 3,000 StreamStarts
from 3,000 routing ids, Hellos of 3,000 node names, a seq of 2^62 and replays. The figure:
the aggregator's own VmHWM (/proc/PID/status) idle, then after each attack.

    .venv/bin/python tests/bench/hostile_rss.py
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import zmq
from commscope.model.schema import PROTOCOL_VERSION, GpuOp, Hello, StreamStart
from commscope.service.aggregate import MAX_MESSAGE_BYTES

MB = 2**20


def hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def field(key: str, value: object) -> bytes:
    return msgspec.msgpack.encode(key) + msgspec.msgpack.encode(value)


def unknown_batch(size: int) -> bytes:
    event = msgspec.msgpack.encode(GpuOp("compute", 2**40, 2**30, "gemm"))
    count = (size - 100) // len(event)
    head = field("type", "batch") + field("stream", "ab" * 16) + field("seq", 7)
    return (
        b"\x84"
        + head
        + msgspec.msgpack.encode("events")
        + b"\xdd"
        + count.to_bytes(4, "big")
        + event * count
    )


def deep_hello() -> bytes:
    body = field("type", "hello") + field("protocol", PROTOCOL_VERSION) + field("node", "x")
    return (
        b"\x85"
        + body
        + field("instance", "i")
        + msgspec.msgpack.encode("x")
        + b"\x91" * 1000
        + b"\x01"
    )


def attacks(
    endpoint: str, context: zmq.Context[zmq.Socket[bytes]]
) -> dict[str, Callable[[], None]]:
    def dealer(identity: str) -> zmq.Socket[bytes]:
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 2000)
        sock.setsockopt(zmq.ROUTING_ID, identity.encode())
        sock.connect(endpoint)
        return sock

    def burst(identity: str, payloads: list[bytes] | Callable[[], list[bytes]]) -> None:
        sock = dealer(identity)
        for payload in payloads() if callable(payloads) else payloads:
            sock.send(payload)
        sock.close()

    def many(count: int, make: Callable[[int], bytes]) -> None:
        for first in range(0, count, 200):  # 200 sockets at a time (file descriptors)
            socks = [dealer(f"node{n}") for n in range(first, min(first + 200, count))]
            for n, sock in enumerate(socks, first):
                sock.send(make(n))
            time.sleep(0.5)
            for sock in socks:
                sock.close(0)

    start = lambda n: msgspec.msgpack.encode(  # noqa: E731
        StreamStart(
            stream=f"{n:032x}", node=f"node{n}", path=f"/r/{n}.json", folder=".", root_name="r"
        )
    )

    def hello(n: int) -> bytes:
        return msgspec.msgpack.encode(
            Hello(protocol=PROTOCOL_VERSION, node=f"node{n}", instance="i")
        )

    return {
        "1,000 random-byte messages": lambda: burst("m", [os.urandom(64) for _ in range(1000)]),
        "1,000 Hellos nested 1,000 deep": lambda: burst("m", [deep_hello()] * 1000),
        "6 frames of 200 MB": lambda: (
            [burst(f"big{n}", [bytes(200 * MB)]) for n in range(6)] and None
        ),
        "50 Batches of 1.9 MB, unknown stream": lambda: burst(
            "m", [unknown_batch(MAX_MESSAGE_BYTES - 2**16)] * 50
        ),
        "20 messages over the limit": lambda: burst("m", [bytes(MAX_MESSAGE_BYTES + 1)] * 20),
        "3,000 StreamStarts, 3,000 peers": lambda: many(3000, start),
        "Hellos of 3,000 node names": lambda: many(3000, hello),
    }


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        listen, metrics = free_port(), free_port()
        endpoint = f"tcp://127.0.0.1:{listen}"
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "commscope.service.cli",
                "aggregate",
                "--listen",
                endpoint,
                "--out",
                tmp,
                "--linger",
                "0",
                "--metrics-port",
                str(metrics),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(3)
            print(f"idle: VmHWM {hwm_mb(server.pid):.0f} MB")
            context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
            for name, attack in attacks(endpoint, context).items():
                attack()
                time.sleep(2)  # let it drain
                alive = "alive" if server.poll() is None else f"EXITED {server.returncode}"
                print(f"after {name}: VmHWM {hwm_mb(server.pid):.0f} MB ({alive})")
            context.term()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
