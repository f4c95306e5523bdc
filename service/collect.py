"""The collector daemon (shell: the transport, a checkpoint file, one thread per file).

It watches a folder for rank traces, reduces each file to its facts (`FileStream`, a thread,
with the pipeline's `edge.Reduction`: the aggregator gets interval runs and calls, not events),
and moves bytes between them, the `Session` (the pure protocol state: window, credit, backoff,
rewind, checkpoint, end-of-run) and the `Transport` to the aggregator. The session keeps at
most `credit` records unacknowledged: beyond that no record is taken, and the file threads
wait, so memory stays bounded while the aggregator is away. The checkpoint — per file its
stream id, the bytes its fingerprint covers, and how many records the aggregator has made
durable — is rewritten (temp file, fsync, rename) only on acknowledgement, so a restart resumes
where the aggregator stands: nothing is lost, and what it resends the aggregator recognises.
With `once`, an aggregator that has not answered for `drain_s` ends the run (False), as the
drain deadline does after a stop.

Nothing is lost silently either: a file every read of which failed (`FileStream`: its
worker died, I/O errors) is counted by reason (`files_lost`, and each failed read in
`read_failures`: /metrics), logged once, named in the report (its stream ends with the
reason) and makes the collector exit non-zero (`lost`). The only folder written is --state:
the worker processes start without a temporary folder (`lasting.pool`), and with no pool
at all (no writable /dev/shm) the files are read in their threads, said at start.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final
from wsgiref.simple_server import WSGIServer

import msgspec
import zmq
from commscope.collector.atomic import write_atomic
from commscope.collector.follow import open_followed
from commscope.collector.inspector_stream import InspectorStream
from commscope.collector.inspector_windows import WindowRule
from commscope.collector.session import Limits, Session, Start, load_checkpoint
from commscope.collector.sources import reader_of
from commscope.collector.stream import (
    FileStream,
    Item,
    Reduced,
    StreamSettings,
    fingerprint,
    finished_facts,
    read_document,
    retryable,
)
from commscope.collector.transport import Transport, ZmqTransport
from commscope.collector.watch import Watcher
from commscope.exporters.collectormetrics import CollectorMetrics
from commscope.exporters.publish import serve
from commscope.model.errors import ConfigError, ProtocolError, ReadError, TraceError
from commscope.model.schema import (
    CheckpointEntry,
    CollectorStats,
    DropReason,
    FileStats,
    Heartbeat,
    TraceMeta,
)
from commscope.model.version import installed_version
from commscope.pipeline.edge import Reduction
from commscope.service import curve, lasting

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
    silence_s: float = 30.0  # no answer from the aggregator this long: warn, connected 0
    keys: curve.ClientKeys | None = None  # None: plain ZeroMQ (--insecure, loopback only)
    jobs: int = 1  # worker processes reducing whole files (1: none, all in the file threads)
    inspector: WindowRule = field(default_factory=WindowRule)  # --inspector-window


class Collector:
    def __init__(
        self,
        settings: CollectorSettings,
        transport: Transport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.clock = clock
        settings.state.mkdir(parents=True, exist_ok=True)
        files = _load(settings.state / CHECKPOINT)
        limits = Limits(
            window=settings.window,
            resend_s=settings.resend_s,
            max_resend_s=settings.max_resend_s,
            heartbeat_s=settings.heartbeat_s,
            silence_s=settings.silence_s,
        )
        self.session = Session(settings.node, _INSTANCE, limits, files, clock())
        self.transport = transport
        self.queue: queue.Queue[Item] = queue.Queue(maxsize=4)
        self.workers: dict[str, FileStream] = {}
        self.seen: set[str] = set()
        self.events_done = 0
        self._scanned = False  # the start-up scan has been done
        self._root_seen = True
        self.stopping = threading.Event()
        self._encoder = msgspec.msgpack.Encoder()
        self._drain_deadline: float | None = None
        self.exporter = CollectorMetrics(settings.job, settings.node)
        self.link: curve.Link | None = None  # watches the handshakes (ZeroMQ only)
        self.pool = _pool(settings.jobs)
        self.in_workers = 0  # files reduced in a worker process
        self.lost: list[str] = []  # the files every read of which failed
        self._handshakes = 0  # those greeted with a hello

    # ---------------------------------------------------------------- the loop
    def run(self, stop: threading.Event) -> bool:
        """Until end-of-run is acknowledged (True) or the drain time runs out (False)."""
        settings = self.settings
        server = self._serve()
        watcher = Watcher(settings.watch, poll_s=settings.poll_s, use_inotify=settings.use_inotify)
        transport = self.transport
        try:
            transport = transport or self._connect()
            self._say_hello(watcher)
            transport.send(self.session.hello())
            while True:
                done = self.step(transport, watcher, stop, 0.02)
                if done is not None:
                    return done
        finally:
            if server is not None:
                server.shutdown()
                server.server_close()
            self.close()
            watcher.close()
            if self.link is not None:
                self.link.close()
            if transport is not None:
                transport.close()

    def _connect(self) -> Transport:
        settings = self.settings

        def secure(socket: zmq.Socket[bytes]) -> None:
            self.link = curve.client(socket, settings.keys, settings.aggregator)

        try:
            return ZmqTransport(
                settings.aggregator,
                settings.node,
                settings.window * 2 + 16,
                secure,
                curve.routing_id(settings.node, settings.keys),
            )
        except zmq.ZMQError as exc:
            raise ConfigError(f"--aggregator {settings.aggregator}: {exc}") from None

    def _serve(self) -> WSGIServer | None:
        settings = self.settings
        try:
            return serve(self.exporter, settings.metrics_port, settings.metrics_addr)
        except (OSError, OverflowError) as exc:
            where = f"{settings.metrics_addr}:{settings.metrics_port}"
            raise ConfigError(f"--metrics-port: cannot serve /metrics on {where} ({exc})") from None

    def close(self) -> None:
        """Stop every file thread (they are daemons: a kill needs nothing more)."""
        self.stopping.set()
        for worker in self.workers.values():
            worker.cancelled.set()
        if self.pool is not None:
            self.pool.shutdown()

    def _say_hello(self, watcher: Watcher) -> None:
        settings = self.settings
        log.info(
            "collector starting",
            extra={
                "version": _VERSION,
                "aggregator": settings.aggregator,
                "node": settings.node,
                "watch": str(settings.watch),
                "state": str(settings.state),
                "metrics": None
                if settings.metrics_port is None
                else f"{settings.metrics_addr}:{settings.metrics_port}",
                "watching_by": watcher.mode,
                "workers": None if self.pool is None else lasting.start_method(),
            },
        )
        self._check_root()

    def _check_root(self) -> None:
        exists = self.settings.watch.is_dir()
        if exists != self._root_seen:
            self._root_seen = exists
            if exists:
                log.info("watch folder found", extra={"watch": str(self.settings.watch)})
            else:
                log.warning(
                    "watch folder missing; waiting for it",
                    extra={"watch": str(self.settings.watch)},
                )

    def step(
        self, transport: Transport, watcher: Watcher, stop: threading.Event, wait_s: float
    ) -> bool | None:
        """One turn of the loop: True/False when the run is over (see `run`), else None."""
        if self.link is not None:
            self.link.check()  # a handshake that cannot succeed: one clear error
            self._greet(transport)
        now = self.clock()
        if stop.is_set() and not self.stopping.is_set():
            self._begin_drain(now)
        self._receive(transport, wait_s, now)
        if not self.stopping.is_set() or not self._scanned:  # the first scan resumes the
            self._discover(watcher.poll(0))  # files a checkpoint holds open: never skipped
        self._reap()
        self._start_workers()
        self._pump(transport, now)
        for payload in self.session.due(now):
            transport.send(payload)
        self._heartbeat(transport, now)
        self._link(now)
        return self._over(transport, now)

    def _greet(self, transport: Transport) -> None:
        """A hello on every new connection: an aggregator back from an outage answers with
        its Welcome at once, and the session resends what waits without its backoff."""
        handshakes = self.link.handshakes if self.link is not None else 0
        if handshakes != self._handshakes:
            self._handshakes = handshakes
            transport.send(self.session.hello())

    def _over(self, transport: Transport, now: float) -> bool | None:
        if self.session.run_acked:
            log.info(
                "end of run acknowledged",
                extra={"files_in_workers": self.in_workers, "files_lost": len(self.lost)},
            )
            return True
        if self._finished():
            payload = self.session.end_run(now, self._why())
            if payload is not None:
                transport.send(payload)
        if self._drain_deadline is not None and now > self._drain_deadline:
            log.warning("drain time over; exiting without end-of-run acknowledged")
            return False
        if self.settings.once and now - self.session.heard > self.settings.drain_s:
            log.warning(
                "--once: the aggregator has not answered for --drain seconds; exiting "
                "without end-of-run acknowledged",
                extra={"aggregator": self.settings.aggregator, "drain_s": self.settings.drain_s},
            )
            return False
        return None

    def _begin_drain(self, now: float) -> None:
        log.info("stopping: finishing the files being read, then end-of-run")
        self.stopping.set()
        self._drain_deadline = now + self.settings.drain_s

    def _finished(self) -> bool:
        if not (self.stopping.is_set() or (self.settings.once and self._scanned)):
            return False
        return not self.workers and self.session.idle() and self.queue.empty()

    def _why(self) -> str:
        return "stopped" if self.stopping.is_set() else "every file sent (--once)"

    # ---------------------------------------------------------------- files
    def _discover(self, paths: list[Path]) -> None:
        if not self._scanned or not self._root_seen:
            self._check_root()
        self._scanned = True
        for path in paths:
            self.seen.add(str(path))
            self.session.found(str(path), self._head(path))

    def _head(self, path: Path) -> tuple[str, int] | None:
        """The file's stream id over the bytes its checkpoint's fingerprint covered."""
        length = self.session.fingerprint_length(str(path))
        if length is None:
            return None
        try:
            return fingerprint(path, length)
        except OSError:
            return None

    def _start_workers(self) -> None:
        for path in self.session.cancels:
            worker = self.workers.pop(path, None)
            if worker is not None:
                self._retire(worker)
        self.session.cancels.clear()
        starts = self.session.starts
        while starts and self._busy() < self.settings.parallel:
            self._start_worker(starts.popleft())

    def _busy(self) -> int:
        """Workers reading a file to its end (a tailed Inspector log lasts the whole run: it
        takes no slot, or `parallel` logs would keep every trace waiting)."""
        return sum(1 for w in self.workers.values() if not isinstance(w, InspectorStream))

    def _start_worker(self, start: Start) -> None:
        old = self.workers.pop(start.path, None)
        if old is not None:
            self._retire(old)
        tailed = reader_of(Path(start.path).name).live == "tail"
        windows: dict[str, Any] = (
            {"rule": self.settings.inspector, "windows": start.windows} if tailed else {}
        )
        worker = (InspectorStream if tailed else FileStream)(
            path=Path(start.path),
            root=self.settings.watch,
            node=self.settings.node,
            skip=start.skip,
            generation=start.generation,
            out=self.queue,
            settings=self.settings.stream,
            stopping=self._tail_stop if tailed else self.stopping.is_set,
            reducer=Reduction,
            fingerprint_bytes=start.fingerprint_bytes,
            whole=self._whole if self.pool is not None else None,
            **windows,
        )
        self.workers[start.path] = worker
        worker.start()

    def _tail_stop(self) -> bool:
        """When a tailed Inspector log ends: the collector stops, or at its end for --once."""
        return self.settings.once or self.stopping.is_set()

    def _whole(self, path: Path, stream: str) -> Future[Reduced]:
        """The file reduced in a worker (RuntimeError without a pool, OSError: none starts)."""
        if self.pool is None:
            raise RuntimeError("no worker processes")
        return self.pool.submit(reduce_whole, str(path), stream, self.settings.stream.batch_events)

    def _retire(self, worker: FileStream) -> None:
        worker.cancelled.set()
        self.events_done += worker.events

    def _reap(self) -> None:
        for key, worker in list(self.workers.items()):
            if worker.is_alive():
                continue
            del self.workers[key]
            self.events_done += worker.events
            self.in_workers += worker.elsewhere
            self.session.failed(worker.failures, worker.lost)
            if worker.lost is not None:
                self._lose(key, worker)
            elif worker.error is not None:
                self._drop("unreadable_file", worker.error)

    def _lose(self, path: str, worker: FileStream) -> None:
        self.lost.append(path)
        log.warning(
            "file lost",
            extra={"path": path, "reason": worker.lost, "failed_reads": worker.failures},
        )

    def _drop(self, reason: DropReason, detail: str | None = None) -> None:
        self.session.drop(reason)
        log.warning("dropped", extra={"reason": reason, "detail": detail})

    # ---------------------------------------------------------------- moving bytes
    def _pump(self, transport: Transport, now: float) -> None:
        while self.session.has_credit():
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return
            payload = self.session.take(
                item.path, item.generation, item.record, item.fingerprint_bytes, now,
                item.log, item.final,
            )  # fmt: skip
            if payload is not None:
                transport.send(payload)

    def _receive(self, transport: Transport, wait_s: float, now: float) -> None:
        for reply in transport.receive(wait_s):
            self.session.receive(reply, now)
        checkpoint = self.session.checkpoint()
        if checkpoint is not None:
            write_atomic(self.settings.state / CHECKPOINT, checkpoint)

    def _heartbeat(self, transport: Transport, now: float) -> None:
        if not self.session.heartbeat_due(now):
            return
        stats = self.snapshot(now)
        transport.send(self._encoder.encode(Heartbeat(node=self.settings.node, stats=stats)))
        if self.session.end_sent is None:
            transport.send(self.session.hello())  # a probe: its answer says the link is up
        self.exporter.show(stats, self.session.connected)

    def _link(self, now: float) -> None:
        change = self.session.link(now)
        if change is True:
            log.info("aggregator answers", extra={"aggregator": self.settings.aggregator})
        elif change is False:
            log.warning(
                "aggregator not answering",
                extra={"aggregator": self.settings.aggregator, "for_s": self.settings.silence_s},
            )
        if change is not None:
            self.exporter.show(self.snapshot(now), self.session.connected)

    def snapshot(self, now: float) -> CollectorStats:
        stats = self.session.snapshot(now)
        stats.files_seen = len(self.seen)
        stats.events_read = self.events_done + sum(w.events for w in self.workers.values())
        return stats


_INSTANCE: Final = uuid.uuid4().hex
_VERSION: Final = installed_version()


def _pool(jobs: int) -> lasting.LastingPool | None:
    """Worker processes for whole files (forkserver where it can start: never a fork of this
    threaded process; its server imports this module once for every worker), or none for
    `jobs` 1, or when none can start (said once: the files are read in their threads)."""
    if jobs <= 1:
        return None
    try:
        return lasting.LastingPool(jobs, __name__)
    except OSError as exc:
        log.warning(
            "worker processes cannot start: files are read in the collector's threads",
            extra={"jobs": jobs, "reason": lasting.reason(exc)},
        )
        return None


def reduce_whole(path: str, stream: str, batch_events: int) -> Reduced:
    """A worker's task: the file as it is now, from its start to its end, reduced to its facts
    (`TraceError`'s reason as a value; a file cut short, or one that could not be read, is read
    again by its thread)."""
    events = 0

    def seen(batch: int) -> None:
        nonlocal events
        events += batch

    opener = partial(open_followed, Path(path), idle_s=0.0)  # as the thread reads, not waiting
    try:
        rank, reduction = read_document(Path(path), opener, Reduction, batch_events, seen)
    except ReadError as exc:
        return Reduced([], TraceMeta(), FileStats(), 0, exc.reason, read_here=True)
    except TraceError as exc:
        return Reduced([], TraceMeta(), FileStats(), 0, exc.reason, read_here=retryable(exc.reason))
    return Reduced(list(finished_facts(rank, reduction, stream)), rank.meta, rank.stats, events)


def _load(path: Path) -> dict[str, CheckpointEntry]:
    if not path.exists():
        return {}
    try:
        return load_checkpoint(path.read_bytes())
    except OSError as exc:
        raise ProtocolError(f"{path}: unreadable checkpoint ({exc})") from None
    except ProtocolError as exc:
        raise ProtocolError(f"{path}: {exc}") from None
