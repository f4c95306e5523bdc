"""Malformed and hostile wire messages: rejected and counted, never a crash. The aggregator
keeps serving honest collectors afterwards and its report is unchanged. First over a real
socket (a process), then each attack in process through `Aggregator.receive` (fake clock),
and last when the run ends and what it lost."""

from __future__ import annotations

import math
import os
import shutil
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest
import zmq
from commscope.exporters import jsonreport
from commscope.model.schema import (
    MAX_FACT_ITEMS,
    MAX_RANKS,
    PROTOCOL_VERSION,
    RUN_BYTES,
    Ack,
    Batch,
    CollectorStats,
    CommOp,
    EndOfRun,
    Facts,
    FileStats,
    GpuOp,
    GpuTimeKey,
    Heartbeat,
    Hello,
    Record,
    Reject,
    StreamEnd,
    StreamStart,
    ToCollector,
    TraceMeta,
    Welcome,
)
from commscope.pipeline.edge import Reduction
from commscope.pipeline.report import Options
from commscope.service.aggregate import MAX_MESSAGE_BYTES, Aggregator, AggregatorSettings
from commscope.service.links import own_stream
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

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
        msgspec.msgpack.encode({"type": "batch", "stream": STREAM, "seq": "one", "events": []}),
        msgspec.msgpack.encode(
            {"type": "hello", "protocol": PROTOCOL_VERSION, "node": "", "instance": "i"}
        ),
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
        and f"collector protocol {PROTOCOL_VERSION + 7}, aggregator protocol {PROTOCOL_VERSION}"
        in answer.reason
    )
    wait_for("the refusal counted", lambda: rejected(aggregate, "protocol") == 1)


def test_records_of_an_unknown_stream_get_position_zero_and_are_not_applied(
    aggregate: Aggregate, peer: zmq.Socket[bytes]
) -> None:
    aggregate.start()
    peer.send(
        msgspec.msgpack.encode(Hello(protocol=PROTOCOL_VERSION, node="mallory", instance="i"))
    )
    assert isinstance(reply(peer), Welcome)
    part = Facts(stream=STREAM, seq=3, calls=[CommOp("AllReduce", 0, 10, 8, 2, True)])
    peer.send(msgspec.msgpack.encode(part))
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
    """Over the limit: refused and counted; over twice the limit (MAXMSGSIZE): libzmq drops
    the connection, which the socket monitor counts."""
    server = aggregate.start()
    peer.send(bytes(MAX_MESSAGE_BYTES + 1))
    wait_for("too large counted", lambda: rejected(aggregate, "too_large") == 1)
    peer.send(bytes(2 * MAX_MESSAGE_BYTES + 1))
    wait_for("the drop counted", lambda: (rejected(aggregate, "disconnected") or 0) >= 1)
    watch = tmp_path / "traces"

    shutil.copytree(SAMPLE, watch)
    collector = procs.start(
        "collector", *collector_args(watch, aggregate.endpoint, "n1", tmp_path / "st", "--once")
    )
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    assert normalised(aggregate.report()) == normalised(offline(watch))


# ---------------------------------------------------------------- in process, one message each
# Each attack goes through `Aggregator.receive` with a fake clock; the refusal is counted by
# reason and nothing is raised. `peer` is the node a connection proved (CurveZMQ's User-Id);
# without it the routing id stands for the node.

NODE = "n1"
LEGIT = "0123456789abcdef0123456789abcdef"
FORGED = "fedcba9876543210fedcba9876543210"
LEGIT_KEY = own_stream(NODE, LEGIT)  # the aggregator's key of NODE's stream LEGIT
LEGIT_EVENTS = Reduction()
LEGIT_EVENTS.add_all(
    [GpuOp("compute", 0, 100), CommOp("AllReduce", 50, 100, 4096, 1, True, "0", 1)]
)
LEGIT_RUN: list[Record] = [
    StreamStart(stream=LEGIT, node=NODE, path="/run/w/rank0.json", folder="w", root_name="run"),
    *LEGIT_EVENTS.facts(LEGIT, 1),  # one record
    StreamEnd(stream=LEGIT, seq=2, meta=TraceMeta(rank=0, world_size=1, backend="nccl")),
]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def agg(tmp_path: Path) -> Iterator[Aggregator]:
    settings = AggregatorSettings(
        listen="tcp://127.0.0.1:*", out=tmp_path / "out", state=tmp_path / "st"
    )
    aggregator = Aggregator(settings, clock=Clock())
    yield aggregator
    aggregator.store.close()


def capped(tmp_path: Path, **caps: int) -> Aggregator:
    settings = AggregatorSettings(
        listen="tcp://127.0.0.1:*", out=tmp_path / "out", state=tmp_path / "st", **caps
    )
    return Aggregator(settings, clock=Clock())


def send(aggregator: Aggregator, message: object, peer: str = NODE) -> None:
    aggregator.receive([peer.encode(), msgspec.msgpack.encode(message)], peer=peer)


def refusals(aggregator: Aggregator) -> dict[str, int]:
    return {k: v for k, v in aggregator.stats.rejected.items() if v}


def report_of(aggregator: Aggregator) -> dict[str, Any]:
    aggregator.commit()
    return jsonreport.to_document(aggregator.aggregation.report(Options(), final=True))


def map_payload(fields: dict[str, object], raw_tail: bytes = b"") -> bytes:
    """A msgpack map of `fields`, plus one more key "x" whose value is `raw_tail` as is."""
    body = b"".join(
        msgspec.msgpack.encode(k) + msgspec.msgpack.encode(v) for k, v in fields.items()
    )
    extra = msgspec.msgpack.encode("x") + raw_tail if raw_tail else b""
    return bytes([0x80 | (len(fields) + bool(raw_tail))]) + body + extra


def test_a_hello_nested_a_thousand_deep_is_counted_not_raised(agg: Aggregator) -> None:
    hello = {"type": "hello", "protocol": PROTOCOL_VERSION, "node": NODE, "instance": "i"}
    payload = map_payload(hello, b"\x91" * 1000 + b"\x01")  # [[[…1]]], 1,000 deep
    assert len(payload) < 1100
    for _ in range(10):
        agg.receive([NODE.encode(), payload])
    assert refusals(agg) == {"undecodable": 10}


def facts_payload(calls: int) -> bytes:
    """A well-formed Facts of `calls` CommOps for a stream never started (built as bytes)."""
    call = msgspec.msgpack.encode(CommOp("AllReduce", 2**40, 2**30, None, None, True))
    head = map_payload({"type": "facts", "stream": FORGED, "seq": 7})
    array = b"\xdd" + calls.to_bytes(4, "big")
    return bytes([head[0] + 1]) + head[1:] + msgspec.msgpack.encode("calls") + array + call * calls


def peak_while(action: Callable[[], object]) -> int:
    """Peak bytes Python allocated while `action` ran (tracemalloc)."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_facts_of_an_unknown_stream_are_judged_on_their_head_not_decoded(agg: Aggregator) -> None:
    """1.9 MB, 40,000 calls (more than a Facts may hold): the head says it is ahead of its
    stream, so it is acknowledged at 0 and never decoded. Decoding it whole takes over 10 MB
    (measured the same way below), receiving it under 64 KB."""
    payload = facts_payload(40_000)
    assert len(payload) < MAX_MESSAGE_BYTES
    whole = peak_while(lambda: msgspec.msgpack.decode(payload))
    peak = peak_while(lambda: agg.receive([NODE.encode(), payload], peer=NODE))
    assert whole > 10 * 2**20 and peak < 64 * 2**10
    assert (agg.stats.out_of_order, refusals(agg)) == (1, {})


def test_a_message_over_the_size_limit_is_refused_before_any_decoding(agg: Aggregator) -> None:
    """A well-formed 200 MB Facts (8 million calls): refused on its length, nothing of it
    decoded (a real socket never even delivers it: libzmq drops over twice the limit)."""
    payload = facts_payload(8_000_000)
    assert len(payload) > 200 * 10**6
    peak = peak_while(lambda: agg.receive([NODE.encode(), payload]))
    assert peak < 64 * 2**10 and refusals(agg) == {"too_large": 1}


def test_the_size_limit_holds_the_largest_facts_a_collector_sends() -> None:
    """MAX_FACT_ITEMS items, each as large as an item gets: a CommOp with a 256-character
    process group (a run, a thread's entry or a step is smaller), fit the limit."""
    op = CommOp("ReduceScatter", 2**62, 2**62, 2**62, 2**24, True, "p" * 256, 2**62, "pg_config")
    kernel_ns: dict[Any, int] = dict.fromkeys(get_args(GpuTimeKey), 2**62)
    part = Facts(stream=LEGIT, seq=2**62, calls=[op] * MAX_FACT_ITEMS, kernel_ns=kernel_ns)
    assert len(msgspec.msgpack.encode(part)) < MAX_MESSAGE_BYTES


def test_a_protocol_4_batch_is_refused_undecoded_with_both_versions(agg: Aggregator) -> None:
    """An old collector streams events in Batches: refused on its head (its events never
    decoded, whatever they are), counted, and answered with both protocol versions."""
    for record in LEGIT_RUN[:1]:
        send(agg, record)
    send(agg, Batch(stream=LEGIT, seq=1, events=[GpuOp("compute", 0, 1)] * 10))
    assert refusals(agg) == {"protocol": 1}
    assert agg.aggregation.position(LEGIT_KEY) == (1, False)
    ((_, answer),) = agg._replies
    assert answer == Reject(
        reason=f"collector protocol 4 (event batches), aggregator protocol {PROTOCOL_VERSION}: "
        "run the same commscope on both"
    )


@pytest.mark.parametrize(
    "message",
    [
        StreamEnd(stream=LEGIT, seq=2, meta=TraceMeta(world_size=10**12)),
        StreamEnd(stream=LEGIT, seq=2, meta=TraceMeta(rank=10**12)),
        StreamEnd(stream=LEGIT, seq=2, meta=TraceMeta(pg_sizes={"0": 10**12})),
        StreamEnd(stream=LEGIT, seq=2, stats=FileStats(dropped={"invented": 1})),  # type: ignore[dict-item]
        Facts(stream=LEGIT, seq=2, calls=[CommOp("Evil", 0, 1, 8, 2, True)]),  # type: ignore[arg-type]
        Facts(stream=LEGIT, seq=2, kernel_ns={"invented": 1}),  # type: ignore[dict-item]
        Facts(stream=LEGIT, seq=2, runs={"rocket": b""}),  # type: ignore[dict-item]
        Facts(stream=LEGIT, seq=2, calls=[CommOp("AllReduce", 0, 1, 8, 2, True)] * 4097),
        Facts(stream=LEGIT, seq=2, calls=[CommOp("AllReduce", 0, 1, 8, 2, True, "a\nb")]),
        Facts(stream=LEGIT, seq=2, calls=[CommOp("AllToAll", 0, 1, 8, 2, True, dtype="x" * 257)]),
        Facts(stream=LEGIT, seq=2, calls=[CommOp("AllToAll", 0, 1, 8, 2, True, in_splits=(-1,))]),
        Facts(
            stream=LEGIT,
            seq=2,
            calls=[CommOp("AllToAll", 0, 1, 8, 2, True, out_splits=(1,) * 1025)],
        ),
        Facts(stream=LEGIT, seq=2, runs={"compute": bytes(RUN_BYTES * (MAX_FACT_ITEMS + 1))}),
        Facts(stream=LEGIT, seq=2, busy={1: bytes(RUN_BYTES + 1)}),
    ],
    ids=[
        "world-1e12",
        "rank-1e12",
        "group-1e12",
        "drop-reason",
        "collective",
        "gpu-time",
        "set-name",
        "calls-too-many",
        "control-character",
        "dtype-too-long",
        "split-negative",
        "splits-too-many",
        "runs-too-many",
        "runs-not-whole",
    ],
)
def test_values_out_of_bounds_are_refused_at_decode(agg: Aggregator, message: object) -> None:
    """Sent where they would be applied (the next record of the peer's own open stream)."""
    for record in LEGIT_RUN[:2]:
        send(agg, record)
    send(agg, message)
    assert refusals(agg) == {"invalid": 1}
    assert agg.aggregation.position(LEGIT_KEY) == (2, False)


@pytest.mark.parametrize(
    "message",
    [
        {
            "type": "start",
            "stream": LEGIT,
            "node": NODE,
            "path": "p",
            "folder": ".",
            "root_name": "r",
            "name_rank": 10**12,
        },
        {"type": "heartbeat", "node": NODE, "stats": {"lag_s": math.inf}},
        {"type": "heartbeat", "node": NODE, "stats": {"lag_s": math.nan}},
        {"type": "heartbeat", "node": NODE, "stats": {"dropped": {"invented": 1}}},
        {"type": "heartbeat", "node": "a b", "stats": {}},
        {"type": "heartbeat", "node": "n" * 254, "stats": {}},
        {"type": "hello", "protocol": PROTOCOL_VERSION, "node": NODE, "instance": "x" * 65},
        {"type": "facts", "stream": LEGIT, "seq": 2**63},
        {"type": "facts", "stream": LEGIT, "seq": 2**62 + 1},
    ],
    ids=[
        "name-rank",
        "lag-inf",
        "lag-nan",
        "drop-reason",
        "node-space",
        "node-long",
        "instance",
        "seq-2^63",
        "seq-over",
    ],
)
def test_messages_out_of_bounds_are_refused(agg: Aggregator, message: dict[str, object]) -> None:
    agg.receive([NODE.encode(), msgspec.msgpack.encode(message)], peer=NODE)
    assert refusals(agg) == {"invalid": 1}
    assert (agg.heartbeats, agg.aggregation.open) == ({}, {})


def test_the_highest_rank_and_world_finish_a_report_without_building_the_world(
    agg: Aggregator, tmp_path: Path
) -> None:
    """Rank 2^24-1 of a 2^24-rank world: the window is incomplete (one rank of 16M), found
    without a set of 16M ranks (peak under 1 MB), and the final report is written."""
    start, part, end = LEGIT_RUN
    for record in (
        start,
        part,
        replace(end, meta=TraceMeta(rank=MAX_RANKS - 1, world_size=MAX_RANKS)),
    ):
        send(agg, record)
    agg.commit()
    complete: list[str] = []
    assert peak_while(lambda: complete.extend(agg.aggregation.complete_windows())) < 2**20
    assert complete == []
    report = agg._final()
    assert report.ranks == [MAX_RANKS - 1] and len(list((tmp_path / "out").iterdir())) == 3


def test_replays_are_duplicates_and_change_nothing(agg: Aggregator, tmp_path: Path) -> None:
    for record in LEGIT_RUN:
        send(agg, record)
    once = report_of(agg)
    for _ in range(3):
        for record in LEGIT_RUN:
            send(agg, record)
    assert (agg.stats.duplicates, refusals(agg)) == (9, {})
    assert report_of(agg) == once


def test_a_stranger_beside_a_run_changes_nothing(tmp_path: Path) -> None:
    """Mallory (a connection proved to be another node) forges n1's stream start for n1's
    path, sends n1's heartbeat and end-of-run: each refused; what it writes under n1's stream
    id lands in mallory's own (never started) stream. n1's report is the one it has alone."""
    alone = capped(tmp_path / "alone")
    for record in LEGIT_RUN:
        send(alone, record)
    expected = report_of(alone)
    alone.store.close()
    agg = capped(tmp_path / "beside")
    try:
        send(agg, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
        send(agg, LEGIT_RUN[0])
        huge = CommOp("AllReduce", 0, 10, 100 * 10**12, 1, True, "0", 1)
        attacks: list[object] = [
            replace(LEGIT_RUN[0], stream=FORGED),  # n1's path under a new stream: retires n1's?
            Facts(stream=LEGIT, seq=1, calls=[huge]),  # 100 TB into n1's stream
            Heartbeat(node=NODE, stats=CollectorStats(files_seen=999)),
            EndOfRun(node=NODE),
        ]
        for attack in attacks:
            send(agg, attack, peer="mallory")
        for record in LEGIT_RUN[1:]:
            send(agg, record)
        assert (refusals(agg), agg.stats.out_of_order) == ({"not_own_node": 3}, 1)
        assert (agg.nodes, agg.heartbeats, agg.aggregation.retired) == ({NODE: False}, {}, set())
        assert report_of(agg) == expected
    finally:
        agg.store.close()


def test_a_stream_id_claimed_first_by_another_node_stays_the_owners(agg: Aggregator) -> None:
    """Mallory, proved by its key, starts n1's next stream id (and n1's path) as its own
    before n1 does: that is mallory's stream; n1's stream of the same id still runs whole."""
    send(agg, replace(LEGIT_RUN[0], node="mallory"), peer="mallory")
    for record in LEGIT_RUN:
        send(agg, record)
    assert refusals(agg) == {}
    assert agg.aggregation.position(LEGIT_KEY) == (len(LEGIT_RUN), True)
    assert agg.aggregation.owner(own_stream("mallory", LEGIT)) == "mallory"
    assert agg.aggregation.finished[LEGIT_KEY].node == NODE


def test_a_forged_stream_for_a_finished_path_cannot_retire_it(agg: Aggregator) -> None:
    for record in LEGIT_RUN:
        send(agg, record)
    send(agg, replace(LEGIT_RUN[0], stream=FORGED), peer="mallory")
    send(agg, replace(LEGIT_RUN[0], stream=FORGED, node="mallory"), peer="mallory")  # its own
    assert agg.aggregation.retired == set() and LEGIT_KEY in agg.aggregation.finished
    assert refusals(agg) == {"not_own_node": 1}


def test_without_a_proved_peer_the_routing_id_stands_for_the_node(agg: Aggregator) -> None:
    agg.receive([b"mallory", msgspec.msgpack.encode(EndOfRun(node=NODE))])
    agg.receive([NODE.encode(), msgspec.msgpack.encode(EndOfRun(node=NODE))])
    assert (agg.nodes, refusals(agg)) == ({NODE: True}, {"not_own_node": 1})


def test_a_proved_peer_may_not_use_another_nodes_routing_id(agg: Aggregator) -> None:
    """With ROUTER_HANDOVER a routing id can be taken over: mallory, proved by its key, takes
    the routing id n1 spoke from; what it sends under that id is refused and counted, and
    n1's reply waiting for that id is not sent (it would reach mallory)."""
    hello = Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i")
    agg.receive([b"r1", msgspec.msgpack.encode(hello)], NODE)
    agg.receive([b"r1", msgspec.msgpack.encode(EndOfRun(node="mallory"))], "mallory")
    assert (agg.nodes, refusals(agg)) == ({NODE: False}, {"routing_id_taken": 1})
    assert [agg.links.routable(identity) for identity, _ in agg._replies] == [False]
    agg.receive([b"r2", msgspec.msgpack.encode(hello)], NODE)  # n1 again, wherever it is now
    assert [agg.links.routable(identity) for identity, _ in agg._replies] == [False, True]


def starts(count: int, node: str = NODE) -> list[StreamStart]:
    return [
        StreamStart(stream=f"{n:032x}", node=node, path=f"/r/{n}.json", folder=".", root_name="r")
        for n in range(count)
    ]


def test_open_streams_are_capped_per_node(tmp_path: Path) -> None:
    agg = capped(tmp_path, max_streams_per_node=256)
    try:
        for start in starts(300):
            send(agg, start)
        assert (len(agg.aggregation.open), refusals(agg)) == (256, {"too_many_streams": 44})
    finally:
        agg.store.close()


def test_three_thousand_stream_starts_keep_one_journal_handle(tmp_path: Path) -> None:
    """3,000 streams from 3,000 nodes (each its own peer): 1,000 open (the total cap), the
    rest refused; one journal file open, each accepted stream's start in it."""
    agg = capped(tmp_path, max_streams=1000, max_nodes=5000)
    try:
        for n, start in enumerate(starts(3000)):
            node = f"node{n}"
            send(agg, replace(start, node=node), peer=node)
            assert agg.store.open_handles() <= 1
        agg.commit()
        assert (len(agg.aggregation.open), refusals(agg)) == (1000, {"too_many_streams": 2000})
        assert len([stream for stream, _ in agg.store.logs()]) == 1000
    finally:
        agg.store.close()


def test_node_names_are_capped(tmp_path: Path) -> None:
    """Hellos and heartbeats of 3,000 names: 1,024 nodes kept; the newcomers refused (a
    Hello with a Reject saying why), the known ones still served."""
    agg = capped(tmp_path, max_nodes=1024)
    try:
        for n in range(3000):
            node = f"node{n}"
            send(agg, Hello(protocol=PROTOCOL_VERSION, node=node, instance="i"), peer=node)
            send(agg, Heartbeat(node=f"beat{n}", stats=CollectorStats()), peer=f"beat{n}")
        assert (len(agg.nodes), len(agg.heartbeats)) == (1024, 1024)
        assert refusals(agg) == {"too_many_nodes": 2 * (3000 - 1024)}
        replies = [reply for _, reply in agg._replies]
        assert sum(isinstance(r, Welcome) for r in replies) == 1024
        assert {r.reason for r in replies if isinstance(r, Reject)} == {"more than 1024 nodes"}
        send(agg, Hello(protocol=PROTOCOL_VERSION, node="node0", instance="i"), peer="node0")
        assert isinstance(agg._replies[-1][1], Welcome)
    finally:
        agg.store.close()


# ---------------------------------------------------------------- when the run ends, what was lost


def test_one_collectors_end_of_run_does_not_end_the_run_while_another_works(
    agg: Aggregator,
) -> None:
    """Without --expect-nodes: n1 ends; n2 (never seen to say Hello: it came before this
    aggregator's state) still sends heartbeats, then has a stream open; once its heartbeat
    is 30 s old and its stream gone, n1's end-of-run ends the run, and n2 is lost."""
    clock = agg.clock
    assert isinstance(clock, Clock)
    send(agg, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
    send(agg, EndOfRun(node=NODE))
    send(agg, Heartbeat(node="n2", stats=CollectorStats()), peer="n2")
    assert not agg._over()
    clock.now += 29
    send(agg, replace(LEGIT_RUN[0], node="n2"), peer="n2")
    clock.now += 2  # heartbeat 31 s old, stream still open
    assert not agg._over()
    agg.aggregation.open.clear()
    assert agg._over()
    assert agg._lost() == ["n2: no end-of-run"]


def test_a_file_its_collector_could_not_read_is_lost(agg: Aggregator) -> None:
    """A stream that ends lost (every read failed, StreamEnd.lost) is finished, named in the
    report's skipped inputs and among what the aggregator lost (its exit 6); one that ends
    merely unusable (a corrupt file, lost False) is skipped, not lost."""
    send(agg, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
    why = "lost after 3 reads: unreadable (Permission denied)"
    send(agg, LEGIT_RUN[0])
    send(agg, StreamEnd(stream=LEGIT, seq=1, error=why, lost=True))
    send(agg, EndOfRun(node=NODE))
    assert agg._over()
    assert agg._lost() == [f"{NODE}: /run/w/rank0.json {why}"]
    skipped = report_of(agg)["inputs"]["skipped"]
    assert skipped == [{"path": "/run/w/rank0.json", "reason": why}]


def test_a_file_merely_unusable_is_not_lost(agg: Aggregator) -> None:
    send(agg, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
    send(agg, LEGIT_RUN[0])
    send(agg, StreamEnd(stream=LEGIT, seq=1, error="truncated: unexpected end of file"))
    send(agg, EndOfRun(node=NODE))
    assert agg._over() and agg._lost() == []


def test_with_expected_nodes_their_end_of_run_ends_the_run(tmp_path: Path) -> None:
    agg = capped(tmp_path, expect_nodes=1)
    try:
        send(agg, Heartbeat(node="n2", stats=CollectorStats()), peer="n2")
        send(agg, EndOfRun(node=NODE))
        assert agg._over()
    finally:
        agg.store.close()


def test_a_collector_silent_past_the_end_grace_no_longer_holds_the_run(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """--expect-nodes 2: n1 ends; n2 opened a stream, then exited (its drain deadline) without
    end-of-run. Its last message at t = 1000 s; with the default grace (300 s) the run still
    waits at 1299 s and is over at 1300 s: the final report names n2 (and its file, unfinished,
    is skipped), the log says so once."""
    agg = capped(tmp_path, expect_nodes=2)
    clock = agg.clock
    assert isinstance(clock, Clock) and agg.settings.end_grace_s == 300
    try:
        send(agg, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
        send(agg, Hello(protocol=PROTOCOL_VERSION, node="n2", instance="j"), peer="n2")
        send(agg, replace(LEGIT_RUN[0], node="n2"), peer="n2")
        clock.now += 200
        send(agg, EndOfRun(node=NODE))
        clock.now += 99  # n2 silent 299 s
        assert not agg._over()
        clock.now += 1
        assert agg._over() and agg._over()
        silent = [r for r in caplog.records if r.msg.startswith("collector silent")]
        assert [(r.node, r.silent_s) for r in silent] == [("n2", 300.0)]  # type: ignore[attr-defined]
        report = agg._final()
        assert agg.lost == ["n2: /run/w/rank0.json unfinished", "n2: no end-of-run"]
        assert report.inputs.unended_collectors == ["n2"]
        assert [s.path for s in report.inputs.skipped] == ["/run/w/rank0.json"]
    finally:
        agg.store.close()


def test_a_heartbeat_keeps_a_quiet_collector_waited_for(tmp_path: Path) -> None:
    """n2 sends nothing but a heartbeat every 200 s (a job between profiling windows): 1,000 s
    after n1 ended the run still waits for it; once n2 stops, 300 s later it does not."""
    agg = capped(tmp_path, expect_nodes=2)
    clock = agg.clock
    assert isinstance(clock, Clock)
    try:
        send(agg, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
        send(agg, EndOfRun(node=NODE))
        send(agg, Hello(protocol=PROTOCOL_VERSION, node="n2", instance="j"), peer="n2")
        for _ in range(5):
            clock.now += 200
            send(agg, Heartbeat(node="n2", stats=CollectorStats()), peer="n2")
            assert not agg._over()
        clock.now += 300
        assert agg._over()
    finally:
        agg.store.close()


def test_a_silent_collector_heard_again_is_waited_for_again(agg: Aggregator) -> None:
    """Without --expect-nodes too, a silent node stops holding the run (before, a node that
    said Hello held it for ever); heard again (a restarted collector's Hello), it holds it."""
    clock = agg.clock
    assert isinstance(clock, Clock)
    send(agg, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
    send(agg, Hello(protocol=PROTOCOL_VERSION, node="n2", instance="j"), peer="n2")
    send(agg, EndOfRun(node=NODE))
    clock.now += 300
    assert agg._over()
    send(agg, Hello(protocol=PROTOCOL_VERSION, node="n2", instance="k"), peer="n2")
    assert not agg._over()


def test_a_restarted_aggregator_gives_its_stored_nodes_the_grace_from_its_start(
    tmp_path: Path,
) -> None:
    """The state says n1 ended and n2 did not: the new aggregator waits 300 s from its start
    for n2 (it may still be draining), then ends."""
    first = capped(tmp_path, expect_nodes=2)
    send(first, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
    send(first, Hello(protocol=PROTOCOL_VERSION, node="n2", instance="j"), peer="n2")
    send(first, EndOfRun(node=NODE))
    first.store.close()
    agg = capped(tmp_path, expect_nodes=2)
    clock = agg.clock
    assert isinstance(clock, Clock)
    try:
        clock.now += 299
        assert not agg._over()
        clock.now += 1
        assert agg._over()
    finally:
        agg.store.close()


def test_streams_unfinished_at_the_end_are_lost(agg: Aggregator) -> None:
    send(agg, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
    for record in LEGIT_RUN[:2]:
        send(agg, record)
    send(agg, EndOfRun(node=NODE))
    agg._final()
    assert agg.lost == [f"{NODE}: /run/w/rank0.json unfinished"]


def test_nothing_is_lost_when_every_stream_ended_and_every_collector_ended(
    agg: Aggregator,
) -> None:
    send(agg, Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
    for record in [*LEGIT_RUN, EndOfRun(node=NODE)]:
        send(agg, record)
    agg.commit()
    assert agg._over()
    agg._final()
    assert agg.lost == []


def test_many_routing_ids_speaking_for_the_collector_change_nothing(
    procs: Processes, aggregate: Aggregate, tmp_path: Path
) -> None:
    """500 connections, each its own routing id, send random bytes and n1's stream start,
    heartbeat and end-of-run: all refused and counted; n1's run beside them reports exactly
    what `commscope report` says of its files."""
    aggregate.extra = (*aggregate.extra, "--max-handshakes", "1000")  # not about the cap
    server = aggregate.start()
    context = zmq.Context()
    forged = [
        os.urandom(64),
        msgspec.msgpack.encode(replace(LEGIT_RUN[0], node="n1")),
        msgspec.msgpack.encode(Heartbeat(node="n1", stats=CollectorStats(files_seen=9))),
        msgspec.msgpack.encode(EndOfRun(node="n1")),
    ]
    strangers = []
    for n in range(500):
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTING_ID, f"s{n}".encode())
        sock.connect(aggregate.endpoint)
        for payload in forged:
            sock.send(payload)
        strangers.append(sock)
    try:
        wait_for("every forgery counted", lambda: rejected(aggregate, "not_own_node") == 1500)
        watch = tmp_path / "traces"
        shutil.copytree(SAMPLE, watch)
        args = collector_args(watch, aggregate.endpoint, "n1", tmp_path / "st", "--once")
        collector = procs.start("collector", *args)
        assert collector.wait(60) == 0, collector.tail()
        assert server.wait(60) == 0, server.tail()
        assert normalised(aggregate.report()) == normalised(offline(watch))
    finally:
        for sock in strangers:
            sock.close(0)
        context.term()


# ---------------------------------------------------------------- anything at all

JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats()
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    ["type", "stream", "seq", "node", "events", "stats", "protocol", "meta", "calls", "runs"]
)
MESSAGES = st.fixed_dictionaries(
    {
        "type": st.sampled_from(
            ["hello", "start", "batch", "facts", "end", "heartbeat", "end_of_run", "x"]
        )
    },
    optional={
        "stream": st.just(LEGIT) | st.text(max_size=4),
        "seq": JSONISH,
        "node": st.just(NODE) | JSONISH,
    },
).flatmap(
    lambda base: st.dictionaries(KEYS, JSONISH, max_size=3).map(lambda extra: {**extra, **base})
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    payload=st.binary(max_size=64)
    | JSONISH.map(msgspec.msgpack.encode)
    | MESSAGES.map(msgspec.msgpack.encode)
)
def test_nothing_a_peer_sends_escapes_receive(agg: Aggregator, payload: bytes) -> None:
    """Random bytes, random msgpack, and messages of every kind with random fields, sent
    while a legitimate stream is open: each is applied, counted or refused, never raised."""
    if LEGIT_KEY not in agg.aggregation.open:
        send(agg, LEGIT_RUN[0])
    agg.receive([NODE.encode(), payload], peer=NODE)
    agg.commit()


def test_a_hello_of_another_protocol_is_refused_with_the_reason_whatever_its_fields(
    agg: Aggregator,
) -> None:
    """An older collector's Hello may not fit this version's bounds: it still learns why."""
    old = {"type": "hello", "protocol": PROTOCOL_VERSION - 1, "node": "a b", "instance": ""}
    agg.receive([b"old", msgspec.msgpack.encode(old)])
    assert refusals(agg) == {"protocol": 1}
    ((_, answer),) = agg._replies
    why = f"collector protocol {PROTOCOL_VERSION - 1}, aggregator protocol {PROTOCOL_VERSION}"
    assert answer == Reject(reason=f"{why}: run the same commscope on both")


def test_a_log_kept_before_the_upgrade_replays_up_to_its_first_batch(tmp_path: Path) -> None:
    """A protocol-4 aggregator logged a stream's start and a Batch; after the upgrade the
    start is applied, the Batch is not (position 1: the collector is told to send its facts
    from record 1), and the log is cut after the start, so the facts then logged replay."""
    first = capped(tmp_path)
    first.store.append(LEGIT_KEY, msgspec.msgpack.encode(LEGIT_RUN[0]))
    first.store.append(LEGIT_KEY, msgspec.msgpack.encode(Batch(stream=LEGIT, seq=1, events=[])))
    first.store.close()
    upgraded = capped(tmp_path)
    assert upgraded.aggregation.position(LEGIT_KEY) == (1, False)
    send(upgraded, LEGIT_RUN[1])
    upgraded.commit()
    upgraded.store.close()
    again = capped(tmp_path)
    try:
        assert again.aggregation.position(LEGIT_KEY) == (2, False)
        send(again, LEGIT_RUN[2])
        assert report_of(again) == report_of_run(tmp_path / "alone")
    finally:
        again.store.close()


def report_of_run(state: Path) -> dict[str, Any]:
    """The report of LEGIT_RUN sent once to a fresh aggregator."""
    alone = capped(state)
    try:
        for record in LEGIT_RUN:
            send(alone, record)
        return report_of(alone)
    finally:
        alone.store.close()


def test_received_bytes_count_every_payload_refused_ones_too(agg: Aggregator) -> None:
    hello = msgspec.msgpack.encode(Hello(protocol=PROTOCOL_VERSION, node=NODE, instance="i"))
    agg.receive([NODE.encode(), hello], peer=NODE)
    agg.receive([NODE.encode(), b"\xc1"], peer=NODE)  # 0xc1 is never msgpack: refused
    agg.receive([b"one", b"frame", b"too many"])  # not [routing id, payload]: no payload
    assert refusals(agg) == {"undecodable": 1, "frames": 1}
    assert agg.stats.received_bytes == len(hello) + 1


def test_window_latency_runs_from_the_last_record_not_the_last_heartbeat(
    agg: Aggregator,
) -> None:
    """The one-rank window's records arrive at t=1005; a heartbeat (any message: `_drain`
    stamps each) at 1020; the window is published at 1021: 16 s after its last record."""
    clock = agg.clock
    assert isinstance(clock, Clock)
    clock.now = 1005.0
    for record in LEGIT_RUN:
        send(agg, record)
    agg.commit()
    clock.now = 1020.0
    agg._last_message = clock.now  # a heartbeat, as `_drain` stamps it
    clock.now = 1021.0
    agg._tick()
    assert agg.completed == {"w"}
    assert agg.stats.window_latency_s == 16.0
