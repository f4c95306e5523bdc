"""Which proven node each routing id belongs to (`service.links`, pure): by hand, and a
hypothesis oracle over any sequence of (routing id, node) messages; then two allowed keys
attacking each other over real sockets (the aggregator and a collector as processes)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq
from commscope.collector.stream import fingerprint
from commscope.model.schema import (
    PROTOCOL_VERSION,
    Ack,
    Checkpoint,
    EndOfRun,
    Hello,
    RunAck,
    StreamEnd,
    StreamStart,
    ToCollector,
    Welcome,
)
from commscope.service import curve
from commscope.service.links import Links, own_stream
from hypothesis import given
from hypothesis import strategies as st

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
from service.test_curve import keys_cli

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"


def test_the_first_node_to_speak_on_a_routing_id_owns_it() -> None:
    links = Links()
    assert (links.claim(b"x", "n1"), links.claim(b"x", "n1")) == (None, None)
    assert (links.owner(b"x"), links.routable(b"x")) == ("n1", True)


def test_another_node_on_an_owned_id_is_refused_and_the_id_answers_no_one() -> None:
    links = Links()
    links.claim(b"x", "n1")
    assert links.claim(b"x", "n2") == "n1"
    assert (links.owner(b"x"), links.routable(b"x")) == (None, False)


def test_a_node_is_answered_again_once_it_speaks_from_where_it_now_is() -> None:
    links = Links()
    links.claim(b"x", "n1")
    links.claim(b"x", "n2")  # took n1's id over: libzmq renamed n1's connection
    assert links.claim(b"\0renamed", "n1") is None
    assert (links.routable(b"\0renamed"), links.routable(b"x")) == (True, False)


def test_a_squatter_never_locks_the_owner_out_of_its_id() -> None:
    """n2 spoke first on n1's id; n1 arrives on it (handover): refused once, then its own."""
    links = Links()
    links.claim(b"n1-id", "n2")
    assert [links.claim(b"n1-id", "n1") for _ in range(2)] == ["n2", None]
    assert (links.owner(b"n1-id"), links.routable(b"n1-id")) == ("n1", True)


def test_only_the_id_a_node_last_spoke_from_is_answered() -> None:
    links = Links()
    links.claim(b"old", "n1")
    links.claim(b"new", "n1")
    assert (links.routable(b"old"), links.routable(b"new")) == (False, True)


def test_an_id_never_proven_is_routable_as_without_curve() -> None:
    assert Links().routable(b"n1")


def test_the_oldest_ids_are_forgotten_past_the_limit() -> None:
    links = Links(limit=2)
    for identity in (b"a", b"b", b"c"):
        links.claim(identity, identity.decode())
    assert [links.owner(i) for i in (b"a", b"b", b"c")] == [None, "b", "c"]


def test_each_refusal_is_said_once_per_node_and_reason() -> None:
    links = Links()
    assert [links.first("n2", "r"), links.first("n2", "r"), links.first("n3", "r")] == [
        True,
        False,
        True,
    ]


def test_stream_keys_are_a_nodes_own() -> None:
    stream = "ab" * 16
    assert own_stream("n1", stream) != own_stream("n2", stream)
    assert own_stream("n1", stream) == own_stream("n1", stream)
    assert len(own_stream("n1", stream)) == 32 and int(own_stream("n1", stream), 16) >= 0


@given(st.lists(st.tuples(st.sampled_from([b"x", b"y", b"z"]), st.sampled_from("abc"))))
def test_a_reply_goes_only_where_its_node_spoke_last(messages: list[tuple[bytes, str]]) -> None:
    """Oracle: whatever the messages, a routable id's last message came from its owner, and
    that owner spoke last from it; a node's accepted message makes its id routable."""
    links = Links()
    last_on: dict[bytes, str] = {}
    last_from: dict[str, bytes] = {}
    for identity, node in messages:
        accepted = links.claim(identity, node) is None
        last_on[identity] = node
        if accepted:
            last_from[node] = identity
            assert links.routable(identity) and links.owner(identity) == node
    for identity, node in last_on.items():
        owner = links.owner(identity)
        if links.routable(identity):
            assert owner == node and last_from[node] == identity


# ---------------------------------------------------------------- two allowed keys, real sockets
@pytest.fixture
def ring(tmp_path: Path) -> Path:
    """aggregator/ (its pair), n1/ and n2/ (each node's own pair), allow/ (both public keys)."""
    ring = tmp_path / "keys"
    for name in ("aggregator", "n1", "n2"):
        keys_cli(ring / name, name)
    (ring / "allow").mkdir()
    for name in ("n1", "n2"):
        shutil.copy(ring / name / f"{name}.key", ring / "allow" / f"{name}.key")
    return ring


@pytest.fixture
def aggregate(procs: Processes, tmp_path: Path, ring: Path) -> Aggregate:
    security = ("--keys", str(ring / "aggregator"), "--allow", str(ring / "allow"))
    return Aggregate(
        procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "1"), security=security
    )


class Dealers:
    """Raw Curve DEALERs, each holding one node's own allowed key on the routing id it
    chooses; all closed at teardown."""

    def __init__(self, ring: Path, endpoint: str) -> None:
        self.ring = ring
        self.endpoint = endpoint
        self.context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.sockets: list[zmq.Socket[bytes]] = []

    def __call__(self, node: str, identity: bytes) -> zmq.Socket[bytes]:
        socket = self.context.socket(zmq.DEALER)
        self.sockets.append(socket)
        socket.linger = 0
        socket.routing_id = identity
        pair = curve.load_pair(self.ring / node)
        socket.curve_secretkey, socket.curve_publickey = pair.secret, pair.public
        server_key = self.ring / "aggregator" / "aggregator.key"
        socket.curve_serverkey = curve.load_public(server_key, "key")
        socket.connect(self.endpoint)
        return socket

    def close(self) -> None:
        for socket in self.sockets:
            socket.close(0)
        self.context.term()


@pytest.fixture
def dealer(ring: Path, aggregate: Aggregate) -> Iterator[Dealers]:
    made = Dealers(ring, aggregate.endpoint)
    yield made
    made.close()


def say(socket: zmq.Socket[bytes], message: object) -> None:
    socket.send(msgspec.msgpack.encode(message))


def answer(socket: zmq.Socket[bytes], timeout_ms: int = 20_000) -> ToCollector | None:
    if not socket.poll(timeout_ms):
        return None
    return msgspec.msgpack.Decoder(ToCollector).decode(socket.recv())


def refused(aggregate: Aggregate, reason: str) -> float | None:
    text = aggregate.metrics_text() or ""
    return sample_value(text, "commscope_aggregator_rejected_total", reason=reason)


def test_a_collector_s_routing_id_under_curve_is_drawn_at_random() -> None:
    """No other peer can name it (to take it over, or squat it before the node connects);
    without Curve the routing id is the node's name, as the contract has it."""
    keys = curve.ClientKeys(curve.KeyPair(b"", b"", "n1", Path()), b"", Path())
    drawn = {curve.routing_id("n1", keys) for _ in range(100)}
    assert len(drawn) == 100 and {len(d) for d in drawn} == {24}
    assert curve.routing_id("n1", None) == b"n1"


def test_a_node_taking_over_anothers_routing_id_gets_none_of_its_replies(
    aggregate: Aggregate, dealer: Dealers
) -> None:
    """n1 speaks on routing id `shared`; n2 (its own allowed key), knowing that id, connects
    on it (ROUTER_HANDOVER gives it the id: libzmq drops n1's connection from the ROUTER)
    and speaks: refused, counted, logged once, and it hears nothing, not n1's replies
    either. n1, connected again, is served and the run ends normally."""
    server = aggregate.start()
    victim = dealer("n1", b"shared")
    say(victim, Hello(protocol=PROTOCOL_VERSION, node="n1", instance="v"))
    assert isinstance(answer(victim), Welcome)
    say(victim, Hello(protocol=PROTOCOL_VERSION, node="n1", instance="v"))  # a reply on its way
    thief = dealer("n2", b"shared")
    say(thief, EndOfRun(node="n2", instance="t"))
    wait_for("the takeover refused", lambda: refused(aggregate, "routing_id_taken") == 1)
    again = dealer("n1", curve.routing_id("n1", None) + b"/again")
    say(again, EndOfRun(node="n1", instance="v"))
    assert answer(again) == RunAck(node="n1")
    assert server.wait(60) == 0, server.tail()
    assert answer(thief, 500) is None
    lines = [line for line in server.lines() if "belongs to another node" in line["msg"]]
    assert [(line["node"], line["owner"]) for line in lines] == [("n2", "n1")]


def claim(socket: zmq.Socket[bytes], streams: list[str]) -> None:
    """n2 starts n1's next stream ids as its own files and ends them (as files it could not
    read), each acknowledged whole before n1 begins."""
    for n, stream in enumerate(streams):
        start = StreamStart(
            stream=stream, node="n2", path=f"/n2/claimed{n}.json", folder=".", root_name="x"
        )
        say(socket, start)
        say(socket, StreamEnd(stream=stream, seq=1, error="claimed"))
    done: set[str] = set()
    while len(done) < len(streams):
        reply = answer(socket)
        assert reply is not None, f"claims acknowledged: {sorted(done)}"
        if isinstance(reply, Ack) and reply.done:
            done.add(reply.stream)


def test_a_node_claiming_anothers_stream_ids_and_squatting_its_name_changes_nothing(
    procs: Processes,
    aggregate: Aggregate,
    ring: Path,
    tmp_path: Path,
    dealer: Dealers,
) -> None:
    """Before n1's collector starts, n2 (its own allowed key) squats the routing id `n1` and
    starts every one of n1's stream ids (computed from n1's files) as its own. n1's
    collector then sends them all: each is applied as n1's, and the report is exactly
    `commscope report` of n1's files beside n2's own (skipped) claims."""
    server = aggregate.start()
    watch = tmp_path / "watch"
    shutil.copytree(SAMPLE, watch)
    files = sorted(watch.rglob("*.json.gz"))
    streams = [fingerprint(path)[0] for path in files]
    squatter = dealer("n2", b"n1")
    claim(squatter, streams)
    args = collector_args(
        watch,
        aggregate.endpoint,
        "n1",
        tmp_path / "st",
        "--once",
        security=(
            "--keys",
            str(ring / "n1"),
            "--server-key",
            str(ring / "aggregator" / "aggregator.key"),
        ),
    )
    collector = procs.start("n1", *args)
    assert collector.wait(60) == 0, collector.tail()
    assert server.wait(60) == 0, server.tail()
    checkpoint = msgspec.msgpack.decode(
        (tmp_path / "st" / "checkpoint.msgpack").read_bytes(), type=Checkpoint
    )
    assert sorted(entry.stream for entry in checkpoint.files.values()) == sorted(streams)
    found, expected = normalised(aggregate.report()), normalised(offline(watch))
    claims = [s for s in found["inputs"]["skipped"] if s["path"].startswith("/n2/")]
    assert len(claims) == len(streams)
    found["inputs"]["skipped"] = [s for s in found["inputs"]["skipped"] if s not in claims]
    found["inputs"]["files"] -= len(claims)
    assert found == expected
