"""CurveZMQ on the link: only allow-listed collectors get in, each message carries the node its
key was issued to, refusals are counted and logged once per peer, a collector with a wrong
server key stops with one clear line, and running without keys takes an explicit, loopback-only
`--insecure`. In-process tests use real sockets on loopback; a few start the real daemons."""

from __future__ import annotations

import logging
import shutil
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
import zmq
from commscope.model.errors import ConfigError
from commscope.model.schema import PROTOCOL_VERSION, REFUSED_REASONS, EndOfRun, Hello
from commscope.service import curve, endpoints
from commscope.service.cli import main
from zmq.utils.monitor import recv_monitor_message

from service.harness import (
    COMMSCOPE,
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


def keys_cli(out: Path, name: str) -> str:
    """`commscope keys`, as a user runs it."""
    done = subprocess.run(
        [*COMMSCOPE, "keys", "--out", str(out), "--name", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def keyring(tmp_path: Path) -> Path:
    """aggregator/ (its pair), allow/ (n1.key), n1/ (n1's pair), stranger/ (a pair for 'n1'
    that the aggregator never saw), all made by `commscope keys`."""
    ring = tmp_path / "keys"
    for folder, name in (("aggregator", "aggregator"), ("n1", "n1"), ("stranger", "n1")):
        keys_cli(ring / folder, name)
    (ring / "allow").mkdir()
    shutil.copy(ring / "n1" / "n1.key", ring / "allow" / "n1.key")
    return ring


# ---------------------------------------------------------------- key files
def test_keys_writes_a_public_file_and_a_0600_secret_file_and_says_so(tmp_path: Path) -> None:
    said = keys_cli(tmp_path / "k", "node-7")
    public, secret = tmp_path / "k" / "node-7.key", tmp_path / "k" / "node-7.key_secret"
    assert f"wrote {public}" in said and f"wrote {secret}" in said
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    pair = curve.load_pair(tmp_path / "k", "node-7")
    assert (pair.name, pair.path) == ("node-7", secret)
    assert curve.load_public(public, "--server-key") == pair.public


def test_keys_never_overwrites_a_pair(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    keys_cli(tmp_path, "n1")
    before = (tmp_path / "n1.key_secret").read_bytes()
    assert main(["keys", "--out", str(tmp_path), "--name", "n1"]) == 1
    assert "n1.key exists; remove it first" in capsys.readouterr().err
    assert (tmp_path / "n1.key_secret").read_bytes() == before


@pytest.mark.parametrize("name", ["../n1", "a/b", ".hidden", ""])
def test_keys_refuses_a_name_that_is_not_a_plain_node_name(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="--name"):
        curve.make_pair(tmp_path / "k", name)
    assert not (tmp_path / "k").exists() and not (tmp_path / "n1.key").exists()


def test_one_folder_of_keys_serves_both_daemons(tmp_path: Path) -> None:
    """As the README makes them: the aggregator takes aggregator.key_secret, a collector
    NODE.key_secret, from the same folder."""
    for name in ("aggregator", "n1"):
        keys_cli(tmp_path / "keys", name)
    (tmp_path / "allow").mkdir()
    shutil.copy(tmp_path / "keys" / "n1.key", tmp_path / "allow")
    keys = tmp_path / "keys"
    server = curve.server_keys("tcp://0.0.0.0:1", keys, tmp_path / "allow", insecure=False)
    client = curve.client_keys("tcp://127.0.0.1:1", keys, keys / "aggregator.key", "n1", False)
    assert server is not None and client is not None
    assert (server.pair.name, client.pair.name) == ("aggregator", "n1")
    assert client.server_key == server.pair.public
    assert server.allow == {client.pair.public: "n1"}


def test_the_allow_list_names_each_key_by_its_file(keyring: Path) -> None:
    shutil.copy(keyring / "aggregator" / "aggregator.key", keyring / "allow" / "n2.key")
    allow = curve.load_allow(keyring / "allow")
    pair_n1 = curve.load_pair(keyring / "n1")
    pair_agg = curve.load_pair(keyring / "aggregator")
    assert allow == {pair_n1.public: "n1", pair_agg.public: "n2"}


def test_one_key_under_two_names_is_refused(keyring: Path) -> None:
    shutil.copy(keyring / "allow" / "n1.key", keyring / "allow" / "n9.key")
    with pytest.raises(ConfigError, match=r"same key as n1\.key"):
        curve.load_allow(keyring / "allow")


def test_an_empty_allow_list_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no collector could connect"):
        curve.load_allow(tmp_path)


def test_a_key_issued_to_another_node_is_refused_at_start(keyring: Path) -> None:
    server_key = keyring / "aggregator" / "aggregator.key"
    with pytest.raises(ConfigError, match="issued to node 'n1', not to --node 'n2'"):
        curve.client_keys("tcp://127.0.0.1:1", keyring / "n1", server_key, "n2", insecure=False)


# ---------------------------------------------------------------- --insecure
@pytest.mark.parametrize(
    ("endpoint", "loopback"),
    [
        ("tcp://127.0.0.1:5555", True),
        ("tcp://127.0.0.9:5555", True),  # all of 127/8 is loopback
        ("tcp://[::1]:5555", True),
        ("tcp://localhost:5555", True),
        ("ipc:///tmp/commscope.sock", True),
        ("inproc://agg", True),
        ("tcp://0.0.0.0:5555", False),  # every interface
        ("tcp://*:5555", False),
        ("tcp://[::]:5555", False),
        ("tcp://127.0.0.1:6000;0.0.0.0:5555", False),  # source;destination: the destination
        ("udp://127.0.0.1:5555", False),  # not a transport the link uses
        ("127.0.0.1:5555", False),  # not an endpoint
    ],
)
def test_which_endpoints_count_as_loopback(endpoint: str, loopback: bool) -> None:
    assert curve.is_loopback(endpoint) is loopback


def _daemon_argv(command: str, endpoint: str, tmp_path: Path, *extra: str) -> list[str]:
    if command == "aggregate":
        return ["aggregate", "--listen", endpoint, "--state", str(tmp_path / "st"), *extra]
    return [
        *("collect", "--watch", str(tmp_path), "--aggregator", endpoint, "--node", "n1"),
        *("--state", str(tmp_path / "st"), *extra),
    ]


@pytest.mark.parametrize("command", ["aggregate", "collect"])
def test_insecure_on_a_non_loopback_endpoint_is_refused(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = _daemon_argv(command, "tcp://0.0.0.0:5555", tmp_path, "--insecure")
    assert main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    flag = "--listen" if command == "aggregate" else "--aggregator"
    assert err == [
        "commscope: error: --insecure is allowed only on a loopback endpoint "
        f"({endpoints.LOOPBACK}), not {flag} tcp://0.0.0.0:5555"
    ]


@pytest.mark.parametrize("command", ["aggregate", "collect"])
def test_no_keys_and_no_insecure_is_refused_with_one_line(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_daemon_argv(command, "tcp://127.0.0.1:5555", tmp_path)) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "needs --keys DIR" in err[0] and "or --insecure" in err[0]
    assert not (tmp_path / "st").exists()  # refused before anything was set up


def test_insecure_with_keys_is_refused(keyring: Path) -> None:
    with pytest.raises(ConfigError, match="--insecure runs without keys"):
        curve.server_keys("tcp://127.0.0.1:1", keyring / "aggregator", None, insecure=True)


# ---------------------------------------------------------------- the ZAP decision
def test_zap_accepts_an_allowed_key_with_its_node_as_user_id() -> None:
    public, _ = zmq.curve_keypair()
    request = [b"1.0", b"7", b"commscope", b"127.0.0.1", b"", b"CURVE", _raw(public)]
    reply, refused = curve.zap_reply({public: "n1"}, request)
    assert (reply, refused) == ([b"1.0", b"7", b"200", b"OK", b"n1", b""], None)


def test_zap_refuses_an_unknown_key_and_names_it() -> None:
    public, _ = zmq.curve_keypair()
    request = [b"1.0", b"7", b"commscope", b"127.0.0.1", b"", b"CURVE", _raw(public)]
    reply, refused = curve.zap_reply({}, request)
    assert reply[2] == b"400" and refused == public


@pytest.mark.parametrize(
    "request_",
    [[b"1.0", b"7", b"", b"127.0.0.1", b"", b"NULL"], [b"1.0"], [b"2.0", b"7", b"", b"", b"", b""]],
)
def test_zap_refuses_anything_but_a_curve_request(request_: list[bytes]) -> None:
    reply, refused = curve.zap_reply({}, request_)
    assert reply[2] == b"400" and refused is None


def _raw(z85_key: bytes) -> bytes:
    from zmq.utils import z85

    return z85.decode(z85_key)


# ---------------------------------------------------------------- real sockets, one process
class Rig:
    """A Curve ROUTER with its Gate on a loopback port, and DEALERs made on demand."""

    def __init__(self, ring: Path) -> None:
        self.ring = ring
        self.context = zmq.Context()
        self.router = self.context.socket(zmq.ROUTER)
        self.router.linger = 0
        keys = curve.server_keys("", ring / "aggregator", ring / "allow", insecure=False)
        assert keys is not None
        self.gate = curve.server(self.router, keys)
        self.monitor = self.router.get_monitor_socket(curve.HANDSHAKE_EVENTS)  # as the aggregator
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.dealers: list[tuple[zmq.Socket[bytes], curve.Link]] = []

    def dealer(self, folder: str, server_key: Path | None = None, node: str = "n1") -> curve.Link:
        socket = self.context.socket(zmq.DEALER)
        socket.linger = 0
        server_key = server_key or self.ring / "aggregator" / "aggregator.key"
        keys = curve.client_keys(self.endpoint, self.ring / folder, server_key, node, False)
        assert keys is not None
        link = curve.client(socket, keys, self.endpoint)
        socket.connect(self.endpoint)
        socket.send(b"hello")
        self.dealers.append((socket, link))
        return link

    def refused(self) -> dict[str, int]:
        """The gate's counts, after handing it the handshake events seen so far."""
        while self.monitor.poll(0):
            self.gate.handshake(recv_monitor_message(self.monitor))
        return self.gate.refused()

    def close(self) -> None:
        for socket, link in self.dealers:
            link.close()
            socket.close(0)
        self.gate.close()
        self.monitor.close(0)
        self.router.close(0)
        # term() waits for every socket of the context, some closed by threads of their own:
        # bounded, so a socket left open fails this test instead of hanging the run.
        ender = threading.Thread(target=self.context.term, daemon=True)
        ender.start()
        ender.join(60)
        assert not ender.is_alive(), "a ZeroMQ socket still open 60 s after the rig closed"


@pytest.fixture
def rig(keyring: Path) -> Iterator[Rig]:
    made = Rig(keyring)
    yield made
    made.close()


def test_an_allowed_collector_s_messages_carry_its_node_name(rig: Rig) -> None:
    link = rig.dealer("n1")
    assert rig.router.poll(10_000), "nothing received within 10 s"
    frames = rig.router.recv_multipart(copy=False)
    assert (frames[-1].bytes, curve.peer(frames)) == (b"hello", "n1")
    link.check()  # no error
    assert rig.refused() == dict.fromkeys(REFUSED_REASONS, 0)


def test_an_unknown_key_is_refused_counted_and_logged_once(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "commscope.curve")
    # After a refusal libzmq does not retry: three connections make three attempts of one peer.
    links = [rig.dealer("stranger") for _ in range(3)]
    wait_for("three refusals", lambda: rig.refused()["unknown_key"] == 3)
    assert not rig.router.poll(200)  # nothing of it got through
    lines = [r for r in caplog.records if "not in the allow-list" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].__dict__["address"] == "127.0.0.1"
    assert lines[0].__dict__["key"] == curve.load_pair(rig.ring / "stranger").public.decode()
    with pytest.raises(ConfigError, match="its public key is not in the aggregator's --allow"):
        wait_for("the collector's verdict", lambda: links[0].error)
        links[0].check()


def test_a_key_added_to_the_allow_list_is_accepted_at_its_next_handshake(rig: Rig) -> None:
    keys_cli(rig.ring / "n2", "n2")
    refused = rig.dealer("n2", node="n2")
    wait_for("the refusal", lambda: refused.error)
    shutil.copy(rig.ring / "n2" / "n2.key", rig.ring / "allow" / "n2.key")
    rig.dealer("n2", node="n2")
    assert rig.router.poll(10_000), "nothing received within 10 s"
    frames = rig.router.recv_multipart(copy=False)
    assert curve.peer(frames) == "n2"


def test_a_wrong_server_key_fails_the_collector_and_is_counted(rig: Rig) -> None:
    wrong = rig.ring / "n1" / "n1.key"  # a real key, but not the aggregator's
    link = rig.dealer("n1", server_key=wrong)
    error = wait_for("the collector's verdict", lambda: link.error)
    assert error == (
        f"the Curve handshake with {rig.endpoint} failed 3 times in a row: its key is not the "
        f"one in --server-key {wrong}"
    )
    assert rig.refused()["cryptographic"] >= 1  # the server cannot open the client's box
    assert not rig.router.poll(200)


def test_a_plain_zeromq_peer_is_refused_and_counted(rig: Rig) -> None:
    socket = rig.context.socket(zmq.DEALER)
    socket.linger = 0
    socket.connect(rig.endpoint)
    socket.send(b"hello")
    try:
        wait_for("the refusal counted", lambda: rig.refused()["no_curve"] >= 1)
        assert not rig.router.poll(200)
    finally:
        socket.close(0)


def test_an_insecure_collector_says_when_the_aggregator_requires_curve(rig: Rig) -> None:
    socket = rig.context.socket(zmq.DEALER)
    socket.linger = 0
    link = curve.client(socket, None, rig.endpoint)
    socket.connect(rig.endpoint)
    try:
        error = wait_for("the verdict", lambda: link.error)
        assert error == (
            f"{rig.endpoint} requires CurveZMQ: give this collector --keys DIR and --server-key "
            "FILE instead of --insecure"
        )
    finally:
        link.close()
        socket.close(0)


def test_the_collector_says_when_the_aggregator_has_no_curve(keyring: Path) -> None:
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)  # an aggregator run --insecure
    router.linger = 0
    endpoint = f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"
    dealer = context.socket(zmq.DEALER)
    dealer.linger = 0
    keys = curve.client_keys(
        endpoint, keyring / "n1", keyring / "aggregator" / "aggregator.key", "n1", False
    )
    assert keys is not None
    link = curve.client(dealer, keys, endpoint)
    dealer.connect(endpoint)
    try:
        assert "does not use CurveZMQ" in wait_for("the verdict", lambda: link.error)
    finally:
        link.close()
        dealer.close(0)
        router.close(0)
        context.term()


# ---------------------------------------------------------------- the real daemons
def _secured(procs: Processes, tmp_path: Path, ring: Path) -> Aggregate:
    security = ("--keys", str(ring / "aggregator"), "--allow", str(ring / "allow"))
    return Aggregate(
        procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "1"), security=security
    )


def _client_security(ring: Path, folder: str) -> tuple[str, ...]:
    return (
        "--keys",
        str(ring / folder),
        "--server-key",
        str(ring / "aggregator" / "aggregator.key"),
    )


def forge_end_of_run(endpoint: str, ring: Path) -> None:
    """A stranger's own socket (an unknown key, the right server key) says n1's run is over."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.linger = 0
    pair = curve.load_pair(ring / "stranger")
    socket.curve_secretkey, socket.curve_publickey = pair.secret, pair.public
    socket.curve_serverkey = curve.load_public(ring / "aggregator" / "aggregator.key", "key")
    socket.connect(endpoint)
    for message in (
        Hello(protocol=PROTOCOL_VERSION, node="n1", instance="forged"),
        EndOfRun(node="n1"),
    ):
        socket.send(msgspec.msgpack.encode(message))
    try:
        assert not socket.poll(1000)  # no answer: the handshake was refused
    finally:
        socket.close(0)
        context.term()


def test_an_unknown_key_s_files_never_reach_the_report(
    procs: Processes, tmp_path: Path, keyring: Path
) -> None:
    """A stranger (a pair the aggregator never allowed, even named n1) sends iteration_8; the
    allowed n1 sends iteration_4. The report is exactly `commscope report` of n1's folder."""
    aggregate = _secured(procs, tmp_path, keyring)
    server = aggregate.start()
    for name in ("stranger", "n1"):
        shutil.copytree(
            SAMPLE / ("iteration_8" if name == "stranger" else "iteration_4"),
            tmp_path / name / "watch" / "iteration_x",
        )
    stranger = procs.start(
        "stranger",
        *collector_args(
            tmp_path / "stranger" / "watch",
            aggregate.endpoint,
            "n1",
            tmp_path / "stranger" / "st",
            "--once",
            security=_client_security(keyring, "stranger"),
        ),
    )
    assert stranger.wait(30) == 1
    assert "refused this collector's key" in stranger.tail()
    forge_end_of_run(aggregate.endpoint, keyring)  # would end the run before n1 if it got in
    metric = "commscope_aggregator_refused_connections_total"
    wait_for(
        "both refusals on /metrics",
        lambda: (
            (sample_value(aggregate.metrics_text() or "", metric, reason="unknown_key") or 0) >= 2
        ),
    )
    assert server.popen.poll() is None
    n1 = procs.start(
        "n1",
        *collector_args(
            tmp_path / "n1" / "watch",
            aggregate.endpoint,
            "n1",
            tmp_path / "n1" / "st",
            "--once",
            security=_client_security(keyring, "n1"),
        ),
    )
    assert n1.wait(60) == 0, n1.tail()
    assert server.wait(60) == 0, server.tail()
    assert normalised(aggregate.report()) == normalised(offline(tmp_path / "n1" / "watch"))
    refusals = [line for line in server.lines() if "not in the allow-list" in line["msg"]]
    assert len(refusals) == 1


def test_a_collector_with_a_wrong_server_key_exits_1_with_one_clear_line(
    procs: Processes, tmp_path: Path, keyring: Path
) -> None:
    aggregate = _secured(procs, tmp_path, keyring)
    aggregate.start()
    (tmp_path / "watch").mkdir()
    wrong = keyring / "n1" / "n1.key"
    collector = procs.start(
        "n1",
        *collector_args(
            tmp_path / "watch",
            aggregate.endpoint,
            "n1",
            tmp_path / "st",
            security=("--keys", str(keyring / "n1"), "--server-key", str(wrong)),
        ),
    )
    assert collector.wait(30) == 1
    assert collector.tail().strip().splitlines()[-1] == (
        f"commscope: error: the Curve handshake with {aggregate.endpoint} failed 3 times in a "
        f"row: its key is not the one in --server-key {wrong}"
    )


def test_insecure_says_so_at_start(procs: Processes, tmp_path: Path) -> None:
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port())
    server = aggregate.start()
    warnings = wait_for(
        "the warning",
        lambda: [line for line in server.lines() if line["msg"].startswith("--insecure")],
    )
    assert warnings[0]["level"] == "warning" and "unauthenticated" in warnings[0]["msg"]
    assert warnings[0]["endpoint"] == aggregate.endpoint
