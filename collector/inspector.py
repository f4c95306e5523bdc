"""NCCL Inspector JSONL records → commscope events (pure: strings in, structs out).

NCCL Inspector (`ext-profiler/inspector` in NVIDIA/nccl, NCCL 2.28+) appends one JSON object
a line to `<dump_dir>/<hostname>-pid<pid>.log`, one line per completed operation per
communicator: `header {id, comm_name (v4.1+), rank, n_ranks, nnodes}`, `metadata
{inspector_output_format_version "v4.x", dump_timestamp_us, hostname, pid, ...}` and one of
`coll_perf {coll, coll_sn, coll_msg_size_bytes, coll_exec_time_us, coll_timing_source,
coll_algobw_gbs, coll_busbw_gbs}` or `p2p_perf {p2p, p2p_sn, p2p_peer, p2p_msg_size_bytes,
p2p_exec_time_us, p2p_timing_source, ...}` (`inspectorCompletedP2p` in inspector.cc: `p2p` is
"Send" or "Recv", `p2p_peer` the peer's rank in the communicator, as the header's `rank` is
this one's). Verbose logs add `event_trace_ts` with
`coll_start_ts` / `p2p_start_ts` (host microseconds since the epoch, when NCCL was called).
Newer writers (v4.3) put header and metadata on a `dump_stats` line that the bare payload
lines after it inherit: `LineReader` keeps that state.

Readings (stated in the report): NCCL's `count` for AllGather and ReduceScatter is the
per-rank part, so S = coll_msg_size_bytes x n_ranks for those (the nccl-tests convention
DESIGN.md uses; Inspector's own algbw does the same); the op's duration is
`coll_exec_time_us` (whatever its `coll_timing_source` says); its start is `coll_start_ts`
when the log is verbose, else unknown (the op is then placed to end at its line's
`dump_timestamp_us`, and nothing reads its start across ranks: `timed` is False).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import msgspec
from commscope.collector.classify import collective_type
from commscope.model.names import host_label
from commscope.model.schema import (
    MAX_LABEL,
    MAX_RANKS,
    CollectiveType,
    CommOp,
    EventDropReason,
    FileStats,
)

_KNOWN_MAJOR: Final = "v4."  # the format versions this reader knows (v4.0 … v4.x)
_DECODER: Final = msgspec.json.Decoder()
_US: Final = 1000
_PER_RANK_SIZE: Final = frozenset({"AllGather", "ReduceScatter"})
_P2P_TYPES: Final = {"Send": "SendRecv", "Recv": "SendRecv", "SendRecv": "SendRecv"}

# Why a line gives no operation (a fixed set: report and metric labels).
NOT_JSON: Final = "inspector_not_json"
TRUNCATED: Final = "inspector_cut_short"
UNKNOWN_VERSION: Final = "inspector_unknown_version"
MISSING_KEYS: Final = "inspector_bad_record"
TOO_LONG: Final = "inspector_line_too_long"
MAX_LINE_BYTES: Final = 1 << 20  # Inspector's lines are ~1 KB: a partial line held at most this


@dataclass(frozen=True)
class _Header:
    comm: str  # the communicator: its name and id ("DP Group 0 0xabc"), or the id alone
    rank: int  # within the communicator
    n_ranks: int
    dump_us: int | None  # metadata.dump_timestamp_us
    host: str | None = None  # metadata.hostname (None: absent, or not a label)


@dataclass(frozen=True)
class Op:
    """One Inspector record: the communicator it ran on and the operation."""

    header: _Header
    collective: CollectiveType
    seq: int
    message_bytes: int
    exec_us: int
    timing_source: str
    start_us: int | None  # verbose logs only
    inspector_busbw_gbs: float | None  # Inspector's own figure: a cross-check only
    # a Send's or Recv's direction and `p2p_peer` (the peer's rank in the communicator)
    peer: tuple[str, int] | None = None

    def comm_op(self) -> CommOp:
        """The op in commscope's event model (times in ns; see the module docstring)."""
        dur = self.exec_us * _US
        if self.start_us is not None:
            start = self.start_us * _US
        else:
            start = max(0, (self.header.dump_us or 0) * _US - dur)
        group_rank, send_to, recv_from = _group_peer(self.peer, self.header.rank)
        return CommOp(
            collective=self.collective,
            start_ns=start,
            dur_ns=dur,
            message_bytes=self.message_bytes,
            group_size=self.header.n_ranks,
            on_gpu=True,
            process_group=self.header.comm,
            seq=self.seq,
            group_source="Inspector n_ranks",
            group_rank=group_rank,
            group_send_to=send_to,
            group_recv_from=recv_from,
        )


def _group_peer(peer: tuple[str, int] | None, rank: int) -> tuple[int | None, ...]:
    """A P2P op's ranks within its communicator: its own, the peer it sends to, the peer it
    receives from (`CommOp.group_*`, made global across ranks by `pipeline.p2pranks`)."""
    if peer is None:
        return None, None, None
    way, other = peer
    return (rank, other, None) if way == "Send" else (rank, None, other)


@dataclass(frozen=True)
class Ignored:
    """A well-formed line that carries no operation (a `dump_stats` marker, a proxy trace)."""


@dataclass(frozen=True)
class Bad:
    reason: EventDropReason


Parsed = Op | Ignored | Bad


class LineReader:
    """Complete lines of one log, in order → `Parsed` (keeps a v4.3 marker's header)."""

    def __init__(self) -> None:
        self.inherited: tuple[_Header, str] | None = None  # (header, version) of the marker

    def line(self, text: bytes | str) -> Parsed:
        try:
            record = _DECODER.decode(text)
        except msgspec.DecodeError:
            return Bad(NOT_JSON)
        if not isinstance(record, dict):
            return Bad(NOT_JSON)
        return self._record(record)

    def _record(self, record: dict[str, Any]) -> Parsed:
        if "header" in record:
            found = _header(record)
            if isinstance(found, Bad):
                return found
            header, version = found
        elif self.inherited is not None:
            header, version = self.inherited
        else:
            return Bad(MISSING_KEYS)
        if "dump_stats" in record:
            self.inherited = (header, version)
            return Ignored()
        if "coll_perf" in record:
            return _op(record["coll_perf"], "coll", header)
        if "p2p_perf" in record:
            return _op(record["p2p_perf"], "p2p", header)
        return Ignored() if "proxy_trace" in record else Bad(MISSING_KEYS)


def _header(record: dict[str, Any]) -> tuple[_Header, str] | Bad:
    head, meta = record.get("header"), record.get("metadata")
    if not isinstance(head, dict) or not isinstance(meta, dict):
        return Bad(MISSING_KEYS)
    version = meta.get("inspector_output_format_version")
    if not isinstance(version, str) or not version.startswith(_KNOWN_MAJOR):
        return Bad(UNKNOWN_VERSION)
    comm = head.get("id")
    n_ranks = _int(head.get("n_ranks"), 1, MAX_RANKS + 1)
    if not isinstance(comm, str) or n_ranks is None:
        return Bad(MISSING_KEYS)
    rank = _int(head.get("rank"), 0, n_ranks)
    if rank is None:
        return Bad(MISSING_KEYS)
    dump = _int(meta.get("dump_timestamp_us"), 1, 2**62)
    host = host_label(meta.get("hostname"))
    header = _Header(_comm_label(comm, head.get("comm_name")), rank, n_ranks, dump, host)
    return header, version


def _comm_label(comm_id: str, name: object) -> str:
    """The communicator's label: `comm_name id` when it has a name, else its id (bounded,
    no control characters: it becomes a process-group label)."""
    text = f"{name} {comm_id}" if isinstance(name, str) and name and name != "unknown" else comm_id
    clean = "".join(c for c in text if c.isprintable())[:MAX_LABEL]
    return clean or "unknown"


def _op(perf: object, kind: str, header: _Header) -> Op | Bad:
    if not isinstance(perf, dict):
        return Bad(MISSING_KEYS)
    name = perf.get(kind)
    seq = _int(perf.get(f"{kind}_sn"), 0, 2**62)
    size = _int(perf.get(f"{kind}_msg_size_bytes"), 0, 2**62)
    exec_us = _int(perf.get(f"{kind}_exec_time_us"), 0, 2**62)
    if not isinstance(name, str) or seq is None or size is None or exec_us is None:
        return Bad(MISSING_KEYS)
    collective = _type(name, kind)
    factor = header.n_ranks if collective in _PER_RANK_SIZE else 1
    source = perf.get(f"{kind}_timing_source")
    trace = perf.get("event_trace_ts")
    start = trace.get(f"{kind}_start_ts") if isinstance(trace, dict) else None
    busbw = perf.get(f"{kind}_busbw_gbs")
    return Op(
        header=header,
        collective=collective,
        seq=seq,
        message_bytes=size * factor,
        exec_us=exec_us,
        timing_source=source if isinstance(source, str) else "unknown",
        start_us=_int(start, 1, 2**62),
        inspector_busbw_gbs=float(busbw) if isinstance(busbw, int | float) else None,
        peer=_p2p_peer(perf, name, header.n_ranks) if kind == "p2p" else None,
    )


def _p2p_peer(perf: dict[str, Any], name: str, n_ranks: int) -> tuple[str, int] | None:
    """A Send's or Recv's direction and `p2p_peer` (a rank of the communicator), else None
    (a SendRecv names no direction)."""
    peer = _int(perf.get("p2p_peer"), 0, n_ranks)
    return (name, peer) if name in {"Send", "Recv"} and peer is not None else None


def _type(name: str, kind: str) -> CollectiveType:
    if kind == "p2p" or name in _P2P_TYPES:
        return "SendRecv" if name in _P2P_TYPES else "Other"
    return collective_type(name)


def _int(value: object, low: int, high: int) -> int | None:
    """`value` when it is an int in [low, high), else None (bools are not counts)."""
    return value if type(value) is int and low <= value < high else None


def count_dropped(stats: FileStats, reason: EventDropReason, count: int = 1) -> None:
    """Count `count` lines or ops of a log left out for `reason` (one of the reasons above)."""
    stats.dropped[reason] = stats.dropped.get(reason, 0) + count


def split_lines(buffer: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines (without their newline, blank ones left out) and the rest: a partial
    last line is held until its newline arrives."""
    *lines, rest = buffer.split(b"\n")
    return [line for line in lines if line.strip()], rest


def cut_lines(rest: bytes, chunk: bytes, skipping: bool) -> tuple[list[bytes], bytes, bool, bool]:
    """`split_lines` for a log read chunk by chunk, holding at most MAX_LINE_BYTES of a partial
    line: (complete lines, the partial line held, whether the bytes up to the next newline
    are being passed over, whether a line was just given up as too long). A line that grows
    past the bound is left out whole, however long it gets."""
    buffer = rest + chunk
    if skipping:
        end = buffer.find(b"\n")
        if end < 0:
            return [], b"", True, False
        buffer = buffer[end + 1 :]
    lines, held = split_lines(buffer)
    if len(held) > MAX_LINE_BYTES:
        return lines, b"", True, True
    return lines, held, False, False


OTHER_COMM: Final = "inspector_other_comm"


@dataclass(frozen=True)
class Placed:
    """A log's ops by global rank, the world size they imply, and the ops left out."""

    by_rank: dict[int, list[Op]]
    world_size: int | None
    left_out: int  # ops of a multi-GPU process on a smaller communicator (GPU not known)
    comm: str | None = None  # a multi-GPU process's: the communicator placing its ranks
    host: str | None = None  # the first op's metadata.hostname (the log's host)


def place(ops: list[Op]) -> Placed:
    """Global ranks from the log itself: the largest communicator in it (most ranks; ties:
    most ops, then its label) is taken as the world, and its rank(s) in this log are the
    global ranks. One such rank (one GPU per process): every op of the log is that rank's.
    Several (one process driving several GPUs): only the largest communicator's ops can be
    placed, the others are left out (the log does not say which GPU ran them)."""
    if not ops:
        return Placed({}, None, 0)
    counts: dict[tuple[int, str], int] = {}
    for op in ops:
        key = (op.header.n_ranks, op.header.comm)
        counts[key] = counts.get(key, 0) + 1
    world, comm = largest(counts)
    ranks = sorted({op.header.rank for op in ops if op.header.comm == comm})
    host = next((op.header.host for op in ops if op.header.host is not None), None)
    if len(ranks) == 1:
        return Placed({ranks[0]: ops}, world, 0, host=host)
    by_rank, left_out = split(ops, comm, ranks)
    return Placed(by_rank, world, left_out, comm, host)


def split(ops: Iterable[Op], comm: str, ranks: Iterable[int]) -> tuple[dict[int, list[Op]], int]:
    """A multi-GPU process's ops by its ranks on `comm` (in `ranks`' order), and how many
    were on another communicator (left out: the log does not say which GPU ran them)."""
    by_rank: dict[int, list[Op]] = {rank: [] for rank in ranks}
    left_out = 0
    for op in ops:
        if op.header.comm == comm:
            by_rank[op.header.rank].append(op)
        else:
            left_out += 1
    return by_rank, left_out


def largest(counts: dict[tuple[int, str], int]) -> tuple[int, str]:
    """The communicator taken as the world, of (n_ranks, label) -> ops: the most ranks, ties
    broken by the most ops, then the label (`place`, and the tailed reader's `Tail.placed`)."""
    return max(counts, key=lambda k: (k[0], counts[k], k[1]))
