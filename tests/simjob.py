"""A simulated TorchTitan-like job: the Kineto traces of R ranks over W profiling windows (pure,
but for `write_trace` and `write_job`, which write the files).

Parallelism is laid out as TorchTitan's DeviceMesh lays it out, dims (pp, dp_shard, tp) with tp
innermost: rank = (stage x dp + dp index) x tp + tp index. A TP group is `tp` consecutive ranks
(one node's GPUs when tp = 8), an FSDP group the ranks of one stage with the same tp index, a PP
group one rank per stage. Process groups are named as PyTorch names them: "0" is the world, then
every subgroup of each mesh dim, in creation order (pp, dp_shard, tp), takes the next number, so
every rank set has its own name; each rank's `distributedInfo.pg_config` lists its groups with
their ranks (as in real traces), and every call carries its group's name, ranks, size and `Seq`.

Time: every rank of a pipeline stage follows one nominal schedule per step (`stage_plan`). At a
collective, rank r arrives at the nominal time plus a jitter below `jitter_us` (a hash of the
seed, rank, step and slot: any member's arrival is known without simulating it), and the
collective ends for every member at the last arrival plus α + S·F/β. FSDP's all-gathers and
reduce-scatters run on their own stream inside a GEMM (wholly overlapped); TP's and PP's run in
gaps of the compute stream (wholly exposed); an all-reduce of the gradient norm over the world
ends each step, then the optimizer's kernels. PP's send/recv are not scheduled against their
peer stage (a simulation, not a pipeline schedule): commscope counts them, it does not match
them. Each node's clock is offset by up to 400 µs. `expected` gives what the traces hold by
construction: per rank and window |C|, |C ∩ P| and the calls by type.

Events are written in Kineto's indented layout (one event per block, the reader's fast path):
per collective a `record_param_comms` cpu_op enclosing its `cudaLaunchKernel`, and the NCCL
kernel with the collective args (as recent PyTorch copies them); per compute kernel an aten
op and its launch; `filler` python_function spans after each launch (the size knob: real
traces are mostly such CPU events); a `[memory]` event and a `ProfilerStep#N` span per step.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from typing import Any, Final

from commscope.model.bus import bus_factor

GPUS_PER_NODE: Final = 8
US: Final = 1_000  # ns
BASE_TIME_NS: Final = 1_767_225_600_000_000_000
T0_NS: Final = 5_000_000_000  # the first window's first step on the trace clock
WINDOW_EVERY_NS: Final = 60_000_000_000
LEAD_NS: Final = 300 * US  # the CPU launches this far ahead of the GPU
STEP_GAP_NS: Final = 100 * US
MARGIN_NS: Final = 30 * US  # around every collective, between it and compute
FILLER_SPAN_NS: Final = 18 * US  # the filler spans after a launch fit in this
MAX_CLOCK_OFFSET_NS: Final = 400 * US
GPU_NAME: Final = "NVIDIA H100 80GB HBM3"
COMPUTE_STREAM: Final = 7
STREAMS: Final = {"dp": 20, "world": 20, "tp": 24, "pp": 28}
PID: Final = 4242

GEMM_NS: Final = 2_000 * US
ATTENTION_NS: Final = 900 * US
NORM_NS: Final = 120 * US
ADAMW_NS: Final = 300 * US
OPTIMIZER_KERNELS: Final = 4
LAYER_PARAMS: Final = 26 * 2**20  # one TP shard of a layer's weights, elements
ACTIVATION: Final = 8192 * 4096  # sequence x hidden of a microbatch, elements
ALPHA_NS: Final = 15 * US
BANDWIDTH_Bps: Final = {"tp": 360e9, "dp": 45e9, "pp": 45e9, "world": 45e9}
DTYPE_BYTES: Final = {"BFloat16": 2, "Float": 4}

KERNELS: Final = {
    "gemm": (
        "aten::mm",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64_warpgroupsize2x1x1_"
        "execute_segment_k_off_kernel__5x_cublas",
    ),
    "attention": (
        "aten::_flash_attention_forward",
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, "
        "false, cutlass::bfloat16_t>, false, true, false, false, true, true, false>"
        "(Flash_fwd_params)",
    ),
    "attention_bwd": (
        "aten::_flash_attention_backward",
        "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits"
        "<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>, true, false, false>"
        "(Flash_bwd_params)",
    ),
    "norm": (
        "aten::mul",
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<c10::"
        "BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float>>, "
        "std::array<char*, 3ul>>(int, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
        "c10::BFloat16, at::native::binary_internal::MulFunctor<float>>, std::array<char*, 3ul>)",
    ),
    "adamw": (
        "aten::_fused_adamw_",
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous "
        "namespace)::FusedAdamMathFunctor<float, 4, (at::native::ADAM_MODE)1, false>>",
    ),
}
NCCL: Final = {  # collective type -> the NCCL kernel that runs it
    "AllGather": "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ReduceScatter": (
        "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    ),
    "AllReduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "SendRecv": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
}


@dataclass(frozen=True)
class Job:
    """The simulated job's shape. `layers`: transformer blocks per pipeline stage; `steps`:
    ProfilerSteps per window; `filler`: CPU spans after each launch (the per-rank size knob);
    `gzip_every`: every k-th rank writes `.json.gz` (0: none)."""

    ranks: int
    tp: int = 8
    pp: int = 2
    layers: int = 4
    steps: int = 2
    windows: int = 2
    filler: int = 24
    gzip_every: int = 4
    jitter_us: int = 30
    seed: int = 0
    gpus_per_node: int = GPUS_PER_NODE

    def __post_init__(self) -> None:
        if self.ranks < 1 or self.ranks % (self.tp * self.pp):
            raise ValueError(f"{self.ranks} ranks is not a multiple of tp x pp")

    @property
    def dp(self) -> int:
        return self.ranks // (self.tp * self.pp)

    @property
    def jitter_ns(self) -> int:
        return self.jitter_us * US


@dataclass(frozen=True)
class Group:
    name: str
    desc: str
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Comm:
    """A collective of the plan: its mesh dim, type, the args' name and message."""

    dim: str  # "tp" | "dp" | "pp" | "world"
    kind: str  # the contract's type: AllGather, ReduceScatter, AllReduce, SendRecv
    name: str  # the `Collective name` arg
    in_nelems: int
    out_nelems: int
    dtype: str = "BFloat16"


@dataclass(frozen=True)
class Slot:
    """One GPU op of a stage's step at `at_ns` after the step's start: a compute kernel
    (`kernel` a KERNELS key, `dur_ns` its duration) or a collective (`dur_ns` its work)."""

    at_ns: int
    dur_ns: int
    kernel: str = ""
    comm: Comm | None = None


# ---------------------------------------------------------------- the mesh and its groups


def coords(job: Job, rank: int) -> tuple[int, int, int]:
    """(stage, dp index, tp index) of `rank`."""
    rest, tp_i = divmod(rank, job.tp)
    stage, dp_i = divmod(rest, job.dp)
    return stage, dp_i, tp_i


def rank_of(job: Job, stage: int, dp_i: int, tp_i: int) -> int:
    return (stage * job.dp + dp_i) * job.tp + tp_i


def groups(job: Job, rank: int) -> dict[str, Group]:
    """The rank's process groups by mesh dim ("world", "pp", "dp", "tp")."""
    stage, dp_i, tp_i = coords(job, rank)
    pp_base, dp_base = 1, 1 + job.dp * job.tp
    tp_base = dp_base + job.pp * job.tp
    pp = tuple(rank_of(job, s, dp_i, tp_i) for s in range(job.pp))
    dp = tuple(rank_of(job, stage, d, tp_i) for d in range(job.dp))
    tp = tuple(rank_of(job, stage, dp_i, t) for t in range(job.tp))
    return {
        "world": Group("0", "default_pg", tuple(range(job.ranks))),
        "pp": Group(str(pp_base + dp_i * job.tp + tp_i), "mesh_pp", pp),
        "dp": Group(str(dp_base + stage * job.tp + tp_i), "mesh_dp_shard", dp),
        "tp": Group(str(tp_base + stage * job.dp + dp_i), "mesh_tp", tp),
    }


def group_names(job: Job) -> set[str]:
    """Every group's name (each rank set's own)."""
    return {g.name for rank in range(job.ranks) for g in groups(job, rank).values()}


def node_of(job: Job, rank: int) -> int:
    return rank // job.gpus_per_node


def clock_offset_ns(job: Job, node: int) -> int:
    """The node's clock against node 0's (0 for node 0)."""
    return 0 if node == 0 else _hash(job.seed, node, 7, 11) % MAX_CLOCK_OFFSET_NS


def _hash(*parts: int) -> int:
    h = 0x811C9DC5
    for part in parts:
        h = ((h ^ (part & 0xFFFFFFFF)) * 0x01000193) & 0xFFFFFFFF
        h ^= h >> 13
        h = (h * 0x5BD1E995) & 0xFFFFFFFF
        h ^= h >> 15
    return h


def jitter_ns(job: Job, rank: int, step: int, slot: int) -> int:
    return _hash(job.seed, rank, step, slot) % (job.jitter_ns + 1)


# ---------------------------------------------------------------- a stage's step


def work_ns(comm: Comm, size: int) -> int:
    """α + S·F/β: how long the collective runs once every member has arrived."""
    nbytes = max(comm.in_nelems, comm.out_nelems) * DTYPE_BYTES[comm.dtype]
    factor = bus_factor(comm.kind, size) or 1.0
    return ALPHA_NS + round(nbytes * factor / BANDWIDTH_Bps[comm.dim] * 1e9)


def dim_size(job: Job, dim: str) -> int:
    return {"tp": job.tp, "dp": job.dp, "pp": job.pp, "world": job.ranks}[dim]


@dataclass
class _Plan:
    job: Job
    at: int = 0
    slots: list[Slot] = field(default_factory=list)

    def compute(self, kernel: str, dur: int, inside: Comm | None = None) -> None:
        """A compute kernel; `inside`: a collective wholly overlapped by it."""
        self.slots.append(Slot(self.at, dur, kernel))
        if inside is not None and dim_size(self.job, inside.dim) > 1:
            work = work_ns(inside, dim_size(self.job, inside.dim))
            if 2 * MARGIN_NS + self.job.jitter_ns + work > dur:
                raise ValueError(f"{inside.name} does not fit inside {kernel}")
            self.slots.append(Slot(self.at + MARGIN_NS, work, comm=inside))
        self.at += dur

    def exposed(self, comm: Comm) -> None:
        """A collective in a gap of the compute stream (skipped in a group of one)."""
        size = dim_size(self.job, comm.dim)
        if size > 1:
            work = work_ns(comm, size)
            self.slots.append(Slot(self.at + MARGIN_NS, work, comm=comm))
            self.at += 2 * MARGIN_NS + self.job.jitter_ns + work

    def layer(self, backward: bool) -> None:
        """A transformer block: FSDP gathers its weights inside the first GEMM (and scatters
        its gradients inside the last, backward); TP's sequence-parallel gather and scatter
        sit between GEMMs and attention."""
        job, x, act = self.job, 2 if backward else 1, ACTIVATION
        gather = Comm("dp", "AllGather", "_allgather_base", LAYER_PARAMS // job.dp, LAYER_PARAMS)
        scatter = Comm(
            "dp", "ReduceScatter", "_reduce_scatter_base", LAYER_PARAMS, LAYER_PARAMS // job.dp
        )
        self.compute("gemm", x * GEMM_NS, inside=gather)
        self.exposed(Comm("tp", "AllGather", "_allgather_base", act // job.tp, act))
        self.compute("attention_bwd" if backward else "attention", x * ATTENTION_NS)
        self.exposed(Comm("tp", "ReduceScatter", "_reduce_scatter_base", act, act // job.tp))
        self.compute("gemm", x * GEMM_NS, inside=scatter if backward else None)
        self.compute("norm", NORM_NS)

    def p2p(self, name: str) -> None:
        shard = ACTIVATION // self.job.tp
        self.exposed(Comm("pp", "SendRecv", name, shard, shard))


def _body(job: Job, stage: int) -> _Plan:
    """The stage's step up to the world all-reduce: a stage after the first receives
    activations first and sends gradients last; one before the last sends activations and
    receives gradients between its forward and backward."""
    plan = _Plan(job)
    if stage > 0:
        plan.p2p("recv")
    for _ in range(job.layers):
        plan.layer(backward=False)
    if stage < job.pp - 1:
        plan.p2p("send")
        plan.p2p("recv")
    for _ in range(job.layers):
        plan.layer(backward=True)
    if stage > 0:
        plan.p2p("send")
    return plan


@cache
def stage_plan(job: Job, stage: int) -> tuple[tuple[Slot, ...], int]:
    """The stage's slots in one step, and the step's length (ns). Every stage reaches the
    world all-reduce at the same offset (stages with fewer p2p calls wait)."""
    plan = _body(job, stage)
    plan.at = max(_body(job, s).at for s in range(job.pp))
    plan.exposed(Comm("world", "AllReduce", "allreduce", 1, 1, "Float"))
    for _ in range(OPTIMIZER_KERNELS):
        plan.compute("adamw", ADAMW_NS)
    return tuple(plan.slots), plan.at


def calls_per_step(job: Job, stage: int) -> Counter[str]:
    """The stage's collectives in one step, by mesh dim."""
    return Counter(s.comm.dim for s in stage_plan(job, stage)[0] if s.comm is not None)


def step_every_ns(job: Job) -> int:
    return stage_plan(job, 0)[1] + LEAD_NS + STEP_GAP_NS


def step_start_ns(job: Job, window: int, step: int) -> int:
    """The true time the window's `step`-th step starts on the GPUs."""
    return T0_NS + window * WINDOW_EVERY_NS + step * step_every_ns(job)


def folder(job: Job, window: int) -> str:
    """TorchTitan's folder for the window: named after its last step."""
    return f"iteration_{(window + 1) * job.steps}"


def file_name(job: Job, rank: int) -> str:
    gz = job.gzip_every and rank % job.gzip_every == job.gzip_every - 1
    return f"rank{rank}_trace.json" + (".gz" if gz else "")


def _jitter_key(slot: Slot, index: int) -> int:
    """Members of a world call sit at different slots of their stages: one key for them."""
    return -1 if slot.comm is not None and slot.comm.dim == "world" else index


@cache
def _last_arrival_ns(job: Job, members: tuple[int, ...], step: int, key: int) -> int:
    return max(jitter_ns(job, m, step, key) for m in members)


def comm_span_ns(job: Job, rank: int, gstep: int, index: int, slot: Slot) -> tuple[int, int]:
    """(arrival, end) of the rank's collective in the slot, after the step's start (true
    time): the end is the last member's arrival plus the work (p2p: its own arrival)."""
    assert slot.comm is not None
    key = _jitter_key(slot, index)
    arrive = slot.at_ns + jitter_ns(job, rank, gstep, key)
    if slot.comm.dim == "pp":
        return arrive, arrive + slot.dur_ns
    members = groups(job, rank)[slot.comm.dim].ranks
    return arrive, slot.at_ns + _last_arrival_ns(job, members, gstep, key) + slot.dur_ns


# ---------------------------------------------------------------- what the traces hold


@dataclass(frozen=True)
class Expected:
    """One rank's window by construction: |C|, |C ∩ P| (ns) and its calls by type."""

    comm_ns: int
    overlap_ns: int
    calls: Counter[str]


def expected(job: Job, window: int, rank: int) -> Expected:
    slots = stage_plan(job, coords(job, rank)[0])[0]
    comm = overlap = 0
    calls: Counter[str] = Counter()
    for k in range(job.steps):
        for index, slot in enumerate(slots):
            if slot.comm is None:
                continue
            start, end = comm_span_ns(job, rank, window * job.steps + k, index, slot)
            comm += end - start
            overlap += end - start if slot.comm.dim == "dp" else 0
            calls[slot.comm.kind] += 1
    return Expected(comm, overlap, calls)


# ---------------------------------------------------------------- the events


def _ranks_text(ranks: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, ranks)) + "]"


# A filler span as `trace_text` writes an event (json.dumps of its dict, in Kineto's block).
_FILLER: Final = (
    '  {\n    "ph": "X", "cat": "python_function", "name": "torch/nn/modules/module.py(1762): '
    f'_call_impl", "pid": {PID}, "tid": {PID}, "ts": %r, "dur": %r, "args": {{"Python parent '
    'id": %d, "Python id": %d, "Python thread": 0}\n  }'
)


@dataclass
class _Events:
    """One rank's events in one window, built slot by slot (times in ns on its clock)."""

    job: Job
    rank: int
    out: list[dict[str, Any] | str] = field(default_factory=list)  # str: a filler, rendered
    ids: int = 0
    python_ids: int = 0

    @property
    def device(self) -> int:
        return self.rank % self.job.gpus_per_node

    def next_id(self) -> int:
        self.ids += 1
        return self.ids

    def span(self, cat: str, name: str, ts: int, dur: int, tid: int, *, args: Any) -> None:
        self.out.append(
            {"ph": "X", "cat": cat, "name": name, "pid": PID if tid == PID else self.device,
             "tid": tid, "ts": ts / US, "dur": dur / US, "args": args}
        )  # fmt: skip

    def launch(self, op: str, ts: int, extra: dict[str, Any]) -> tuple[int, int]:
        """The CPU op and its cudaLaunchKernel at `ts`: (external id, correlation)."""
        ext, corr = self.next_id(), self.next_id()
        args = {"External id": ext, "Record function id": 0, "Ev Idx": ext, **extra}
        self.span("cpu_op", op, ts, 8 * US, PID, args=args)
        runtime = {"External id": ext, "cbid": 211, "correlation": corr}
        self.span("cuda_runtime", "cudaLaunchKernel", ts + 2 * US, 4 * US, PID, args=runtime)
        self.filler(ts + 10 * US)
        return ext, corr

    def filler(self, ts: int) -> None:
        """The filler spans, already in the file's layout: the bulk of a large trace, so each
        is one %-format rather than a dict through json.dumps (the same bytes, faster)."""
        pitch = FILLER_SPAN_NS // max(self.job.filler, 1)
        dur, first = (pitch // 2) / US, self.python_ids
        self.out.extend(
            _FILLER % ((ts + k * pitch) / US, dur, first + k, first + k + 1)
            for k in range(self.job.filler)
        )
        self.python_ids += self.job.filler

    def kernel(self, name: str, ts: int, dur: int, stream: int, ids: tuple[int, int]) -> dict:
        args = {"External id": ids[0], "queued": 0, "device": self.device, "context": 1,
                "stream": stream, "correlation": ids[1], "registers per thread": 128,
                "shared memory": 0, "grid": [132, 1, 1], "block": [384, 1, 1]}  # fmt: skip
        self.span("kernel", name, ts, dur, stream, args=args)
        return args


def _comm_args(comm: Comm, group: Group, seq: int) -> dict[str, Any]:
    return {
        "Collective name": comm.name,
        "In msg nelems": comm.in_nelems,
        "Out msg nelems": comm.out_nelems,
        "Group size": len(group.ranks),
        "dtype": comm.dtype,
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": group.name,
        "Process Group Description": group.desc,
        "Process Group Ranks": _ranks_text(group.ranks),
        "Seq": seq,
    }


def _step(ev: _Events, window: int, k: int, seq: Counter[str]) -> None:
    """One step's events: ProfilerStep, a memory event, then each slot's CPU and GPU events."""
    job, rank = ev.job, ev.rank
    slots, length = stage_plan(job, coords(job, rank)[0])
    gstep = window * job.steps + k
    base = step_start_ns(job, window, k) + clock_offset_ns(job, node_of(job, rank))
    begin = base - LEAD_NS - 50 * US
    marker = {"External id": ev.next_id(), "Record function id": 0}
    name = f"ProfilerStep#{gstep + 1}"
    ev.span("user_annotation", name, begin, base + length - begin, PID, args=marker)
    allocated = (40 << 30) + _hash(job.seed, rank, gstep) % (1 << 30)
    ev.out.append(
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": PID,
         "tid": PID, "ts": begin / US + 1, "args": {"Total Reserved": 60 << 30,
         "Total Allocated": allocated, "Bytes": 1 << 20, "Addr": 0x7F00_0000_0000,
         "Device Id": rank % job.gpus_per_node, "Device Type": 1}}
    )  # fmt: skip
    per_step = calls_per_step(job, coords(job, rank)[0])
    for index, slot in enumerate(slots):
        if slot.comm is None:
            op, name = KERNELS[slot.kernel]
            ids = ev.launch(op, base + slot.at_ns - LEAD_NS, {})
            ev.kernel(name, base + slot.at_ns, slot.dur_ns, COMPUTE_STREAM, ids)
            continue
        dim = slot.comm.dim
        group = groups(job, rank)[dim]
        args = _comm_args(slot.comm, group, gstep * per_step[dim] + seq[dim])
        seq[dim] += 1
        start, end = comm_span_ns(job, rank, gstep, index, slot)
        ids = ev.launch("record_param_comms", base + start - LEAD_NS, args)
        ev.kernel(NCCL[slot.comm.kind], base + start, end - start, STREAMS[dim], ids).update(args)


def events(job: Job, window: int, rank: int) -> list[dict[str, Any] | str]:
    """The rank's trace events in the window (a filler span already rendered: a str)."""
    ev = _Events(job, rank)
    for k in range(job.steps):
        _step(ev, window, k, Counter())
    return ev.out


def head(job: Job, rank: int) -> dict[str, Any]:
    """The document's keys before `traceEvents`, as Kineto writes them."""
    device = {"name": GPU_NAME, "totalGlobalMem": 85045379072, "computeMajor": 9,
              "computeMinor": 0, "numSms": 132}  # fmt: skip
    own = sorted(groups(job, rank).values(), key=lambda g: int(g.name))
    pg_config = [
        {"pg_name": g.name, "pg_desc": g.desc, "backend_config": "cuda:nccl",
         "pg_size": len(g.ranks), "ranks": list(g.ranks)}
        for g in own
    ]  # fmt: skip
    info = {"backend": "nccl", "rank": rank, "world_size": job.ranks,
            "pg_count": 1 + job.dp * job.tp + job.pp * job.tp + job.pp * job.dp,
            "pg_config": pg_config, "nccl_version": "2.21.5"}  # fmt: skip
    devices = [{"id": i, **device} for i in range(job.gpus_per_node)]
    return {"schemaVersion": 1, "deviceProperties": devices, "distributedInfo": info}


def trace_text(job: Job, window: int, rank: int) -> str:
    """The whole document in Kineto's indented layout (one event per block)."""
    top = ",\n".join(f'  "{key}": {json.dumps(value)}' for key, value in head(job, rank).items())
    blocks = ",\n".join(
        e if isinstance(e, str) else "  {\n    " + json.dumps(e)[1:-1] + "\n  }"
        for e in events(job, window, rank)
    )
    tail = (
        f'  "traceName": "rank{rank}_trace.json",\n  "displayTimeUnit": "ms",\n'
        f'  "baseTimeNanoseconds": {BASE_TIME_NS}\n'
    )
    return "{\n" + top + ',\n  "traceEvents": [\n' + blocks + "\n  ],\n" + tail + "}\n"


def density(job: Job, window: int = 0, rank: int = 0) -> float:
    """Collectives per MB (10^6 B) of JSON in the rank's trace of the window."""
    calls = sum(expected(job, window, rank).calls.values())
    return calls * 1e6 / len(trace_text(job, window, rank).encode())


def at_density(job: Job, collectives_per_mb: float) -> Job:
    """The job with the filler that brings rank 0's first window nearest `collectives_per_mb`
    in bytes: placed by the bytes at filler 0 and 1 (each span adds about as many), then
    moved while a neighbour is nearer (a span's times print in more or fewer digits)."""
    wanted = sum(expected(job, 0, 0).calls.values()) * 1e6 / collectives_per_mb

    def miss(filler: int) -> int:
        return len(trace_text(replace(job, filler=filler), 0, 0).encode()) - round(wanted)

    filler = max(0, round(-miss(0) / (miss(1) - miss(0))))
    while filler > 0 and abs(miss(filler - 1)) < abs(miss(filler)):
        filler -= 1
    while abs(miss(filler + 1)) < abs(miss(filler)):
        filler += 1
    return replace(job, filler=filler)


def write_trace(job: Job, window: int, rank: int, path: Path) -> tuple[int, int]:
    """Write the rank's trace for the window to `path` (gzip when it ends `.gz`):
    (bytes stored, bytes of JSON)."""
    data = trace_text(job, window, rank).encode()
    stored = gzip.compress(data, compresslevel=1, mtime=0) if path.suffix == ".gz" else data
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(stored)
    return len(stored), len(data)


def write_job(job: Job, root: Path) -> tuple[int, int]:
    """Every window's files under `root/iteration_N/`: (bytes stored, bytes of JSON)."""
    stored = plain = 0
    for window in range(job.windows):
        for rank in range(job.ranks):
            path = root / folder(job, window) / file_name(job, rank)
            a, b = write_trace(job, window, rank, path)
            stored, plain = stored + a, plain + b
    return stored, plain


if __name__ == "__main__":  # a quick look: python tests/simjob.py RANKS OUT
    import sys

    out = Path(sys.argv[2])
    sizes = write_job(Job(int(sys.argv[1])), out)
    print(f"{out}: {sizes[0]:,} B stored, {sizes[1]:,} B of JSON", file=sys.stderr)
