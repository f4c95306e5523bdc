"""Events, per-rank results and the wire protocol (pure): what a collector reads a trace into
and sends the aggregator, versioned together by `PROTOCOL_VERSION`."""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec
from commscope.model.base import (
    MAX_BATCH_EVENTS,
    MAX_GROUPS,
    MAX_LOOKALIKES,
    MAX_RANKS,
    CollectiveType,
    Count,
    DropReason,
    EventDropReason,
    Evidence,
    GpuKind,
    GroupSource,
    Instance,
    KernelCategory,
    Label,
    Name,
    NodeName,
    Rank,
    ReadFailure,
    Seq,
    Source,
    Splits,
    StreamId,
    Text,
    WorldSize,
    evidence_in,
)

# A Hello of another version is refused (what each version changed: CHANGELOG.md).
PROTOCOL_VERSION: Final = 14
MAX_NICS: Final = 64  # network interfaces a trace names (`TraceMeta.nics`)
MAX_TAIL_CALLS: Final = 1024  # process groups a rank's `ProfileTail` keeps (the latest-ending)


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
    # the host the rank ran on, where the file records it (Nsight Systems' Hostname, NCCL
    # Inspector's metadata.hostname); None: not recorded (Kineto traces record none)
    host: Label | None = None
    # the network interfaces the file names, as PCI ids `vendor:device` (4 hex digits each, as
    # `lspci -n` prints them; Nsight Systems' TARGET_INFO_NIC_INFO), sorted, each once
    nics: Annotated[list[Label], msgspec.Meta(max_length=MAX_NICS)] = []


class GpuOp(msgspec.Struct, frozen=True, gc=False, tag="gpu", array_like=True):
    """A non-communication GPU activity: a compute kernel, a memcpy, a memset, or a fused kernel
    (computes and communicates: counted in neither union)."""

    kind: GpuKind
    start_ns: int
    dur_ns: int
    category: KernelCategory | None = None  # a compute kernel's


class P2PMember(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One send or receive of a batched SendRecv kernel (`batch_isend_irecv`, an NCCL group
    that sends and receives): its peer as `CommOp` names one, and its size."""

    send_to: Rank | None = None
    recv_from: Rank | None = None
    group_send_to: Rank | None = None
    group_recv_from: Rank | None = None
    message_bytes: Count | None = None


MAX_MEMBERS: Final = 256  # members a batched call keeps; a larger batch keeps none (unpaired)


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
    # a SendRecv call's peer (global rank) and direction: which of the two is set says which
    send_to: Rank | None = None
    recv_from: Rank | None = None
    # the same within the call's process group (communicator) when the source names only
    # group ranks (NCCL's payloads, Inspector's p2p_peer): this rank's group rank and the
    # peer's; the report maps them to global ranks across ranks (`pipeline.p2pranks`)
    group_rank: Rank | None = None
    group_send_to: Rank | None = None
    group_recv_from: Rank | None = None
    # a batched kernel's sends and receives when it has no single peer (each paired alone:
    # `pipeline.p2pranks` expands them for the pairing; the call itself is tallied once)
    members: Annotated[tuple[P2PMember, ...], msgspec.Meta(max_length=MAX_MEMBERS)] = ()


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


_GraphId = Annotated[int, msgspec.Meta(ge=1, le=2**62)]
MAX_GRAPHS: Final = 1024  # graph ids a rank's tally keeps (`collector.graphs.GRAPHS`)


class GraphRow(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One CUDA graph's replays (`collector.graphs`): the graph launch calls whose kernels
    carry its id, the kernels and their Σ duration, the communication kernels among them and
    theirs. `graph` None: kernels whose id is not recorded (no `graph id` arg, graphId 0 or
    NULL), or of graphs beyond the MAX_GRAPHS kept, summed."""

    graph: _GraphId | None
    launches: Count = 0
    kernels: Count = 0
    kernel_ns: Count = 0
    comm_kernels: Count = 0
    comm_ns: Count = 0


class GraphTally(msgspec.Struct, frozen=True, kw_only=True, tag="graphs", array_like=True):
    """A file's or a rank's CUDA graph launches (cudaGraphLaunch, cuGraphLaunch,
    hipGraphLaunch and their variants) and the kernels attributed to them, by correlation id
    and by graph id (`collector.graphs`); mergeable (`pipeline.graphs.merge`)."""

    launches: Count = 0  # graph launch calls
    call_ns: Count = 0  # Σ their durations (CPU)
    empty: Count = 0  # of those, launches with no kernel of their correlation in the trace
    unlaunched: Count = 0  # kernels with a graph id whose launch call is not in the trace
    rows: Annotated[list[GraphRow], msgspec.Meta(max_length=MAX_GRAPHS + 1)] = []  # by graph


Event = GpuOp | CommOp | Step | CpuSpan | MemoryPeak | KernelTime | LaunchDelays | GraphTally


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


class LastCall(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """The last collective a rank's profile saw of one process group (`pipeline.tail`)."""

    group: Label | None  # None: the calls that name no process group (gloo's spans)
    seq: Seq | None  # the call's `Seq` (Flight Recorder's collective_seq_id); None: unknown
    collective: CollectiveType
    end_ns: int  # on the trace's own clock
    step: int | None = None  # the profiled step holding its start (None: outside every step)
    message_bytes: Count | None = None
    dtype: Label | None = None


class ProfileTail(msgspec.Struct, frozen=True, kw_only=True):
    """What a rank's profile saw last (`pipeline.tail`): per process group its last collective,
    and its last profiled step with that step's compute and exposed communication (ns)."""

    calls: Annotated[list[LastCall], msgspec.Meta(max_length=MAX_TAIL_CALLS)] = []
    step: int | None = None  # the highest ProfilerStep number (None: no step)
    step_ns: Count = 0
    compute_ns: Count = 0  # |P ∩ step|
    exposed_ns: Count = 0  # |(C \ P) ∩ step|


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
    # ProfilerStep number -> its start (ns, the trace's own clock): the window's own, to place
    # its calls in steps (`pipeline.alltoallv`); empty once merged
    step_starts: dict[int, int] = {}
    graphs: GraphTally | None = None  # None: no CUDA graph launch or graph kernel recorded
    tail: ProfileTail | None = None  # what the profile saw last (None: kept before it was)

    @property
    def evidence(self) -> frozenset[Evidence]:
        return evidence_in(self.evidence_text)


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
FLIGHT_PART_BYTES: Final = 2**20  # of a Flight Recorder dump in one `Facts` (a message: 2 MiB)
MAX_FACT_ITEMS: Final = MAX_BATCH_EVENTS  # runs, threads, steps and calls in one `Facts`
RUN_BYTES: Final = 16  # one run: start and end, little-endian int64
Runs = Annotated[bytes, msgspec.Meta(max_length=MAX_FACT_ITEMS * RUN_BYTES)]
ThreadRuns = Annotated[dict[int, Runs], msgspec.Meta(max_length=MAX_FACT_ITEMS)]


class Facts(msgspec.Struct, frozen=True, kw_only=True, tag="facts"):
    """Part of what one finished file comes to (protocol 5: the collector reduces the file,
    `pipeline.edge`): interval unions as runs (disjoint, sorted, packed `RUN_BYTES` a run),
    per thread the cpu_op time (`busy`) and the time inside collective calls (`call_time`),
    the kept ProfilerSteps, the collectives with their tallies by type (protocol 14), and sums.
    A file's facts span as many records as the bound `MAX_FACT_ITEMS` needs; absorbed
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
    graphs: GraphTally | None = None  # CUDA graph launches and their kernels
    # a part of a Flight Recorder dump (`model.flight.FlightDump`, msgpack-encoded): a dump's
    # stream carries it in order, over as many records as its length needs (protocol 13)
    flight: Annotated[bytes, msgspec.Meta(max_length=FLIGHT_PART_BYTES)] = b""
    # this record's calls counted by type, on the GPU and on the CPU (`accumulate.tallies`),
    # so the aggregator adds tallies, not calls; none: it counts the calls itself. Checked by
    # `pipeline.edge.well_formed`: exactly the calls' types and counts, sums within bounds,
    # samples finite (protocol 14)
    gpu_ops: dict[CollectiveType, OpTally] = {}
    cpu_ops: dict[CollectiveType, OpTally] = {}


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
