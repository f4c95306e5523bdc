"""The report document (pure): what `commscope report` and the aggregator write, versioned
by `SCHEMA_VERSION`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import msgspec
from commscope.model.base import Evidence, evidence_in
from commscope.model.wire import (
    CommOp,
    FileStats,
    RankResult,
    Sketch,
    TraceMeta,
)

if TYPE_CHECKING:
    from commscope.model.frames import Frames

# The report document's version (what each version changed: CHANGELOG.md).
SCHEMA_VERSION: Final = 5


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
    # SendRecv calls paired across ranks: the k-th send from i to j with the k-th receive on j
    # from i (`pipeline.p2p`); unpaired: a call with no partner although both ranks are traced
    p2p_pairs: int = 0
    p2p_unpaired: int = 0
    p2p_desyncs: int = 0  # pairs whose message size or dtype differ (never paired)


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


class LinkCollective(msgspec.Struct, kw_only=True):
    """One collective type's instances on one link class (`pipeline.hosts`): their count, and
    over those of known size, Σ S·F and the bus bandwidth Σ S·F / Σ wait-free seconds (each
    instance's fastest member, as the α-β fit takes it), with the α-β fit pooled over groups."""

    instances: int = 0
    sized: int = 0
    bus_bytes: float | None = None  # Σ S·F over the sized instances (one member's)
    busbw_Bps: float | None = None
    peak_ratio: float | None = None  # busbw / the link's peak (None: peak unknown)
    fit: AlphaBeta | None = None


class LinkGroup(msgspec.Struct, kw_only=True):
    """One process group's instances of one collective type (`Links.by_group`): their count,
    and (S·F bytes, wait-free seconds) of each sized one, in no order: what `commscope merge`
    pools into the link classes exactly."""

    instances: int = 0
    points: list[tuple[float, float]] = []


class Link(msgspec.Struct, kw_only=True):
    """A link class: intra-node (NVLink / the host's fabric) or inter-node (the network)."""

    peak_Bps: float | None = None  # per direction
    peak_source: str = ""  # where the peak came from, or why it is unknown
    groups: list[str] = []  # the process groups whose instances use it
    collectives: dict[str, LinkCollective] = {}


class Links(msgspec.Struct, kw_only=True):
    """Which ranks share a host, and each collective instance split by whether its group stays
    on one node (intra-node) or crosses nodes (inter-node), each against its own link peak."""

    hosts: dict[str, str] = {}  # rank -> host
    host_sources: dict[str, str] = {}  # rank -> what gave its host
    groups: dict[str, str] = {}  # process group -> "intra_node" | "inter_node" | "unknown"
    intra_node: Link = msgspec.field(default_factory=Link)
    inter_node: Link = msgspec.field(default_factory=Link)
    unknown_instances: int = 0  # instances of groups whose locality is unknown
    na_reason: str | None = None  # why no instance could be placed (None: some were)
    # process group -> collective type -> its instances and points (what the classes pool)
    by_group: dict[str, dict[str, LinkGroup]] = {}


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


class AllToAllRank(msgspec.Struct, kw_only=True):
    """One rank's all-to-all-v traffic (`pipeline.alltoallv`): bytes it sent and received
    (its own slice included, as nccl-tests sizes a call) over the calls whose bytes are known."""

    calls: int = 0
    sent_bytes: int = 0
    received_bytes: int = 0


class AllToAllStep(msgspec.Struct, kw_only=True):
    """One profiled step's all-to-all-v calls: max/mean over ranks of each rank's bytes in
    the step (1 = balanced), and the rank that moved the most."""

    step: int
    calls: int = 0  # instances of known bytes (in the step of their lowest member's call)
    sent_imbalance: float | None = None
    received_imbalance: float | None = None
    busiest_rank: int | None = None


class AllToAllV(msgspec.Struct, kw_only=True):
    """All-to-all calls that recorded their split sizes (MoE token dispatch and combine):
    per-rank bytes, load imbalance (max/mean over ranks), busbw by the busiest rank, and the
    rank x rank traffic matrix summed over the run (row: sender, column: receiver)."""

    calls: int = 0  # matched instances with split sizes
    unknown_bytes: int = 0  # of those, calls whose bytes are unknown (splits cut, no row size)
    total_bytes: int = 0  # Σ bytes sent over ranks (own slices included)
    sent_imbalance: float | None = None  # over the run: max/mean of the ranks' bytes sent
    received_imbalance: float | None = None
    busiest_rank: int | None = None  # most bytes sent or received over the run
    call_sent_imbalance: Summary = msgspec.field(default_factory=Summary)  # over calls
    call_received_imbalance: Summary = msgspec.field(default_factory=Summary)
    busbw_Bps: Summary = msgspec.field(default_factory=Summary)  # per call, busiest rank
    per_rank: dict[str, AllToAllRank] = {}
    steps: list[AllToAllStep] = []
    matrix_ranks: list[int] = []  # the global ranks of the matrix's rows and columns
    matrix_bytes: list[list[int]] = []  # [i][j]: bytes matrix_ranks[i] sent to matrix_ranks[j]
    matrix_na_reason: str | None = None  # why some traffic is not in the matrix
    replay_bytes: int | None = None  # nccl-tests `-b`: n x the largest entry of a mean call


class PipelineRank(msgspec.Struct, kw_only=True):
    """One rank of a pipeline-parallel job within its profiled steps (s; see how-it-works.md):
    bubble = |S \\ (P ∪ T)|, the part the schedule implies = min(bubble, (p−1)/m x compute),
    the rest a slow neighbour adds; waiting is exposed waiting on its matched P2P calls."""

    stage: int | None = None
    step_span_s: float = 0.0
    compute_s: float = 0.0
    transfer_s: float = 0.0  # exposed transfer of its matched P2P calls
    bubble_s: float = 0.0
    schedule_bubble_s: float | None = None  # None: p or m unknown
    neighbour_bubble_s: float | None = None
    waiting_activations_s: float = 0.0  # receiving from the stage before it
    waiting_gradients_s: float = 0.0  # receiving from the stage after it
    waiting_to_send_s: float = 0.0  # its send posted before the neighbour's receive
    caused_waiting_s: float = 0.0  # exposed waiting of its neighbours on its calls
    pairs: int = 0
    # the exposed P2P waiting of any rank it caused at the root (`pipeline.rootcause`)
    root_caused_waiting_s: float = 0.0
    virtual_stages: list[int] = []  # the stages it holds (looped or V schedules; `virtual`)


class Pipeline(msgspec.Struct, kw_only=True):
    """Pipeline parallelism from matched P2P pairs (empty: the job has none)."""

    stages: int | None = None
    stage_source: str | None = None  # "config (...)" or "P2P pattern (...)"; None: unknown
    stage_issue: str | None = None  # why the ranks' stages are unknown
    microbatches: float | None = None  # activation sends of stage 0 per profiled step
    per_rank: dict[str, PipelineRank] = {}
    waited_for_stage: int | None = None
    waited_for_rank: int | None = None
    evidence: str | None = None
    # the schedule the bubble split assumes, and where it came from; its schedule bubbles are
    # null for a schedule whose formula commscope does not know (`pipeline.virtual`)
    schedule: str | None = None
    stages_per_rank: int | None = None  # v: 1, or the virtual stages each rank holds
    bubble_formula: str | None = None  # the schedule bubble's share of compute, and its source


class GraphStats(msgspec.Struct, kw_only=True):
    """CUDA graph launches of a rank, or of every rank, and the kernels they replayed
    (`pipeline.graphs`): each kernel attributed to the graph launch of its correlation id,
    or by its graph id alone when that launch is not in the trace (`unlaunched`)."""

    launches: int = 0  # graph launch calls (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch)
    call_time_s: float = 0.0  # their CPU time
    empty: int = 0  # launches with no kernel of their correlation in the trace
    empty_share: float | None = None  # of `launches`
    kernels: int = 0  # kernels replayed by a graph (launch or graph id)
    kernel_time_s: float = 0.0  # their Σ GPU time (streams may overlap)
    kernels_per_launch: float | None = None  # kernels of a launch / launches with kernels
    comm_kernels: int = 0  # communication kernels among them (the one family table)
    comm_time_s: float = 0.0
    unlaunched: int = 0  # kernels with a graph id whose launch call is not in the trace
    graphs: int = 0  # distinct graph ids recorded


class GraphReplays(msgspec.Struct, kw_only=True):
    """One graph's replays on one rank; `graph` None: ids not recorded, or beyond those kept."""

    graph: int | None = None
    launches: int = 0
    kernels: int = 0
    kernel_time_s: float = 0.0
    comm_kernels: int = 0
    comm_time_s: float = 0.0


class Graphs(msgspec.Struct, kw_only=True):
    """CUDA graphs: per rank and pooled over ranks, and each rank's graphs by id."""

    all_ranks: GraphStats | None = None
    per_rank: dict[str, GraphStats] = {}
    per_graph: dict[str, list[GraphReplays]] = {}  # rank -> its graphs, most GPU time first
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
    alltoallv: AllToAllV | None = None  # None: no all-to-all recorded its split sizes
    pipeline: Pipeline = msgspec.field(default_factory=Pipeline)
    graphs: Graphs = msgspec.field(default_factory=Graphs)


class ExposedSplit(msgspec.Struct, frozen=True, kw_only=True):
    """A rank's exposed communication |E| and its exposed transfer and waiting (ns), over its
    window(s) and within its profiled steps (`pipeline.waiting`); the rest is unmatched."""

    exposed_ns: int = 0
    transfer_ns: int = 0
    waiting_ns: int = 0
    exposed_in_steps_ns: int = 0
    transfer_in_steps_ns: int = 0
    waiting_in_steps_ns: int = 0


class AllToAllCall(msgspec.Struct, frozen=True, array_like=True):
    """One all-to-all call of a rank as `commscope merge` needs it (`pipeline.alltoallv`):
    the call as recorded, its place among its group's calls on the rank (the matching key
    when a group's calls do not all carry a Seq; `by_index`: not all of the rank's do) and
    the profiled step it starts in."""

    op: CommOp
    index: int
    by_index: bool = False
    step: int | None = None


class AllToAllCalls(msgspec.Struct, kw_only=True):
    """A rank's all-to-all calls in a window and the process groups' members its pg_config
    lists for their groups: what the all-to-all-v section of a merge is built from."""

    calls: list[AllToAllCall] = []
    members: dict[str, list[int]] = {}


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
    alltoallv: AllToAllCalls | None = None  # None: the rank ran no all-to-all in the window


class Window(Sections, kw_only=True):
    name: str
    facts: dict[str, RankFacts] = {}  # rank -> what `commscope merge` needs (schema 4 on)
    # the window's intra- vs inter-node section (`pipeline.hosts`, the run's hosts and peaks);
    # None on an open window, a report for /metrics alone, or one made before it
    links: Links | None = None


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
    # Intra- vs inter-node: hosts, and the instances split by link (`pipeline.hosts`); None on
    # a report made before it (a merged report's: `pipeline.linkmerge`)
    links: Links | None = None
    # PyTorch Flight Recorder dumps among the inputs (`pipeline.flight`); None: there were none
    flight_recorder: FlightRecorder | None = None
    # what each rank's profile saw last (`pipeline.tail`): what Flight Recorder dumps join
    profile_tails: list[RankTail] = []

    def frames(self) -> Frames:
        """This report's tables as pandas DataFrames (`model.frames`; needs pandas: the
        `pandas` extra)."""
        from commscope.model.frames import frames  # noqa: PLC0415 (pandas only when asked)

        return frames(self)


class ProfiledCall(msgspec.Struct, kw_only=True):
    """The last collective a rank's profile saw of one process group."""

    group: str | None  # None: its calls name no process group (gloo's spans)
    seq: int | None  # its `Seq` (Flight Recorder's collective_seq_id); None: not recorded
    collective: str
    end_ns: int | None  # aligned: the rank's clock (time base + trace time) less its offset
    step: int | None  # the profiled step holding its start
    message_bytes: int | None = None
    dtype: str | None = None


class RankTail(msgspec.Struct, kw_only=True):
    """What one rank's profile saw last: per process group its last collective, and its last
    profiled step against the other ranks' median of that step (the ranks that have it)."""

    rank: int
    calls: list[ProfiledCall] = []
    step: int | None = None
    step_s: float | None = None
    compute_s: float | None = None  # within that step: |P ∩ step|
    exposed_comm_s: float | None = None  # within that step: |(C \ P) ∩ step|
    others_median_s: float | None = None  # the other ranks' median duration of that step
    others: int = 0  # how many other ranks profiled that step


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


class FlightProgress(msgspec.Struct, kw_only=True):
    """A process group's progress on one rank, from its Flight Recorder dump: the last
    collective sequence id it enqueued, saw start and saw complete (None: none)."""

    group: str
    rank: int
    enqueued: int | None = None
    started: int | None = None
    completed: int | None = None
    last_op: str | None = None  # the type of its last enqueued collective, where in its buffer


class FlightStuck(msgspec.Struct, kw_only=True):
    """A rank that never joined a collective the others of its group entered."""

    group: str
    desc: str  # the group's description (e.g. default_pg)
    rank: int
    after_seq: int | None  # the last collective it enqueued (None: none)
    after_op: str | None  # its type, where a buffer holds it
    missed_seq: int  # the first collective it never joined
    missed_op: str | None
    entered_by: list[int] = []  # the ranks that enqueued that collective


class FlightMismatch(msgspec.Struct, kw_only=True):
    """One collective whose members disagree: `rank` enqueued `found` where
    `reference_rank` (the lowest rank holding it) enqueued `expected`."""

    group: str
    seq: int
    kind: str  # type, size or dtype
    rank: int
    found: str
    reference_rank: int
    expected: str
    stack: list[str] = []  # where `rank` issued it, innermost first ("name (file:line)")


class FlightDuration(msgspec.Struct, kw_only=True):
    """The timed entries of one collective type in one group (timing enabled), all ranks."""

    group: str
    collective: str
    count: int
    total_ms: float
    max_ms: float


class FlightJoin(msgspec.Struct, kw_only=True):
    """A stuck rank joined with what its profile saw last: "rank R stopped after AllReduce #N
    of group G; its last profiled step shows …" (`exporters.flighttext.join_sentence`)."""

    rank: int
    group: str
    after_seq: int | None  # the last collective of the group it enqueued (the dump's)
    after_op: str | None
    profiled: bool = False  # a profile of the rank is beside the dumps
    # the profile's last collective of the group ("same": it is the dump's last; "earlier":
    # the profile ended before it; "later": the profile saw a later one; "unnumbered": its calls
    # name no group or sequence; "none": it saw no collective of the group)
    profile_seq: int | None = None
    profile_op: str | None = None
    agreement: str = "none"
    behind_s: float | None = None  # its end before the latest any rank's profile saw (aligned)
    step: int | None = None  # its last profiled step
    step_s: float | None = None
    others_median_s: float | None = None
    compute_s: float | None = None
    exposed_comm_s: float | None = None


class FlightDisagreement(msgspec.Struct, kw_only=True):
    """One rank's collective (group, seq) as its profile recorded it and as its dump did."""

    rank: int
    group: str
    seq: int
    kind: str  # type, size or dtype
    profile: str
    dump: str


class FlightRecorder(msgspec.Struct, kw_only=True):
    """What PyTorch Flight Recorder dumps say (`pipeline.flight`): per process group the
    progress of each rank, the stuck ranks, mismatched collectives and timed entries."""

    dumps: int = 0
    ranks: list[int] = []
    versions: list[str] = []
    groups: dict[str, str] = {}  # group name -> description
    progress: list[FlightProgress] = []
    stuck: list[FlightStuck] = []
    mismatches: list[FlightMismatch] = []  # the first `MAX_MISMATCHES`, in group and seq order
    mismatch_count: int = 0
    undumped: dict[str, list[int]] = {}  # group -> members (pg_config) without a dump
    durations: list[FlightDuration] = []  # empty: timing was not enabled
    joined: list[FlightJoin] = []  # each stuck rank joined with its profile (`pipeline.flightjoin`)
    disagreements: list[FlightDisagreement] = []  # profile and dump of one (group, seq) differ
