"""The aggregator service (shell: ZeroMQ ROUTER, durable state, /metrics, report files).

One loop: receive what collectors send, validate it (a malformed or hostile message is
counted and answered or dropped, never raised), apply each record at most once through the
pure `Aggregation`, make it durable (`Store`), then acknowledge. Finished files feed the
rolling busbw statistics; the report over finished files is published to Prometheus when a
window completes (at once) and otherwise every `refresh_s`. The run ends when every
collector has sent end-of-run, on `stop` (SIGTERM), or after `idle_timeout_s` of silence;
the final text and JSON reports are the ones `commscope report` writes for the same files.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec
import zmq
from commscope.collector.schema import (
    PROTOCOL_VERSION,
    Ack,
    AggregatorStats,
    CollectorStats,
    EndOfRun,
    FinishedFile,
    Heartbeat,
    Hello,
    Record,
    Reject,
    Report,
    RunAck,
    StreamEnd,
    ToAggregator,
    ToCollector,
    Welcome,
)
from commscope.exporters.files import write_reports
from commscope.exporters.prometheus import STATS, Rolling, Snapshot, SnapshotCollector, serve
from commscope.pipeline.aggregation import Aggregation, Verdict
from commscope.pipeline.report import Options
from commscope.pipeline.rolling import RollingBandwidth
from commscope.pipeline.stats import sample_values
from commscope.pipeline.store import Store
from commscope.service import curve

log = logging.getLogger("commscope.aggregate")

MAX_MESSAGE_BYTES: Final = 256 * 2**20
_DRAIN: Final = 512  # messages handled between two syncs
REJECT_REASONS: Final = ("frames", "undecodable", "invalid", "protocol", "unroutable")


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
    horizon_s: float = 600.0
    credit: int = 64
    refresh_s: float = 5.0
    heartbeat_timeout_s: float = 30.0
    keys: curve.ServerKeys | None = None  # None: plain ZeroMQ (--insecure, loopback only)


class Aggregator:
    def __init__(self, settings: AggregatorSettings, clock: Callable[[], float] = time.monotonic):
        self.settings = settings
        self.clock = clock
        self.instance = uuid.uuid4().hex
        self.stats = AggregatorStats(
            rejected=dict.fromkeys(REJECT_REASONS, 0),
            refused=dict.fromkeys(curve.REFUSED_REASONS, 0),
        )
        self.rolling = RollingBandwidth(settings.horizon_s)
        self.store = Store(settings.state)
        self.aggregation = Aggregation(load=self.store.load)
        self.nodes = self.store.nodes()
        self.heartbeats: dict[str, tuple[CollectorStats, float]] = {}
        self._decoder = msgspec.msgpack.Decoder(ToAggregator)
        self._encoder = msgspec.msgpack.Encoder()
        self._acks: dict[tuple[bytes, str], None] = {}
        self._replies: list[tuple[bytes, ToCollector]] = []
        self._finished: list[FinishedFile] = []
        self._recover()
        self.completed = set(self.aggregation.complete_windows())
        self._report: Report | None = None
        self._dirty = True
        self.exporter = SnapshotCollector(Snapshot(job=settings.job))
        self._published_at = -math.inf  # publish at the first tick
        self._last_message = clock()
        self.socket: zmq.Socket[bytes] | None = None
        self.gate: curve.Gate | None = None

    # ---------------------------------------------------------------- recovery
    def _recover(self) -> None:
        self.aggregation.restore(self.store.finished(), self.store.retired())
        decoder = msgspec.msgpack.Decoder(Record)
        for stream, frames in self.store.logs():
            if stream in self.aggregation.finished:  # crashed between done/ and the log's removal
                self.store.forget(stream, keep_done=True)
                continue
            for frame in frames:
                record = decoder.decode(frame)
                if self.aggregation.verdict(record) is Verdict.APPLY:
                    self._apply(record, frame, log_it=False)
        log.info(
            "state recovered",
            extra={"finished": len(self.aggregation.finished), "open": len(self.aggregation.open)},
        )

    # ---------------------------------------------------------------- the loop
    def run(self, stop: threading.Event) -> Report:
        context = zmq.Context()
        self.socket = context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        if self.settings.keys is not None:
            self.gate = curve.server(self.socket, self.settings.keys)
        self.socket.bind(self.settings.listen)
        server = serve(self.exporter, self.settings.metrics_port, self.settings.metrics_addr)
        try:
            while not stop.is_set() and not self._over():
                if self.socket.poll(100):
                    self._drain(self.socket)
                self._tick()
            return self._final()
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
            self.store.close()
            if self.gate is not None:
                self.gate.close()
            self.socket.close(0)
            context.term()

    def _drain(self, socket: zmq.Socket[bytes]) -> None:
        for _ in range(_DRAIN):
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self._last_message = self.clock()
            self.receive([frame.bytes for frame in frames], peer=curve.peer(frames))
        self.commit()
        self._send(socket)

    def receive(self, frames: list[bytes], peer: str | None = None) -> None:
        """One multipart message from the ROUTER: [identity, payload]. `peer`: the node its
        Curve key was issued to (None without Curve); not used yet on this branch."""
        if len(frames) != 2:
            self._reject("frames")
            return
        identity, payload = frames
        try:
            message = self._decoder.decode(payload)
        except msgspec.ValidationError:  # a subclass of DecodeError: first
            self._reject("invalid")
            return
        except msgspec.DecodeError:
            self._reject("undecodable")
            return
        kind = type(message).__name__
        self.stats.messages[kind] = self.stats.messages.get(kind, 0) + 1
        self._dispatch(identity, message, payload)

    def _dispatch(self, identity: bytes, message: ToAggregator, payload: bytes) -> None:
        if isinstance(message, Hello):
            self._hello(identity, message)
        elif isinstance(message, Heartbeat):
            self.heartbeats[message.node] = (message.stats, self.clock())
        elif isinstance(message, EndOfRun):
            self.nodes[message.node] = True
            self.store.save_nodes(self.nodes)
            self._replies.append((identity, RunAck(node=message.node)))
            log.info("end of run", extra={"node": message.node})
        else:
            self._record(identity, message, payload)

    def _hello(self, identity: bytes, hello: Hello) -> None:
        if hello.protocol != PROTOCOL_VERSION:
            self._reject("protocol")
            reason = f"protocol {hello.protocol} not supported (this one: {PROTOCOL_VERSION})"
            self._replies.append((identity, Reject(reason=reason)))
            return
        if self.nodes.get(hello.node) is not False:
            self.nodes[hello.node] = False
            self.store.save_nodes(self.nodes)
        welcome = Welcome(
            protocol=PROTOCOL_VERSION, instance=self.instance, credit=self.settings.credit
        )
        self._replies.append((identity, welcome))

    def _record(self, identity: bytes, record: Record, payload: bytes) -> None:
        verdict = self.aggregation.verdict(record)
        if verdict is Verdict.APPLY:
            self._apply(record, payload, log_it=True)
        elif verdict is Verdict.DUPLICATE:
            self.stats.duplicates += 1
        else:
            self.stats.out_of_order += 1
        self._acks[(identity, record.stream)] = None

    def _apply(self, record: Record, payload: bytes, log_it: bool) -> None:
        if log_it and not isinstance(record, StreamEnd):
            self.store.append(record.stream, payload)
        applied = self.aggregation.apply(record)
        self.stats.events += applied.events
        for old in applied.superseded:
            self.store.forget(old)
            self.store.save_retired(self.aggregation.retired)
            self._dirty = True
        if applied.finished is not None:
            self._finished.append(applied.finished)

    def commit(self) -> None:
        """Make what was applied durable; only then may it be acknowledged."""
        self.store.sync()
        now = self.clock()
        for item in self._finished:
            self.store.finish(item)
            if item.result is not None:
                for kind, tally in item.result.ops.items():
                    self.rolling.add(kind, sample_values(tally.busbw_Bps), now)
            self._dirty = True
        self._finished.clear()

    def _send(self, socket: zmq.Socket[bytes]) -> None:
        for identity, stream in self._acks:
            next_seq, done = self.aggregation.position(stream)
            ack = Ack(stream=stream, next_seq=next_seq, done=done, credit=self.settings.credit)
            self._replies.append((identity, ack))
            self.stats.acks += 1
        self._acks.clear()
        for identity, reply in self._replies:
            try:
                socket.send_multipart([identity, self._encoder.encode(reply)], zmq.NOBLOCK)
            except zmq.ZMQError:
                self._reject("unroutable")  # peer gone: it resends and gets a fresh answer
        self._replies.clear()

    def _reject(self, reason: str) -> None:
        self.stats.rejected[reason] = self.stats.rejected.get(reason, 0) + 1
        if (
            self.stats.rejected[reason] in (1, 10, 100, 1000)
            or not self.stats.rejected[reason] % 10000
        ):
            log.warning(
                "message rejected", extra={"reason": reason, "count": self.stats.rejected[reason]}
            )

    # ---------------------------------------------------------------- publishing and ending
    def _tick(self) -> None:
        """Publish at once when a window completes; otherwise every `refresh_s` (the report
        only when a file has finished since, the service's own counters always)."""
        now = self.clock()
        fresh: set[str] = set()
        if self._dirty:
            complete = set(self.aggregation.complete_windows())
            fresh, self.completed = complete - self.completed, complete
        if fresh or now - self._published_at >= self.settings.refresh_s:
            self.publish(window_completed=bool(fresh))

    def publish(self, window_completed: bool = False) -> None:
        if self._dirty or self._report is None:
            self._report = self.aggregation.report(self.settings.options)
            self._dirty = False
            if not self._finished:  # every finished file is stored: call lists can go
                self.aggregation.shed()
        if window_completed:
            self.stats.window_latency_s = self.clock() - self._last_message
        self.stats.log_bytes = self.store.log_bytes()
        if self.gate is not None:
            self.stats.refused = self.gate.refused()
        self.exporter.publish(self.snapshot(self._report))
        self._published_at = self.clock()

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
        timeout = self.settings.heartbeat_timeout_s
        collectors = {
            node: (stats, now - seen < timeout) for node, (stats, seen) in self.heartbeats.items()
        }
        aggregation = self.aggregation
        done = aggregation.finished.values()
        return Snapshot(
            job=self.settings.job,
            report=report,
            windows_completed=len(self.completed),
            busbw=busbw,
            aggregator=msgspec.structs.replace(self.stats),
            streams={
                "open": len(aggregation.open),
                "done": sum(1 for f in done if f.result is not None),
                "skipped": sum(1 for f in done if f.result is None),
            },
            collectors=collectors,
        )

    def _over(self) -> bool:
        nodes = self.nodes
        if nodes and all(nodes.values()) and len(nodes) >= self.settings.expect_nodes:
            return True
        idle = self.settings.idle_timeout_s
        return idle is not None and self.clock() - self._last_message >= idle

    def _final(self) -> Report:
        if self.socket is not None:
            self._send(self.socket)
        report = self.aggregation.report(self.settings.options, final=True)
        self.exporter.publish(self.snapshot(report))
        paths = write_reports(report, self.settings.out, self._fallback_name())
        for path in paths:
            log.info("report written", extra={"path": str(path)})
        return report

    def _fallback_name(self) -> str:
        roots = sorted({f.root_name for f in self.aggregation.finished.values()})
        return roots[0] if roots else "run"
