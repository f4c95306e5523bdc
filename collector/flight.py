"""PyTorch Flight Recorder dumps as a trace source (pure: bytes come through the opener).

A dump is one rank's: a pickle (`_dump_fr_trace`, the file PyTorch writes on a watchdog
timeout, named TORCH_FR_DUMP_TEMP_FILE + rank, by default `nccl_trace_rank_<rank>`) or JSON
(`_dump_fr_trace_json`, and torchcomms' `torchcomm_fr_trace_<rank>`). Pickles are read by a
restricted unpickler: only plain containers, str, bytes, numbers, bool and None are built,
and a pickle that names any class or function (a GLOBAL, STACK_GLOBAL or extension opcode)
is refused whole, as are persistent ids. The keys of each version are in docs/flight-recorder.md.
A dump yields no event: its rank carries the dump (`Rank.flight`) for `pipeline.flight`.

Live, PyTorch writes a dump in place (`DebugInfoWriter::write`: one `std::ofstream` on the
final name, no temporary name) and may write it again later: the collector reads it once it
decodes whole (a pickle read to its STOP, a JSON document closed; one cut short is
"truncated", read again as it grows) and again, as a new stream, each time it is rewritten
(`Live` "rewritten"); its stream carries the dump msgpack-encoded (`parts`). A dump beyond
the wire's bounds (`model.flight`) is refused offline too, so both reports agree.
"""

from __future__ import annotations

import io
import pickle
import re
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from typing import Final, NoReturn

import msgspec
from commscope.collector.classify import collective_type
from commscope.collector.source import File, Live, Rank, Reading
from commscope.model.errors import TraceError
from commscope.model.flight import (
    MAX_FLIGHT_BYTES,
    FlightDump,
    FlightEntry,
    FlightFrame,
    FlightStatus,
)
from commscope.model.schema import Event, Facts, FileStats, TraceMeta
from commscope.model.schema import Source as SourceKind
from commscope.model.wire import FLIGHT_PART_BYTES

_FLIGHT_DUMPS: Final[SourceKind] = "flight"
# PyTorch's default dump prefix (TORCH_FR_DUMP_TEMP_FILE, formerly
# TORCH_NCCL_DEBUG_INFO_TEMP_FILE: /tmp/nccl_trace_rank_) and torchcomms'
# (TORCHCOMM_FR_DUMP_TEMP_FILE), then the rank
_NAME: Final = re.compile(
    r"(?:nccl_trace_rank_|torchcomm_fr_trace_)(\d+)(?:\.json|\.pkl|\.pickle)?$"
)
_MAX_BYTES: Final = 1 << 30  # a dump of the largest ring buffer with stacks is far smaller
_NONE: Final = -1  # pg_status: no such collective yet
_CUT_SHORT: Final = "truncated: the dump ends early (still being written?)"


class _Refused(pickle.UnpicklingError):
    """A pickle that wants to build something other than plain data."""


class _PlainUnpickler(pickle.Unpickler):
    """Builds only dicts, lists, tuples, sets, str, bytes, int, float, bool and None."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid: object) -> NoReturn:
        raise _Refused("a persistent id")


def plain_load(data: bytes) -> object:
    """The plain data a pickle holds; `_Refused` if it names any class or function."""
    return _PlainUnpickler(io.BytesIO(data)).load()


class _Frame(msgspec.Struct):
    name: str = ""
    filename: str = ""
    line: int = 0


class _Entry(msgspec.Struct):
    record_id: int = 0
    process_group: list[str] = []
    collective_seq_id: int = 0
    p2p_seq_id: int = 0
    op_id: int = 0
    is_p2p: bool = False
    profiling_name: str = ""
    input_sizes: list[list[int]] = []
    input_dtypes: list[str] = []
    output_sizes: list[list[int]] = []
    output_dtypes: list[str] = []
    state: str = "scheduled"
    time_created_ns: int | None = None
    time_discovered_started_ns: int | None = None
    time_discovered_completed_ns: int | None = None
    duration_ms: float | None = None
    frames: list[_Frame] = []
    pg_id: int | None = None


class _Status(msgspec.Struct):
    last_enqueued_collective: int = _NONE
    last_started_collective: int = _NONE
    last_completed_collective: int = _NONE


class _Group(msgspec.Struct):
    name: str = ""
    desc: str = ""
    ranks: str | list[int] = []


class _Dump(msgspec.Struct):
    version: str = ""
    pg_config: dict[str, _Group | list[int]] = {}
    pg_status: dict[str, _Status] = {}
    entries: list[_Entry] = []


def rank_of(name: str) -> int | None:
    """The rank a dump's file name gives (the number after the prefix), None for no dump."""
    found = _NAME.search(name)
    return None if found is None else int(found.group(1))


def decode(data: bytes, rank: int, shown: str) -> FlightDump:
    """One dump, pickle or JSON; TraceError when it is refused, cut short (the reason starts
    "truncated"), beyond the wire's bounds or is no Flight Recorder dump."""
    if not data.strip():
        raise TraceError(shown, "empty file")
    try:
        raw = _raw(data)
    except _Refused as exc:
        why = f"refused: a pickle that builds objects ({exc}); only plain data is read"
        raise TraceError(shown, why) from None
    except (EOFError, pickle.UnpicklingError, msgspec.DecodeError) as exc:
        if isinstance(exc, EOFError) or "truncated" in str(exc):
            raise TraceError(shown, _CUT_SHORT) from None
        raise TraceError(shown, f"not a Flight Recorder dump ({exc})") from None
    except msgspec.ValidationError as exc:
        raise TraceError(shown, f"not a Flight Recorder dump ({exc})") from None
    except (
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        AttributeError,
        RecursionError,
        OverflowError,  # a length past any size (a damaged FRAME or BINBYTES8)
        MemoryError,  # a length past the memory: the unpickler sizes its buffer first
    ) as exc:
        raise TraceError(shown, f"not a Flight Recorder dump ({type(exc).__name__})") from None
    return _bounded(_dump(raw, rank, shown), shown)


def _bounded(dump: FlightDump, shown: str) -> FlightDump:
    """The dump as the aggregator decodes it from the wire (`_encoded`); TraceError when it
    is beyond the bounds that decoding checks (a name too long, a rank too high)."""
    data = _encoded(dump)
    if len(data) > MAX_FLIGHT_BYTES:
        why = f"a Flight Recorder dump over {MAX_FLIGHT_BYTES} bytes once encoded"
        raise TraceError(shown, why)
    try:
        return msgspec.msgpack.decode(data, type=FlightDump)
    except msgspec.ValidationError as exc:
        raise TraceError(
            shown, f"a Flight Recorder dump beyond commscope's bounds ({exc})"
        ) from None


def _encoded(dump: FlightDump) -> bytes:
    return msgspec.msgpack.encode(dump)


def parts(dump: FlightDump, stream: str, first_seq: int) -> Iterator[Facts]:
    """The dump's records on the wire, numbered from `first_seq`: its encoding cut in parts
    of at most `FLIGHT_PART_BYTES`."""
    data = _encoded(dump)
    for seq, at in enumerate(range(0, len(data), FLIGHT_PART_BYTES), start=first_seq):
        yield Facts(stream=stream, seq=seq, flight=data[at : at + FLIGHT_PART_BYTES])


def _raw(data: bytes) -> _Dump:
    if data.lstrip()[:1] == b"{":
        return msgspec.json.decode(data, type=_Dump, strict=False)
    return msgspec.convert(plain_load(data), _Dump, strict=False)


def _dump(raw: _Dump, rank: int, shown: str) -> FlightDump:
    entries = [_entry(e) for e in raw.entries]
    names = {
        e.pg_id: e.process_group[0] for e in raw.entries if e.process_group and e.pg_id is not None
    }
    return FlightDump(
        rank=rank,
        path=shown,
        version=raw.version,
        members=_members(raw.pg_config),
        status=[
            _status(names.get(int(k), k) if k.isdigit() else k, s) for k, s in raw.pg_status.items()
        ],
        entries=entries,
    )


def _members(config: dict[str, _Group | list[int]]) -> dict[str, list[int]]:
    """pg_config's groups with their ranks, where the dump names any."""
    found: dict[str, list[int]] = {}
    for key, group in config.items():
        name, ranks = (
            (key, group) if isinstance(group, list) else (group.name or key, _ranks(group.ranks))
        )
        if name and ranks:
            found[name] = ranks
    return found


def _ranks(ranks: str | list[int]) -> list[int]:
    """`[0, 1, 2]` as PyTorch prints it (a string), or a list."""
    if isinstance(ranks, list):
        return ranks
    return [int(n) for n in re.findall(r"-?\d+", ranks)]


def _status(group: str, status: _Status) -> FlightStatus:
    def seq(n: int) -> int | None:
        return None if n < 0 else n

    return FlightStatus(
        group=group,
        enqueued=seq(status.last_enqueued_collective),
        started=seq(status.last_started_collective),
        completed=seq(status.last_completed_collective),
    )


def _entry(raw: _Entry) -> FlightEntry:
    group = raw.process_group[0] if raw.process_group else ""
    desc = raw.process_group[1] if len(raw.process_group) > 1 else ""
    return FlightEntry(
        record_id=raw.record_id,
        group=group,
        group_desc=desc,
        collective_seq_id=raw.collective_seq_id,
        p2p_seq_id=raw.p2p_seq_id,
        op_id=raw.op_id,
        is_p2p=raw.is_p2p,
        profiling_name=raw.profiling_name,
        collective=collective_type(raw.profiling_name),
        input_sizes=raw.input_sizes,
        input_dtypes=raw.input_dtypes,
        output_sizes=raw.output_sizes,
        output_dtypes=raw.output_dtypes,
        state=raw.state,
        created_ns=raw.time_created_ns or None,
        started_ns=raw.time_discovered_started_ns or None,  # JSON dumps write 0 for none
        completed_ns=raw.time_discovered_completed_ns or None,
        duration_ms=raw.duration_ms,
        frames=[FlightFrame(f.name, f.filename, f.line) for f in raw.frames],
    )


@dataclass(frozen=True)
class _FlightSource:
    """Flight Recorder dumps, one rank per file, offline and live (read again when rewritten)."""

    kind: SourceKind = _FLIGHT_DUMPS
    live: Live | None = "rewritten"
    lacks: dict[str, str] = field(default_factory=dict)  # reported apart: fills no section

    def claims(self, name: str) -> bool:
        return rank_of(name) is not None

    def read(self, file: File) -> Reading:
        return _DumpReading(file)


class _DumpReading:
    def __init__(self, file: File) -> None:
        self.file = file
        self.dump: FlightDump | None = None
        self.bytes = 0

    def batches(self) -> Iterator[tuple[Hashable, list[Event]]]:
        with self.file.open() as stream:
            data = stream.read(_MAX_BYTES + 1)
        if len(data) > _MAX_BYTES:
            raise TraceError(self.file.shown, f"a Flight Recorder dump over {_MAX_BYTES} bytes")
        rank = rank_of(self.file.path.rsplit("/", 1)[-1])
        self.dump = decode(data, 0 if rank is None else rank, self.file.shown)
        self.bytes = len(data)
        yield from ()

    def ranks(self) -> list[Rank]:
        dump = self.dump
        if dump is None:
            return []
        meta = TraceMeta(rank=dump.rank, source=_FLIGHT_DUMPS)
        stats = FileStats(bytes_read=self.bytes, events=len(dump.entries))
        return [Rank(0, meta, stats, name_rank=dump.rank, flight=dump)]


FLIGHT: Final = _FlightSource()
