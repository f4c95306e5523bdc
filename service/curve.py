"""CurveZMQ on the collector–aggregator link (shell: key files, a ZAP thread, socket monitors).

The aggregator has a key pair and an allow-list: a folder of the collectors' public keys,
`NODE.key` certificate files as pyzmq's `zmq.auth` (and czmq) write them. Each collector has
its own pair and the aggregator's public key. A ZAP handler (ZeroMQ RFC 27) answers every
Curve handshake: a key in the allow-list is accepted with the file's node name as User-Id,
which libzmq then attaches to every message of that connection (`peer`), so the aggregator
knows which node truly sent a message; any other key is refused, counted and logged once per
peer (address and key). The socket monitor counts the handshakes that fail before ZAP is asked
(a peer without Curve, a peer holding a wrong server key). On the collector a monitor turns
handshake failures into one clear error (`Link.check`). Without keys the link is plain ZeroMQ,
allowed only with `--insecure` on a loopback endpoint, and it says so at start.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Generic, TypeVar

import msgspec
import zmq
import zmq.auth
from commscope.model.errors import ConfigError
from commscope.model.schema import REFUSED_REASONS, Name, RefusedReason
from commscope.service.endpoints import LOOPBACK
from commscope.service.logs import sparse
from zmq.utils import z85
from zmq.utils.monitor import recv_monitor_message

log = logging.getLogger("commscope.curve")

_PUBLIC: Final = ".key"  # zmq.auth's suffixes
_SECRET: Final = ".key_secret"
_MAX_LOGGED_PEERS: Final = 1024  # refused (address, key) pairs remembered for the log
_FAILED_HANDSHAKES: Final = 3  # in a row, on a collector: the server key is wrong
_ZAP: Final = "inproc://zeromq.zap.01"
_DOMAIN: Final = b"commscope"
HANDSHAKE_EVENTS: Final = (
    zmq.EVENT_HANDSHAKE_SUCCEEDED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
    | zmq.EVENT_HANDSHAKE_FAILED_AUTH
)


@dataclass(frozen=True)
class KeyPair:
    public: bytes  # Z85, 40 characters
    secret: bytes
    name: str | None  # the node it was issued to (the certificate's metadata), when said
    path: Path


@dataclass(frozen=True)
class ServerKeys:
    pair: KeyPair
    allow: Mapping[bytes, str]  # Z85 public key -> node name
    allow_dir: Path


@dataclass(frozen=True)
class ClientKeys:
    pair: KeyPair
    server_key: bytes
    server_key_path: Path


# ---------------------------------------------------------------- key files
def make_pair(out: Path, name: str) -> tuple[Path, Path]:
    """`commscope keys`: NAME.key (public) and NAME.key_secret (mode 0600) in `out`, never
    over an existing pair."""
    _node_name(name, "--name")
    if name != Path(name).name or name.startswith("."):
        raise ConfigError(f"--name {name!r}: a node name, not a path")
    targets = (out / f"{name}{_PUBLIC}", out / f"{name}{_SECRET}")
    for target in targets:
        if target.exists():
            raise ConfigError(f"{target} exists; remove it first to make a new pair")
    try:
        out.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out) as tmp:  # 0700: no window with a 0644 secret
            public, secret = zmq.auth.create_certificates(tmp, name, metadata={"name": name})
            os.chmod(secret, 0o600)
            os.chmod(public, 0o644)
            for made, target in zip((public, secret), targets, strict=True):
                shutil.move(made, target)
    except OSError as exc:
        raise ConfigError(f"{out}: cannot write the key pair ({exc.strerror or exc})") from None
    return targets


def load_pair(folder: Path, node: str | None = None) -> KeyPair:
    """This daemon's pair from `--keys DIR`: NODE.key_secret (the aggregator's:
    aggregator.key_secret), or else the only *.key_secret there."""
    if not folder.is_dir():
        raise ConfigError(f"--keys {folder}: not a folder")
    found = sorted(folder.glob(f"*{_SECRET}"))
    named = [p for p in found if node is not None and p.name == f"{node}{_SECRET}"]
    if not named and len(found) != 1:
        wanted = f"{node}{_SECRET} or " if node else ""
        raise ConfigError(
            f"--keys {folder}: expected {wanted}exactly one *{_SECRET} file, found {len(found)}"
            " (make a pair with `commscope keys`)"
        )
    path = (named or found)[0]
    public, secret = _certificate(path)
    if secret is None:
        raise ConfigError(f"{path}: no secret-key in it")
    return KeyPair(public, secret, _issued_to(path), path)


def load_public(path: Path, flag: str) -> bytes:
    public, _ = _certificate(path, flag)
    return public


def load_allow(folder: Path) -> dict[bytes, str]:
    """The allow-list: every NODE.key in `folder`, its node named by the file name."""
    if not folder.is_dir():
        raise ConfigError(f"--allow {folder}: not a folder")
    allow: dict[bytes, str] = {}
    for path in sorted(folder.glob(f"*{_PUBLIC}")):
        name = _node_name(path.name.removesuffix(_PUBLIC), str(path))
        public = load_public(path, "--allow")
        if public in allow:
            raise ConfigError(f"{path}: same key as {allow[public]}{_PUBLIC}; one node per key")
        allow[public] = name
    if not allow:
        raise ConfigError(f"--allow {folder}: no *{_PUBLIC} file: no collector could connect")
    return allow


def _certificate(path: Path, flag: str = "--keys") -> tuple[bytes, bytes | None]:
    try:
        public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{flag} {path}: not a key file ({exc})") from None
    for key in (public, secret):
        if key is not None and (len(key) != 40 or not _z85(key)):
            raise ConfigError(f"{flag} {path}: a key is not 40 Z85 characters")
    return public, secret


def _z85(key: bytes) -> bool:
    try:
        return len(z85.decode(key)) == 32
    except (ValueError, KeyError):
        return False


def _issued_to(path: Path) -> str | None:
    """The `name = ...` of a certificate's metadata section (`commscope keys` writes it)."""
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "name":
            return value.strip().strip("\"'")
    return None


def _node_name(name: str, where: str) -> str:
    try:
        return msgspec.convert(name, Name)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{where}: {name!r} is not a usable node name ({exc})") from None


# ---------------------------------------------------------------- the command line's choice
def server_keys(
    listen: str, keys: Path | None, allow: Path | None, insecure: bool
) -> ServerKeys | None:
    """The aggregator's keys from its flags (None: --insecure, checked to be loopback)."""
    if insecure:
        _insecure(listen, "--listen", keys or allow)
        return None
    if keys is None or allow is None:
        raise ConfigError(
            "the aggregator needs --keys DIR (its key pair) and --allow DIR (the collectors'"
            " public keys), see `commscope keys`; or --insecure on a loopback --listen"
            f" ({LOOPBACK})"
        )
    return ServerKeys(load_pair(keys, "aggregator"), load_allow(allow), allow)


def client_keys(
    endpoint: str, keys: Path | None, server_key: Path | None, node: str, insecure: bool
) -> ClientKeys | None:
    """The collector's keys from its flags (None: --insecure, checked to be loopback)."""
    if insecure:
        _insecure(endpoint, "--aggregator", keys or server_key)
        return None
    if keys is None or server_key is None:
        raise ConfigError(
            "the collector needs --keys DIR (its key pair) and --server-key FILE (the"
            " aggregator's public key), see `commscope keys`; or --insecure on a loopback"
            f" --aggregator ({LOOPBACK})"
        )
    pair = load_pair(keys, node)
    if pair.name is not None and pair.name != node:
        raise ConfigError(
            f"{pair.path} was issued to node {pair.name!r}, not to --node {node!r}: the"
            " aggregator would refuse what this collector says for another node"
        )
    return ClientKeys(pair, load_public(server_key, "--server-key"), server_key)


def _insecure(endpoint: str, flag: str, keys: Path | None) -> None:
    if keys is not None:
        raise ConfigError("--insecure runs without keys: drop --keys/--allow/--server-key")
    if not is_loopback(endpoint):
        raise ConfigError(
            f"--insecure is allowed only on a loopback endpoint ({LOOPBACK}), not {flag} {endpoint}"
        )


def warn_insecure(endpoint: str) -> None:
    log.warning(
        "--insecure: the link is unauthenticated and unencrypted; any local process can speak"
        " the protocol",
        extra={"endpoint": endpoint},
    )


def is_loopback(endpoint: str) -> bool:
    """Whether a ZeroMQ endpoint stays on this machine (pure)."""
    transport, sep, address = endpoint.partition("://")
    if not sep:
        return False
    if transport in ("ipc", "inproc"):
        return True
    if transport != "tcp":
        return False
    address = address.rpartition(";")[2]  # tcp://source;destination
    host = address[1:].partition("]")[0] if address.startswith("[") else address.rpartition(":")[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# ---------------------------------------------------------------- the aggregator's side
def zap_reply(allow: Mapping[bytes, str], request: list[bytes]) -> tuple[list[bytes], bytes | None]:
    """The ZAP reply to one request (pure), and the refused Curve key (Z85) if refused."""
    if len(request) < 6:
        return [
            b"1.0",
            request[1] if len(request) > 1 else b"",
            b"400",
            b"malformed",
            b"",
            b"",
        ], None
    version, request_id, _domain, _address, _identity, mechanism, *credentials = request
    if version != b"1.0" or mechanism != b"CURVE" or len(credentials) != 1:
        return [b"1.0", request_id, b"400", b"not a Curve request", b"", b""], None
    key = z85.encode(credentials[0]) if len(credentials[0]) == 32 else b"?"
    name = allow.get(key)
    if name is None:
        return [b"1.0", request_id, b"400", b"key not in the allow-list", b"", b""], key
    return [b"1.0", request_id, b"200", b"OK", name.encode(), b""], None


def server(socket: zmq.Socket[bytes], keys: ServerKeys) -> Gate:
    """Make `socket` (before bind) a Curve server that asks this process's ZAP handler."""
    socket.curve_secretkey = keys.pair.secret
    socket.curve_publickey = keys.pair.public
    socket.curve_server = True
    socket.setsockopt(zmq.ZAP_DOMAIN, _DOMAIN)
    socket.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no handler answering: refuse, never admit
    return Gate(socket, keys.allow, keys.allow_dir)


def peer(frames: list[zmq.Frame]) -> str | None:
    """The node a message truly comes from: the User-Id its ZAP reply gave (None: no Curve)."""
    try:
        return str(frames[-1].get("User-Id"))
    except (zmq.ZMQError, IndexError):
        return None


M = TypeVar("M")


class Listener(Generic[M]):
    """A daemon thread handing each message `socket` receives (read by `receive`) to
    `handle`, until `close()`; the socket is closed with it."""

    def __init__(
        self,
        socket: zmq.Socket[bytes],
        receive: Callable[[zmq.Socket[bytes]], M],
        handle: Callable[[M], None],
        name: str,
    ) -> None:
        self.socket = socket
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(receive, handle), name=name, daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self, receive: Callable[[zmq.Socket[bytes]], M], handle: Callable[[M], None]) -> None:
        try:
            while not self._stop.is_set():
                if self.socket.poll(100):
                    handle(receive(self.socket))
        finally:
            self.socket.close(0)


def _multipart(socket: zmq.Socket[bytes]) -> list[bytes]:
    return socket.recv_multipart()


class Gate:
    """The aggregator's ZAP handler, on one thread of its own; the handshake events of the
    ROUTER's monitor come in through `handshake()`."""

    def __init__(
        self, socket: zmq.Socket[bytes], allow: Mapping[bytes, str], allow_dir: Path | None = None
    ) -> None:
        self.allow = allow
        self.allow_dir = allow_dir
        self._stamp = _stamp(allow_dir)
        self._lock = threading.Lock()
        self._refused: dict[str, int] = dict.fromkeys(REFUSED_REASONS, 0)
        self._logged: set[tuple[bytes, bytes]] = set()
        zap = socket.context.socket(zmq.REP)
        zap.linger = 0
        zap.bind(_ZAP)
        self._zap = zap  # answered on the listener's thread only
        self._listener = Listener(zap, _multipart, self._answer, "commscope-zap")

    def refused(self) -> dict[str, int]:
        with self._lock:
            return dict(self._refused)

    def close(self) -> None:
        self._listener.close()

    def _answer(self, request: list[bytes]) -> None:
        try:
            reply, key = zap_reply(self._current_allow(), request)
        except Exception:  # a REP socket must answer; a refusal is the safe answer
            log.exception("ZAP request not understood: refused")
            reply, key = (
                [b"1.0", request[1] if len(request) > 1 else b"", b"500", b"", b"", b""],
                None,
            )
        self._zap.send_multipart(reply)
        if key is not None:
            self._count("unknown_key")
            self._log_peer(request[3], key)

    def _current_allow(self) -> Mapping[bytes, str]:
        """The allow-list, read again when its folder changed (a key added or removed); an
        unusable new state keeps the previous list."""
        stamp = _stamp(self.allow_dir)
        if stamp == self._stamp or self.allow_dir is None:
            return self.allow
        self._stamp = stamp
        try:
            self.allow = load_allow(self.allow_dir)
        except ConfigError as exc:
            log.warning("allow-list unusable: the previous one stays", extra={"reason": str(exc)})
        else:
            log.info("allow-list read again", extra={"nodes": sorted(self.allow.values())})
        return self.allow

    def handshake(self, event: Mapping[str, object]) -> None:
        """A handshake event of the ROUTER's monitor (the aggregator owns the one monitor)."""
        kind, value = event["event"], event["value"]
        if kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            failed: dict[int, RefusedReason] = {
                zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH: "no_curve",
                zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC: "cryptographic",
            }
            reason: RefusedReason = failed.get(int(value), "handshake")  # type: ignore[call-overload]
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            reason = "handshake"
        else:
            return  # succeeded, or refused by ZAP (counted there, with the peer)
        count = self._count(reason)
        if sparse(count):
            log.warning(
                "connection refused: failed Curve handshake (no peer address at this stage)",
                extra={"reason": reason, "count": count},
            )

    def _count(self, reason: RefusedReason) -> int:
        with self._lock:
            self._refused[reason] += 1
            return self._refused[reason]

    def _log_peer(self, address: bytes, key: bytes) -> None:
        """Once per (address, key); past MAX_LOGGED_PEERS of them, once more and then quiet."""
        if (address, key) in self._logged or len(self._logged) > _MAX_LOGGED_PEERS:
            return
        self._logged.add((address, key))
        if len(self._logged) > _MAX_LOGGED_PEERS:
            log.warning("more refused peers: no longer logged one by one (still counted)")
            return
        log.warning(
            "connection refused: key not in the allow-list",
            extra={"address": address.decode(errors="replace"), "key": key.decode()},
        )


def _stamp(folder: Path | None) -> int | None:
    """When a folder's entries last changed (a Kubernetes ConfigMap update renames one too)."""
    try:
        return folder.stat().st_mtime_ns if folder is not None else None
    except OSError:
        return None


# ---------------------------------------------------------------- the collector's side
def client(socket: zmq.Socket[bytes], keys: ClientKeys | None, endpoint: str = "") -> Link:
    """Make `socket` (before connect) a Curve client of the aggregator holding `server_key`
    (keys None: plain ZeroMQ, watched only for an aggregator that requires Curve)."""
    if keys is not None:
        socket.curve_secretkey = keys.pair.secret
        socket.curve_publickey = keys.pair.public
        socket.curve_serverkey = keys.server_key
    return Link(socket, keys, endpoint)


def routing_id(node: str, keys: ClientKeys | None) -> bytes:
    """A collector's routing id: its node name on a plain link (there the id names the node);
    under CurveZMQ one drawn at random by this process, so that no other peer can take it
    over (the aggregator knows the node from the handshake, never from the id)."""
    return node.encode() if keys is None else secrets.token_urlsafe(18).encode()


class Link:
    """Watches the collector's handshakes; `check()` raises once they cannot succeed."""

    def __init__(self, socket: zmq.Socket[bytes], keys: ClientKeys | None, endpoint: str) -> None:
        self.keys = keys
        self.endpoint = endpoint or "the aggregator"
        self.error: str | None = None
        self.failures = 0
        self.connected = False
        self.handshakes = 0  # succeeded so far: a new one is a (re)connected aggregator
        monitor = socket.get_monitor_socket(HANDSHAKE_EVENTS)
        self._listener = Listener(monitor, recv_monitor_message, self.handle, "commscope-link")

    def check(self) -> None:
        if self.error is not None:
            raise ConfigError(self.error)

    def close(self) -> None:
        self._listener.close()

    def handle(self, event: Mapping[str, object]) -> None:
        kind, value = event["event"], event["value"]
        if kind == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            if self.keys is not None and (self.failures or not self.connected):
                log.info("Curve handshake with the aggregator done", extra={"to": self.endpoint})
            self.failures, self.connected = 0, True
            self.handshakes += 1
        elif (
            kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
            and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
        ):
            self.error = (
                f"{self.endpoint} does not use CurveZMQ (an aggregator run --insecure?)"
                if self.keys is not None
                else f"{self.endpoint} requires CurveZMQ: give this collector --keys DIR and"
                " --server-key FILE instead of --insecure"
            )
        elif self.keys is not None:
            self._failed(kind, self.keys)

    def _failed(self, kind: object, keys: ClientKeys) -> None:
        if kind == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            self.error = (
                f"{self.endpoint} refused this collector's key ({keys.pair.path}): its"
                " public key is not in the aggregator's --allow folder"
            )
            return
        self.failures += 1
        if self.failures >= _FAILED_HANDSHAKES:
            self.error = (
                f"the Curve handshake with {self.endpoint} failed {self.failures} times in a"
                f" row: its key is not the one in --server-key {keys.server_key_path}"
            )
