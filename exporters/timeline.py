"""One Chrome/Perfetto trace of every rank of a job, on aligned clocks (pure: events in, bytes out).

Each rank is a process (pid = rank, named "rank R"), each thread and GPU stream of its traces a
thread of it (tids numbered once over the whole timeline, since Perfetto keys threads by tid).
Every event of a rank file is shifted by `Placed.shift_ns` = base - offset - origin: its trace's
base time, its rank's clock offset in that window (`pipeline.clocks`, applied in whole ns) and
the timeline's origin (`baseTimeNanoseconds`: its writer makes it the earliest time written,
`Timeline.earliest_ns` telling what preceded a guess). Times are written in µs, as Chrome
expects, with their nanoseconds kept (up to 3 decimals; `displayTimeUnit` "ns"). Each member's
call of a matched instance carries a `Mark` in `args.commscope` (instance, waiting and
transfer), and the same are slices on a track of its own beside the call's thread ("commscope:
waiting/transfer"), the last arriver's call an instant there. Flow ids are made unique per
rank file. Nothing is invented: an item commscope's reader cannot read (not an object, no phase
or name, a time or duration it cannot read) is not written but counted (`dropped`); a trace's
own process and thread names are replaced by the timeline's (kept in the thread names).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

TRACK: Final = "commscope: waiting/transfer"
CATEGORY: Final = "commscope"
_MAX_US: Final = round(2**62 / 1000)  # the reader's bound on a time (`collector.normalize`)
_FLOWS: Final = frozenset({"s", "t", "f"})
_FLOW_SCOPE: Final = 1 << 32  # flow ids below it are made unique per file: scope x 2^32 + id
_MAX_NAMES: Final = 1 << 16  # thread and process names kept (the rest: their ids)
_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode
Event = dict[str, Any]
_ThreadKey = tuple[int, object, object]  # (rank, the trace's pid, its tid)
_PROCESS: Final = object()  # the pid and tid of a rank's own metadata thread in `_ThreadKey`


@dataclass(frozen=True)
class Mark:
    """One member's call of a matched instance (times on the rank's own clock, ns)."""

    instance: str
    collective: str
    group: str
    position: int
    waiting: tuple[int, int]
    transfer: tuple[int, int]
    last: int | None  # the last arriver (None: none arrived last)
    members: int

    def args(self) -> dict[str, Any]:
        return {
            "instance": self.instance,
            "collective": self.collective,
            "process_group": self.group,
            "position": self.position,
            "members": self.members,
            "waiting_us": _us(self.waiting[1] - self.waiting[0]),
            "transfer_us": _us(self.transfer[1] - self.transfer[0]),
            "last_arrival_rank": self.last,
        }


@dataclass(frozen=True)
class Placed:
    """One rank file on the timeline: its rank, the ns added to its times, a number of its own
    (`scope`, for flow ids), and its calls' marks by (start ns, duration ns), taken as met."""

    rank: int
    shift_ns: int
    scope: int
    marks: dict[tuple[int, int], Mark] = field(default_factory=dict)


class Timeline:
    """The document in pieces, in order: `head`, then per rank `process` and its files'
    `events`, then `tail`. Holds thread names and ids, never events."""

    def __init__(self, origin_ns: int) -> None:
        self.origin_ns = origin_ns
        self.dropped: dict[str, int] = {}
        self.written = 0
        self.earliest_ns = 0  # the earliest time written, from the origin (0: none before it)
        self._first = True
        self._tids: dict[_ThreadKey, int] = {}
        self._tracks: dict[int, tuple[int, int]] = {}  # a thread's tid -> (rank, its track's)
        self._processes: dict[tuple[int, object], str] = {}
        self._threads: dict[_ThreadKey, str] = {}

    def head(self, other: Mapping[str, Any]) -> bytes:
        """The document's opening: time unit, origin and `otherData`, up to `traceEvents`."""
        start = b'{"displayTimeUnit":"ns","baseTimeNanoseconds":%d,"otherData":' % self.origin_ns
        return start + _encode(other) + b',"traceEvents":[\n'

    def process(self, rank: int, name: str, labels: Mapping[str, Any]) -> bytes:
        """A rank's process metadata: its name, its place (by rank) and `labels` (a "labels"
        text and anything else, as the process_labels event's args)."""
        tid = self._tid((rank, _PROCESS, _PROCESS))
        meta = {"ph": "M", "pid": rank, "tid": tid, "ts": 0}
        return self._emit([
            {**meta, "name": "process_name", "args": {"name": name}},
            {**meta, "name": "process_sort_index", "args": {"sort_index": rank}},
            {**meta, "name": "process_labels", "args": dict(labels)},
        ])  # fmt: skip

    def events(self, items: Iterable[Any], place: Placed) -> bytes:
        """A batch of a rank file's traceEvents items, shifted and marked."""
        return self._emit([event for item in items for event in self._event(item, place)])

    def tail(self, trailer: Mapping[str, Any]) -> bytes:
        """The thread names, then the document's end with `trailer`'s keys after the events."""
        named = [_thread_meta(k, tid, self._thread_name(k)) for k, tid in self._tids.items()
                 if k[1] is not _PROCESS]  # fmt: skip
        owners = {tid: key for key, tid in self._tids.items()}
        for tid, (rank, track) in self._tracks.items():
            named.append(
                _thread_meta((rank, _PROCESS, _PROCESS), track, self._track_name(owners[tid]))
            )
        body = self._emit(named)
        rest = b"".join(b",%s:%s" % (_encode(k), _encode(v)) for k, v in trailer.items())
        return body + b"\n]" + rest + b"}\n"

    def _emit(self, events: list[Event]) -> bytes:
        if not events:
            return b""
        self.written += len(events)
        lead = b"" if self._first else b",\n"
        self._first = False
        return lead + b",\n".join(map(_encode, events))

    def _drop(self, reason: str) -> list[Event]:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
        return []

    def _event(self, item: Any, place: Placed) -> list[Event]:
        """One item: the hot path first (an event with a phase, a name and a time)."""
        ph = item.get("ph") if type(item) is dict else None
        ts = _ns(item.get("ts")) if ph else None
        if ts is None or ph == "M" or type(ph) is not str or type(item.get("name")) is not str:
            return self._odd(item, place.rank)
        try:
            tid = self._tids[(place.rank, item.get("pid"), item.get("tid"))]
        except (KeyError, TypeError):
            tid = self._tid((place.rank, _key(item.get("pid")), _key(item.get("tid"))))
        at = ts + place.shift_ns
        self.earliest_ns = min(self.earliest_ns, at)
        out = {**item, "pid": place.rank, "tid": tid, "ts": _us(at)}
        if ph == "X":
            return self._complete(out, ts, place)
        if ph in _FLOWS and "id" in item:
            out["id"] = _scoped(item["id"], place.scope)
        return [out]

    def _odd(self, item: Any, rank: int) -> list[Event]:
        """Metadata (kept for the names), or an item the reader cannot read (counted)."""
        reason = _unreadable(item)
        return self._drop(reason) if reason is not None else self._metadata(item, rank)

    def _complete(self, out: Event, ts: int, place: Placed) -> list[Event]:
        """An X event: its duration, and its mark when it is a member's call."""
        dur = _ns(out.get("dur"))
        if dur is None or dur < 0:
            return self._drop("duration unreadable")
        out["dur"] = _us(dur)
        args = out.get("args")
        if args is not None and type(args) is not dict:
            return [out]
        mark = place.marks.pop((ts, dur), None)
        if mark is None:
            return [out]
        out["args"] = {**(args or {}), CATEGORY: mark.args()}
        return [out, *self._slices(mark, out["tid"], place)]

    def _slices(self, mark: Mark, tid: int, place: Placed) -> list[Event]:
        """The mark's waiting and transfer (those not empty) on the track beside `tid`, and an
        instant at the call's start when this member arrived last."""
        track = self._track(tid, place.rank)
        at = {"cat": CATEGORY, "pid": place.rank, "tid": track}
        found: list[Event] = []
        for name, (start, end) in (("waiting", mark.waiting), ("transfer", mark.transfer)):
            if end > start:
                args = {"instance": mark.instance, "last_arrival_rank": mark.last}
                found.append({"ph": "X", "name": name, **at, "ts": _us(start + place.shift_ns),
                              "dur": _us(end - start), "args": args})  # fmt: skip
        if mark.last == place.rank:
            found.append({"ph": "i", "s": "t", "name": "last to arrive", **at,
                          "ts": _us(mark.transfer[0] + place.shift_ns),
                          "args": {"instance": mark.instance}})  # fmt: skip
        return found

    def _metadata(self, item: Event, rank: int) -> list[Event]:
        """A trace's process_name and thread_name kept for the timeline's thread names."""
        args = item.get("args")
        name = args.get("name") if type(args) is dict else None
        if not isinstance(name, str) or len(self._threads) + len(self._processes) >= _MAX_NAMES:
            return []
        pid = _key(item.get("pid"))
        if item.get("name") == "process_name":
            self._processes[(rank, pid)] = name
        elif item.get("name") == "thread_name":
            self._threads[(rank, pid, _key(item.get("tid")))] = name
        return []

    def _tid(self, key: _ThreadKey) -> int:
        tid = self._tids.get(key)
        if tid is None:
            tid = self._tids[key] = len(self._tids) + len(self._tracks) + 1
        return tid

    def _track(self, tid: int, rank: int) -> int:
        if tid not in self._tracks:
            self._tracks[tid] = (rank, len(self._tids) + len(self._tracks) + 1)
        return self._tracks[tid][1]

    def _thread_name(self, key: _ThreadKey) -> str:
        rank, pid, tid = key
        process = self._processes.get((rank, pid), _shown("pid", pid))
        thread = self._threads.get(key, _shown("tid", tid))
        return f"{process} / {thread}"

    def _track_name(self, owner: _ThreadKey) -> str:
        return f"{TRACK} ({self._thread_name(owner)})"


def _thread_meta(key: _ThreadKey, tid: int, name: str) -> Event:
    return {"ph": "M", "name": "thread_name", "pid": key[0], "tid": tid, "ts": 0,
            "args": {"name": name}}  # fmt: skip


def _unreadable(item: Any) -> str | None:
    """Why the reader could not read an item (None: it can)."""
    if type(item) is not dict:
        return "not an object"
    ph = item.get("ph")
    if not isinstance(ph, str) or not ph:
        return "no phase"
    if ph == "M":
        return None
    if not isinstance(item.get("name"), str):
        return "no name"
    return None if _ns(item.get("ts")) is not None else "time unreadable"


def _shown(what: str, value: object) -> str:
    """A pid or tid with no name: a non-empty string as it is (Kineto's "Spans"), else
    `pid 5`, `tid ''`."""
    return value if isinstance(value, str) and value else f"{what} {value!r}"


def _key(value: object) -> object:
    """A trace's pid or tid as a key (an int, a string or None as it is, else its text)."""
    return value if value is None or type(value) in (int, str) else repr(value)


def _ns(value: object) -> int | None:
    """µs → ns as the reader reads a time (`collector.normalize`); None if it cannot."""
    if type(value) is int:
        return value * 1000 if -_MAX_US <= value <= _MAX_US else None
    if type(value) is float and math.isfinite(value) and -_MAX_US <= value <= _MAX_US:
        return round(value * 1000)
    return None


def _us(ns: int) -> int | float:
    """ns → µs, exactly when whole, else the nearest double (ns/1000 reads back as ns)."""
    return ns // 1000 if ns % 1000 == 0 else ns / 1000


def _scoped(flow: object, scope: int) -> object:
    """A flow id unique to its file: scope x 2^32 + id (an id that is no such number as is)."""
    if type(flow) is int and 0 <= flow < _FLOW_SCOPE:
        return scope * _FLOW_SCOPE + flow
    return flow


def moved(line: bytes, later_ns: int) -> bytes:
    """A line of a document `Timeline` wrote, but its head, with its time `later_ns` later:
    the bytes `Timeline` writes from an origin `later_ns` earlier (every event is one line;
    metadata, at 0, and the tail stay as they are)."""
    body = line.rstrip(b",\n")
    if not body.startswith(b"{"):
        return line
    event = _decode(body)
    if event.get("ph") == "M":
        return line
    event["ts"] = _us(_in_ns(event["ts"]) + later_ns)
    return _encode(event) + line[len(body) :]


def _in_ns(us: int | float) -> int:
    """A time `_us` wrote, back in ns (exact while under 2^42 µs, 51 days, from the origin)."""
    return us * 1000 if type(us) is int else round(us * 1000)


def origin(starts: Iterable[int]) -> int:
    """The timeline's origin: the earliest of `starts` (aligned, ns), down to a whole second."""
    return min(starts, default=0) // 1_000_000_000 * 1_000_000_000
