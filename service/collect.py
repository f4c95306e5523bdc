"""The collector daemon (shell: ZeroMQ DEALER, a checkpoint file, one thread per file).

It watches a folder for rank traces, streams each file (`FileStream`) to the aggregator and
keeps at most `credit` records unacknowledged: beyond that it stops taking records, and the
file threads wait, so memory stays bounded while the aggregator is away. Unacknowledged
records are sent again after `resend_s` (doubling up to `max_resend_s`). The checkpoint —
per file its stream id, the bytes its fingerprint covers, and how many records the
aggregator has made durable — is rewritten (temp file, fsync, rename) only on
acknowledgement, so a restart resumes where the aggregator stands: nothing is lost, and
what it resends the aggregator recognises and does not apply twice.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec
import zmq
from commscope.collector.atomic import write_atomic
from commscope.collector.errors import ProtocolError
from commscope.collector.schema import (
    PROTOCOL_VERSION,
    Ack,
    CollectorStats,
    DropReason,
    EndOfRun,
    Heartbeat,
    Hello,
    Reject,
    RunAck,
    StreamEnd,
    StreamStart,
    ToCollector,
    Welcome,
)
from commscope.collector.stream import FileStream, Item, StreamSettings, fingerprint
from commscope.collector.watch import Watcher
from commscope.exporters.prometheus import Snapshot, SnapshotCollector, serve

log = logging.getLogger("commscope.collect")

CHECKPOINT: Final = "checkpoint.msgpack"


@dataclass(frozen=True)
class CollectorSettings:
    watch: Path
    aggregator: str
    node: str
    state: Path
    stream: StreamSettings = field(default_factory=StreamSettings)
    use_inotify: bool = True
    poll_s: float = 2.0
    window: int = 64
    resend_s: float = 2.0
    max_resend_s: float = 30.0
    heartbeat_s: float = 5.0
    parallel: int = 8
    once: bool = False
    drain_s: float = 60.0
    metrics_port: int | None = None
    metrics_addr: str = "0.0.0.0"
    job: str = "commscope"


class Entry(msgspec.Struct, kw_only=True):
    """A file's checkpoint: its stream, what the fingerprint covers, what is durable."""

    stream: str
    fingerprint_bytes: int
    acked: int = 0
    done: bool = False


@dataclass
class Pending:
    payload: bytes
    first_sent: float


class Collector:
    def __init__(self, settings: CollectorSettings) -> None:
        self.settings = settings
        self.stats = CollectorStats()
        self.credit = settings.window
        settings.state.mkdir(parents=True, exist_ok=True)
        self.checkpoint = _load(settings.state / CHECKPOINT)
        self.streams = {entry.stream: path for path, entry in self.checkpoint.items()}
        self.queue: queue.Queue[Item] = queue.Queue(maxsize=4)
        self.unacked: OrderedDict[tuple[str, int], Pending] = OrderedDict()
        self.workers: dict[str, FileStream] = {}
        self.generation: dict[str, int] = {}
        self.waiting: deque[tuple[Path, int]] = deque()
        self.seen: set[str] = set()
        self._scanned = False  # the start-up scan has been done
        self.stopping = threading.Event()
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(ToCollector)
        self._dirty = False
        self._resend_every = settings.resend_s
        self._last_resend = self._last_heartbeat = 0.0
        self._run_acked = False
        self._end_sent = 0.0
        self._drain_deadline: float | None = None
        self.exporter = SnapshotCollector(self._metrics(0.0))

    # ---------------------------------------------------------------- the loop
    def run(self, stop: threading.Event) -> bool:
        """Until end-of-run is acknowledged (True) or the drain time runs out (False)."""
        context = zmq.Context()
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.ROUTING_ID, self.settings.node.encode())
        socket.setsockopt(zmq.LINGER, 0)
        socket.setsockopt(zmq.IMMEDIATE, 1)
        socket.setsockopt(zmq.SNDHWM, self.settings.window * 2 + 16)
        socket.connect(self.settings.aggregator)
        watcher = Watcher(
            self.settings.watch, poll_s=self.settings.poll_s, use_inotify=self.settings.use_inotify
        )
        server = serve(self.exporter, self.settings.metrics_port, self.settings.metrics_addr)
        try:
            self._send(socket, self._hello())
            return self._loop(socket, watcher, stop)
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
            self.stopping.set()
            for worker in self.workers.values():
                worker.cancelled.set()
            watcher.close()
            socket.close(0)
            context.term()

    def _metrics(self, now: float) -> Snapshot:
        return Snapshot(
            job=self.settings.job, collectors={self.settings.node: (self.snapshot(now), True)}
        )

    def _loop(self, socket: zmq.Socket[bytes], watcher: Watcher, stop: threading.Event) -> bool:
        while True:
            now = time.monotonic()
            if stop.is_set() and not self.stopping.is_set():
                self._begin_drain(now)
            if socket.poll(20):
                self._receive(socket)
            if not self.stopping.is_set():
                self._discover(watcher.poll(0))
            self._reap()
            self._start_workers()
            self._pump(socket, now)
            self._resend(socket, now)
            self._heartbeat(socket, now)
            if self._run_acked:
                return True
            if self._finished():
                self._end_run(socket, now)
            if self._drain_deadline is not None and now > self._drain_deadline:
                log.warning("drain time over; exiting without end-of-run acknowledged")
                return False

    def _begin_drain(self, now: float) -> None:
        log.info("stopping: finishing the files being read, then end-of-run")
        self.stopping.set()
        self._drain_deadline = now + self.settings.drain_s

    def _finished(self) -> bool:
        if not (self.stopping.is_set() or (self.settings.once and self._scanned)):
            return False
        return not (self.workers or self.waiting or self.unacked or not self.queue.empty())

    # ---------------------------------------------------------------- files
    def _discover(self, paths: list[Path]) -> None:
        self._scanned = True
        for path in paths:
            self.seen.add(str(path))
            skip = self._resume_point(path)
            if skip is not None:
                self.waiting.append((path, skip))

    def _resume_point(self, path: Path) -> int | None:
        """Where a file's stream resumes (None: already fully acknowledged)."""
        entry = self.checkpoint.get(str(path))
        if entry is None:
            return 0
        try:
            stream, _ = fingerprint(path, entry.fingerprint_bytes)
        except OSError:
            return 0
        if stream != entry.stream:
            return 0  # rewritten since: a new stream
        return None if entry.done else entry.acked

    def _start_workers(self) -> None:
        while self.waiting and len(self.workers) < self.settings.parallel:
            path, skip = self.waiting.popleft()
            key = str(path)
            if key in self.workers:
                self.workers[key].cancelled.set()
            generation = self.generation.get(key, 0) + 1
            self.generation[key] = generation
            worker = FileStream(
                path=path,
                root=self.settings.watch,
                node=self.settings.node,
                skip=skip,
                generation=generation,
                out=self.queue,
                settings=self.settings.stream,
                stopping=self.stopping.is_set,
            )
            self.workers[key] = worker
            worker.start()

    def _reap(self) -> None:
        for key, worker in list(self.workers.items()):
            if worker.is_alive():
                continue
            del self.workers[key]
            self.stats.events_read += worker.events
            if worker.error is not None:
                self._drop("unreadable file", worker.error)

    def _drop(self, reason: DropReason, detail: str | None = None) -> None:
        self.stats.dropped[reason] = self.stats.dropped.get(reason, 0) + 1
        log.warning("dropped", extra={"reason": reason, "detail": detail})

    # ---------------------------------------------------------------- sending
    def _pump(self, socket: zmq.Socket[bytes], now: float) -> None:
        while len(self.unacked) < self.credit:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            record = item.record
            path = (
                record.path if isinstance(record, StreamStart) else self.streams.get(record.stream)
            )
            if path is None or item.generation != self.generation.get(path):
                continue  # from a worker since cancelled
            if isinstance(record, StreamStart):
                self._track(record, item.fingerprint_bytes)
            payload = self._encoder.encode(record)
            self.unacked[(record.stream, record.seq)] = Pending(payload, now)
            self.stats.batches_sent += 1
            if isinstance(record, StreamEnd) and record.error is not None:
                self.stats.files_skipped += 1
            self._send_raw(socket, payload)

    def _track(self, start: StreamStart, covered: int) -> None:
        old = self.checkpoint.get(start.path)
        if old is not None and old.stream == start.stream:
            return
        if old is not None:
            self._forget_unacked(old.stream)  # the file was rewritten: its old stream is moot
        self.checkpoint[start.path] = Entry(stream=start.stream, fingerprint_bytes=covered)
        self.streams[start.stream] = start.path

    def _resend(self, socket: zmq.Socket[bytes], now: float) -> None:
        if not self.unacked and not (self._end_sent and not self._run_acked):
            return
        oldest = next(iter(self.unacked.values())).first_sent if self.unacked else self._end_sent
        if now - max(oldest, self._last_resend) < self._resend_every:
            return
        self._send(socket, self._hello())
        for pending in self.unacked.values():
            self._send_raw(socket, pending.payload)
            self.stats.batches_resent += 1
        if self._end_sent:
            self._send(socket, EndOfRun(node=self.settings.node))
        self._last_resend = now
        self._resend_every = min(self._resend_every * 2, self.settings.max_resend_s)

    def _heartbeat(self, socket: zmq.Socket[bytes], now: float) -> None:
        if now - self._last_heartbeat < self.settings.heartbeat_s:
            return
        self._last_heartbeat = now
        self._send(socket, Heartbeat(node=self.settings.node, stats=self.snapshot(now)))
        self.exporter.publish(self._metrics(now))

    def snapshot(self, now: float) -> CollectorStats:
        stats = msgspec.structs.replace(self.stats, dropped=dict(self.stats.dropped))
        stats.files_seen = len(self.seen)
        stats.unacked = len(self.unacked)
        stats.unacked_bytes = sum(len(p.payload) for p in self.unacked.values())
        stats.lag_s = now - next(iter(self.unacked.values())).first_sent if self.unacked else 0.0
        stats.events_read += sum(w.events for w in self.workers.values())
        return stats

    def _end_run(self, socket: zmq.Socket[bytes], now: float) -> None:
        if not self._end_sent:
            self._end_sent = now
            self._last_resend = now
            self._send(socket, EndOfRun(node=self.settings.node, reason=self._why()))

    def _why(self) -> str:
        return "stopped" if self.stopping.is_set() else "every file sent (--once)"

    def _hello(self) -> Hello:
        return Hello(protocol=PROTOCOL_VERSION, node=self.settings.node, instance=_INSTANCE)

    def _send(self, socket: zmq.Socket[bytes], message: object) -> None:
        self._send_raw(socket, self._encoder.encode(message))

    def _send_raw(self, socket: zmq.Socket[bytes], payload: bytes) -> None:
        with contextlib.suppress(zmq.Again):  # no aggregator: stays unacknowledged, is resent
            socket.send(payload, zmq.NOBLOCK)

    # ---------------------------------------------------------------- receiving
    def _receive(self, socket: zmq.Socket[bytes]) -> None:
        while True:
            try:
                payload = socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                reply = self._decoder.decode(payload)
            except (msgspec.DecodeError, msgspec.ValidationError):
                self._drop("malformed reply from the aggregator")
                continue
            self._on_reply(reply)
        if self._dirty:
            write_atomic(self.settings.state / CHECKPOINT, msgspec.msgpack.encode(self.checkpoint))
            self._dirty = False

    def _on_reply(self, reply: ToCollector) -> None:
        if isinstance(reply, Ack):
            self._ack(reply)
        elif isinstance(reply, Welcome):
            self.credit = max(1, reply.credit)
        elif isinstance(reply, RunAck):
            self._run_acked = self._end_sent > 0
        elif isinstance(reply, Reject):
            raise ProtocolError(f"the aggregator refused this collector: {reply.reason}")

    def _ack(self, ack: Ack) -> None:
        path = self.streams.get(ack.stream)
        entry = self.checkpoint.get(path) if path is not None else None
        if path is None or entry is None or entry.stream != ack.stream:
            return
        self.credit = max(1, ack.credit) if ack.credit else self.credit
        if ack.next_seq < entry.acked and not ack.done:
            self._rewind(path, entry, ack.next_seq)
            return
        for seq in range(entry.acked, ack.next_seq):
            if self.unacked.pop((ack.stream, seq), None) is not None:
                self.stats.batches_acked += 1
        if ack.next_seq > entry.acked or ack.done != entry.done:
            entry.acked = max(entry.acked, ack.next_seq)
            self._dirty = True
            self._resend_every = self.settings.resend_s
        if ack.done and not entry.done:
            entry.done = True
            self.stats.files_done += 1
            self._forget_unacked(ack.stream)
            worker = self.workers.get(path)
            if worker is not None and worker.generation == self.generation.get(path):
                worker.cancelled.set()  # the aggregator has it all already

    def _rewind(self, path: str, entry: Entry, seq: int) -> None:
        """The aggregator has less than it acknowledged (it lost its state): send again."""
        log.warning("aggregator asks to resend", extra={"path": path, "from_seq": seq})
        entry.acked = seq
        self._dirty = True
        self._forget_unacked(entry.stream)
        self.waiting.append((Path(path), seq))
        worker = self.workers.pop(path, None)
        if worker is not None:
            worker.cancelled.set()

    def _forget_unacked(self, stream: str) -> None:
        for key in [k for k in self.unacked if k[0] == stream]:
            del self.unacked[key]


_INSTANCE: Final = uuid.uuid4().hex


def _load(path: Path) -> dict[str, Entry]:
    if not path.exists():
        return {}
    try:
        return msgspec.msgpack.decode(path.read_bytes(), type=dict[str, Entry])
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProtocolError(f"{path}: unreadable checkpoint ({exc})") from None
