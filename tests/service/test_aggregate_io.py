"""I/O errors inside the aggregator's loop and at its final reports: counted, logged, retried,
never a traceback (the aggregator in process, a real DEALER on loopback)."""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq
from commscope.model.errors import WriteError
from commscope.model.schema import (
    PROTOCOL_VERSION,
    Ack,
    EndOfRun,
    Hello,
    RunAck,
    StreamEnd,
    StreamStart,
    ToCollector,
)
from commscope.service import aggregate, ending
from commscope.service.aggregate import Aggregator, AggregatorSettings

pytestmark = pytest.mark.timeout(120)
STREAM = "ab" * 16


def failing(times: int, call: Callable[..., Any], as_write: bool = False) -> Callable[..., Any]:
    """`call`, raising EMFILE the first `times` times (as the reports' writer says it: a
    WriteError carrying the OSError, with `as_write`)."""
    left = [times]

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if left[0] > 0:
            left[0] -= 1
            error = OSError(errno.EMFILE, "Too many open files")
            raise WriteError(f"cannot write: {error.strerror}", error) if as_write else error
        return call(*args, **kwargs)

    return wrapped


def until_answered(socket: zmq.Socket[bytes], message: object, done: Callable[[Any], bool]) -> None:
    """Send `message` until a reply satisfies `done` (a collector resends what is unacked)."""
    decoder = msgspec.msgpack.Decoder(ToCollector)
    for _ in range(100):
        socket.send(msgspec.msgpack.encode(message))
        while socket.poll(200):
            if done(decoder.decode(socket.recv())):
                return
    raise AssertionError(f"no answer to {message}")


def test_io_errors_in_the_loop_and_the_reports_are_survived(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store fails twice (a record's write), the reports once: each counted and retried;
    the stream still ends whole, the reports are written, the run ends normally."""
    monkeypatch.setattr(aggregate, "IO_RETRY_S", (0.01, 0.05))
    monkeypatch.setattr(ending, "write_reports", failing(1, ending.write_reports, True))
    settings = AggregatorSettings(
        listen="tcp://127.0.0.1:*", out=tmp_path / "out", state=tmp_path / "st", expect_nodes=1
    )
    agg = Aggregator(settings)
    monkeypatch.setattr(agg.store, "append", failing(2, agg.store.append))
    stop = threading.Event()
    loop = threading.Thread(target=agg.run, args=(stop,), daemon=True)
    loop.start()
    context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.linger = 0
    socket.routing_id = b"n1"
    try:
        for _ in range(100):
            if agg.socket is not None and agg.door is not None:
                break
            stop.wait(0.1)
        assert agg.socket is not None
        socket.connect(agg.socket.getsockopt_string(zmq.LAST_ENDPOINT))
        start = StreamStart(stream=STREAM, node="n1", path="/w/r0.json", folder=".", root_name="w")
        until_answered(socket, Hello(protocol=PROTOCOL_VERSION, node="n1", instance="i"), bool)
        until_answered(socket, start, lambda a: isinstance(a, Ack) and a.next_seq == 1)
        end = StreamEnd(stream=STREAM, seq=1, error="unreadable")
        until_answered(socket, end, lambda a: isinstance(a, Ack) and a.done)
        until_answered(socket, EndOfRun(node="n1", instance="i"), lambda a: isinstance(a, RunAck))
        loop.join(60)
        assert not loop.is_alive()
    finally:
        stop.set()
        loop.join(10)
        socket.close(0)
        context.term()
    assert agg.stats.io_errors == {"loop": 2, "reports": 1}
    assert len(list((tmp_path / "out").glob("*.json"))) == 1
