"""Malformed and hostile wire messages: rejected and counted, never a crash. The aggregator
keeps serving honest collectors afterwards and its report is unchanged."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq
from commscope.collector.schema import (
    PROTOCOL_VERSION,
    Ack,
    Batch,
    GpuOp,
    Hello,
    Reject,
    StreamEnd,
    ToCollector,
    Welcome,
)
from service.harness import (
    Aggregate,
    Processes,
    collector_args,
    free_port,
    normalised,
    offline,
    sample_value,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"
STREAM = "ab" * 16


@pytest.fixture
def aggregate(procs: Processes, tmp_path: Path) -> Aggregate:
    return Aggregate(procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "1"))


@pytest.fixture
def peer(aggregate: Aggregate) -> Iterator[zmq.Socket[bytes]]:
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    socket.setsockopt(zmq.ROUTING_ID, b"mallory")
    socket.connect(aggregate.endpoint)
    yield socket
    socket.close(0)
    context.term()


def reply(socket: zmq.Socket[bytes]) -> ToCollector:
    assert socket.poll(10_000), "no reply within 10 s"
    return msgspec.msgpack.Decoder(ToCollector).decode(socket.recv())


def rejected(aggregate: Aggregate, reason: str) -> float | None:
    return sample_value(
        aggregate.metrics_text() or "", "commscope_aggregator_rejected_total", reason=reason
    )


HOSTILE = {
    "undecodable": [b"\xc1\xc1 not msgpack", b"", b"\x81\xa4type"],
    "invalid": [
        msgspec.msgpack.encode({"type": "batch", "stream": "../../etc", "seq": 1, "events": []}),
        msgspec.msgpack.encode({"type": "batch", "stream": STREAM, "seq": -5, "events": []}),
        msgspec.msgpack.encode({"type": "batch", "stream": STREAM, "seq": 2**63, "events": []}),
        msgspec.msgpack.encode({"type": "nope"}),
        msgspec.msgpack.encode([1, 2, 3]),
        msgspec.msgpack.encode(
            {"type": "batch", "stream": STREAM, "seq": 1, "events": [["gpu", "x", "y", 1]]}
        ),
        msgspec.msgpack.encode({"type": "hello", "protocol": 1, "node": "", "instance": "i"}),
    ],
}


def test_malformed_messages_are_counted_by_reason(
    aggregate: Aggregate, peer: zmq.Socket[bytes]
) -> None:
    server = aggregate.start()
    for payloads in HOSTILE.values():
        for payload in payloads:
            peer.send(payload)
    peer.send_multipart([b"one", b"frame", b"too many"])
    for reason, payloads in HOSTILE.items():
        count = len(payloads)
        wait_for(f"{reason} counted", lambda r=reason, n=count: rejected(aggregate, r) == n)
    wait_for("frames counted", lambda: rejected(aggregate, "frames") == 1)
    assert server.popen.poll() is None


def test_a_wrong_protocol_version_is_refused(aggregate: Aggregate, peer: zmq.Socket[bytes]) -> None:
    aggregate.start()
    peer.send(msgspec.msgpack.encode(Hello(protocol=PROTOCOL_VERSION + 7, node="n", instance="i")))
    answer = reply(peer)
    assert (
        isinstance(answer, Reject)
        and f"protocol {PROTOCOL_VERSION + 7} not supported" in answer.reason
    )
    wait_for("the refusal counted", lambda: rejected(aggregate, "protocol") == 1)


def test_records_of_an_unknown_stream_get_position_zero_and_are_not_applied(
    aggregate: Aggregate, peer: zmq.Socket[bytes]
) -> None:
    aggregate.start()
    peer.send(msgspec.msgpack.encode(Hello(protocol=PROTOCOL_VERSION, node="n", instance="i")))
    assert isinstance(reply(peer), Welcome)
    batch = Batch(stream=STREAM, seq=3, events=[GpuOp("compute", 0, 10)])
    peer.send(msgspec.msgpack.encode(batch))
    assert reply(peer) == Ack(stream=STREAM, next_seq=0, done=False, credit=64)
    peer.send(msgspec.msgpack.encode(StreamEnd(stream=STREAM, seq=4)))
    assert reply(peer) == Ack(stream=STREAM, next_seq=0, done=False, credit=64)
    name = "commscope_aggregator_out_of_order_total"
    text = wait_for("both counted", lambda: _when(aggregate, name, 2))
    assert sample_value(text, "commscope_aggregator_events_total") == 0


def _when(aggregate: Aggregate, name: str, value: float) -> str | None:
    text = aggregate.metrics_text() or ""
    return text if sample_value(text, name) == value else None


def test_an_oversized_message_drops_the_peer_not_the_aggregator(
    procs: Processes, aggregate: Aggregate, peer: zmq.Socket[bytes], tmp_path: Path
) -> None:
    server = aggregate.start()
    peer.send(b"\x00" * (257 * 2**20))  # over MAXMSGSIZE: libzmq closes that connection
    watch = tmp_path / "traces"

    shutil.copytree(SAMPLE, watch)
    collector = procs.start(
        "collector", *collector_args(watch, aggregate.endpoint, "n1", tmp_path / "st", "--once")
    )
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    assert normalised(aggregate.report()) == normalised(offline(watch))
