"""The collector's protocol state (pure: no sockets, threads, clocks or files; `now` is given).

A `Session` is what one collector knows of its link to the aggregator: per file its
checkpoint entry (stream id, the bytes its fingerprint covers, how many records are durable
at the aggregator, whether the stream has ended there), the records sent and not yet
acknowledged (a go-back-N window of at most `credit`), the resend backoff (doubling up to
`max_resend_s`, counted from the last progress), and the end-of-run handshake.

Its inputs are files found (with their fingerprint as it reads now), records from the file
streams and replies from the aggregator; its outputs are payloads to send, `Start`s of file
streams to (re)start, paths whose stream to cancel, and the checkpoint to persist. The shell
(`service/collect.py`) moves bytes and threads; every decision is here, so kills, restarts,
rewinds and backoff are tested in one process with a fake clock.

The resend timeout follows the aggregator's answers as TCP's does (RFC 6298: smoothed round
trip plus four deviations, sampled only from records acknowledged without a resend, and a
backed-off timeout kept until such a sample comes: Karn's rule), so an aggregator that is
busy but answering is not flooded with duplicates.

A resumed file keeps its stream id: its `Start` carries the fingerprint length the
checkpoint recorded, so a file that was shorter than 64 KiB when its stream began is
fingerprinted over the same bytes again (fingerprinting 64 KiB would give another id, whose
records the aggregator does not know). A file whose leading bytes differ (rewritten, or
shrunk) starts a new stream from record 0.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec
from commscope.model.errors import ProtocolError
from commscope.model.schema import (
    PROTOCOL_VERSION,
    STATE_VERSION,
    Ack,
    Checkpoint,
    CheckpointEntry,
    CollectorStats,
    DropReason,
    EndOfRun,
    Facts,
    Hello,
    ReadFailure,
    Record,
    Reject,
    RunAck,
    StreamEnd,
    StreamStart,
    ToCollector,
    Welcome,
)

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(ToCollector)


@dataclass(frozen=True)
class Limits:
    window: int = 64  # at most this many records unacknowledged (until a credit says less)
    resend_s: float = 2.0
    max_resend_s: float = 30.0
    heartbeat_s: float = 5.0
    silence_s: float = 30.0  # no answer for this long: the aggregator counts as unreachable


@dataclass(frozen=True)
class Start:
    """Stream `path` from its start, handing out records from `skip` on. `fingerprint_bytes`:
    the length its checkpoint recorded (None: a new stream, the default length)."""

    path: str
    skip: int
    fingerprint_bytes: int | None
    generation: int
    windows: tuple[tuple[int, int], ...] = ()  # a tailed Inspector log's: (index, acked)


@dataclass
class _Pending:
    payload: bytes
    first_sent: float
    resent: bool = False  # its acknowledgement is no round-trip sample (Karn's rule)
    covers: int = 1  # the seqs it takes (`Facts.covers`)


@dataclass
class Session:
    node: str
    instance: str
    limits: Limits
    files: dict[str, CheckpointEntry]
    now: float  # when the session began
    stats: CollectorStats = field(default_factory=CollectorStats)
    starts: deque[Start] = field(default_factory=deque)
    cancels: list[str] = field(default_factory=list)
    credit: int = 0
    run_acked: bool = False
    connected: bool = False

    def __post_init__(self) -> None:
        self.credit = self.limits.window
        self.streams = {entry.stream: path for path, entry in self.files.items()}
        self.generation: dict[str, int] = {}
        self.unacked: OrderedDict[tuple[str, int], _Pending] = OrderedDict()
        self.dirty = False
        self.resend_every = self.limits.resend_s
        self.srtt: float | None = None  # smoothed round trip of a record to its ack
        self.rttvar = 0.0  # and its mean deviation
        self.last_resend = self.last_heartbeat = -float("inf")
        self.end_sent: float | None = None
        self.heard = self.now  # the silence is counted from the start
        self.answered = self.warned = False
        self.finals: set[str] = set()  # the streams of logs' last windows (`take`'s `final`)
        self.end_reason = ""
        self.aggregator: str | None = None  # the instance of the aggregator last welcoming us
        self.resend_now = False  # a new aggregator: resend without waiting for the backoff

    # ---------------------------------------------------------------- files
    def fingerprint_length(self, path: str) -> int | None:
        """How many leading bytes the checkpoint's fingerprint of `path` covers (None: new)."""
        entry = self.files.get(path)
        return None if entry is None else entry.fingerprint_bytes

    def found(self, path: str, head: tuple[str, int] | None) -> None:
        """A file appeared (or was replaced); `head`: its stream id and covered bytes over
        `fingerprint_length(path)` bytes as it reads now (None: new, or unreadable)."""
        entry = self.files.get(path)
        if entry is None or head is None or head != (entry.stream, entry.fingerprint_bytes):
            self._forget_windows(path)
            self._start(path, 0, None)  # new, or rewritten since (or shrunk): a new stream
        elif not entry.done:
            self._start(path, entry.acked, entry.fingerprint_bytes)

    def _start(self, path: str, skip: int, fingerprint_bytes: int | None) -> None:
        generation = self.generation.get(path, 0) + 1
        self.generation[path] = generation
        self.starts = deque(s for s in self.starts if s.path != path)
        windows = tuple(sorted((k, DONE if e.done else e.acked) for k, e in self._windows(path)))
        self.starts.append(Start(path, skip, fingerprint_bytes, generation, windows))

    def current(self, path: str, generation: int) -> bool:
        """Whether a stream of `path` (or of a window of the log at `path`) begun as
        `generation` is still wanted."""
        return self.generation.get(_real(path)) == generation

    # A tailed Inspector log's windows are streams of their own (`InspectorStream`), each
    # keyed `path\0w<index>` in `files` beside the log's own entry (its stream id and
    # fingerprint; `acked`: the lowest window not known whole at the aggregator, those below
    # pruned; `done`: its last window, at the log's end, is whole there).
    def _windows(self, path: str) -> list[tuple[int, CheckpointEntry]]:
        prefix = f"{path}{_WINDOW}"
        return [(int(k[len(prefix) :]), e) for k, e in self.files.items() if k.startswith(prefix)]

    def _forget_windows(self, path: str) -> None:
        for index, entry in self._windows(path):
            del self.files[f"{path}{_WINDOW}{index}"]
            self.streams.pop(entry.stream, None)
            self._forget_unacked(entry.stream)

    def idle(self) -> bool:
        """Nothing waiting to start and nothing unacknowledged."""
        return not self.starts and not self.unacked

    # ---------------------------------------------------------------- sending
    def has_credit(self) -> bool:
        return len(self.unacked) < self.credit

    def take(  # noqa: PLR0917  # an Item's fields
        self,
        path: str,
        generation: int,
        record: Record,
        covered: int,
        now: float,
        log: str = "",
        final: bool = False,
    ) -> bytes | None:
        """The payload to send for `record` of `path`'s stream begun as `generation` (None:
        that stream was cancelled since, drop it). `log`: the log's stream id when `path` is
        a window's key; `final`: the log's last record."""
        if not self.current(path, generation):
            return None
        if isinstance(record, StreamStart):
            self._track(record, covered, path, log)
        elif record.stream not in self.streams:
            self._changed(_real(path))
            return None
        if final:
            self.finals.add(record.stream)
        payload = _ENCODER.encode(record)
        covers = record.covers if isinstance(record, Facts) else 1
        self.unacked[(record.stream, record.seq)] = _Pending(payload, now, covers=covers)
        self.stats.batches_sent += 1
        if isinstance(record, StreamEnd) and record.error is not None:
            self.stats.files_skipped += 1
        return payload

    def _changed(self, path: str) -> None:
        """A resumed stream read another id than its checkpoint's (the file changed between
        the check and the read): the aggregator would not know it; stream it anew."""
        self.drop("file_changed")
        self.cancels.append(path)
        self._start(path, 0, None)

    def _track(self, start: StreamStart, covered: int, key: str, log: str = "") -> None:
        if log:
            self._track_log(_real(key), log, covered)
        old = self.files.get(key)
        if old is not None and old.stream == start.stream:
            return
        if old is not None:
            self._forget_unacked(old.stream)  # the file was rewritten: its old stream is moot
            self.streams.pop(old.stream, None)
        self.files[key] = CheckpointEntry(stream=start.stream, fingerprint_bytes=covered)
        self.streams[start.stream] = key

    def _track_log(self, path: str, log: str, covered: int) -> None:
        """The entry of a log whose windows stream (`log`: its stream id)."""
        old = self.files.get(path)
        if old is not None and old.stream == log:
            return
        self._forget_windows(path)  # another log under the name: its windows are moot
        self.files[path] = CheckpointEntry(stream=log, fingerprint_bytes=covered)
        self.streams[log] = path

    def hello(self) -> bytes:
        message = Hello(protocol=PROTOCOL_VERSION, node=self.node, instance=self.instance)
        return _ENCODER.encode(message)

    def due(self, now: float) -> list[bytes]:
        """What to send again now: every unacknowledged record (after a hello) and a pending
        end-of-run, once the oldest has waited the backoff; the backoff then doubles."""
        waiting = self.end_sent is not None and not self.run_acked
        if not self.unacked and not waiting:
            return []
        oldest = next(iter(self.unacked.values())).first_sent if self.unacked else self.end_sent
        if now - max(oldest or 0.0, self.last_resend) < self.resend_every and not self.resend_now:
            return []
        self.resend_now = False
        payloads = [self.hello(), *(p.payload for p in self.unacked.values())]
        for pending in self.unacked.values():
            pending.resent = True
        self.stats.batches_resent += len(self.unacked)
        if waiting:
            payloads.append(self._end_of_run())
        self.last_resend = now
        self.resend_every = min(self.resend_every * 2, self.limits.max_resend_s)
        return payloads

    def heartbeat_due(self, now: float) -> bool:
        if now - self.last_heartbeat < self.limits.heartbeat_s:
            return False
        self.last_heartbeat = now
        return True

    def end_run(self, now: float, reason: str) -> bytes | None:
        """End-of-run, the first time it is asked (then `due` resends it until acknowledged)."""
        if self.end_sent is not None:
            return None
        self.end_sent = self.last_resend = now
        self.end_reason = reason
        return self._end_of_run()

    def _end_of_run(self) -> bytes:
        message = EndOfRun(node=self.node, reason=self.end_reason, instance=self.instance)
        return _ENCODER.encode(message)

    # ---------------------------------------------------------------- receiving
    def receive(self, payload: bytes, now: float) -> None:
        """One reply from the aggregator (a malformed one is counted and dropped)."""
        try:
            reply = _DECODER.decode(payload)
        except msgspec.DecodeError:  # ValidationError included
            self.drop("malformed_reply")
            return
        self.heard, self.answered = now, True
        if isinstance(reply, Ack):
            self._ack(reply, now)
        elif isinstance(reply, Welcome):
            self.credit = max(1, reply.credit)
            self._welcomed(reply.instance)
        elif isinstance(reply, RunAck):
            self.run_acked = self.end_sent is not None
        elif isinstance(reply, Reject):
            raise ProtocolError(
                f"the aggregator refused this collector (protocol {PROTOCOL_VERSION}): "
                f"{reply.reason}"
            )

    def _welcomed(self, instance: str) -> None:
        """An aggregator not heard before (restarted, or the first since this collector
        started): what waits is sent again at once, not after the backoff that grew while no
        aggregator answered."""
        if instance == self.aggregator:
            return
        self.aggregator = instance
        self.resend_every = self.limits.resend_s
        self.resend_now = bool(self.unacked) or (self.end_sent is not None and not self.run_acked)

    def _ack(self, ack: Ack, now: float) -> None:
        path = self.streams.get(ack.stream)
        entry = self.files.get(path) if path is not None else None
        if path is None or entry is None or entry.stream != ack.stream:
            return
        self.credit = max(1, ack.credit) if ack.credit else self.credit
        if ack.next_seq < entry.acked and not ack.done:
            self._rewind(path, entry, ack.next_seq)
            return
        split = not ack.done and self._split(ack.stream, ack.next_seq)
        last = None
        for key in self._acked(ack.stream, entry.acked, ack.next_seq):
            pending = self.unacked.pop(key, None)
            if pending is not None:
                self.stats.batches_acked += 1
                last = pending
        if last is not None and not last.resent:
            self._round_trip(now - last.first_sent)
            self.resend_every = self.timeout()  # a fresh round trip: the backoff starts over
        if ack.next_seq > entry.acked or ack.done != entry.done:
            entry.acked = max(entry.acked, ack.next_seq)
            self.dirty = True
            self.last_resend = max(self.last_resend, now)  # progress: counted from here
        if ack.done and not entry.done:
            self._done(path, entry)
        elif ack.done:
            self._forget_unacked(ack.stream)  # whatever is still held of it is moot
        elif split:
            self._resume(path, entry)

    def _split(self, stream: str, next_seq: int) -> bool:
        """Whether the aggregator's position falls inside a record held of `stream`: it has
        part of its ops (a tailed log read again after a restart, its ops cut into records
        otherwise than before, from a checkpoint behind the aggregator), so the record is a
        duplicate there and the rest of its ops must be read and sent again."""
        return any(
            key[0] == stream and key[1] < next_seq < key[1] + pending.covers
            for key, pending in self.unacked.items()
        )

    def _acked(self, stream: str, low: int, high: int) -> list[tuple[str, int]]:
        """The keys of `stream`'s records in [low, high) that may be held: looked up by seq,
        or found among those held when the span is wider (a tailed Inspector log's record
        takes as many seqs as it has ops, `Facts.covers`)."""
        if high - low <= len(self.unacked):
            return [(stream, seq) for seq in range(low, high)]
        return [k for k in self.unacked if k[0] == stream and low <= k[1] < high]

    def _round_trip(self, sample: float) -> None:
        """One record's time from sent to acknowledged, into the smoothed round trip and its
        deviation (RFC 6298's gains, 1/8 and 1/4)."""
        if self.srtt is None:
            self.srtt, self.rttvar = sample, sample / 2
            return
        self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - sample)
        self.srtt = 0.875 * self.srtt + 0.125 * sample

    def timeout(self) -> float:
        """The resend timeout after progress: `resend_s` until a round trip is measured, then
        the smoothed round trip plus four deviations, within `resend_s` and `max_resend_s`."""
        if self.srtt is None:
            return self.limits.resend_s
        rto = self.srtt + 4 * self.rttvar
        return min(max(rto, self.limits.resend_s), self.limits.max_resend_s)

    def _done(self, path: str, entry: CheckpointEntry) -> None:
        entry.done = True
        self.stats.files_done += 1
        self._forget_unacked(entry.stream)
        real = _real(path)
        if real != path:  # a window of a log: the log goes on (unless this was its last)
            self._window_done(real, entry.stream)
            return
        self.generation[path] = self.generation.get(path, 0) + 1  # its records are moot now
        self.cancels.append(path)  # the aggregator has it all already

    def _window_done(self, path: str, stream: str) -> None:
        """Prune the log's windows whole at the aggregator below the lowest one that is not
        (its `acked`); the log is done once its last window is."""
        log = self.files.get(path)
        if log is None:
            return
        windows = self._windows(path)
        waiting = [k for k, e in windows if not e.done]
        floor = min(waiting) if waiting else max(k for k, _ in windows) + 1
        for index, entry in windows:
            if entry.done and index < floor:
                del self.files[f"{path}{_WINDOW}{index}"]
                self.streams.pop(entry.stream, None)
        log.acked = max(log.acked, floor)
        if stream in self.finals:
            self.finals.discard(stream)
            log.done = True

    def _rewind(self, path: str, entry: CheckpointEntry, seq: int) -> None:
        """The aggregator has less than it acknowledged (it lost its state): send again (a
        window's log from its lowest window not whole, each window from what it holds)."""
        entry.acked = seq
        self.dirty = True
        self._resume(path, entry)

    def _resume(self, path: str, entry: CheckpointEntry) -> None:
        """Read the file again, sending from what the aggregator holds (`entry.acked`)."""
        self._forget_unacked(entry.stream)
        real = _real(path)
        self.cancels.append(real)
        log = self.files.get(real, entry)
        self._start(real, entry.acked if real == path else log.acked, log.fingerprint_bytes)

    def _forget_unacked(self, stream: str) -> None:
        for key in [k for k in self.unacked if k[0] == stream]:
            del self.unacked[key]

    def drop(self, reason: DropReason) -> None:
        self.stats.dropped[reason] = self.stats.dropped.get(reason, 0) + 1

    def failed(self, failures: list[ReadFailure], lost: ReadFailure | None) -> None:
        """A file's reads that failed, and whether it was lost after them (the last's key)."""
        for key in failures:
            self.stats.read_failures[key] = self.stats.read_failures.get(key, 0) + 1
        if lost is not None:
            self.stats.files_lost[lost] = self.stats.files_lost.get(lost, 0) + 1

    # ---------------------------------------------------------------- link and state
    def link(self, now: float) -> bool | None:
        """The link's change at `now`: False once the aggregator has not answered for
        `silence_s` (said once), True when it answers (again), None otherwise."""
        if self.answered and now - self.heard < self.limits.silence_s:
            if self.connected:
                return None
            self.connected, self.warned = True, False
            return True
        if self.warned or now - self.heard < self.limits.silence_s:
            return None
        self.connected, self.warned = False, True
        return False

    def snapshot(self, now: float) -> CollectorStats:
        """The counters as a heartbeat carries them (the shell adds what it reads)."""
        stats = msgspec.structs.replace(
            self.stats,
            dropped=dict(self.stats.dropped),
            read_failures=dict(self.stats.read_failures),
            files_lost=dict(self.stats.files_lost),
        )
        stats.unacked = len(self.unacked)
        stats.unacked_bytes = sum(len(p.payload) for p in self.unacked.values())
        oldest = next(iter(self.unacked.values())).first_sent if self.unacked else now
        stats.lag_s = max(0.0, now - oldest)
        return stats

    def checkpoint(self) -> bytes | None:
        """The checkpoint to persist, if it changed since the last call."""
        if not self.dirty:
            return None
        self.dirty = False
        return dump_checkpoint(self.files)


_WINDOW: Final = "\0w"  # a window's key: the log's path, this, and the window's index
DONE: Final = 2**62  # the acknowledged position of a window whole at the aggregator


def _real(key: str) -> str:
    """The file a key names: a window's log, or the file itself."""
    return key.split("\0", 1)[0]


# ---------------------------------------------------------------- the persisted checkpoint


def dump_checkpoint(files: dict[str, CheckpointEntry]) -> bytes:
    return _ENCODER.encode(Checkpoint(version=STATE_VERSION, files=files))


def load_checkpoint(data: bytes) -> dict[str, CheckpointEntry]:
    """The files of a checkpoint of any known version; ProtocolError if it is not one."""
    try:
        raw = msgspec.msgpack.decode(data)
        version = _version(raw)
        for migrate in _MIGRATIONS[version - 1 : STATE_VERSION - 1]:
            raw = migrate(raw)
        return msgspec.convert(raw, Checkpoint).files
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ProtocolError(f"unreadable checkpoint ({exc})") from None


def _version(raw: Any) -> int:
    """Version 1 was a bare map of path to entry (maps); later ones carry `version`, an int."""
    if not isinstance(raw, dict):
        raise ProtocolError(f"unreadable checkpoint (a {type(raw).__name__}, not a map)")
    version = raw.get("version")
    if not isinstance(version, int):
        return 1
    if not 1 <= version <= STATE_VERSION:
        raise ProtocolError(
            f"checkpoint version {version} is not one this collector reads (1..{STATE_VERSION})"
        )
    return version


def _from_v1(raw: Any) -> Any:
    return {"version": 2, "files": raw}


# _MIGRATIONS[v - 1] turns version v into version v + 1.
_MIGRATIONS = (_from_v1,)
