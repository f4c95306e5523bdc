"""The aggregator service (shell: ZeroMQ ROUTER, durable state, /metrics, report files).

One loop: receive what collectors send, validate it (a malformed or hostile message is
counted and answered or dropped, never raised), apply each record at most once through the
pure `Aggregation`, make it durable (`Store`), then acknowledge.

The parts it wires: `Intake` (pure: who speaks, who may start a stream, membership, the end
of the run), `Ledger` (pure: what each record is owed, acknowledgements after the commit),
`Publisher` (the reports /metrics shows, paced, built on a thread beside the loop, with the
live figures of `Live`).

The end: the run ends when every collector has sent end-of-run, on `stop` (SIGTERM), or after
`idle_timeout_s` of silence; a collector silent for `end_grace_s` (no heartbeat, no record)
without end-of-run is no longer waited for (it exited at its drain deadline, or died); the
final text and JSON reports are the ones `commscope report` writes for the same files. `lost`
then names what never finished (streams still open, collectors that never sent end-of-run), and
the state folder records that the run ended (`Store.save_end`: a restart on it writes nothing
again); /metrics stays up `linger_s` longer so the last figures are scraped.

Strangers: a message is decoded in two steps, its head (kind, stream, seq) first and the whole
of it only when it will be applied, so an unwanted large record costs no memory. A peer (the
node its connection proved, else its routing id) speaks only for its own node: its Hello,
heartbeats, end-of-run and streams name it, and its stream ids are keyed by its node
(`own_stream`), so it reaches only its own streams. Under CurveZMQ a routing id belongs to
the proven node that spoke on it first (`Links`): another node's message on it is refused,
and replies go only to the routing id a node last spoke from. The door (`door.Door`) caps
connections still in their handshake; an I/O error in the loop is counted and waited out.
Open streams (per node and in all), nodes and open log handles are capped; whatever is
refused is counted by reason (`REJECT_REASONS`), never raised.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, get_args

import msgspec
import zmq
from commscope.exporters.metricnames import MAX_RANK_SERIES
from commscope.exporters.publish import serve
from commscope.model.errors import ConfigError
from commscope.model.schema import (
    PROTOCOL_VERSION,
    REFUSED_REASONS,
    REJECT_REASONS,
    AggregatorStats,
    Batch,
    CollectorStats,
    EndOfRun,
    Facts,
    Head,
    Heartbeat,
    Hello,
    Record,
    Reject,
    RejectReason,
    Report,
    RunEnd,
    StreamEnd,
    StreamStart,
    ToAggregator,
    ToCollector,
    Welcome,
)
from commscope.model.version import installed_version
from commscope.pipeline.aggregation import Aggregation
from commscope.pipeline.edge import well_formed
from commscope.pipeline.report import Options
from commscope.service import curve, door
from commscope.service.ending import write_final
from commscope.service.intake import Admission, Decision, Intake, Rules, Taken
from commscope.service.ledger import Ledger, Outcome, judge, lost
from commscope.service.links import Links, own_stream
from commscope.service.logs import sparse
from commscope.service.publisher import Publisher
from commscope.service.recovery import recover
from commscope.service.store import Store

log = logging.getLogger("commscope.aggregate")

# A batch is at most MAX_BATCH_EVENTS (4096) events: ~56 KB for DLRM's, ~1.4 MB if every event
# were a CommOp with a 256-character process group. Larger messages are refused and counted
# ("too_large"); libzmq drops a connection sending more than twice that (MAXMSGSIZE), which
# only the socket monitor sees ("disconnected", which counts every dropped connection). libzmq
# queues at most RCVHWM messages per connection: 2x a collector's default window of 64.
MAX_MESSAGE_BYTES: Final = 2 * 2**20
_RECEIVE_QUEUE: Final = 128
_DRAIN: Final = 512  # messages handled between two syncs
IO_RETRY_S: Final = (0.1, 0.5, 1.0, 2.0, 5.0)  # waits after an I/O error: the loop, the reports
_IO_WHERE: Final = ("loop", "reports")  # where an I/O error was survived (`io_errors`)
_ADMISSION: Final[dict[Admission, RejectReason]] = {  # a refused StreamStart's reason
    Admission.NOT_OWN_NODE: "not_own_node",
    Admission.TOO_MANY_STREAMS: "too_many_streams",
}
# A message's kind by its wire tag, from the schema's own tags (the Head's tag set is checked
# against them in tests/collector/test_wire_golden.py).
_KINDS: Final = {kind.__struct_config__.tag: kind.__name__ for kind in get_args(ToAggregator)}


@dataclass(frozen=True)
class AggregatorSettings:
    listen: str
    out: Path
    state: Path
    job: str = "commscope"
    options: Options = field(default_factory=Options)
    metrics_port: int | None = None
    metrics_addr: str = "0.0.0.0"
    expect_nodes: int = 0
    idle_timeout_s: float | None = None
    end_grace_s: float = 300.0  # --end-grace: a node silent this long without end-of-run is gone
    horizon_s: float = 600.0
    credit: int = 64
    refresh_s: float = 5.0
    heartbeat_timeout_s: float = 30.0
    keys: curve.ServerKeys | None = None  # None: plain ZeroMQ (--insecure, loopback only)
    linger_s: float = 0.0  # /metrics kept up this long after the run
    max_streams_per_node: int = 256  # open streams
    max_streams: int = 4096
    max_nodes: int = 1024
    shard: str = ""  # --shard: the `shard` label of every metric ("": none)
    ranks: frozenset[int] | None = None  # --ranks: a shard's ranks (None: the job's every rank)
    max_rank_series: int = MAX_RANK_SERIES  # --max-rank-series (0: no cap)
    command: tuple[str, ...] = ()  # the command line, for the JSON report's provenance
    name: str = ""  # --job: the reports' name when the config names no model ("": a folder's)
    handshake_s: float = 5.0  # --handshake-timeout: a connection's handshake at most this long
    max_handshakes: int = 16  # --max-handshakes: connections in their handshake at once


class Aggregator:
    def __init__(self, settings: AggregatorSettings, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.clock = clock
        self.instance = uuid.uuid4().hex
        self.stats = AggregatorStats(
            rejected=dict.fromkeys(REJECT_REASONS, 0),
            refused=dict.fromkeys(REFUSED_REASONS, 0),
            io_errors=dict.fromkeys(_IO_WHERE, 0),
        )
        self.store = Store(settings.state)
        self.aggregation = Aggregation(load=self.store.load, owned=settings.ranks)
        self.intake = Intake(  # admission, membership and end-of-run (pure)
            Rules(
                expect_nodes=settings.expect_nodes,
                end_grace_s=settings.end_grace_s,
                heartbeat_timeout_s=settings.heartbeat_timeout_s,
                max_nodes=settings.max_nodes,
                max_streams_per_node=settings.max_streams_per_node,
                max_streams=settings.max_streams,
            ),
            Welcome(protocol=PROTOCOL_VERSION, instance=self.instance, credit=settings.credit),
            clock(),
            self.store.nodes(),
            self.store.ended_by(),  # node -> the collector instance that ended it
        )
        self.ledger = Ledger(settings.credit)  # acknowledgements owed, files to store (pure)
        self.publisher = Publisher(  # the reports /metrics shows
            settings,
            clock,
            self.aggregation,
            self.stats,
            intake=self.intake,
            ledger=self.ledger,
            counters=self._counters,
        )
        self._decoder = msgspec.msgpack.Decoder(ToAggregator)
        self._head = msgspec.msgpack.Decoder(Head)
        self._records = msgspec.msgpack.Decoder(Record)
        self._encoder = msgspec.msgpack.Encoder()
        self._replies: list[tuple[bytes, ToCollector]] = []
        self.lost: list[str] = []  # set at the end: what never finished
        recover(self.aggregation, self.store, lambda r, f: self._apply(r, f, log_it=False))
        self.publisher.recovered()
        self._last_message = clock()
        self.socket: zmq.Socket[bytes] | None = None
        self.gate: curve.Gate | None = None
        self.door: door.Door | None = None

    @property
    def nodes(self) -> dict[str, bool]:
        """The nodes seen (Hello or end-of-run) and whether each ended (`Intake`)."""
        return self.intake.nodes

    @property
    def heartbeats(self) -> dict[str, tuple[CollectorStats, float]]:
        return self.intake.heartbeats

    @property
    def links(self) -> Links:
        """Routing id -> the proven node that owns it (`Intake`)."""
        return self.intake.links

    @property
    def completed(self) -> set[str]:
        """The windows complete (`Publisher`)."""
        return self.publisher.completed

    # ---------------------------------------------------------------- the loop
    def run(self, stop: threading.Event) -> Report:
        door.open_files()
        context = zmq.Context()
        self.socket = context.socket(zmq.ROUTER)
        try:
            self.door = self._bind(self.socket)
        except ConfigError:
            context.term()
            raise
        try:
            server = serve(
                self.publisher.exporter, self.settings.metrics_port, self.settings.metrics_addr
            )
        except OSError as exc:
            if self.gate is not None:
                self.gate.close()
            self.door.close()
            self.socket.close(0)
            context.term()
            reason = exc.strerror or exc
            raise ConfigError(f"--metrics-port {self.settings.metrics_port}: {reason}") from None
        self._started()
        self.publisher.begin()
        try:
            self._loop(self.socket, stop)
            report = self._final()
            stop.wait(self.settings.linger_s)  # /metrics stays up for the last scrapes
            return report
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
            self.store.close()
            if self.gate is not None:
                self.gate.close()
            self.door.close()
            self.socket.close(0)
            context.term()
            self.publisher.stop()

    def _loop(self, socket: zmq.Socket[bytes], stop: threading.Event) -> None:
        """Until the run is over: receive, store, acknowledge, publish. An I/O error (out of
        descriptors, disk full...) is waited out and the turn taken again (`_io_error`)."""
        failures = 0
        while not stop.is_set() and not self._over():
            try:
                if socket.poll(100):
                    self._drain(socket)
                self._tick()
                failures = 0
            except OSError as exc:
                stop.wait(self._io_error("loop", exc, failures))
                failures += 1

    def _bind(self, socket: zmq.Socket[bytes]) -> door.Door:
        """Set the ROUTER up and bind it (a clear error if it cannot be); its door, which
        watches its monitor (handshakes capped, drops counted)."""
        settings = self.settings
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.MAXMSGSIZE, 2 * MAX_MESSAGE_BYTES)
        socket.setsockopt(zmq.RCVHWM, _RECEIVE_QUEUE)
        socket.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a node's own reconnection takes its id
        socket.setsockopt(zmq.HANDSHAKE_IVL, max(1, round(settings.handshake_s * 1000)))
        if settings.keys is not None:
            self.gate = curve.server(socket, settings.keys)
        # One monitor per socket (a second would replace the first).
        monitor = socket.get_monitor_socket(door.EVENTS)
        try:
            socket.bind(settings.listen)
        except zmq.ZMQError as exc:
            monitor.close(0)
            socket.close(0)
            reason = zmq.strerror(exc.errno or 0)
            raise ConfigError(f"--listen {settings.listen}: {reason}") from None
        pending = door.Pending(settings.max_handshakes, settings.handshake_s)
        return door.Door(monitor, pending, self.gate.handshake if self.gate else None)

    def _started(self) -> None:
        settings = self.settings
        metrics = None if settings.metrics_port is None else settings.metrics_port
        log.info(
            "aggregator started",
            extra={
                "version": installed_version(),
                "protocol": PROTOCOL_VERSION,
                "listen": settings.listen,
                "metrics": f"http://{settings.metrics_addr}:{metrics}/metrics" if metrics else None,
                "state": str(settings.state),
                "out": str(settings.out),
                "shard": settings.shard or None,
            },
        )

    def _drain(self, socket: zmq.Socket[bytes]) -> None:
        for _ in range(_DRAIN):
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self._last_message = self.clock()
            if self.door is not None:
                self.door.spoke(frames[-1].get(zmq.SRCFD))
            self.receive([frame.bytes for frame in frames], peer=curve.peer(frames))
        self.commit()
        self._send(socket)

    def receive(self, frames: list[bytes], peer: str | None = None) -> None:
        """One multipart message from the ROUTER: [routing id, payload]. `peer`: the node
        its connection proved (None: the routing id stands for it, as without CurveZMQ).
        Nothing a peer sends raises: what is refused is counted by reason."""
        if len(frames) != 2:
            self._reject("frames")
            return
        identity, payload = frames
        self.stats.received_bytes += len(payload)
        if len(payload) > MAX_MESSAGE_BYTES:
            self._reject("too_large")
            return
        speaker = self.intake.speaker(identity, peer)
        if isinstance(speaker, Taken):
            self._taken(speaker.node, speaker.owner)
            return
        try:
            self._receive(identity, speaker, payload)
        except msgspec.ValidationError:  # a subclass of DecodeError: first
            self._reject("invalid")
        except (msgspec.DecodeError, RecursionError):
            self._reject("undecodable")
        else:
            self._heard_from(speaker)

    def _taken(self, node: str, owner: str) -> None:
        """`node` spoke on a routing id `owner` owned: refused, counted, logged once per
        node; the owner gets nothing more on that id (`Links`)."""
        self._tally("routing_id_taken")
        if self.links.first(node, "routing_id_taken"):
            log.warning(
                "message refused: the routing id belongs to another node",
                extra={"node": node, "owner": owner},
            )

    def _heard_from(self, node: str) -> None:
        """A known node spoke (any message): it is not silent, or back if it was."""
        if self.intake.heard(node, self.clock()):
            log.info("collector heard again", extra={"node": node})

    def _receive(self, identity: bytes, speaker: str, payload: bytes) -> None:
        head = self._head.decode(payload)
        kind = _KINDS[head.type]
        if kind == "Batch" or (kind == "Hello" and head.protocol != PROTOCOL_VERSION):
            self._count(kind)
            self._old_protocol(identity, speaker, head.protocol)
            return
        if head.stream is not None and kind in ("StreamStart", "Facts", "StreamEnd"):
            self._record(identity, speaker, head, payload)
            return
        message = self._decoder.decode(payload)
        if isinstance(message, StreamStart | Batch | Facts | StreamEnd):  # no stream in the head
            raise msgspec.ValidationError("a record without a stream")
        self._count(kind)
        if message.node != speaker:
            self._refuse(identity, "not_own_node", f"{speaker} cannot speak for another node")
        elif isinstance(message, Hello):
            self._decided(identity, self.intake.hello(message.node, message.instance))
        elif isinstance(message, Heartbeat):
            self._decided(
                identity, self.intake.heartbeat(message.node, message.stats, self.clock())
            )
        elif isinstance(message, EndOfRun):
            ended = self.intake.end_of_run(message.node, message.instance)
            self._decided(identity, ended, ended_by=True)
            if not ended.refused:
                log.info("end of run", extra={"node": message.node})

    def _old_protocol(self, identity: bytes, speaker: str, protocol: int | None) -> None:
        """A Hello of another protocol version, or protocol 4's event `Batch` (whatever its
        other fields): refused, counted ("protocol"), logged by the sparse rule, answered."""
        theirs = "4 (event batches)" if protocol is None else str(protocol)
        count = self.stats.rejected["protocol"] = self.stats.rejected.get("protocol", 0) + 1
        if sparse(count):
            log.warning(
                "collector of another protocol refused",
                extra={"node": speaker, "collector_protocol": theirs,
                       "aggregator_protocol": PROTOCOL_VERSION, "count": count},
            )  # fmt: skip
        why = f"collector protocol {theirs}, aggregator protocol {PROTOCOL_VERSION}"
        self._replies.append((identity, Reject(reason=f"{why}: run the same commscope on both")))

    def _count(self, kind: str) -> None:
        self.stats.messages[kind] = self.stats.messages.get(kind, 0) + 1

    def _refuse(self, identity: bytes, reason: RejectReason, why: str) -> None:
        self._reject(reason)
        self._replies.append((identity, Reject(reason=why)))

    def _decided(self, identity: bytes, decision: Decision, ended_by: bool = False) -> None:
        """Carry out what the `Intake` decided of a Hello, Heartbeat or EndOfRun: count a
        refusal over the node cap, store the nodes (with who ended them), reply."""
        if decision.refused:
            self._reject("too_many_nodes")
        if decision.save:
            self.store.save_nodes(self.nodes, self.intake.ended_by if ended_by else None)
        if decision.reply is not None:
            self._replies.append((identity, decision.reply))

    def _record(self, identity: bytes, speaker: str, head: Head, payload: bytes) -> None:
        """A record, judged on its head (`judge`); decoded whole only to be applied. Its stream
        is keyed by the speaker's node with it (`own_stream`): no node reaches another's."""
        stream = own_stream(speaker, head.stream or "")
        self._count(_KINDS[head.type])
        verdict = self.aggregation.verdict_at(stream, head.seq, head.type == "start")
        outcome = judge(speaker, self.aggregation.owner(stream), verdict)
        if outcome is Outcome.NOT_OWN_STREAM:
            self._reject("not_own_stream")
            return
        if outcome is Outcome.APPLY and not self._take(speaker, stream, payload):
            return
        if outcome is Outcome.DUPLICATE:
            self.stats.duplicates += 1
        elif outcome is Outcome.AHEAD:
            self.stats.out_of_order += 1
        self.ledger.owe(identity, stream, head.stream or "")

    def _take(self, speaker: str, stream: str, payload: bytes) -> bool:
        """Decode a new record whole and apply it (False: a StreamStart refused)."""
        record = msgspec.structs.replace(self._records.decode(payload), stream=stream)
        if isinstance(record, Facts) and not well_formed(record):
            raise msgspec.ValidationError("facts that are not well formed")
        if isinstance(record, StreamStart) and not self._may_start(speaker, record):
            return False
        self._apply(record, payload, log_it=True)
        return True

    def _may_start(self, speaker: str, start: StreamStart) -> bool:
        """A node starts only its own streams, within the caps on open streams (`Intake`)."""
        open_all, open_own = len(self.aggregation.open), self.aggregation.open_streams(speaker)
        admission = self.intake.may_start(speaker, start.node, open_all, open_own)
        if admission is not Admission.OPEN:
            self._reject(_ADMISSION[admission])
        return admission is Admission.OPEN

    def _apply(self, record: Record, payload: bytes, log_it: bool) -> None:
        """Apply a record (`log_it`: as received, so logged first; else replayed from the log).
        What it finished is stored at the next commit (`Ledger`)."""
        if log_it:
            self.publisher.last_record = self.clock()
        if log_it and not isinstance(record, StreamEnd):
            self.store.append(record.stream, payload)
        applied = self.aggregation.apply(record)
        if log_it and isinstance(record, Facts) and applied.tailed:
            self.publisher.live.tailed(record, applied.busbw, self.clock())
        self.stats.events += applied.events
        for old in applied.superseded:
            self.store.forget(old)
            self.store.save_retired(self.aggregation.retired)
            self.publisher.dirty = True
        if applied.finished is not None:
            self.ledger.finished(applied.finished, applied.tailed)

    def commit(self) -> None:
        """Make what was applied durable, with one sync of the store's journal (the drain's
        records and finished files together); only then may it be acknowledged (`Ledger`)."""
        now = self.clock()
        for item, feeds in self.ledger.to_store():
            self.store.finish(item)
            if feeds:
                self.publisher.live.finished(item, now)
            self.publisher.dirty = True
            self.publisher.dump_waiting |= item.flight is not None
        self.ledger.written()
        self.store.sync()
        self.ledger.commit(self.aggregation.position)

    def _send(self, socket: zmq.Socket[bytes]) -> None:
        """Send the acknowledgements due (`Ledger`) and the replies, each to a routable id."""
        acks = self.ledger.acks()
        self.stats.acks += len(acks)
        for identity, reply in [*self._replies, *acks]:
            if not self.links.routable(identity):  # taken over: only its owner is answered
                continue
            try:
                socket.send_multipart([identity, self._encoder.encode(reply)], zmq.NOBLOCK)
            except zmq.ZMQError:
                self._reject("unroutable")  # peer gone: it resends and gets a fresh answer
        self._replies.clear()

    def _io_error(self, where: str, exc: OSError, failures: int) -> float:
        """An I/O error survived: counted, logged (sparse); how long to wait before the retry.
        What failed is redone: a record not stored is neither applied nor acknowledged (its
        collector sends it again), acknowledgements wait for the store's next sync."""
        count = self.stats.io_errors[where] = self.stats.io_errors.get(where, 0) + 1
        if sparse(count):
            log.error(
                "I/O error: retrying",
                extra={"where": where, "error": exc.strerror or str(exc), "count": count},
            )
        return IO_RETRY_S[min(failures, len(IO_RETRY_S) - 1)]

    def _reject(self, reason: RejectReason) -> None:
        count = self._tally(reason)
        if sparse(count):
            log.warning("message rejected", extra={"reason": reason, "count": count})

    def _tally(self, reason: RejectReason) -> int:
        count = self.stats.rejected[reason] = self.stats.rejected.get(reason, 0) + 1
        return count

    # ---------------------------------------------------------------- publishing and ending
    def _tick(self) -> None:
        self.publisher.tick()

    def publish(self, window_completed: bool = False) -> None:
        self.publisher.publish(window_completed)

    def _counters(self) -> None:
        """The service's own counters, as of now (before each publish)."""
        self.stats.log_bytes = self.store.log_bytes()
        if self.gate is not None:
            self.stats.refused = self.gate.refused()
        if self.door is not None:
            counts = self.door.counts()
            self.stats.rejected["disconnected"] = counts["disconnected"]
            self.stats.refused["too_many_handshakes"] = counts["too_many_handshakes"]

    def _over(self) -> bool:
        """Whether the run is over: membership says so (`Intake.over`), or `idle_timeout_s`
        passed without a message. A node newly silent without end-of-run is logged once."""
        now = self.clock()
        streaming = {s.start.node for s in self.aggregation.open.values()}
        over = self.intake.over(now, streaming)
        for gone in self.intake.silenced():
            log.warning(
                "collector silent without end-of-run: no longer waited for",
                extra={"node": gone.node, "silent_s": round(gone.silent_s, 1)},
            )
        idle = self.settings.idle_timeout_s
        return over or (idle is not None and now - self._last_message >= idle)

    def _lost(self) -> list[str]:
        """What never finished (`ledger.lost`)."""
        return lost(self.aggregation, self.intake.unended())

    def _final(self) -> Report:
        """The run is over: the last acknowledgements sent, the final reports written (an
        I/O error retried), the end recorded in the state folder."""
        self.publisher.wait()
        if self.socket is not None:
            self._send(self.socket)
        self.lost = self._lost()
        if self.lost:
            log.warning("files lost", extra={"count": len(self.lost), "lost": self.lost[:20]})
        report = self.publisher.final()
        final, paths = write_final(
            report,
            self.settings.out,
            self._fallback_name(),
            command=self.settings.command,
            retries=len(IO_RETRY_S),
            failed=lambda exc, failures: self._io_error("reports", exc, failures),
        )
        for path in paths:
            log.info("report written", extra={"path": str(path)})
        when = final.provenance.generated_utc if final.provenance is not None else ""
        ended = RunEnd(reports=[str(p) for p in paths], lost=self.lost, generated_utc=when)
        self.store.save_end(ended)
        return report

    def _fallback_name(self) -> str:
        """--job, else the first collector's watch folder, else `run`."""
        roots = sorted({f.root_name for f in self.aggregation.finished.values()})
        return self.settings.name or (roots[0] if roots else "run")
