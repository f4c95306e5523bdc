"""Nsight Systems SQLite exports → commscope events, the mapping half (pure: no sqlite3).

`nsysdb` reads an export (`nsys export --type sqlite`) with cursors and hands rows here.
One export holds every profiled process: each process that ran GPU kernels is one rank (one
process per GPU). What the tables give, as the Kineto normaliser makes it (`normalize`):

- kernels (`CUPTI_ACTIVITY_KIND_KERNEL`, older `..._CONCURRENT_KERNEL`, or either with a
  version suffix; names through `StringIds`): kernels of a communicating family
  (`families`) are communication, fused ones neither, the others compute with their category
  (`kernels`); memcpy and memset tables as copies.
- A communication kernel's call: its `correlationId` → the `CUPTI_ACTIVITY_KIND_RUNTIME`
  launch (thread, time) → the NVTX ranges enclosing the launch on that thread. The collective
  is PyTorch's `nccl:<op>` range (`emit_nvtx`) when there is one, else NCCL's own API range
  (`ncclAllReduce`, or the members of the `ncclGroupStart`…`ncclGroupEnd` the launch sits in:
  sends and receives are SendRecv), else a c10d op, else the kernel name (a SendRecv kernel
  alone is `Other`, as for Kineto).
- Sizes, communicators and rank counts only from NCCL's NVTX payloads (`binaryData` with
  `--include-blobs=true`, laid out by `NVTX_PAYLOAD_SCHEMA_ENTRIES`; or `jsonText` with
  `--include-json=true`; NCCL's structs per version under "payloads" below): S = the message
  size, a share times the rank count for AllGather, ReduceScatter and ncclAlltoAll (NCCL
  records the send count of an all-gather, the receive count of a reduce-scatter, the bytes
  per peer of an all-to-all), the sum of the sends of a group (an all-to-all). Without a
  payload a size is unknown; a payload that cannot be read is counted by reason in the
  export's note (`export_note`).
- Steps: NVTX step ranges (`STEP_RANGES`: PyTorch's `ProfilerStep#N`, the `train_step`
  and `iteration N` ranges put around Megatron-LM's and other training steps); an export
  with none: its capture span as one step (`capture_step`), which the report says.
- Time: the export's clock (ns); the time base `TARGET_INFO_SESSION_START_TIME.utcEpochNs -
  systemClockNs` (the session start on both clocks).
- Host (`host_of`): the `Hostname` row of `TARGET_INFO_SYSTEM_ENV` for the process's target.
- NICs (`nic_ids`): `TARGET_INFO_NIC_INFO`'s `vendorId` and `deviceId` as PCI ids; the table
  maps no NIC to a target, so every process of the export takes them all.
- Ranks (`ranks_of`): the `Rank` of each process's NCCL communicator init payload (its
  largest communicator); else the processes in the order of their CUDA devices, an
  assumption the report names.
"""

from __future__ import annotations

import functools
import json
import re
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from commscope.collector.classify import (
    BACKEND_CALL_PREFIXES,
    COMM_CALL_PREFIXES,
    collective_type,
)
from commscope.collector.normalize import (
    MAX_NAME,
    CallIndex,
    CommCall,
    Special,
    collective_of,
    kernel_kind,
)
from commscope.collector.nsyssplits import group_splits
from commscope.collector.p2ppeers import Peers, peers
from commscope.model.names import host_label
from commscope.model.schema import (
    MAX_LABEL,
    MAX_MEMBERS,
    MAX_NICS,
    MAX_RANKS,
    CollectiveType,
    CommOp,
    GpuOp,
    GroupSource,
    KernelCategory,
    P2PMember,
    Step,
)

KERNEL_TABLES: Final = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL")
MEMCPY_TABLE: Final = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE: Final = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME_TABLE: Final = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE: Final = "NVTX_EVENTS"
# Kernel name columns, best first: the demangled signature is what `kernels` reads.
NAME_COLUMNS: Final = ("demangledName", "shortName", "name")
# NCCL's payload entry names (see "payloads" below): "Bytes" is the size of Send/Recv and
# Broadcast up to NCCL 2.22.
_COMM_ID: Final = "NCCL communicator ID"
_RANKS: Final = "No. of ranks"
_RANK: Final = "Rank"
_SIZES: Final = ("Message size [bytes]", "Bytes")
_PEER: Final = "Peer rank"  # Send/Recv: the peer's rank in the communicator (all versions)
# Payload sizes that are one rank's share: S = size x n (the send count of an all-gather, the
# receive count of a reduce-scatter, the bytes per peer of ncclAlltoAll).
_SHARDED: Final = frozenset({"AllGather", "ReduceScatter", "AllToAll"})
# NVTX ranges that mark one training step, by family, the first family first: a process
# whose ranges are of several families keeps the first (an emit_nvtx `ProfilerStep#N` inside
# a user's `train_step` is one step, not two). Each with where its name is written:
STEP_RANGES: Final = (
    # PyTorch: `torch.profiler.profile.step()` records "ProfilerStep#" + step_num
    # (pytorch/pytorch torch/profiler/profiler.py), an NVTX range under
    # `torch.autograd.profiler.emit_nvtx`, which Megatron-LM's `--profile`, NeMo's
    # NsysCallback (NVIDIA/NeMo nemo/lightning/pytorch/callbacks/nsys.py) and Megatron-Bridge
    # (src/megatron/bridge/training/profiling.py, start_nsys_profiler) enter
    re.compile(r"ProfilerStep#(\d{1,18})"),
    # `torch.cuda.nvtx.range("train_step")` around Megatron-LM's
    # megatron.training.training.train_step (hao-ai-lab/DistCA, its Megatron training
    # script), "train_step_{n:03d}" and `nsys --capture-range=nvtx --nvtx-capture=train_step`
    # in public training scripts; `range_push(f"step {i}")` and f"Step {step}" around the
    # steps of public training loops
    re.compile(r"train[_ ]?step(?:[ _#:-]*(\d{1,18}))?|step[ _#:-]*(\d{1,18})", re.I),
    # `torch.cuda.nvtx.range_push("iteration{}".format(step))` (PyTorch dev-discuss, "Using
    # Nsight Systems to profile GPU workload"), f"iteration_{i}" and f"Iteration {i}" in
    # public training and benchmark scripts
    re.compile(r"iteration[ _#:-]*(\d{1,18})?", re.I),
)
TID_BITS: Final = 24  # a serialized global id: ... | pid << 24 | tid
_TID_BITS: Final = TID_BITS
_VID_SHIFT: Final = 48  # a global id: target (VM) id << 48 | pid << 24 | tid


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


def host_of(global_id: int, hosts: Mapping[int, str]) -> str | None:
    """The Hostname of the target a process ran on (`TARGET_INFO_SYSTEM_ENV`, keyed by the
    target's globalVid: a global id's bits above the process id), else the export's only
    one; None when unknown or not a label (bounded, printable)."""
    host = hosts.get(global_id >> _VID_SHIFT << _VID_SHIFT)
    if host is None and len(set(hosts.values())) == 1:
        host = next(iter(hosts.values()))
    return host_label(host)


def nic_ids(rows: Iterable[tuple[object, object]]) -> list[str]:
    """The PCI ids `vendor:device` (4 hex digits each) of (vendorId, deviceId) rows, sorted,
    each once, at most MAX_NICS; a row whose ids are not 16-bit numbers is left out."""
    parts = ((_pci_part(vendor), _pci_part(device)) for vendor, device in rows)
    found = {f"{v:04x}:{d:04x}" for v, d in parts if v is not None and d is not None}
    return sorted(found)[:MAX_NICS]


def _pci_part(value: object) -> int | None:
    """A 16-bit PCI id part stored as an integer or its decimal text, else None."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    return value if type(value) is int and 0 <= value <= 0xFFFF else None


def _thread_id(global_id: int) -> int:
    return global_id & ((1 << _TID_BITS) - 1)


def _os_pid(global_id: int) -> int:
    return (global_id >> _TID_BITS) & ((1 << _TID_BITS) - 1)


def call_name(text: str) -> str:
    """A range's name without what PyTorch's `emit_nvtx` appends (`, op_id = 7`, `, seq = 3`,
    `, sizes = [...]`)."""
    head, sep, rest = text.partition(", ")
    return head if sep and rest.startswith(("op_id", "seq", "sizes")) else text


def step_range(name: str) -> tuple[int, int | None] | None:
    """(family, step number or None when the name has none) of a step range's name (a
    range name cut of emit_nvtx's suffixes, `call_name`), None for any other range."""
    for family, pattern in enumerate(STEP_RANGES):
        match = pattern.fullmatch(name)
        if match:
            number = next((n for n in match.groups() if n is not None), None)
            return family, None if number is None else int(number)
    return None


def is_nccl_api(name: str) -> bool:
    """A range of NCCL's own NVTX domain (`ncclAllReduce`, `ncclGroupEnd`), not PyTorch's
    `nccl:<op>`."""
    return name[:4].lower() == "nccl" and ":" not in name


def is_pytorch_call(name: str) -> bool:
    return name.startswith(COMM_CALL_PREFIXES)


# ---------------------------------------------------------------- payloads
#
# NCCL attaches one NVTX extended payload (a C struct) to each of its API ranges and registers
# the struct's layout as a payload schema of its NVTX domain. The structs (NVIDIA/nccl):
# - NCCL >= 2.27 (2.27.3 read), `src/include/nvtx_payload_schemas.h`: the communicator first
#   (`comm->commHash`, the same on every rank): `NcclNvtxParamsCommInitRank {uint64_t newcomm;
#   int nranks; int myrank; int cudaDev;}` (also ncclCommInitRankConfig/Scalable, Destroy,
#   Abort), `NcclNvtxParamsCommSplit {uint64_t newcomm; uint64_t parentcomm; int nranks; int
#   myrank; ...}`, `NcclNvtxParamsAllReduce {uint64_t comm; size_t bytes; ncclRedOp_t op;}`,
#   `NcclNvtxParamsAllGather {uint64_t comm; size_t bytes;}` (the send count),
#   `NcclNvtxParamsSendRecv {uint64_t comm; size_t bytes; int peer;}`; since 2.28
#   `NcclNvtxParamsAlltoAll {uint64_t comm; size_t bytes;}` (bytes per peer).
# - NCCL <= 2.22 (2.16.2 `src/collectives/*.cc`, 2.22.3 `src/collectives.cc` and
#   `src/init.cc`): schemas inline, no communicator: `NvtxParamsCommInitRank {int rank; int
#   nranks; int cudaDev;}`, `NvtxParamsAllReduce {size_t bytes; ncclRedOp_t op;}`, AllGather a
#   bare size_t, Send/Recv `{size_t bytes; int peer;}` and Broadcast name their size "Bytes".
# Schema ids (`src/include/nvtx.h`: 1 << 24 + NVTX_SID_*) differ between NCCL versions, so the
# entries are read by name from the export's NVTX_PAYLOAD_SCHEMA_ENTRIES of the event's domain.
# Entry types, and the offset of an entry registered without one (aligned to its own size):
# NVIDIA/NVTX `nvToolsExtPayload.h`. The blob (NVTX_EVENTS.binaryData, `nsys export
# --include-blobs=true`) is not documented by Nsight Systems; read here as GindaChen/nsys-ai
# (`nccl_payload_breakdown.py`) found it in real 2026 exports: a 32-byte header (schema id at
# byte 8, payload size at byte 16), then the struct. A payload whose size is not its schema's
# static size (NVTX_PAYLOAD_SCHEMAS.payloadSize) is not read. With `--include-json=true` the
# export writes the decoded payload as a JSON object keyed by entry name (NVTX_EVENTS.jsonText).

# Integer entry types (NVTX_PAYLOAD_ENTRY_TYPE_*) -> struct format, as on LP64 Linux (LONG and
# ULONG 8 bytes; SIZE and ADDRESS 8): CHAR 1 .. ULONGLONG 10, INT8 11 .. UINT64 18, SIZE 22,
# ADDRESS 23. Others (floats, strings, registered enums such as NCCL's reduction op) not read.
_INT_TYPES: Final = {
    1: "<b", 2: "<B", 3: "<h", 4: "<H", 5: "<i", 6: "<I", 7: "<q", 8: "<Q", 9: "<q", 10: "<Q",
    11: "<b", 12: "<B", 13: "<h", 14: "<H", 15: "<i", 16: "<I", 17: "<q", 18: "<Q",
    22: "<Q", 23: "<Q",
}  # fmt: skip
_PAYLOAD_HEADER: Final = 32
_MAX_JSON: Final = 1 << 16  # an NCCL payload is a few fields: a longer text is not one
_DIGITS: Final = re.compile(r"[0-9]{1,20}")

_Entry = tuple[str, str, int]  # name, struct format, offset in the payload


@dataclass(frozen=True)
class Schema:
    """A payload schema: its integer entries and its static size in bytes (None when the
    export's NVTX_PAYLOAD_SCHEMAS does not say)."""

    entries: tuple[_Entry, ...]
    size: int | None = None


Schemas = dict[tuple[int | None, int], Schema]  # (domainId or None: not said, schemaId) -> schema


def schemas_from(
    entries: Iterable[tuple[object, ...]], sizes: Iterable[tuple[object, ...]] = ()
) -> Schemas:
    """Schemas from (domainId, schemaId, idx, name, type, offset) rows of
    NVTX_PAYLOAD_SCHEMA_ENTRIES and (domainId, schemaId, payloadSize) rows of
    NVTX_PAYLOAD_SCHEMAS; rows repeated (the export writes one set per process) count once.
    A domain of NULL (a table without the column) is None: the schema of any domain."""
    rows: dict[tuple[int | None, int], dict[int, tuple[object, object, object]]] = {}
    for domain, schema, idx, name, kind, offset in entries:
        if type(schema) is int and type(idx) is int:
            key = (domain if type(domain) is int else None, schema)
            rows.setdefault(key, {})[idx] = (name, kind, offset)
    static = {
        (d if type(d) is int else None, s): n
        for d, s, n in sizes
        if type(s) is int and type(n) is int
    }
    return {key: Schema(_laid_out(found), static.get(key)) for key, found in rows.items()}


def _laid_out(rows: Mapping[int, tuple[object, object, object]]) -> tuple[_Entry, ...]:
    """The integer entries in index order, each at its exported offset, or (NULL or 0 after
    the first: registered without one) at the end of the entry before aligned to its own
    size; unknown after an entry this cannot size."""
    laid: list[_Entry] = []
    end: int | None = 0
    for idx in sorted(rows):
        name, kind, offset = rows[idx]
        layout = _INT_TYPES.get(kind) if type(kind) is int else None
        size = struct.calcsize(layout) if layout is not None else None
        at = _offset(offset, end, size)
        end = at + size if at is not None and size is not None else None
        if at is not None and layout is not None and isinstance(name, str):
            laid.append((name, layout, at))
    return tuple(laid)


def _offset(exported: object, end: int | None, size: int | None) -> int | None:
    if type(exported) is int and exported != 0:
        return exported if exported > 0 else None
    if end == 0:
        return 0
    return None if end is None or size is None else -(-end // size) * size


def read_payload(
    blob: object, text: object, schemas: Schemas, domain: object = None
) -> tuple[dict[str, int], str | None]:
    """One NVTX event's payload fields (from its blob, else its jsonText), and why none could
    be read when it has a payload that is not one this can read (None: fine, or none)."""
    fields, problem = decode_payload(blob, schemas, domain)
    if fields:
        return fields, None
    found, trouble = decode_json(text)
    return (found, None) if found else ({}, problem or trouble)


def decode_payload(
    blob: object, schemas: Schemas, domain: object = None
) -> tuple[dict[str, int], str | None]:
    """The integer fields of a binaryData blob, laid out by its schema of the event's domain
    (any domain when the export has no domain column and one domain has the id)."""
    if blob is None or not isinstance(blob, bytes) or len(blob) < _PAYLOAD_HEADER:
        return {}, _not_a_blob(blob)
    (wide,) = struct.unpack_from("<Q", blob, 8)
    (size,) = struct.unpack_from("<Q", blob, 16)
    found = _schema(schemas, domain, wide) or _schema(schemas, domain, wide & 0xFFFFFFFF)
    if found is None:
        return {}, f"payload of a schema not in NVTX_PAYLOAD_SCHEMA_ENTRIES (id {wide})"
    key, schema = found
    if schema.size not in (None, size):
        return {}, f"payload of schema {key[1]} with {size} bytes, not its {schema.size}"
    if _PAYLOAD_HEADER + size > len(blob):
        return {}, f"payload of schema {key[1]} cut short ({len(blob) - 32} of its {size} bytes)"
    return _fields(blob[_PAYLOAD_HEADER : _PAYLOAD_HEADER + size], schema.entries), None


def _not_a_blob(blob: object) -> str | None:
    if blob is None:
        return None
    if isinstance(blob, bytes):
        return "payload blob shorter than its 32-byte header"
    return "binaryData that is not a blob"


def _schema(
    schemas: Schemas, domain: object, schema: int
) -> tuple[tuple[int | None, int], Schema] | None:
    """The schema of the event's domain (or of no domain said); of the one domain that has
    the id when the event's domain is not said."""
    keys: list[tuple[int | None, int]]
    if type(domain) is int:
        mine: tuple[int | None, int] = (domain, schema)
        keys = [key for key in (mine, (None, schema)) if key in schemas][:1]
    else:
        keys = [key for key in schemas if key[1] == schema]
    return (keys[0], schemas[keys[0]]) if len(keys) == 1 else None


def _fields(payload: bytes, entries: Iterable[_Entry]) -> dict[str, int]:
    fields = {}
    for name, layout, at in entries:
        if at + struct.calcsize(layout) <= len(payload):
            (fields[name],) = struct.unpack_from(layout, payload, at)
    return fields


def decode_json(text: object) -> tuple[dict[str, int], str | None]:
    """The integer fields of a jsonText payload: a JSON object keyed by entry name (integers,
    or decimal strings of at most 20 digits)."""
    if text is None:
        return {}, None
    if not isinstance(text, str) or len(text) > _MAX_JSON:
        return {}, "jsonText payload that is not text of at most 64 KiB"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}, "jsonText payload that is not JSON"
    if not isinstance(value, dict):
        return {}, "jsonText payload that is not a JSON object"
    found = {name: _json_int(item) for name, item in value.items()}
    return {name: item for name, item in found.items() if item is not None}, None


def _json_int(value: object) -> int | None:
    if type(value) is int:
        return value
    return int(value) if isinstance(value, str) and _DIGITS.fullmatch(value) else None


def _message_size(payload: Mapping[str, int]) -> int | None:
    size = next((payload[k] for k in _SIZES if k in payload), None)
    return size if size is not None and 0 <= size < 2**62 else None


def _comm_label(payload: Mapping[str, int]) -> str | None:
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
    mine: dict[str, int] = field(default_factory=dict)  # communicator -> this process's rank

    def add(self, payload: Mapping[str, int]) -> None:
        """A payload that says a communicator's rank count (init, split, shrink, destroy);
        NCCL up to 2.22 names no communicator: then the rank only. Of the largest
        communicators, the lowest rank (rows come in any order)."""
        label, ranks, rank = _comm_label(payload), payload.get(_RANKS), payload.get(_RANK)
        if ranks is None or not 1 <= ranks <= MAX_RANKS:
            return
        if label is not None:
            self.sizes[label] = ranks
        if rank is None or not 0 <= rank < ranks:
            return
        if label is not None:
            self.mine[label] = rank
        if (ranks, -rank) > (self.world or 0, -(self.rank or 0)):
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
    label = next((x for m in members if (x := _comm_label(m.payload)) is not None), None)
    ranks = comms.sizes.get(label) if label is not None else None
    sent, received = group_splits(((m.name, m.payload, _message_size(m.payload))
                                   for m in members), ranks)  # fmt: skip
    way, peer = _p2p(members) if kind == "SendRecv" else (None, None)
    both = _both(members) if kind == "SendRecv" and peer is None else ()
    return CommCall(
        call.name[:MAX_NAME],
        call.start_ns,
        call.end_ns,
        collective_name=way or kind,
        nelems_bytes=_group_bytes(members, kind, ranks),
        group_size=ranks,
        pg=label if label is not None and len(label) <= MAX_LABEL else None,
        in_splits=sent,
        out_splits=received,
        group_peer=peer,
        group_rank=_own_rank(comms, label) if peer is not None or both else None,
        members=both,
    )


def _p2p(members: Sequence[ApiCall]) -> tuple[str | None, int | None]:
    """("Send" or "Recv", the peer's rank in the communicator) of a call or group whose
    members all go one way to one peer (`Peer rank` of NCCL's Send/Recv payload); else
    (None, None): a group that sends and receives, or to several peers, is one kernel whose
    members (`_both`) say its peers."""
    ways = {"Send" if m.name.lower().endswith("send") else "Recv" for m in members}
    found = {m.payload.get(_PEER) for m in members}
    peer = found.pop() if len(found) == 1 else None
    if len(ways) != 1 or peer is None or not 0 <= peer < MAX_RANKS:
        return None, None
    return ways.pop(), peer


def _own_rank(comms: Comms, label: str | None) -> int | None:
    return comms.mine.get(label) if label is not None else None


def _both(members: Sequence[ApiCall]) -> tuple[P2PMember, ...]:
    """A group's sends and receives, each with its peer's rank in the communicator and its
    size, when every one names its peer (else none: the group is not paired)."""
    if len(members) > MAX_MEMBERS:
        return ()
    found = []
    for m in members:
        peer = m.payload.get(_PEER)
        if peer is None or not 0 <= peer < MAX_RANKS:
            return ()
        size = _message_size(m.payload)
        to, back = (peer, None) if m.name.lower().endswith("send") else (None, peer)
        found.append(P2PMember(group_send_to=to, group_recv_from=back, message_bytes=size))
    return tuple(found)


def _group_bytes(members: Sequence[ApiCall], kind: str | None, ranks: int | None) -> int | None:
    """S of a call or group: the sends of a group of sends and receives (the receives when
    it sends nothing), the sum of a group of one collective, a share times n for AllGather,
    ReduceScatter and ncclAlltoAll; None when a member has no size or n is needed and
    unknown (NCCL up to 2.22 names no communicator, so n is never known from its payloads)."""
    chosen = members
    if kind == "SendRecv":
        sends = [m for m in members if m.name.lower().endswith("send")]
        chosen = sends or members
    sizes = [_message_size(m.payload) for m in chosen]
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
    lookalike_ns: int = 0  # compute kernels named like communication (`FileStats`)
    lookalikes: dict[str, int] = field(default_factory=dict)  # shown name -> ns


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
    computes = _kind(name[:MAX_NAME])
    if computes is not None:
        return _compute(computes, start_ns, end_ns - start_ns, tally)
    tally.comm_kernels += 1
    tally.no_launch += calls is None
    primary = CommCall(name[:MAX_NAME], start_ns, end_ns)
    found = calls or []
    api = next((c for c in found if is_nccl_api(c.name)), None)
    size = api.nelems_bytes if api else None
    tally.sizes_unknown += size is None
    group, source = _group(api, world)
    kind = _collective(primary, found, api)
    sent, received = (api.in_splits, api.out_splits) if api and kind == "AllToAll" else ((), ())
    both = api.members if api and kind == "SendRecv" else ()
    return CommOp(kind, start_ns, end_ns - start_ns, size, group, True,
                  api.pg if api else None, None, source, None, sent, received,
                  *_peers(kind, api), both)  # fmt: skip


def _peers(kind: CollectiveType, api: CommCall | None) -> Peers:
    """A Send's or Recv's ranks within its communicator (made global across ranks by
    `pipeline.p2pranks`: NCCL's payloads name no global rank)."""
    if kind != "SendRecv" or api is None:
        return Peers()
    if api.group_peer is None:  # a group both ways: its members say the peers
        return Peers(group_rank=api.group_rank if api.members else None)
    way = (api.collective_name or "").lower()
    return peers(way, None, api.group_peer, api.group_rank)


_kind: Final = functools.lru_cache(maxsize=4096)(kernel_kind)  # a run's few names


def _compute(kind: KernelCategory | Special, start_ns: int, dur_ns: int, tally: Tally) -> GpuOp:
    """A kernel that does not communicate: compute (its time listed when it is named like
    communication, `Special`), or fused."""
    if not isinstance(kind, Special):
        return GpuOp("compute", start_ns, dur_ns, kind)
    if kind.fused:
        return GpuOp("fused", start_ns, dur_ns)
    tally.lookalike_ns += dur_ns
    if kind.shown is not None:
        tally.lookalikes[kind.shown] = tally.lookalikes.get(kind.shown, 0) + dur_ns
    return GpuOp("compute", start_ns, dur_ns, kind.category)


def _collective(primary: CommCall, calls: list[CommCall], api: CommCall | None) -> CollectiveType:
    backend = next((c for c in calls if c.name.startswith(BACKEND_CALL_PREFIXES)), None)
    if backend is not None:
        return collective_type(backend.name)
    if api is not None and api.collective_name is not None:
        return collective_type(api.collective_name)
    return collective_of(primary, [primary], [c for c in calls if not is_nccl_api(c.name)])


_NCCL_GROUP: Final[GroupSource] = "NCCL communicator"


def _group(api: CommCall | None, world: int | None) -> tuple[int | None, GroupSource | None]:
    if api is not None and api.group_size is not None:
        return api.group_size, _NCCL_GROUP
    return (world, "world size") if world is not None else (None, None)


def enclosing(index: CallIndex, launch: tuple[int, int] | None) -> list[CommCall] | None:
    """The calls around a launch (thread, time), innermost first; None without a launch."""
    return None if launch is None else index.enclosing(*launch)


StepRange = tuple[int, int, int, int | None, int]  # family, start, end, number, global tid


def steps_of(ranges: Iterable[StepRange]) -> list[Step]:
    """One process's steps from its step ranges: those of its first family (`STEP_RANGES`)
    only; numbered by their names, or all by start order from 1 when one has no number (in
    any order of the rows: sorted by start, end, thread)."""
    found = sorted(ranges, key=lambda r: (r[0], r[1], r[2], r[4]))
    chosen = [r for r in found if r[0] == found[0][0]] if found else []
    numbered = all(r[3] is not None for r in chosen)
    return [
        Step(r[3] if numbered and r[3] is not None else k, r[1], r[2] - r[1], _thread_id(r[4]))
        for k, r in enumerate(chosen, start=1)
    ]


CAPTURE_STEP: Final = 0  # the number of the step that is an export's capture span


def capture_step(span: tuple[int, int] | None) -> Step | None:
    """An export without any step range: its capture span (the first start to the last end
    of its GPU activity, all processes) as one step, said in the report as an assumption."""
    if span is None:
        return None
    return Step(CAPTURE_STEP, span[0], span[1] - span[0], 0)


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
        f"pid {_os_pid(p.global_pid)} (GPU {min(p.devices, default=0)}) rank {ranks[p.global_pid]}"
        for p in order
    )
    note = (
        "no NCCL rank in the export (no communicator-init payload of NCCL in NVTX_EVENTS: "
        "NCCL 2.19+ writes them, `nsys export --include-blobs true` keeps them): ranks "
        f"assumed from the order of the processes' CUDA devices: {described}"
    )
    return ranks, note


def export_note(ranks: str | None, unread: Mapping[str, int]) -> str | None:
    """An export's note: how its ranks were decided when NCCL did not say, and its NCCL
    payloads that could not be read, counted by reason."""
    parts = [ranks] if ranks else []
    if unread:
        listed = "; ".join(f"{count} {reason}" for reason, count in sorted(unread.items()))
        parts.append(
            "NCCL NVTX payloads not read (their sizes, communicators and ranks unknown): " + listed
        )
    return ". ".join(parts) or None


def world_of(processes: Sequence[Process]) -> int | None:
    worlds = {p.comms.world for p in processes if p.comms.world is not None}
    return worlds.pop() if len(worlds) == 1 else None


def base_time_ns(utc_epoch_ns: object, system_clock_ns: object) -> int | None:
    """The export's time base: the session start in UTC minus the same instant on the
    export's clock (None unless both are integers)."""
    if isinstance(utc_epoch_ns, int) and isinstance(system_clock_ns, int):
        return utc_epoch_ns - system_clock_ns
    return None
