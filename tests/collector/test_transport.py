"""The transport seam: the in-memory transport delivers to a real in-process aggregator only
when asked (so tests can drop, duplicate or swap the aggregator in between), and the ZeroMQ
transport is a DEALER whose `configure` hook runs before it connects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq
from commscope.collector.transport import MemoryTransport, ZmqTransport
from commscope.model.schema import (
    PROTOCOL_VERSION,
    Ack,
    Hello,
    StreamStart,
    ToCollector,
    Welcome,
)
from commscope.service.aggregate import Aggregator, AggregatorSettings

HELLO = msgspec.msgpack.encode(Hello(protocol=PROTOCOL_VERSION, node="n1", instance="i"))
STREAM = "0123456789abcdef0123456789abcdef"
START = msgspec.msgpack.encode(
    StreamStart(stream=STREAM, node="n1", path="/r/a.json", folder=".", root_name="r")
)
decode = msgspec.msgpack.Decoder(ToCollector).decode


@pytest.fixture
def aggregator(tmp_path: Path) -> Iterator[Aggregator]:
    made = Aggregator(
        AggregatorSettings(listen="inproc://x", out=tmp_path / "o", state=tmp_path / "s")
    )
    yield made
    made.store.close()


def test_memory_transport_delivers_only_when_asked(aggregator: Aggregator) -> None:
    transport = MemoryTransport(aggregator, b"n1")
    transport.send(HELLO)
    transport.send(START)
    assert transport.outbox == [HELLO, START] and aggregator.aggregation.open == {}
    replies = [decode(r) for r in transport.receive(0)]
    assert isinstance(replies[0], Welcome)
    assert replies[1] == Ack(stream=STREAM, next_seq=1, credit=aggregator.settings.credit)
    assert transport.outbox == [] and transport.receive(0) == []


def test_memory_transport_duplicates_are_answered_once_each(aggregator: Aggregator) -> None:
    transport = MemoryTransport(aggregator, b"n1")
    transport.send(START)
    transport.send(START)
    (ack,) = [decode(r) for r in transport.receive(0)]  # one ack per stream per delivery
    assert ack == Ack(stream=STREAM, next_seq=1, credit=aggregator.settings.credit)
    assert aggregator.stats.duplicates == 1


def test_memory_transport_can_swap_its_aggregator(aggregator: Aggregator, tmp_path: Path) -> None:
    transport = MemoryTransport(aggregator, b"n1")
    transport.send(START)
    assert len(transport.receive(0)) == 1
    aggregator.store.close()
    again = Aggregator(aggregator.settings)  # a restart on the same state folder
    try:
        transport.aggregator = again
        transport.send(START)
        (ack,) = [decode(r) for r in transport.receive(0)]
        assert ack.next_seq == 1  # it recovered the stream from its log: a duplicate
    finally:
        again.store.close()


def test_zmq_transport_configures_before_connecting_and_round_trips() -> None:
    context = zmq.Context.instance()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    seen: list[bytes] = []

    def configure(socket: zmq.Socket[bytes]) -> None:
        seen.append(socket.getsockopt(zmq.LAST_ENDPOINT))  # type: ignore[arg-type]
        socket.setsockopt(zmq.RECONNECT_IVL, 123)

    transport = ZmqTransport(f"tcp://127.0.0.1:{port}", "n1", 8, configure)
    try:
        assert seen == [b""]  # not connected yet when the hook ran
        for _ in range(100):  # until connected: before, a send is dropped (IMMEDIATE)
            transport.send(HELLO)
            if router.poll(100):
                break
        identity, payload = router.recv_multipart()
        assert (identity, payload) == (b"n1", HELLO)
        router.send_multipart([identity, b"reply"])
        assert transport.receive(10.0) == [b"reply"]
        assert transport.receive(0) == []
    finally:
        transport.close()
        router.close(0)
