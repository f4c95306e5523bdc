"""commscope's one schema module (pure): every struct that crosses a process boundary.

Normalised trace events (what the collector emits and the pipeline consumes, later shipped
over ZeroMQ), per-file metadata, and the report document. Units are in field names (`_ns`,
`_s`, `_bytes`, `_Bps`); times inside are integer nanoseconds, the report speaks seconds.
New fields get defaults and are appended, never retyped. `None` means unknown, never 0.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Final, Literal, get_args

import msgspec

# The versions of what is written: the report document, the wire protocol (a Hello of another
# version is refused), the collector's checkpoint and the aggregator's state folder. What each
# version changed: CHANGELOG.md, "Wire protocol and saved state versions".
SCHEMA_VERSION: Final = 5
PROTOCOL_VERSION: Final = 10
# Persisted state (the collector's checkpoint, the aggregator's store). Version 1 carried no
# version field; readers migrate it explicitly.
STATE_VERSION: Final = 2
# The aggregator's state folder (its `version.msgpack`): versions 1 and 2 went with
# STATE_VERSION; 3 is one journal (`JournalEntry` frames in segments), which `pipeline.store`
# migrates version 1 and 2 folders to; 4 keys drop reasons as protocol 10 does.
STORE_VERSION: Final = 4

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
# SQLite export, or NCCL Inspector JSONL.
Source = Literal["kineto", "nsys", "inspector"]
# What a rank's figures rest on (`RankResult.evidence`): its GPU kernels, its CPU-side gloo
# calls, or an NCCL Inspector log's records. The wire and the report keep it as printed
# (`evidence_label`: in name order, joined by " + "; "none" when there is none) under the key
# "source".
Evidence = Literal["cpu (gloo)", "gpu kernels", "nccl inspector"]
EVIDENCE: Final[tuple[Evidence, ...]] = get_args(Evidence)
NO_EVIDENCE: Final = "none"
# `TraceMeta.source` of NCCL Inspector logs (their ranks' evidence: `collector.inspector.INSPECTED`)
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


# ---------------------------------------------------------------- normalised events


class TraceMeta(msgspec.Struct, frozen=True, kw_only=True):
    """What a trace file says about itself (top-level keys around `traceEvents`)."""

    rank: Rank | None = None
    world_size: WorldSize | None = None
    backend: Label | None = None
    gpu_name: Label | None = None
    base_time_ns: int | None = None
    pg_sizes: Annotated[dict[Label, WorldSize], msgspec.Meta(max_length=MAX_GROUPS)] = {}
    nccl_version: Label | None = None
    # process group -> member ranks (pg_config)
    pg_ranks: Annotated[
        dict[Label, Annotated[list[Rank], msgspec.Meta(max_length=MAX_RANKS)]],
        msgspec.Meta(max_length=MAX_GROUPS),
    ] = {}
    source: Source = "kineto"
    # False: the calls' start times are not in the file (an NCCL Inspector log written without
    # NCCL_INSPECTOR_DUMP_VERBOSE): no clock offset or arrival skew rests on them
    call_starts: bool = True


class GpuOp(msgspec.Struct, frozen=True, gc=False, tag="gpu", array_like=True):
    """A non-communication GPU activity: a compute kernel, a memcpy, a memset, or a fused kernel
    (computes and communicates: counted in neither union)."""

    kind: GpuKind
    start_ns: int
    dur_ns: int
    category: KernelCategory | None = None  # a compute kernel's


class CommOp(msgspec.Struct, frozen=True, gc=False, tag="comm", array_like=True):
    """One collective: an NCCL/RCCL kernel (`on_gpu`) or a gloo span on a CPU thread."""

    collective: CollectiveType
    start_ns: int
    dur_ns: int
    message_bytes: int | None
    group_size: WorldSize | None
    on_gpu: bool
    process_group: Label | None = None
    seq: int | None = None
    group_source: GroupSource | None = None  # None when n is unknown (checked at decode)
    dtype: Label | None = None  # one name per type (`classify.dtype_name`); None: unknown
    # an all-to-all-v's split sizes as recorded (the first MAX_SPLITS, in group-rank order):
    # in_splits[j] is what this rank sends to group rank j, out_splits[j] what it receives
    in_splits: Splits = ()
    out_splits: Splits = ()


class Step(msgspec.Struct, frozen=True, gc=False, tag="step", array_like=True):
    """A `ProfilerStep#N` span on the thread that runs the training loop."""

    step: int
    start_ns: int
    dur_ns: int
    tid: int


class CpuSpan(msgspec.Struct, frozen=True, gc=False, tag="cpu", array_like=True):
    """A merged run of cpu_op time on one thread; `comm_call` spans are c10d/wait calls."""

    tid: int
    start_ns: int
    end_ns: int
    comm_call: bool


class MemoryPeak(msgspec.Struct, frozen=True, gc=False, tag="mem", array_like=True):
    """The highest `Total Allocated` / `Total Reserved` of one GPU's `[memory]` events."""

    device: int
    allocated_bytes: int
    reserved_bytes: int | None = None


class KernelTime(msgspec.Struct, frozen=True, gc=False, tag="ktime", array_like=True):
    """One kernel name's kernels in a file, or a rank's: how many, their Σ duration, and
    whether they communicate; `name` None is the row of the names beyond the cap, summed
    (`pipeline.topkernels`)."""

    name: Name | None
    count: Count
    time_ns: Count
    communication: bool = False


class LaunchDelays(msgspec.Struct, frozen=True, gc=False, tag="launches", array_like=True):
    """Kernel launches of a file as the normaliser joined them (`collector.launches`), in
    parts of at most `collector.launches.DELAYS` kernels: the launch calls (cudaLaunchKernel,
    cuLaunchKernel, hipLaunchKernel and their variants) and their Σ duration, the kernels
    joined to their call by `correlation`, those shorter than their call, and each joined
    kernel's queue delay (its start minus its call's start, ns) packed as little-endian int64."""

    calls: int = 0
    call_ns: int = 0
    kernels: int = 0
    shorter: int = 0
    delays_ns: bytes = b""


Event = GpuOp | CommOp | Step | CpuSpan | MemoryPeak | KernelTime | LaunchDelays


class FileStats(msgspec.Struct, kw_only=True):
    """Counters of one parsed file: what was read and what was dropped, and why."""

    bytes_read: int = 0
    events: int = 0
    dropped: dict[EventDropReason, int] = {}
    sizes_unknown: int = 0
    comm_kernels: int = 0  # communication kernels (`collector.families`) read
    no_launch: int = 0  # of those, kernels whose launching call is not in the trace
    # compute kernels named like communication that match no family: their GPU time, and the
    # longest of them by shown name (`normalize.LOOKALIKE_NAMES` at most)
    lookalike_ns: Annotated[int, msgspec.Meta(ge=0, le=2**62)] = 0
    lookalikes: Annotated[
        dict[Label, Annotated[int, msgspec.Meta(ge=0, le=2**62)]],
        msgspec.Meta(max_length=MAX_LOOKALIKES),
    ] = {}


# ---------------------------------------------------------------- per-rank results


class Sketch(msgspec.Struct, kw_only=True):
    """A mergeable log-bucket sketch of a sample (`pipeline.sketch`): bucket index -> values,
    exact count, exact sum (as non-overlapping float parts), exact min and max. Positive values
    in `positive` (bucket ceil(log_γ x)), negative ones in `negative` (bucket of -x)."""

    count: int = 0
    sum_parts: list[float] = []  # their exact sum is the sample's sum (canonical expansion)
    min: float | None = None
    max: float | None = None
    zeros: int = 0
    positive: dict[int, int] = {}
    negative: dict[int, int] = {}


class LaunchTally(msgspec.Struct, kw_only=True):
    """A rank's kernel launches (`LaunchDelays` summed, the queue delays as a sketch in ns):
    mergeable over files and windows (`pipeline.topkernels.merge_launches`)."""

    calls: Count = 0  # launch calls
    call_ns: Count = 0  # Σ their durations: the CPU time spent launching
    kernels: Count = 0  # kernels joined to their launch call
    shorter: Count = 0  # of those, kernels shorter than their launch call
    delay_ns: Sketch = msgspec.field(default_factory=Sketch)  # kernel start - call start


class OpTally(msgspec.Struct, kw_only=True):
    """One rank's collectives of one type: sums, and per-op bandwidth samples (B/s), packed
    as little-endian float64 (`pipeline.stats.add_sample` / `sample_values`): 8 bytes a sample
    instead of a list slot and a Python float (32), as every sample of a window is kept (over
    several windows they give way to sketches: `RunTally`)."""

    count: int = 0
    sized_count: int = 0
    message_bytes: int = 0
    bus_parts: dict[int, int] = {}  # group size n -> Σ S x (F x n): exact, order-free
    bus_count: int = 0
    bus_time_ns: int = 0
    time_ns: int = 0
    sized_time_ns: int = 0
    algbw_Bps: bytearray = msgspec.field(default_factory=bytearray)
    busbw_Bps: bytearray = msgspec.field(default_factory=bytearray)
    group_sources: dict[str, int] = {}  # GROUP_SOURCES entry (or "unknown") -> ops


class RunTally(OpTally, kw_only=True):
    """A tally over several windows (`pipeline.accumulate.merge_results`), in memory only (a
    window's stored result keeps its `OpTally`): the bandwidths are sketches, not samples
    (the sample fields stay empty)."""

    algbw_sketch: Sketch = msgspec.field(default_factory=Sketch)
    busbw_sketch: Sketch = msgspec.field(default_factory=Sketch)


class ShedTally(OpTally, kw_only=True):
    """A finished window's tally once the live aggregator has given up its samples
    (`pipeline.aggregation.Aggregation.shed`), in memory only: the bandwidths kept as their
    sketches, msgpack-encoded (`pipeline.sketch.pack`: a few bytes a bucket, however many
    samples), for the whole-run figures; an exact figure reads the samples back from the store
    first (the sample fields stay empty)."""

    algbw_packed: bytes = b""
    busbw_packed: bytes = b""


class InSteps(msgspec.Struct, kw_only=True):
    """One rank's measures within S, the union of its profiled steps' spans (ns): every ratio
    against step time takes its numerator from here and |S| as its denominator."""

    span_ns: int = 0  # |S|
    comm_ns: int = 0  # |C ∩ S|
    overlap_ns: int = 0  # |C ∩ P ∩ S|
    compute_ns: int = 0  # |P ∩ S|
    gpu_busy_ns: int = 0  # |GPU busy ∩ S| (compute, communication, memcpy, memset)


class RankResult(msgspec.Struct, kw_only=True):
    """What one rank's events came to, for one window or summed over several (mergeable)."""

    evidence_text: str = msgspec.field(name="source")  # `evidence`, printed: `evidence_label`
    comm_ns: int = 0
    overlap_ns: int = 0
    compute_ns: int = 0
    ops: dict[str, OpTally] = {}
    steps: dict[int, int] = {}  # ProfilerStep number -> duration (ns)
    files: list[str] = []
    calls: list[CommOp] = []  # the window's collectives in start order (empty once merged)
    kernel_ns: dict[str, int] = {}  # Σ duration per GPU activity category
    gpu_busy_ns: int = 0  # |union of all GPU activity|
    gpu_span_ns: int = 0  # from the first GPU activity's start to the last one's end
    memory_peak_bytes: int | None = None  # max `Total Allocated` over the rank's GPUs
    memory_reserved_peak_bytes: int | None = None
    start_ns: int | None = None  # the earliest start of any event kept (the trace's own clock)
    end_ns: int | None = None  # the latest end of any event kept
    in_steps: InSteps | None = None  # clipped to the profiled steps (None: kept before these)
    ungrouped_calls: int = 0  # collectives without a Process Group Name
    # the window's own, for exposed waiting and transfer (`pipeline.waiting`); empty once merged:
    exposed_runs: bytes = b""  # E = C \ P, packed runs (`pipeline.intervals.pack`)
    step_runs: bytes = b""  # S, the union of the profiled steps' spans, packed runs
    # an Nsight Systems export without NVTX step ranges: its capture span, taken as its one
    # step (ns; summed over windows), is in `in_steps` (the step figures) but not in `steps`
    # (training steps: the iteration time)
    capture_ns: int = 0
    # kernels per name, by GPU time: at most `pipeline.topkernels.NAMES` names, the rest in
    # one row whose name is None (`pipeline.topkernels.capped`)
    kernel_names: list[KernelTime] = []
    launches: LaunchTally | None = None  # None: the source records no launch calls

    @property
    def evidence(self) -> frozenset[Evidence]:
        return evidence_in(self.evidence_text)


# ---------------------------------------------------------------- the report document


class Summary(msgspec.Struct, kw_only=True):
    """mean/median/min/max/p95 of a sample (median and p95 interpolate linearly)."""

    mean: float | None = None
    median: float | None = None
    min: float | None = None
    max: float | None = None
    p95: float | None = None
    # median and p95 from a sketch, each within this relative error (None: exact quantiles)
    relative_error: float | None = None


class RankOverlap(msgspec.Struct, kw_only=True):
    ratio: float | None
    comm_time_s: float
    overlapped_time_s: float
    exposed_comm_time_s: float
    compute_time_s: float
    evidence_text: str = msgspec.field(name="source")  # the rank's `RankResult.evidence_text`
    # exposed communication split (`pipeline.waiting`): the three sum to exposed_comm_time_s;
    # None where the window's cross-rank facts are not in yet (an open window)
    exposed_transfer_s: float | None = None  # |E ∩ T|: moving data, no member still awaited
    exposed_waiting_s: float | None = None  # |(E ∩ W) \ T|: waiting for the last member
    exposed_unmatched_s: float | None = None  # calls matched to no instance (not split)

    @property
    def evidence(self) -> frozenset[Evidence]:
        return evidence_in(self.evidence_text)


class Overlap(msgspec.Struct, kw_only=True):
    mean: float | None = None
    min: float | None = None
    max: float | None = None
    per_rank: dict[str, RankOverlap] = {}


class CollectiveStats(msgspec.Struct, kw_only=True):
    count: int
    sized_count: int
    message_bytes: int | None
    bus_bytes: float | None  # Σ S x F, exact to a float: never rounded to whole bytes
    time_s: float
    algbw_Bps: Summary
    busbw_Bps: Summary
    group_size_sources: dict[str, int] = {}  # where n came from -> ops ("unknown": nowhere)


class Collectives(msgspec.Struct, kw_only=True):
    per_rank: dict[str, dict[str, CollectiveStats]] = {}
    all_ranks: dict[str, CollectiveStats] = {}


class RankNetwork(msgspec.Struct, kw_only=True):
    bus_bandwidth_Bps: float | None
    simple_bandwidth_Bps: float | None
    message_bytes: int | None
    bus_bytes: float | None
    ops: int


class Network(msgspec.Struct, kw_only=True):
    mean_bus_bandwidth_Bps: float | None = None
    peak_bandwidth_Bps: float | None = None
    peak_source: str | None = None
    utilization: float | None = None
    total_bus_bytes: float | None = None
    per_rank: dict[str, RankNetwork] = {}


class TrafficShare(msgspec.Struct, kw_only=True):
    count: int
    bus_bytes: float | None
    share: float | None
    mean_time_s: float | None


class Throughput(msgspec.Struct, kw_only=True):
    iterations: int = 0
    iteration_time_s: float | None = None
    tokens_per_second: float | None = None
    tokens_per_second_per_gpu: float | None = None
    samples_per_second: float | None = None
    global_batch_size: int | None = None
    seq_len: int | None = None
    na_reason: str | None = None
    step_times_s: list[float] = []  # per ProfilerStep number: mean over ranks of its duration


class Utilization(msgspec.Struct, kw_only=True):
    """MFU and HFU: model (and hardware) FLOP/s per GPU over the GPU's peak."""

    mfu: float | None = None
    hfu: float | None = None
    hfu_factor: float | None = None
    flops_per_token: float | None = None
    flops_source: str | None = None
    peak_flops: float | None = None
    peak_source: str | None = None
    model_flops_per_second_per_gpu: float | None = None
    na_reason: str | None = None
    hfu_reason: str | None = None  # where the recomputation factor comes from, or why unknown
    warning: str | None = None  # the figures cannot be right (MFU above 100%)


class RankKernels(msgspec.Struct, kw_only=True):
    """One rank's GPU time by category (Σ durations; streams may overlap) and idle time."""

    time_s: dict[str, float] = {}
    share: dict[str, float] = {}
    busy_s: float = 0.0
    span_s: float = 0.0
    idle_s: float = 0.0
    idle_ratio: float | None = None
    memory_peak_bytes: int | None = None
    memory_reserved_peak_bytes: int | None = None


class Kernels(msgspec.Struct, kw_only=True):
    time_s: dict[str, float] = {}
    share: dict[str, float] = {}
    idle_ratio_mean: float | None = None
    per_rank: dict[str, RankKernels] = {}


class GroupMatch(msgspec.Struct, kw_only=True):
    """One process group's collectives matched across its members' traces."""

    members: list[int] = []
    ranks_with_traces: list[int] = []
    key: str = "index"  # "seq": Process Group Name + Seq; "index": running index per rank
    instances: int = 0
    desyncs: int = 0
    unmatched: int = 0


class Desync(msgspec.Struct, kw_only=True):
    """Members disagree on what the collective at one position of a group is."""

    process_group: str
    key: str
    position: int
    calls: dict[str, str]  # rank -> "AllReduce 4194304 B Float"
    differs: list[str] = []  # what: "collective", "message size", "dtype", "split sizes"
    ranks: list[int] = []  # the ranks whose call departs from the others'


class Matching(msgspec.Struct, kw_only=True):
    instances: int = 0
    by_seq: int = 0
    by_index: int = 0
    unmatched: int = 0
    point_to_point: int = 0  # SendRecv calls: pairwise, not matched across a group
    desync_count: int = 0
    desyncs: list[Desync] = []  # the first few
    groups: dict[str, GroupMatch] = {}


class ClockOffset(msgspec.Struct, kw_only=True):
    """`offset_s` is subtracted from the rank's clock to align it with the reference."""

    offset_s: float
    uncertainty_s: float | None
    samples: int


class Clocks(msgspec.Struct, kw_only=True):
    reference_rank: int | None = None
    method: str = ""
    per_rank: dict[str, ClockOffset] = {}


class CollectiveSkew(msgspec.Struct, kw_only=True):
    instances: int
    skew_s: Summary
    wait_s: float  # Σ over instances of the time members waited for the last arriver
    wait_in_call_s: float = 0.0  # the same, each member's wait at most its own call's duration
    call_time_s: float = 0.0  # Σ over instances and members of the call's duration


class RankArrival(msgspec.Struct, kw_only=True):
    instances: int = 0
    last: int = 0
    last_share: float | None = None
    expected_last: float = 0.0  # if arrival order were random
    caused_wait_s: float = 0.0
    waited_s: float = 0.0


class SkewInstances(msgspec.Struct, kw_only=True):
    """One collective type's matched instances in time order (window after window), for the
    HTML report's plot: each one's arrival skew and last arriver (None: none arrived last).
    At most `pipeline.crossrank.PLOT_POINTS`, evenly thinned; `total` counts them all."""

    skew_s: list[float] = []
    last: list[int | None] = []
    total: int = 0


class Skew(msgspec.Struct, kw_only=True):
    per_collective: dict[str, CollectiveSkew] = {}
    per_rank: dict[str, RankArrival] = {}
    waited_for_rank: int | None = None  # the rank the others wait for (named when clear)
    evidence: str = ""
    instances: dict[str, SkewInstances] = {}  # the whole run's only (windows leave it empty)


class Stragglers(msgspec.Struct, kw_only=True):
    """Step-time outliers among the ranks: z over ranks of the mean step time."""

    z: dict[str, float] = {}
    robust_z: dict[str, float] = {}
    flagged: list[int] = []
    evidence: str = ""
    robust_z_threshold: float | None = None  # flagged at robust z ≥ this (None: not tested)


class AlphaBeta(msgspec.Struct, kw_only=True):
    """T = α + S_bus / β fitted to wait-free durations (each instance's fastest member)."""

    instances: int
    sizes: int
    alpha_s: float | None = None
    beta_Bps: float | None = None
    r2: float | None = None
    peak_ratio: float | None = None
    latency_bound: float | None = None  # share of the fitted points with S_bus < α·β
    na_reason: str | None = None
    bus_bytes: float | None = None  # Σ S·F over the instances of known size (one member's)
    # The fitted points (S·F bytes, wait-free seconds), at most `crossrank.PLOT_POINTS` evenly
    # thinned of `points_total`, for the HTML report's plot; kept on the whole run's fit of most
    # bus bytes of each collective type (`crossrank.PLOT_FITS` types at most), windows none.
    points: list[tuple[float, float]] = []
    points_total: int = 0
    bus_factor: float | None = None  # F of every point (S = S·F / F); None when they differ


class Finding(msgspec.Struct, kw_only=True):
    verdict: str
    evidence: list[str] = []
    suggestions: list[str] = []


class Diagnosis(msgspec.Struct, kw_only=True):
    verdict: str = "n/a"
    figures: dict[str, float | None] = {}
    findings: list[Finding] = []
    assumptions: list[str] = []  # what the verdict and figures rest on that the traces do not show
    left_out: list[str] = []  # what the figures leave out (time outside the profiled steps)
    confidence: str = "n/a"  # low (under 3 profiled steps), medium, high
    confidence_reason: str = ""


class RankSteps(msgspec.Struct, kw_only=True):
    """Step times, and the rank's time within S (the union of its profiled steps' spans) and
    outside it; the in-step figures are None for a result kept before they were."""

    count: int
    mean_s: float | None
    min_s: float | None
    max_s: float | None
    span_s: float | None = None  # |S|
    comm_s: float | None = None  # |C ∩ S|
    exposed_comm_s: float | None = None  # |C ∩ S| - |C ∩ P ∩ S|
    compute_s: float | None = None  # |P ∩ S|
    gpu_busy_s: float | None = None  # |GPU busy ∩ S|; None for a rank without GPU activity
    comm_outside_s: float | None = None  # |C| - |C ∩ S|: communication outside the steps
    compute_outside_s: float | None = None  # |P| - |P ∩ S|
    exposed_transfer_s: float | None = None  # within S, as `RankOverlap` splits it
    exposed_waiting_s: float | None = None
    exposed_unmatched_s: float | None = None
    capture_span: bool = False  # the rank's step is its export's capture span (assumed)


class Skipped(msgspec.Struct, frozen=True):
    path: str
    reason: str


class JobInfo(msgspec.Struct, kw_only=True):
    """One job among the files given: what tells it apart from the others."""

    number: int  # from 1, in order of start time
    world_size: int | None = None
    backend: str | None = None
    gpu_name: str | None = None  # "": no GPU (CPU-only traces); None: the traces do not say
    started_utc: str | None = None  # its earliest event, ISO 8601; None: time base unknown
    files: int = 0
    description: str = ""


class Inputs(msgspec.Struct, kw_only=True):
    files: int = 0
    skipped: list[Skipped] = []
    bytes_read: int = 0
    events: int = 0
    dropped_events: dict[str, int] = {}
    sizes_unknown: int = 0
    ignored: list[str] = []  # valid JSON beside the traces that is not a trace (not counted)
    notes: list[str] = []  # what was read where the traces did not say (ranks from names)
    job: int | None = None  # the job this report covers, when the files hold several
    jobs: list[JobInfo] = []  # every job the files hold, when they hold several
    # the format each rank's window was read from (`Source`) -> how many (window, rank) pairs;
    # which ones: `windows[].facts[rank].meta.source`
    sources: dict[str, int] = {}
    # a live report mid-run: windows still open, given without their cross-rank sections
    # (matching, clocks, skew, alpha-beta), which the run's then leave out too
    open_windows: list[str] = []
    # a live final report: the collectors (nodes) that never sent end-of-run (exited at their
    # drain deadline, or died): files they had not sent yet are missing from the report
    unended_collectors: list[str] = []


class HealthIssue(msgspec.Struct, kw_only=True):
    """One thing the traces lack: how much of it, and which sections it weakens."""

    key: str  # stable name of the check
    missing: str
    count: int
    total: int
    unit: str  # what `count` and `total` count: ranks, files, collective calls, ...
    share: float | None = None  # count / total
    weakens: list[str] = []
    # the kernels behind the gap, by shown name: GPU time (s), longest first (`comm_lookalike`)
    kernels: dict[str, float] = {}
    named: list[str] = []  # the first few cases, each in one line


class Health(msgspec.Struct, kw_only=True):
    """What the traces lack, so a reader knows how far to trust each section."""

    checked: list[str] = []  # the keys of every check made
    issues: list[HealthIssue] = []


class KernelRow(msgspec.Struct, kw_only=True):
    """One kernel name's GPU time; `name` None: the names beyond the cap, summed."""

    name: str | None
    count: int
    time_s: float
    mean_s: float | None
    share: float | None  # of the Σ duration of every kernel (of the rank, or of all ranks)
    communication: bool | None  # a communication kernel; None on the summed row


class TopKernels(msgspec.Struct, kw_only=True):
    """Kernels by name and GPU time (Σ durations; streams may overlap), per rank and pooled
    over ranks; each list is sorted by time, the names beyond `names_kept` summed in a last
    row (name null), so the rows add up to `count` and `time_s` exactly."""

    count: int = 0
    time_s: float = 0.0
    names_kept: int = 0
    all_ranks: list[KernelRow] = []
    per_rank: dict[str, list[KernelRow]] = {}
    na_reason: str | None = None


class RankLaunches(msgspec.Struct, kw_only=True):
    """Kernel launches: CPU time in launch calls, and each kernel against its launch call."""

    calls: int = 0
    call_time_s: float = 0.0
    kernels: int = 0  # kernels joined to their launch call (by correlation)
    queue_delay_s: Summary = msgspec.field(default_factory=Summary)  # kernel start - call start
    shorter: int = 0  # kernels shorter than their launch call
    shorter_share: float | None = None  # of `kernels`


class Launches(msgspec.Struct, kw_only=True):
    all_ranks: RankLaunches | None = None
    per_rank: dict[str, RankLaunches] = {}
    na_reason: str | None = None


class Sections(msgspec.Struct, kw_only=True):
    """The report sections, for the whole run or for one window."""

    ranks: list[int] = []
    overlap: Overlap = msgspec.field(default_factory=Overlap)
    collectives: Collectives = msgspec.field(default_factory=Collectives)
    network: Network = msgspec.field(default_factory=Network)
    traffic: dict[str, TrafficShare] = {}
    throughput: Throughput = msgspec.field(default_factory=Throughput)
    steps: dict[str, RankSteps] = {}
    utilization: Utilization = msgspec.field(default_factory=Utilization)
    kernels: Kernels = msgspec.field(default_factory=Kernels)
    matching: Matching = msgspec.field(default_factory=Matching)
    clocks: Clocks = msgspec.field(default_factory=Clocks)
    skew: Skew = msgspec.field(default_factory=Skew)
    stragglers: Stragglers = msgspec.field(default_factory=Stragglers)
    alpha_beta: dict[str, dict[str, AlphaBeta]] = {}  # process group -> collective -> fit
    health: Health = msgspec.field(default_factory=Health)
    top_kernels: TopKernels = msgspec.field(default_factory=TopKernels)
    launches: Launches = msgspec.field(default_factory=Launches)


class ExposedSplit(msgspec.Struct, frozen=True, kw_only=True):
    """A rank's exposed communication |E| and its exposed transfer and waiting (ns), over its
    window(s) and within its profiled steps (`pipeline.waiting`); the rest is unmatched."""

    exposed_ns: int = 0
    transfer_ns: int = 0
    waiting_ns: int = 0
    exposed_in_steps_ns: int = 0
    transfer_in_steps_ns: int = 0
    waiting_in_steps_ns: int = 0


class RankFacts(msgspec.Struct, kw_only=True):
    """One rank's window as a JSON report carries it for `commscope merge`: the result's
    integer sums (its call list, files and bandwidth samples left out: `pipeline.facts`), its
    bandwidths as sketches per collective type (exact count, sum, min and max), and what trace
    health reads of its file (`meta` without the pg_config lists; `pg_config`: it had some)."""

    result: RankResult
    algbw: dict[str, Sketch] = {}
    busbw: dict[str, Sketch] = {}
    meta: TraceMeta = TraceMeta()
    pg_config: bool = False
    stats: FileStats = msgspec.field(default_factory=FileStats)
    split: ExposedSplit | None = None  # None: the window's cross-rank facts were not in


class Window(Sections, kw_only=True):
    name: str
    facts: dict[str, RankFacts] = {}  # rank -> what `commscope merge` needs (schema 4 on)


class RunConfig(msgspec.Struct, kw_only=True):
    """The job as the report header describes it (config file, flags and traces)."""

    model: str | None = None
    flavor: str | None = None
    local_batch_size: int | None = None
    global_batch_size: int | None = None
    seq_len: int | None = None
    parallelism: dict[str, int] = {}
    gpu_name: str | None = None
    backend: str | None = None
    config_path: str | None = None
    warnings: list[str] = []  # what the config holds that commscope cannot use or doubts
    parallelism_source: dict[str, str] = {}  # degree → where its value came from
    parallelism_issue: str | None = None  # why the config's degrees cannot be this run's

    @property
    def model_name(self) -> str | None:
        """The model and its flavour (`llama3 8B`), None when neither is known."""
        return " ".join(x for x in (self.model, self.flavor) if x) or None


class Shard(msgspec.Struct, kw_only=True):
    """One report `commscope merge` combined: its file, and the ranks and windows it held."""

    path: str
    ranks: list[int] = []
    windows: list[str] = []


class MergeInfo(msgspec.Struct, kw_only=True):
    """How a merged report was made. Figures per rank and over ranks are exact; the cross-rank
    analysis (matching, clocks, skew, α-β) was made within each shard, so only the process
    groups whose traced members all lie in one shard are kept (`groups_inside`: group ->
    shard index); those across shards are not analysed (`groups_across`: group -> shards)."""

    shards: list[Shard] = []
    groups_inside: dict[str, int] = {}  # shard indices count from 0, in `shards` order
    groups_across: dict[str, list[int]] = {}
    notes: list[str] = []  # what each cross-rank section covers, in words


class Provenance(msgspec.Struct, kw_only=True):
    """Who wrote a report, when and from what; set by the shell that writes it (None on a
    report built in process). Left out when a live report is compared with an offline one."""

    tool_version: str  # commscope's version, e.g. "0.1.0"
    generated_utc: str  # ISO 8601 in UTC, e.g. "2026-11-24T12:00:05Z"
    inputs: list[str] = []  # the paths given, absolute; [] for the live aggregator
    command: list[str] = []  # the command line, program first


class Report(Sections, kw_only=True):
    schema_version: int = SCHEMA_VERSION
    world_size: int | None = None
    config: RunConfig = msgspec.field(default_factory=RunConfig)
    windows: list[Window] = []
    inputs: Inputs = msgspec.field(default_factory=Inputs)
    diagnosis: Diagnosis = msgspec.field(default_factory=Diagnosis)
    merge: MergeInfo | None = None  # set on a report `commscope merge` made of shard reports
    provenance: Provenance | None = None  # version, time, inputs and command line (the shell's)
    # Which input format gave each section (section key -> source, or n/a with the reason);
    # empty when every section comes from Kineto traces alone.
    sources: dict[str, str] = {}
    # NCCL Inspector logs beside the same job's Kineto traces: their own sections, apart (the
    # same collectives are in both: never added to the sections above)
    inspector: Sections | None = None


class StepTest(msgspec.Struct, kw_only=True):
    """Run B's step times against run A's (`commscope diff`): Welch's two-sided t-test,
    decided at `alpha`. t, df and p_value are None with too few steps (`reason` says why)."""

    mean_a_s: float | None = None
    mean_b_s: float | None = None
    change: float | None = None  # (mean_b - mean_a) / mean_a
    t: float | None = None
    df: float | None = None
    p_value: float | None = None
    reason: str | None = None
    steps: tuple[int, int] = (0, 0)
    alpha: float = 0.05
    significant: bool = False
    worse: bool = False  # significant, and B slower: the regression gate


class JobDifference(msgspec.Struct, frozen=True, array_like=True):
    what: str
    a: str
    b: str


class RunComparison(msgspec.Struct, kw_only=True):
    """What makes two reports different jobs, and whether the step time changed."""

    differences: list[JobDifference] = []
    step_time: StepTest = msgspec.field(default_factory=StepTest)


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


class StreamStart(msgspec.Struct, frozen=True, kw_only=True, tag="start"):
    """Record 0 of a stream: which file it is (`folder` relative to the watched root)."""

    stream: StreamId
    seq: Seq = 0
    node: NodeName
    path: Name
    folder: Name  # "." for the root itself
    root_name: Name
    name_rank: Rank | None = None


class Batch(msgspec.Struct, frozen=True, kw_only=True, tag="batch"):
    """Protocol 4's record: a file's events as read. Protocol 5 ships `Facts` instead; the
    aggregator refuses a Batch (reason "protocol"), and an aggregator's log holding one (kept
    before an upgrade) replays only up to it: the collector is told to send the rest again."""

    stream: StreamId
    seq: Seq
    events: Annotated[list[Event], msgspec.Meta(max_length=MAX_BATCH_EVENTS)]


class StreamEnd(msgspec.Struct, frozen=True, kw_only=True, tag="end"):
    """The last record: the file's metadata and counters, or why it cannot be used."""

    stream: StreamId
    seq: Seq
    meta: TraceMeta = TraceMeta()
    stats: FileStats = msgspec.field(default_factory=FileStats)
    size_bytes: Count = 0
    error: Text | None = None
    lost: bool = False  # every read of the file failed (`error` says why): a file lost


# Where a GPU activity's time is summed (`RankResult.kernel_ns` keys).
GpuTimeKey = Literal[
    "gemm",
    "attention",
    "elementwise",
    "reduction",
    "other",
    "memcpy",
    "memset",
    "communication",
    "fused",
]
RunsName = Literal["compute", "gpu_comm", "cpu_comm", "copies"]
MAX_FACT_ITEMS: Final = MAX_BATCH_EVENTS  # runs, threads, steps and calls in one `Facts`
RUN_BYTES: Final = 16  # one run: start and end, little-endian int64
Runs = Annotated[bytes, msgspec.Meta(max_length=MAX_FACT_ITEMS * RUN_BYTES)]
ThreadRuns = Annotated[dict[int, Runs], msgspec.Meta(max_length=MAX_FACT_ITEMS)]


class Facts(msgspec.Struct, frozen=True, kw_only=True, tag="facts"):
    """Part of what one finished file comes to (protocol 5: the collector reduces the file,
    `pipeline.edge`): interval unions as runs (disjoint, sorted, packed `RUN_BYTES` a run),
    per thread the cpu_op time (`busy`) and the time inside collective calls (`call_time`),
    the kept ProfilerSteps, the collectives themselves (their tallies follow from them), and
    sums. A file's facts span as many records as the bound `MAX_FACT_ITEMS` needs; absorbed
    in any split they give the same `RankResult` as the file's events."""

    stream: StreamId
    seq: Seq
    runs: dict[RunsName, Runs] = {}
    busy: ThreadRuns = {}
    call_time: ThreadRuns = {}
    steps: Annotated[list[Step], msgspec.Meta(max_length=MAX_FACT_ITEMS)] = []
    calls: Annotated[list[CommOp], msgspec.Meta(max_length=MAX_FACT_ITEMS)] = []
    kernel_ns: dict[GpuTimeKey, int] = {}
    has_gpu: bool = False
    memory_peak_bytes: int | None = None
    memory_reserved_peak_bytes: int | None = None
    call_starts: bool = True  # False: the calls' starts are unknown (a tailed Inspector log
    # written without NCCL_INSPECTOR_DUMP_VERBOSE): no skew is read from them (protocol 6)
    covers: Annotated[int, msgspec.Meta(ge=1, le=MAX_FACT_ITEMS)] = 1  # the seqs it takes: a
    # tailed Inspector log numbers its ops (1, 2, …) and a record of ops k … k+c-1 is seq k
    # covering c, so the numbering is the file's whatever the records' cuts (protocol 7)
    kernel_names: Annotated[list[KernelTime], msgspec.Meta(max_length=MAX_FACT_ITEMS)] = []
    launches: LaunchTally | None = None  # checked by `pipeline.edge.well_formed` (protocol 9)


Record = StreamStart | Facts | StreamEnd


class CollectorStats(msgspec.Struct, kw_only=True):
    """A collector's own counters, relayed in heartbeats (exported with a `node` label)."""

    files_seen: Count = 0
    files_done: Count = 0
    files_skipped: Count = 0
    events_read: Count = 0
    batches_sent: Count = 0
    batches_resent: Count = 0
    batches_acked: Count = 0
    unacked: Count = 0
    unacked_bytes: Count = 0
    lag_s: Annotated[float, msgspec.Meta(ge=0, le=1e9)] = 0.0  # finite: inf and NaN refused
    dropped: dict[DropReason, Count] = {}
    read_failures: dict[ReadFailure, Count] = {}  # reads of a file that failed (read again)
    files_lost: dict[ReadFailure, Count] = {}  # files every read of which failed, by the last


class Hello(msgspec.Struct, frozen=True, kw_only=True, tag="hello"):
    protocol: Annotated[int, msgspec.Meta(ge=0, le=2**31)]
    node: NodeName
    instance: Instance


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True, tag="heartbeat"):
    node: NodeName
    stats: CollectorStats


class EndOfRun(msgspec.Struct, frozen=True, kw_only=True, tag="end_of_run"):
    """This node's part of the run is over; every stream it opened has ended. `instance` is
    the sending collector's (its first end-of-run goes without a Hello, and may reach an
    aggregator that never had one from it: restarted since)."""

    node: NodeName
    reason: Text = ""
    instance: Instance | None = None


ToAggregator = Hello | StreamStart | Batch | StreamEnd | Heartbeat | EndOfRun | Facts


class Welcome(msgspec.Struct, frozen=True, kw_only=True, tag="welcome"):
    protocol: int
    instance: str
    credit: int


class Ack(msgspec.Struct, frozen=True, kw_only=True, tag="ack"):
    """Records below `next_seq` of `stream` are durable; `done`: the stream has ended."""

    stream: str
    next_seq: int
    done: bool = False
    credit: int = 0


class RunAck(msgspec.Struct, frozen=True, kw_only=True, tag="run_ack"):
    node: str


class Reject(msgspec.Struct, frozen=True, kw_only=True, tag="reject"):
    reason: str


ToCollector = Welcome | Ack | RunAck | Reject


class Head(msgspec.Struct, kw_only=True):
    """A message read without the rest of it: its kind, and a record's stream and seq. The
    aggregator decodes this first, and the whole message only when it will apply it."""

    type: Literal["hello", "start", "batch", "end", "heartbeat", "end_of_run", "facts"]
    stream: StreamId | None = None
    seq: Seq = 0
    protocol: int | None = None  # a Hello's: another version is refused before the rest


# ---------------------------------------------------------------- aggregator state
#
# The aggregator's state folder (`pipeline.store`): `version.msgpack` (a `StateVersion`: the
# format of everything beside it; a folder without one is version 1), `done/<stream>.msgpack`
# (a `FinishedFile`), `nodes.msgpack` (`Nodes`), `retired.msgpack` (`Retired`), and the open
# streams' logs (the wire records as received). Version 1 held the same structs, unchecked,
# and bandwidth samples as lists of floats; `pipeline.store` migrates it explicitly.


class StateVersion(msgspec.Struct, kw_only=True):
    version: int


Nodes = dict[NodeName, bool]  # each collector seen -> whether it has sent end-of-run
EndedBy = dict[NodeName, Instance]  # each ended node -> the collector instance that ended it
Retired = list[StreamId]  # superseded streams


class RunEnd(msgspec.Struct, kw_only=True):
    """`ended.msgpack`: the run is over and its final reports are written. An aggregator
    started again on this state folder writes nothing and exits as the run did (its code
    follows from `lost`)."""

    reports: list[str]  # the final reports' paths
    lost: list[str] = []  # what never finished (the aggregator's `lost`)
    generated_utc: str = ""  # when the reports were written (ISO 8601)


# What a frame of the aggregator's journal says about `stream` (state version 3).
JournalKind = Literal["record", "finished", "forget", "forget_log"]


class JournalEntry(msgspec.Struct, array_like=True, frozen=True):
    """One frame of the aggregator's journal: a record of an open stream as received
    (`data`), a finished file's result (`data`: a msgpack `FinishedFile`), or that the
    stream's records and result ("forget") or only its records ("forget_log") are gone."""

    kind: JournalKind
    stream: StreamId
    data: bytes = b""


class FinishedFile(msgspec.Struct, kw_only=True):
    """One trace stream the aggregator has seen end: its result, or why it is unusable.
    Persisted by the aggregator, so a restart keeps every finished file."""

    stream: str
    node: str
    path: str
    folder: str
    root_name: str
    name_rank: int | None = None
    next_seq: int = 0
    size_bytes: int = 0
    meta: TraceMeta = TraceMeta()
    stats: FileStats = msgspec.field(default_factory=FileStats)
    result: RankResult | None = None
    error: str | None = None
    lost: bool = False  # its collector could not read it (StreamEnd.lost)


class AggregatorStats(msgspec.Struct, kw_only=True):
    """The aggregator's own counters (exported as `commscope_aggregator_*`)."""

    messages: dict[str, int] = {}  # by kind
    events: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    rejected: dict[str, int] = {}  # by reason
    acks: int = 0
    log_bytes: int = 0
    window_latency_s: float | None = None
    refused: dict[str, int] = {}  # connections refused at the Curve handshake, by reason
    received_bytes: int = 0  # message payloads as received, refused ones included
    io_errors: dict[str, int] = {}  # I/O errors survived (retried), by where: loop, reports


# ---------------------------------------------------------------- collector state


class CheckpointEntry(msgspec.Struct, kw_only=True):
    """A file's checkpoint: its stream, how many leading bytes its fingerprint covers (fewer
    than 64 KiB when the file was shorter as its stream began), what the aggregator holds
    durably (`acked` records), and whether the stream has ended there (`done`)."""

    stream: str
    fingerprint_bytes: Count
    acked: Count = 0
    done: bool = False


class Checkpoint(msgspec.Struct, kw_only=True):
    """The collector's persisted state (version 1 was a bare map of path to entry)."""

    version: int = STATE_VERSION
    files: dict[str, CheckpointEntry] = {}
