"""Shared base types of the model (pure): the literals every part names and the bounded
values a peer's message is checked against on decode (`Rank`, `Label`, `Count`, ...)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Final, Literal, get_args

import msgspec

KernelCategory = Literal["gemm", "attention", "elementwise", "reduction", "other"]
KERNEL_CATEGORIES: Final[tuple[KernelCategory, ...]] = get_args(KernelCategory)
# `fused`: a kernel that computes and communicates (comm-GEMM overlap), in neither union
GpuKind = Literal["compute", "memcpy", "memset", "fused"]
FUSED: Final[GpuKind] = "fused"

# Where a collective's group size n came from (DESIGN.md rulings, in order of preference).
GroupSource = Literal[
    "Group size arg",
    "pg_config",
    "tensor shapes",
    "world size",
    "NCCL communicator",  # the rank count of an NCCL NVTX payload's communicator (Nsight Systems)
    "Inspector n_ranks",  # an NCCL Inspector record's header (protocol 6)
]
GROUP_SOURCES: Final[tuple[GroupSource, ...]] = get_args(GroupSource)
# The format a rank's events were read from: PyTorch profiler (Kineto) JSON, an Nsight Systems
# SQLite export, NCCL Inspector JSONL, or a PyTorch Flight Recorder dump (no events: its
# content rides in `Facts.flight`).
Source = Literal["kineto", "nsys", "inspector", "flight"]
# What a rank's figures rest on (`RankResult.evidence`): its GPU kernels, its CPU-side gloo
# calls, or an NCCL Inspector log's records. The wire and the report keep it as printed
# (`evidence_label`: in name order, joined by " + "; "none" when there is none) under the key
# "source".
Evidence = Literal["cpu (gloo)", "gpu kernels", "nccl inspector"]
EVIDENCE: Final[tuple[Evidence, ...]] = get_args(Evidence)
NO_EVIDENCE: Final = "none"
# `TraceMeta.source` of NCCL Inspector logs (their ranks' evidence: `model.inspector.INSPECTED`)
INSPECTOR_LOGS: Final[Source] = "inspector"

CollectiveType = Literal[
    "AllReduce",
    "AllGather",
    "ReduceScatter",
    "AllToAll",
    "Broadcast",
    "Reduce",
    "SendRecv",
    "Barrier",
    "Other",
]
COLLECTIVE_TYPES: Final[tuple[CollectiveType, ...]] = get_args(CollectiveType)

# Reason keys: the `reason` label values (short snake_case keys, fixed sets); `REASONS` below is
# the one table of their human text (reports and HELP texts read it).
# Why a parser dropped events of a file (`FileStats.dropped` keys).
EventDropReason = Literal[
    "bad_span",
    "not_complete_span",
    "args_not_object",
    "memory_event_incomplete",
    "step_without_number",
    "event_not_object",
    "cat_not_string",
    "value_mended",
    "comm_kernel_unresolved",
    "inspector_not_json",
    "inspector_cut_short",
    "inspector_unknown_version",
    "inspector_bad_record",
    "inspector_line_too_long",
    "inspector_other_comm",
    "bad_tid",
    "inspector_no_time",
]
EVENT_DROP_REASONS: Final[tuple[EventDropReason, ...]] = get_args(EventDropReason)
# What a collector counts as dropped (`CollectorStats.dropped` keys).
DropReason = Literal["unreadable_file", "malformed_reply", "file_changed"]
DROP_REASONS: Final[tuple[DropReason, ...]] = get_args(DropReason)
# Why a collector's read of a file failed (`CollectorStats.read_failures` and `files_lost` keys).
ReadFailure = Literal["worker_died", "unreadable", "reader_failed"]
READ_FAILURES: Final[tuple[ReadFailure, ...]] = get_args(ReadFailure)
# What the aggregator refused (`AggregatorStats.rejected` keys).
RejectReason = Literal[
    "frames",
    "too_large",
    "undecodable",
    "invalid",
    "protocol",
    "unroutable",
    "not_own_node",
    "not_own_stream",
    "too_many_streams",
    "too_many_nodes",
    "disconnected",
    "routing_id_taken",
]
REJECT_REASONS: Final[tuple[RejectReason, ...]] = get_args(RejectReason)
# Connections the aggregator refused before a message (`AggregatorStats.refused` keys).
RefusedReason = Literal[
    "unknown_key", "no_curve", "cryptographic", "handshake", "too_many_handshakes"
]
REFUSED_REASONS: Final[tuple[RefusedReason, ...]] = get_args(RefusedReason)
REASONS: Final[dict[str, str]] = {
    "bad_span": "span without numeric ts/dur (or out of range)",
    "not_complete_span": "kernel/op event that is not a complete span (ph != X)",
    "args_not_object": "args that are not an object",
    "memory_event_incomplete": "[memory] event without Device Id/Type or Total Allocated",
    "step_without_number": "ProfilerStep without a step number",
    "event_not_object": "traceEvents item that is not an object",
    "cat_not_string": "event whose cat is not a string",
    "value_mended": "value beyond 64 bits, NaN or Infinity, or bytes not UTF-8 (mended)",
    "comm_kernel_unresolved": "comm kernel resolved without all its calls "
    "(file beyond the memory bounds)",
    "inspector_not_json": "inspector line that is not JSON",
    "inspector_cut_short": "inspector line cut short (no newline at the end of the file)",
    "inspector_unknown_version": "inspector record of an unknown format version",
    "inspector_bad_record": "inspector record missing keys or with bad values",
    "inspector_line_too_long": "inspector line longer than 1 MiB (left out)",
    "inspector_other_comm": "inspector op of a multi-GPU process on a communicator "
    "other than its largest",
    "bad_tid": "cpu event whose tid is neither a number nor a name",
    "inspector_no_time": "inspector op without a time "
    "(no dump_timestamp_us, not verbose): in no window",
    "unreadable_file": "a file the collector could not read",
    "malformed_reply": "a malformed reply from the aggregator",
    "file_changed": "a file that changed while its stream resumed (streamed anew)",
    "worker_died": "the worker process reading the file died",
    "unreadable": "an I/O error reading the file",
    "reader_failed": "a fault of the reader itself",
    "frames": "not [routing id, payload]",
    "too_large": "a message over the size cap",
    "undecodable": "not msgpack, or nested too deeply",
    "invalid": "msgpack, but not a message of this protocol or a value out of bounds",
    "protocol": "a Hello of another protocol version, or a protocol-4 event Batch",
    "unroutable": "a reply to a peer gone",
    "not_own_node": "a message naming another node than the peer's own",
    "not_own_stream": "a record for another node's stream",
    "too_many_streams": "a stream over the per-node or total cap of open streams",
    "too_many_nodes": "a node over the cap of nodes",
    "disconnected": "a connection dropped, by libzmq for an oversized frame or by the peer",
    "routing_id_taken": "a proven node on a routing id another proven node owns",
    "unknown_key": "a Curve key not in the allow-list",
    "no_curve": "a peer without Curve encryption",
    "cryptographic": "a Curve handshake that failed its cryptography",
    "handshake": "a failed handshake",
    "too_many_handshakes": "shut at once: --max-handshakes others were in their handshake",
}


def reason_text(key: str) -> str:
    """A reason key's human text (a key not in `REASONS`, from an older report: itself)."""
    return REASONS.get(key, key)


def evidence_label(found: Iterable[Evidence]) -> str:
    """Evidence as printed: in name order, joined by " + " ("none" when there is none)."""
    return " + ".join(sorted(set(found))) or NO_EVIDENCE


def evidence_in(text: str) -> frozenset[Evidence]:
    """The evidence a printed text names (`evidence_label`'s inverse)."""
    parts = text.split(" + ")
    return frozenset(e for e in EVIDENCE if e in parts)


# Bounds every value a peer sends is checked against on decode (and the parser keeps to).
MAX_RANKS: Final = 2**24  # ranks are 0 … MAX_RANKS-1, a world at most MAX_RANKS
MAX_GROUPS: Final = 1 << 16  # process groups a trace describes
MAX_LABEL: Final = 256  # a name a trace gives: a process group, a GPU, a backend
LABEL_PATTERN: Final = "^[^\\x00-\\x1f\\x7f]+$"  # no control characters
MAX_LOOKALIKES: Final = 64  # kernel names a file lists as looking like communication
MAX_BATCH_EVENTS: Final = 4096  # events in one Batch (what the collector sends, at most)
Rank = Annotated[int, msgspec.Meta(ge=0, lt=MAX_RANKS)]
WorldSize = Annotated[int, msgspec.Meta(ge=1, le=MAX_RANKS)]
Label = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_LABEL, pattern=LABEL_PATTERN)]
Text = Annotated[str, msgspec.Meta(max_length=16384)]  # a reason or an error message
MAX_SPLITS: Final = 1024  # split sizes an all-to-all call keeps (`classify.split_sizes`)
Splits = Annotated[
    tuple[Annotated[int, msgspec.Meta(ge=0, lt=2**62)], ...], msgspec.Meta(max_length=MAX_SPLITS)
]


# ---------------------------------------------------------------- wire protocol
#
# Collector (DEALER, routing id = node) → aggregator (ROUTER). Each trace file is a stream of
# records numbered from 0: one `StreamStart`, the `Facts` the collector reduced the file to once
# its document ended (protocol 5; protocol 4 sent every event in `Batch`es), one `StreamEnd`. The
# aggregator applies record `seq` of a stream only when it is the next one expected (at most
# once, in order), makes it durable, and acknowledges cumulatively with `Ack(next_seq)`;
# the collector resends what is unacknowledged after a timeout (go-back-N). Every field a
# peer sends is validated on decode: a hostile message fails there, never deeper.

StreamId = Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]
Seq = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]
Count = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
# A node's name (a host or pod name; the collector's routing id): a label value, bounded.
NODE_PATTERN: Final = "^[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,252}$"
NodeName = Annotated[str, msgspec.Meta(pattern=NODE_PATTERN)]
Instance = Annotated[str, msgspec.Meta(pattern="^[0-9A-Za-z_-]{1,64}$")]
