"""The aggregator service (shell: ZeroMQ ROUTER, durable state, /metrics, report files).

One loop: receive what collectors send, validate it (a malformed or hostile message is
counted and answered or dropped, never raised), apply each record at most once through the
pure `Aggregation`, make it durable (`Store`), then acknowledge.

Publishing: finished files feed the rolling busbw statistics; the report over finished files
is published to Prometheus when a window completes (at once), and before that at each further
quarter of a window's ranks, at most `REBUILD_SHARE` of the time going to building reports
(`Pacing`); the service's own counters every `refresh_s`. Within `run` a report is built on a
thread beside the loop (`ReportBuild`), from what `Aggregation.prepare` set out, so the loop
keeps applying, storing and acknowledging (a loop busy for seconds makes collectors resend).

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
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, get_args

import msgspec
import zmq
from commscope.exporters.files import stamped, write_reports
from commscope.exporters.metricnames import MAX_RANK_SERIES
from commscope.exporters.prometheus import (
    STATS,
    BusbwHistogram,
    Rolling,
    Snapshot,
    SnapshotCollector,
)
from commscope.exporters.publish import serve
from commscope.model.errors import ConfigError, WriteError
from commscope.model.schema import (
    PROTOCOL_VERSION,
    REFUSED_REASONS,
    REJECT_REASONS,
    Ack,
    AggregatorStats,
    Batch,
    CollectorStats,
    EndOfRun,
    Facts,
    FinishedFile,
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
from commscope.pipeline import inspector_live
from commscope.pipeline.aggregation import Aggregation, Prepared, Verdict
from commscope.pipeline.edge import well_formed
from commscope.pipeline.report import Options
from commscope.pipeline.rolling import RollingBandwidth
from commscope.pipeline.stats import sample_values
from commscope.service import curve, door, heap
from commscope.service.intake import Admission, Decision, Intake, Rules, Taken
from commscope.service.links import own_stream
from commscope.service.logs import sparse
from commscope.service.pacing import Pacing
from commscope.service.store import Store

log = logging.getLogger("commscope.aggregate")

# A batch is at most MAX_BATCH_EVENTS (4096) events: ~56 KB for DLRM's, ~1.4 MB if every event
# were a CommOp with a 256-character process group. Larger messages are refused and counted
# ("too_large"); libzmq drops a connection sending more than twice that (MAXMSGSIZE), which
# only the socket monitor sees ("disconnected", which counts every dropped connection). libzmq
# queues at most RCVHWM messages per connection: 2x a collector's default window of 64.
MAX_MESSAGE_BYTES: Final = 2 * 2**20
RECEIVE_QUEUE: Final = 128
_DRAIN: Final = 512  # messages handled between two syncs
LIVE_S: Final = 1.0  # a tailed Inspector op is on /metrics within this (plus the tick)
IO_RETRY_S: Final = (0.1, 0.5, 1.0, 2.0, 5.0)  # waits after an I/O error: the loop, the reports
IO_WHERE: Final = ("loop", "reports")  # where an I/O error was survived (`io_errors`)
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
            io_errors=dict.fromkeys(IO_WHERE, 0),
        )
        self.rolling = RollingBandwidth(settings.horizon_s)
        self.busbw_histogram = BusbwHistogram()
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
        self._decoder = msgspec.msgpack.Decoder(ToAggregator)
        self._head = msgspec.msgpack.Decoder(Head)
        self._records = msgspec.msgpack.Decoder(Record)
        self.lost: list[str] = []  # set at the end: what never finished
        self._encoder = msgspec.msgpack.Encoder()
        self._acks: dict[tuple[bytes, str], str] = {}  # (routing id, stream key) -> its id
        self.links = self.intake.links  # routing id -> the proven node that owns it
        self._replies: list[tuple[bytes, ToCollector]] = []
        self._finished: list[FinishedFile] = []
        self._fed_live: set[str] = set()  # of those, tailed Inspector logs: fed as they came
        self._live_pending = False  # a tailed Inspector op arrived since the last publish
        self.live_skew = inspector_live.LiveSkew()
        self.recent_skews = inspector_live.RecentSkews(settings.horizon_s)
        self._recover()
        self.completed = set(self.aggregation.complete_windows())
        self._report: Report | None = None
        self._dirty = True
        self._background = False  # set by `run`: reports are built beside the loop
        self._building: ReportBuild | None = None
        self._heap = heap.Freezer()
        self._window_waiting = False  # a window completed: its report is due at once
        self._windows_shown = len(self.completed)  # as of the report shown
        self._began = 0.0  # when the report being built was set out
        self._completing = False  # it shows a window completed
        self._completes = self._windows_shown  # the windows complete when it was set out
        self.exporter = SnapshotCollector(Snapshot(job=settings.job, shard=settings.shard))
        self._published_at = -math.inf  # publish at the first tick
        self.pacing = Pacing()  # when a mid-window report may be built
        self._last_message = clock()
        self._last_record = self._last_message  # a record applied as received (not a heartbeat)
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

    # ---------------------------------------------------------------- recovery
    def _recover(self) -> None:
        self.aggregation.restore(self.store.finished(), self.store.retired())
        for stream, frames in self.store.logs():
            if stream in self.aggregation.finished:  # crashed between done/ and the log's removal
                self.store.forget(stream, keep_done=True)
                continue
            self._replay(stream, frames)
        log.info(
            "state recovered",
            extra={"finished": len(self.aggregation.finished), "open": len(self.aggregation.open)},
        )

    def _replay(self, stream: str, frames: Iterator[bytes]) -> None:
        """Apply a stream's log up to its first record this version refuses (a protocol-4
        Batch, logged before an upgrade); the log is then cut there, so what follows (the
        collector, told the position, sends it again) is logged after what was applied."""
        applied: list[bytes] = []
        refused = False
        for frame in frames:  # read to the end: that mends a torn tail
            record = None if refused else self._logged(stream, frame)
            refused = refused or record is None
            if record is not None and self.aggregation.verdict(record) is Verdict.APPLY:
                self._apply(record, frame, log_it=False)
                applied.append(frame)
        if refused:
            self.store.forget(stream)
            for frame in applied:
                self.store.append(stream, frame)

    def _logged(self, stream: str, frame: bytes) -> Record | None:
        """A logged record (None, logged, if it does not fit this version's schema: replay
        of its stream stops there and the stream stays unfinished)."""
        try:
            record: Record = self._records.decode(frame)
        except msgspec.DecodeError as exc:
            log.warning("logged record refused", extra={"stream": stream, "reason": str(exc)})
            return None
        return msgspec.structs.replace(record, stream=stream)  # logged under its stream's key

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
            server = serve(self.exporter, self.settings.metrics_port, self.settings.metrics_addr)
        except OSError as exc:
            if self.gate is not None:
                self.gate.close()
            self.door.close()
            self.socket.close(0)
            context.term()
            reason = exc.strerror or exc
            raise ConfigError(f"--metrics-port {self.settings.metrics_port}: {reason}") from None
        self._started()
        self._background = True
        self._heap.start()
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
            self._heap.stop()

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
        socket.setsockopt(zmq.RCVHWM, RECEIVE_QUEUE)
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
        """A record, judged on its head; decoded whole only to be applied. Its stream is
        keyed by the speaker's node with it (`own_stream`): no node reaches another's."""
        stream = own_stream(speaker, head.stream or "")
        self._count(_KINDS[head.type])
        owner = self.aggregation.owner(stream)
        if owner is not None and owner != speaker:
            self._reject("not_own_stream")
            return
        verdict = self.aggregation.verdict_at(stream, head.seq, head.type == "start")
        if verdict is Verdict.APPLY:
            record = msgspec.structs.replace(self._records.decode(payload), stream=stream)
            if isinstance(record, Facts) and not well_formed(record):
                raise msgspec.ValidationError("packed runs that are not whole runs")
            if isinstance(record, StreamStart) and not self._may_start(speaker, record):
                return
            self._apply(record, payload, log_it=True)
        elif verdict is Verdict.DUPLICATE:
            self.stats.duplicates += 1
        else:
            self.stats.out_of_order += 1
        self._acks[(identity, stream)] = head.stream or ""

    def _may_start(self, speaker: str, start: StreamStart) -> bool:
        """A node starts only its own streams, within the caps on open streams (`Intake`)."""
        open_all, open_own = len(self.aggregation.open), self.aggregation.open_streams(speaker)
        admission = self.intake.may_start(speaker, start.node, open_all, open_own)
        if admission is not Admission.OPEN:
            self._reject(_ADMISSION[admission])
        return admission is Admission.OPEN

    def _apply(self, record: Record, payload: bytes, log_it: bool) -> None:
        if log_it:
            self._last_record = self.clock()
        if log_it and not isinstance(record, StreamEnd):
            self.store.append(record.stream, payload)
        applied = self.aggregation.apply(record)
        if log_it and isinstance(record, Facts) and applied.tailed:
            self._feed(record, applied.busbw)
        self.stats.events += applied.events
        for old in applied.superseded:
            self.store.forget(old)
            self.store.save_retired(self.aggregation.retired)
            self._dirty = True
        if applied.finished is not None:
            self._finished.append(applied.finished)
            if applied.tailed:
                self._fed_live.add(applied.finished.stream)

    def _feed(self, part: Facts, busbw: dict[str, list[float]]) -> None:
        """A tailed Inspector log's ops (their busbw as `Aggregation.apply` absorbed them):
        into the rolling busbw now (published within `LIVE_S`), not when the stream ends."""
        now = self.clock()
        for kind, values in busbw.items():
            self.rolling.add(kind, values, now)
            self.busbw_histogram.add(kind, values)
        for kind, skew_s in self.live_skew.add(part.stream, part):
            self.recent_skews.add(kind, skew_s, now)
        self._live_pending = True

    def commit(self) -> None:
        """Make what was applied durable, with one sync of the store's journal (the drain's
        records and finished files together); only then may it be acknowledged."""
        now = self.clock()
        for item in self._finished:
            self.store.finish(item)
            if item.result is not None and item.stream not in self._fed_live:
                for kind, tally in item.result.ops.items():
                    values = sample_values(tally.busbw_Bps)
                    self.rolling.add(kind, values, now)
                    self.busbw_histogram.add(kind, values)
            self._dirty = True
        self._finished.clear()
        self._fed_live.clear()
        self.store.sync()

    def _send(self, socket: zmq.Socket[bytes]) -> None:
        for (identity, stream), wire in self._acks.items():
            next_seq, done = self.aggregation.position(stream)
            ack = Ack(stream=wire, next_seq=next_seq, done=done, credit=self.settings.credit)
            self._replies.append((identity, ack))
            self.stats.acks += 1
        self._acks.clear()
        for identity, reply in self._replies:
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
        """Publish at once when a window completes; otherwise every `refresh_s` (the report
        when `Pacing` allows, the service's own counters always)."""
        now = self.clock()
        fresh: set[str] = set()
        if self._dirty:
            complete = set(self.aggregation.complete_windows())
            fresh, self.completed = complete - self.completed, complete
        built = self._building is not None and not self._building.is_alive()
        live = self._live_pending and now - self._published_at >= LIVE_S
        if fresh or built or live or now - self._published_at >= self.settings.refresh_s:
            self.publish(window_completed=bool(fresh))

    def publish(self, window_completed: bool = False) -> None:
        """Show the service's figures, with a report built anew when one is due. Within
        `run` the report is built beside the loop (`ReportBuild`), which keeps receiving,
        applying, storing and acknowledging meanwhile; it is shown once built (the first,
        at start, is built at once)."""
        self._window_waiting = self._window_waiting or window_completed
        if self._building is not None and not self._building.is_alive():
            self._collect(self._building)
        if self._building is None and self._due():
            prepared = self._set_out()
            if self._background and self._report is not None:
                self._building = ReportBuild(self.aggregation, prepared)
                self._building.start()
            else:
                self._built(self.aggregation.build(prepared))
        self.stats.log_bytes = self.store.log_bytes()
        if self.gate is not None:
            self.stats.refused = self.gate.refused()
        if self.door is not None:
            counts = self.door.counts()
            self.stats.rejected["disconnected"] = counts["disconnected"]
            self.stats.refused["too_many_handshakes"] = counts["too_many_handshakes"]
        if self._report is not None:
            self.exporter.show(self.snapshot(self._report))
        self._live_pending = False
        self._published_at = self.clock()

    def _due(self) -> bool:
        return self._report is None or (
            self._dirty
            and (
                self._window_waiting
                or self.pacing.may_rebuild(self.clock(), self.aggregation.progress())
            )
        )

    def _set_out(self) -> Prepared:
        """Set a report out from the files finished so far (`Aggregation.prepare`)."""
        self._dirty = False
        self._began = self.clock()
        self._completing, self._window_waiting = self._window_waiting, False
        self._completes = len(self.completed)
        self.pacing.set_out(self.aggregation.progress())
        return self.aggregation.prepare(self.settings.options, metrics_only=True)  # for /metrics

    def _built(self, report: Report, cpu_s: float | None = None) -> None:
        """Show a report built: the next mid-window one waits out its cost (`Pacing`).
        Each is logged with its time (and the CPU of its thread when built beside the loop)."""
        cost = self.clock() - self._began
        extra = {"seconds": round(cost, 3), "window_completed": self._completing}
        log.info("report built", extra={**extra, "cpu_s": cpu_s} if cpu_s is not None else extra)
        self.pacing.built(self.clock(), cost)
        self._report, self._windows_shown = report, self._completes
        if self._completing:
            self.stats.window_latency_s = self.clock() - self._last_record
        if not self._finished:  # every finished file is stored: call lists can go
            self.aggregation.shed()
        if self._background:  # the daemon: its long-lived heap out of the GC's walks
            self._heap.after_report()

    def _collect(self, build: ReportBuild) -> None:
        """Take a report built beside the loop. One that could not be built because a file it
        read was superseded meanwhile (its stored copy gone) is set out again."""
        self._building = None
        if isinstance(build.error, LookupError):
            log.info(
                "report built again: a file changed meanwhile", extra={"why": str(build.error)}
            )
            self._dirty, self._window_waiting = True, self._window_waiting or self._completing
            self.pacing.retry()
            return
        if build.error is not None:
            raise build.error
        if build.report is not None:
            self._built(build.report, build.cpu_s)

    def _wait_build(self) -> None:
        """Let a report being built beside the loop end (the run is over)."""
        if self._building is not None:
            self._building.join()
            self._building = None

    def snapshot(self, report: Report) -> Snapshot:
        now = self.clock()
        kinds = self.rolling.keys()
        busbw = {
            kind: Rolling(
                count=self.rolling.count(kind, now),
                stats={
                    **{name: self.rolling.quantile(kind, q, now) for name, q in STATS.items()},
                    "mean": self.rolling.mean(kind, now),
                },
            )
            for kind in kinds
        }
        collectors = self.intake.collectors(now)
        aggregation = self.aggregation
        done = aggregation.finished.values()
        return Snapshot(
            job=self.settings.job,
            report=report,
            windows_completed=self._windows_shown,
            busbw=busbw,
            aggregator=msgspec.structs.replace(self.stats),
            streams={
                "open": len(aggregation.open),
                "done": sum(1 for f in done if f.result is not None),
                "skipped": sum(1 for f in done if f.result is None),
            },
            collectors=collectors,
            shard=self.settings.shard,
            busbw_histogram=self.busbw_histogram.snapshot(),
            max_rank_series=self.settings.max_rank_series,
            live_skew=self.recent_skews.stats(now),
            started_ranks=self._ranks_started(),
        )

    def _ranks_started(self) -> frozenset[int]:
        """Ranks whose streams have started (a file-name rank) or ended usable (the trace's
        rank), within a shard's `--ranks`: /metrics shows their counters at 0 from then on."""
        aggregation, owned = self.aggregation, self.settings.ranks
        started = [s.start.name_rank for s in aggregation.open.values()]
        ended = [f.meta.rank if f.meta.rank is not None else f.name_rank
                 for f in aggregation.finished.values() if f.result is not None]  # fmt: skip
        known = {rank for rank in (*started, *ended) if rank is not None}
        return frozenset(known if owned is None else known & owned)

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
        """What never finished: streams still open, files their collector could not read,
        collectors without end-of-run."""
        lost = [
            f"{s.start.node}: {s.start.path} unfinished" for s in self.aggregation.open.values()
        ]
        lost += [
            f"{f.node}: {f.path} {f.error}" for f in self.aggregation.finished.values() if f.lost
        ]
        lost += [f"{node}: no end-of-run" for node in self.intake.unended()]
        return lost

    def _final(self) -> Report:
        self._wait_build()
        if self.socket is not None:
            self._send(self.socket)
        self.lost = self._lost()
        if self.lost:
            log.warning("files lost", extra={"count": len(self.lost), "lost": self.lost[:20]})
        report = self.aggregation.report(self.settings.options, final=True)
        if unended := self.intake.unended():
            inputs = msgspec.structs.replace(report.inputs, unended_collectors=unended)
            report = msgspec.structs.replace(report, inputs=inputs)
        self.exporter.show(self.snapshot(report))
        final = stamped(report, (), self.settings.command, datetime.now(UTC))
        paths = self._write(final)
        for path in paths:
            log.info("report written", extra={"path": str(path)})
        when = final.provenance.generated_utc if final.provenance is not None else ""
        ended = RunEnd(reports=[str(p) for p in paths], lost=self.lost, generated_utc=when)
        self.store.save_end(ended)
        return report

    def _write(self, final: Report) -> tuple[Path, ...]:
        """The final reports, written; an I/O error retried (`IO_RETRY_S`), then one line."""
        failures = 0
        while True:
            try:
                return write_reports(final, self.settings.out, self._fallback_name())
            except WriteError as exc:
                wait_s = self._io_error("reports", exc.error, failures)
                failures += 1
                if failures > len(IO_RETRY_S):
                    raise ConfigError(
                        f"--out {self.settings.out}: reports not written: {exc}"
                    ) from None
                time.sleep(wait_s)

    def _fallback_name(self) -> str:
        """--job, else the first collector's watch folder, else `run`."""
        roots = sorted({f.root_name for f in self.aggregation.finished.values()})
        return self.settings.name or (roots[0] if roots else "run")


class ReportBuild(threading.Thread):
    """A report built beside the aggregator's loop, from what `Aggregation.prepare` set out
    (`publish`): the loop keeps acknowledging, so collectors do not resend while a large
    job's report takes seconds. Its report, or the error that stopped it, is kept for the loop."""

    def __init__(self, aggregation: Aggregation, prepared: Prepared) -> None:
        super().__init__(name="commscope-report", daemon=True)
        self.aggregation = aggregation
        self.prepared = prepared
        self.report: Report | None = None
        self.error: Exception | None = None
        self.cpu_s = 0.0

    def run(self) -> None:
        began = time.thread_time()
        try:
            self.report = self.aggregation.build(self.prepared)
        except Exception as exc:  # handed to the loop: raised there, or the report set out again
            self.error = exc
        self.cpu_s = round(time.thread_time() - began, 3)
