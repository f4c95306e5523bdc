"""Nsight Systems SQLite exports → commscope events, the mapping half (pure: no sqlite3).

`nsysdb` reads an export (`nsys export --type sqlite`) with cursors and hands rows here.
One export holds every profiled process: each process that ran GPU kernels is one rank (one
process per GPU). What the tables give, as the Kineto normaliser makes it (`normalize`):

- kernels (`CUPTI_ACTIVITY_KIND_KERNEL`, older `..._CONCURRENT_KERNEL`, or either with a
  version suffix; names through `StringIds`): NCCL/RCCL kernels are communication, the others
  compute with their category (`kernels`); memcpy and memset tables as copies.
- A communication kernel's call: its `correlationId` → the `CUPTI_ACTIVITY_KIND_RUNTIME`
  launch (thread, time) → the NVTX ranges enclosing the launch on that thread. The collective
  is PyTorch's `nccl:<op>` range (`emit_nvtx`) when there is one, else NCCL's own API range
  (`ncclAllReduce`, or the members of the `ncclGroupStart`…`ncclGroupEnd` the launch sits in:
  sends and receives are SendRecv), else a c10d op, else the kernel name (a SendRecv kernel
  alone is `Other`, as for Kineto).
- Sizes, communicators and rank counts only from NCCL's NVTX payloads (`binaryData` with
  `--include-blobs`, decoded through `NVTX_PAYLOAD_SCHEMA_ENTRIES`): S = the message size, a
  shard times the rank count for AllGather and ReduceScatter (NCCL records the send count of
  an all-gather and the receive count of a reduce-scatter), the sum of the sends of a group
  (an all-to-all). Without a payload a size is unknown.
- Steps: `ProfilerStep#N` ranges (and `step N`, `iteration N`, `train_step N`).
- Time: the export's clock (ns); the time base `TARGET_INFO_SESSION_START_TIME.utcEpochNs -
  systemClockNs` (the session start on both clocks).
- Ranks (`ranks_of`): the `Rank` of each process's NCCL communicator init payload (its
  largest communicator); else the processes in the order of their CUDA devices, an
  assumption the report names.
"""

from __future__ import annotations

import functools
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from commscope.collector.classify import (
    BACKEND_CALL_PREFIXES,
    COMM_CALL_PREFIXES,
    collective_type,
    is_comm_kernel,
)
from commscope.collector.kernels import kernel_category
from commscope.collector.normalize import MAX_NAME, CallIndex, CommCall, collective_of
from commscope.collector.schema import (
    MAX_LABEL,
    MAX_RANKS,
    CollectiveType,
    CommOp,
    GpuOp,
    GroupSource,
    Step,
)

KERNEL_TABLES: Final = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL")
MEMCPY_TABLE: Final = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE: Final = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLE: Final = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE: Final = "NVTX_EVENTS"
# Kernel name columns, best first: the demangled signature is what `kernels` reads.
NAME_COLUMNS: Final = ("demangledName", "shortName", "name")
# NCCL's payload schema entries (nccl/src/include/nvtx_payload_schemas.h).
_COMM_ID: Final = "NCCL communicator ID"
_RANKS: Final = "No. of ranks"
_RANK: Final = "Rank"
_SIZES: Final = ("Message size [bytes]", "Bytes")
_SHARDED: Final = frozenset({"AllGather", "ReduceScatter"})
_STEP: Final = re.compile(
    r"^(?:ProfilerStep#|(?:train[_ ]?)?step[ _#:-]*|iteration[ _#:-]*)(\d{1,18})$", re.I
)
_TID_BITS: Final = 24  # a serialized global id: ... | pid << 24 | tid
# NVTX payload entry types that are integers (nvToolsExtPayload.h): type -> struct format.
_INT_TYPES: Final = {
    5: "<i", 6: "<I", 7: "<q", 8: "<Q", 9: "<q", 10: "<Q", 11: "<b", 12: "<B", 13: "<h",
    14: "<H", 15: "<i", 16: "<I", 17: "<q", 18: "<Q", 22: "<Q",
}  # fmt: skip
# A payload blob as Nsight Systems 2026.2 exports it: a 32-byte header (schema id at byte 8,
# little-endian), then the payload laid out as the schema entries' offsets say.
PAYLOAD_HEADER: Final = 32


def pick_table(tables: Iterable[str], bases: Sequence[str]) -> str | None:
    """The first of `bases` the export has, else one of them with a version suffix
    (`CUPTI_ACTIVITY_KIND_KERNEL_V2`), the highest suffix first."""
    names = set(tables)
    for base in bases:
        if base in names:
            return base
    suffixed = sorted(n for n in names for b in bases if re.fullmatch(re.escape(b) + r"_\w+", n))
    return suffixed[-1] if suffixed else None


def global_pid(global_id: int) -> int:
    """The process part of a serialized global thread id."""
    return global_id >> _TID_BITS << _TID_BITS


def thread_id(global_id: int) -> int:
    return global_id & ((1 << _TID_BITS) - 1)


def os_pid(global_id: int) -> int:
    return (global_id >> _TID_BITS) & ((1 << _TID_BITS) - 1)


def call_name(text: str) -> str:
    """A range's name without what PyTorch's `emit_nvtx` appends (`, op_id = 7`, `, seq = 3`,
    `, sizes = [...]`)."""
    head, sep, rest = text.partition(", ")
    return head if sep and rest.startswith(("op_id", "seq", "sizes")) else text


def step_number(name: str) -> int | None:
    match = _STEP.match(name)
    return int(match.group(1)) if match else None


def is_nccl_api(name: str) -> bool:
    """A range of NCCL's own NVTX domain (`ncclAllReduce`, `ncclGroupEnd`), not PyTorch's
    `nccl:<op>`."""
    return name[:4].lower() == "nccl" and ":" not in name


def is_pytorch_call(name: str) -> bool:
    return name.startswith(COMM_CALL_PREFIXES)


# ---------------------------------------------------------------- payloads


Schemas = dict[int, list[tuple[str, int, int]]]  # schema id -> (entry name, type, offset)


def schemas_from(rows: Iterable[tuple[object, ...]]) -> Schemas:
    """(schemaId, name, type, offset) rows of NVTX_PAYLOAD_SCHEMA_ENTRIES (an offset of NULL
    is 0; repeated rows once)."""
    found: dict[int, dict[str, tuple[str, int, int]]] = {}
    for schema, name, kind, offset in rows:
        if isinstance(schema, int) and isinstance(name, str) and isinstance(kind, int):
            at = offset if isinstance(offset, int) else 0
            found.setdefault(schema, {})[name] = (name, kind, at)
    return {schema: list(entries.values()) for schema, entries in found.items()}


def decode_payload(blob: object, schemas: Schemas) -> dict[str, int]:
    """The integer fields of one NVTX payload blob ({} when it is not one this can read)."""
    if not isinstance(blob, bytes) or len(blob) < PAYLOAD_HEADER:
        return {}
    (schema,) = struct.unpack_from("<Q", blob, 8)
    if schema not in schemas:  # the id's upper half may be flags (not seen so far)
        (schema,) = struct.unpack_from("<I", blob, 8)
    fields = {}
    for name, kind, offset in schemas.get(schema, ()):
        layout = _INT_TYPES.get(kind)
        at = PAYLOAD_HEADER + offset
        if layout is not None and offset >= 0 and at + struct.calcsize(layout) <= len(blob):
            (fields[name],) = struct.unpack_from(layout, blob, at)
    return fields


def message_size(payload: Mapping[str, int]) -> int | None:
    size = next((payload[k] for k in _SIZES if k in payload), None)
    return size if size is not None and 0 <= size < 2**62 else None


def comm_label(payload: Mapping[str, int]) -> str | None:
    """A communicator as a process group name (its NCCL id, in hex)."""
    comm = payload.get(_COMM_ID)
    return None if comm is None else f"nccl:{comm & (2**64 - 1):016x}"


# ---------------------------------------------------------------- NCCL API calls


@dataclass(frozen=True)
class ApiCall:
    """One range of NCCL's NVTX domain on one thread, with its payload's fields."""

    tid: int
    start_ns: int
    end_ns: int
    name: str
    payload: Mapping[str, int] = field(default_factory=dict)


@dataclass
class Comms:
    """What NCCL's communicator-init payloads of one process say: communicator -> rank count,
    and the process's rank in its largest communicator."""

    sizes: dict[str, int] = field(default_factory=dict)
    rank: int | None = None
    world: int | None = None

    def add(self, payload: Mapping[str, int]) -> None:
        label, ranks, rank = comm_label(payload), payload.get(_RANKS), payload.get(_RANK)
        if label is None or ranks is None or not 1 <= ranks <= MAX_RANKS:
            return
        self.sizes[label] = ranks
        if rank is not None and 0 <= rank < ranks and ranks >= (self.world or 0):
            self.rank, self.world = rank, ranks


def launchers(calls: Iterable[ApiCall], comms: Comms) -> list[tuple[int, CommCall]]:
    """One thread's NCCL API ranges as the calls that launch kernels, with their threads: a
    collective outside a group, and each outermost `ncclGroupEnd` for its group's members."""
    found: list[tuple[int, CommCall]] = []
    depth, members = 0, list[ApiCall]()
    for call in sorted(calls, key=lambda c: (c.start_ns, -c.end_ns)):
        if call.name == "ncclGroupStart":
            depth += 1
        elif call.name == "ncclGroupEnd":
            depth = max(depth - 1, 0)
            if depth == 0 and members:
                found.append((call.tid, _launcher(call, members, comms)))
                members = []
        elif _api_type(call.name) is not None:
            if depth:
                members.append(call)
            else:
                found.append((call.tid, _launcher(call, [call], comms)))
    return found


def _api_type(name: str) -> CollectiveType | None:
    kind = collective_type(name)
    return None if kind == "Other" else kind


def _launcher(call: ApiCall, members: Sequence[ApiCall], comms: Comms) -> CommCall:
    types = {_api_type(m.name) for m in members}
    kind = types.pop() if len(types) == 1 else None
    label = next((x for m in members if (x := comm_label(m.payload)) is not None), None)
    ranks = comms.sizes.get(label) if label is not None else None
    return CommCall(
        call.name[:MAX_NAME],
        call.start_ns,
        call.end_ns,
        collective_name=kind,
        nelems_bytes=_group_bytes(members, kind, ranks),
        group_size=ranks,
        pg=label if label is not None and len(label) <= MAX_LABEL else None,
    )


def _group_bytes(members: Sequence[ApiCall], kind: str | None, ranks: int | None) -> int | None:
    """S of a call or group: the sends of a group of sends and receives (the receives when
    it sends nothing), the sum of a group of one collective, a shard times n for AllGather
    and ReduceScatter; None when a member has no size or n is needed and unknown."""
    chosen = members
    if kind == "SendRecv":
        sends = [m for m in members if m.name.lower().endswith("send")]
        chosen = sends or members
    sizes = [message_size(m.payload) for m in chosen]
    if not sizes or any(s is None for s in sizes):
        return None
    total = sum(s for s in sizes if s is not None)
    if kind in _SHARDED:
        return None if ranks is None else total * ranks
    return total


# ---------------------------------------------------------------- kernels


@dataclass
class Tally:
    comm_kernels: int = 0
    no_launch: int = 0
    sizes_unknown: int = 0


def gpu_op(kind: str, start_ns: int, end_ns: int) -> GpuOp:
    return GpuOp("memcpy" if kind == "memcpy" else "memset", start_ns, end_ns - start_ns)


def kernel_event(
    name: str,
    start_ns: int,
    end_ns: int,
    calls: list[CommCall] | None,
    *,
    world: int | None,
    tally: Tally,
) -> GpuOp | CommOp:
    """A kernel as an event; `calls`: the ranges enclosing its launch, innermost first (None
    when its launch is not in the export)."""
    if not is_comm_kernel(name):
        return GpuOp("compute", start_ns, end_ns - start_ns, _category(name[:MAX_NAME]))
    tally.comm_kernels += 1
    tally.no_launch += calls is None
    primary = CommCall(name[:MAX_NAME], start_ns, end_ns)
    found = calls or []
    api = next((c for c in found if is_nccl_api(c.name)), None)
    size = api.nelems_bytes if api else None
    tally.sizes_unknown += size is None
    group, source = _group(api, world)
    kind = _collective(primary, found, api)
    return CommOp(kind, start_ns, end_ns - start_ns, size, group, True,
                  api.pg if api else None, None, source)  # fmt: skip


_category: Final = functools.lru_cache(maxsize=4096)(kernel_category)  # a run's few names


def _collective(primary: CommCall, calls: list[CommCall], api: CommCall | None) -> CollectiveType:
    backend = next((c for c in calls if c.name.startswith(BACKEND_CALL_PREFIXES)), None)
    if backend is not None:
        return collective_type(backend.name)
    if api is not None and api.collective_name is not None:
        return collective_type(api.collective_name)
    return collective_of(primary, [primary], [c for c in calls if not is_nccl_api(c.name)])


NCCL_GROUP: Final[GroupSource] = "NCCL communicator"


def _group(api: CommCall | None, world: int | None) -> tuple[int | None, GroupSource | None]:
    if api is not None and api.group_size is not None:
        return api.group_size, NCCL_GROUP
    return (world, "world size") if world is not None else (None, None)


def enclosing(index: CallIndex, launch: tuple[int, int] | None) -> list[CommCall] | None:
    """The calls around a launch (thread, time), innermost first; None without a launch."""
    return None if launch is None else index.enclosing(*launch)


def step_event(name: str, start_ns: int, end_ns: int, global_tid: int) -> Step | None:
    number = step_number(name)
    if number is None:
        return None
    return Step(number, start_ns, end_ns - start_ns, thread_id(global_tid))


# ---------------------------------------------------------------- ranks


@dataclass(frozen=True)
class Process:
    """A process that ran kernels: its serialized id, its CUDA devices, what NCCL said."""

    global_pid: int
    devices: tuple[int, ...]
    comms: Comms = field(default_factory=Comms)


def ranks_of(processes: Sequence[Process]) -> tuple[dict[int, int], str | None]:
    """Each process's rank, and a note when the export did not say it: NCCL's payload rank
    when every process has one (and they differ), else the order of their lowest CUDA
    device (then process id), said as an assumption."""
    given = {p.global_pid: p.comms.rank for p in processes}
    known = [r for r in given.values() if r is not None]
    if len(known) == len(processes) and len(set(known)) == len(known):
        return {pid: rank for pid, rank in given.items() if rank is not None}, None
    order = sorted(processes, key=lambda p: (min(p.devices, default=0), p.global_pid))
    ranks = {p.global_pid: rank for rank, p in enumerate(order)}
    described = ", ".join(
        f"pid {os_pid(p.global_pid)} (GPU {min(p.devices, default=0)}) rank {ranks[p.global_pid]}"
        for p in order
    )
    note = (
        "no NCCL rank in the export (NVTX payloads not exported): ranks assumed from the order "
        f"of the processes' CUDA devices: {described}"
    )
    return ranks, note


def world_of(processes: Sequence[Process]) -> int | None:
    worlds = {p.comms.world for p in processes if p.comms.world is not None}
    return worlds.pop() if len(worlds) == 1 else None


def base_time_ns(utc_epoch_ns: object, system_clock_ns: object) -> int | None:
    """The export's time base: the session start in UTC minus the same instant on the
    export's clock (None unless both are integers)."""
    if isinstance(utc_epoch_ns, int) and isinstance(system_clock_ns, int):
        return utc_epoch_ns - system_clock_ns
    return None
