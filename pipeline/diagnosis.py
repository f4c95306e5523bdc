"""The diagnosis: where the run's time goes, in a verdict with the numbers behind it (pure).

Every figure against step time covers the profiled steps only: its numerator is clipped to
S, the union of each rank's ProfilerStep spans, its denominator is |S|, so none exceeds 1;
what lies outside the steps is stated apart (`left_out`). Figures, means over ranks: exposed
communication, compute and GPU busy time as fractions of step time; the GPU's idle share of
its active span (shown; no verdict rests on it); overlap; the share of the matched calls'
time spent waiting for late arrivers. Verdicts, each only when its figure passes its
threshold: communication-bound, input- or launch-bound (GPU idle within the steps; the
kernel launch figures back launch overhead or rule it out, and its advice needs them),
compute-bound. With none of them: "too little to judge" below the minimums (no profiled step,
under `_MIN_STEP_S` of step time per rank), "no communication" when no rank ran a collective,
else balanced. Every suggestion is tied to the figures that show it can help; every
assumption a figure rests on is listed (`assumptions`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from commscope.model.schema import (
    KERNEL_CATEGORIES,
    AlphaBeta,
    Diagnosis,
    Finding,
    RankLaunches,
    RunConfig,
    Sections,
)
from commscope.model.units import duration, rate, size
from commscope.pipeline.accumulate import CPU
from commscope.pipeline.stats import mean, ratio

_COMM_BOUND: Final = 0.20  # exposed communication / step time
_HOST_BOUND: Final = 0.20  # GPU idle within the steps / step time (1 - GPU busy / step time)
_COMPUTE_BOUND: Final = 0.75  # compute / step time, with exposed comm and idle both below:
_QUIET: Final = 0.10
_LOW_OVERLAP: Final = 0.50
_LOW_UTILIZATION: Final = 0.50
_WAIT_SHARE: Final = 0.25  # waiting on late arrivers / the matched calls' time
_DOMINANT_TRAFFIC: Final = 0.50
_NON_GEMM: Final = 0.30  # elementwise + reduction share of GPU compute time
_MOSTLY_WAITING: Final = 0.50  # waiting on late arrivers / the matched calls' time
_MIN_FIT_R2: Final = 0.80  # an α-β fit looser than this gives evidence, not advice
_LATENCY_BOUND: Final = 0.25  # share of a fit's instances below α·β worth bucketing for
_MIN_STEP_S: Final = 1e-3  # profiled step time per rank (mean over ranks) to judge by
_MIN_INSTANCES: Final = 3  # matched collectives to judge late arrivals by
# DDP's first gradient bucket (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES): a step's
# all-reduce traffic below it is one bucket whatever bucket_cap_mb says.
_DDP_FIRST_BUCKET: Final = 2**20
_NO_COMMUNICATION: Final = "no communication"
WAITING: Final = "waiting for"
_MIN_STEPS: Final = 3  # profiled steps below which the diagnosis says its confidence is low
_SURE_STEPS: Final = 10  # profiled steps from which it is high


@dataclass(frozen=True)
class Evidence:
    """What the job is seen to run, each a line of evidence ("" when not seen): FSDP (a
    config shard degree > 1, or parameter all-gathers with gradient reduce-scatters), DDP (a
    config replicate degree > 1 without sharding, or gradient all-reduces in every profiled
    step without FSDP's pattern), NCCL (the traces' backend)."""

    fsdp: str = ""
    ddp: str = ""
    nccl: bool = False

    @classmethod
    def of(cls, run: Sections, config: RunConfig) -> Evidence:
        degrees = config.parallelism
        shard = degrees.get("data_parallel_shard_degree", 0)
        replicate = degrees.get("data_parallel_replicate_degree", 0)
        fsdp = f"config data_parallel_shard_degree = {shard}" if shard > 1 else _fsdp_calls(run)
        ddp = ""
        if replicate > 1 and shard <= 1:
            ddp = f"config data_parallel_replicate_degree = {replicate}, no sharding"
        elif not fsdp and not degrees:
            ddp = _ddp_calls(run)
        return cls(fsdp=fsdp, ddp=ddp, nccl="nccl" in (config.backend or "").lower())


def _fsdp_calls(run: Sections) -> str:
    """FSDP's pattern in the calls: all-gathers of parameters (forward, and again in backward
    when resharded) at least as many as the reduce-scatters of gradients, both every step."""
    ops, steps = run.collectives.all_ranks, run.throughput.iterations
    gathers = ops["AllGather"].count if "AllGather" in ops else 0
    scatters = ops["ReduceScatter"].count if "ReduceScatter" in ops else 0
    ranks = len(run.ranks) or 1
    if not steps or scatters < steps * ranks or gathers < scatters:
        return ""
    return (
        f"{gathers} all-gathers and {scatters} reduce-scatters over {steps} profiled steps "
        "(parameters gathered, gradients reduce-scattered)"
    )


def _ddp_calls(run: Sections) -> str:
    """DDP's pattern: gradient all-reduces in every profiled step of every rank."""
    counts = [
        (stats["AllReduce"].count, run.steps[rank].count)
        for rank, stats in run.collectives.per_rank.items()
        if "AllReduce" in stats and rank in run.steps
    ]
    if (
        not counts
        or len(counts) < len(run.ranks)
        or any(n < steps or not steps for n, steps in counts)
    ):
        return ""
    total = sum(n for n, _ in counts)
    return (
        f"all-reduces in every profiled step of every rank ({total} in all), as DDP's "
        "gradient buckets"
    )


_LAUNCH_SHORT: Final = 0.50  # kernels shorter than their launch call / kernels joined to one
_LAUNCH_QUEUE_S: Final = 50e-6  # median launch-to-kernel queue delay below: an empty queue
INPUT_ADVICE: Final = (
    "the host does not keep the GPU fed: more DataLoader workers with pin_memory, prefetching"
)
LAUNCH_ADVICE: Final = (
    "fewer, larger kernels (torch.compile, CUDA graphs): the gaps sit between short kernel launches"
)


def figures(run: Sections) -> dict[str, float | None]:
    """The few numbers the verdicts rest on (fractions of 1)."""
    exposed, compute, busy = [], [], []
    transfer, waiting, unmatched = [], [], []
    for steps in run.steps.values():
        span = steps.span_s or None
        exposed.append(ratio(steps.exposed_comm_s, span))
        compute.append(ratio(steps.compute_s, span))
        busy.append(ratio(steps.gpu_busy_s, span))
        transfer.append(ratio(steps.exposed_transfer_s, span))
        waiting.append(ratio(steps.exposed_waiting_s, span))
        unmatched.append(ratio(steps.exposed_unmatched_s, span))
    waits = math.fsum(s.wait_in_call_s for s in run.skew.per_collective.values())
    calls = math.fsum(s.call_time_s for s in run.skew.per_collective.values())
    return {
        "exposed_comm_fraction": mean(exposed),
        "exposed_transfer_fraction": mean(transfer),
        "exposed_waiting_fraction": mean(waiting),
        "exposed_unmatched_fraction": mean(unmatched),
        "compute_fraction": mean(compute),
        "gpu_busy_fraction": mean(busy),
        "gpu_idle_fraction": run.kernels.idle_ratio_mean,
        "overlap": run.overlap.mean,
        "wait_fraction_of_comm": ratio(waits, calls),
        "bandwidth_utilization": run.network.utilization,
        "mfu": run.utilization.mfu,
    }


def _weight(verdict: str, found: dict[str, float | None]) -> float:
    """A verdict's weight, to rank several: the figure that triggered it."""
    if verdict == "communication-bound":
        return _exposed_parts(found)[0]
    if verdict.startswith(WAITING):
        return _exposed_parts(found)[1]
    if verdict == "input- or launch-bound":
        busy = found["gpu_busy_fraction"]
        return 0.0 if busy is None else 1.0 - busy
    return found["compute_fraction"] or 0.0


def _exposed_parts(found: dict[str, float | None]) -> tuple[float, float]:
    """(communication, waiting) as fractions of step time: exposed transfer plus exposed
    unmatched, and exposed waiting. Without the split (no rank's cross-rank facts), all of
    the exposed communication counts as communication."""
    transfer, waiting = found["exposed_transfer_fraction"], found["exposed_waiting_fraction"]
    if transfer is None or waiting is None:
        return found["exposed_comm_fraction"] or 0.0, 0.0
    return transfer + (found["exposed_unmatched_fraction"] or 0.0), waiting


def _bound(verdict: str) -> bool:
    return verdict in _BOUND or verdict.startswith(WAITING)


_BOUND: Final = ("communication-bound", "input- or launch-bound", "compute-bound")


def diagnose(run: Sections, config: RunConfig | None = None) -> Diagnosis:
    """`config`: the job's configuration (its parallel degrees are evidence for advice)."""
    found = figures(run)
    gap = _too_little(run)
    jobs = Evidence.of(run, config or RunConfig())
    findings = [
        *(_step_findings(run, found, jobs) if gap is None else ()),
        *_silence(run),
        *_late_rank(run, found, gap is None),
        *_stragglers(run),
    ]
    bound = sorted(
        (f for f in findings if _bound(f.verdict)), key=lambda f: -_weight(f.verdict, found)
    )
    if bound:
        verdict = bound[0].verdict + "".join(f"; also {f.verdict}" for f in bound[1:])
    elif gap is not None:
        verdict = f"too little to judge: {gap}"
    elif not run.collectives.all_ranks:
        verdict = "no communication in the traces (compute only); nothing past a threshold"
    else:
        verdict = "balanced"
    level, why = confidence(run)
    return Diagnosis(
        verdict=verdict,
        figures=found,
        findings=[*bound, *(f for f in findings if not _bound(f.verdict))],  # verdict's order
        assumptions=assumptions(run, found),
        left_out=left_out(run),
        confidence=level,
        confidence_reason=why,
    )


def confidence(run: Sections) -> tuple[str, str]:
    """How far the verdict can be trusted from the number of profiled steps it rests on."""
    steps = run.throughput.iterations
    if any(s.capture_span for s in run.steps.values()):
        return "low", "from an Nsight Systems capture span taken as one step (no step range)"
    if not steps:
        return "n/a", "no profiled step"
    if steps < _MIN_STEPS:
        return "low", (
            f"from {steps} profiled step{'s' * (steps != 1)}, fewer than {_MIN_STEPS}: one "
            "step's noise can decide the verdict, and no advice rests on a fit over steps"
        )
    if steps < _SURE_STEPS:
        return "medium", f"from {steps} profiled steps, fewer than {_SURE_STEPS}"
    return "high", f"from {steps} profiled steps"


def _step_findings(
    run: Sections, found: dict[str, float | None], jobs: Evidence
) -> Iterator[Finding]:
    yield from _communication(run, found, jobs)
    yield from _waiting(run, found, jobs)
    yield from _host(run, found)
    yield from _compute(run, found)


def _too_little(run: Sections) -> str | None:
    """Why the step time is too little to judge by, or None when it is enough."""
    spans = [s.span_s for s in run.steps.values() if s.count or s.capture_span]
    if not spans:
        return "no profiled step (ProfilerStep) in the traces; the verdicts weigh step time"
    known = [span for span in spans if span is not None]
    if not known:
        return "the steps' spans were not kept (results stored by an older commscope)"
    per_rank = math.fsum(known) / len(known)
    if per_rank < _MIN_STEP_S:
        return (
            f"{duration(per_rank)} of profiled step time per rank, "
            f"under the {_MIN_STEP_S * 1e3:g} ms minimum"
        )
    return None


def _silence(run: Sections) -> Iterator[Finding]:
    if run.ranks and not run.collectives.all_ranks:
        yield Finding(
            verdict=_NO_COMMUNICATION,
            evidence=[
                "no rank's trace holds a collective: overlap, exposed communication, network "
                "load and the cross-rank sections do not apply"
            ],
        )


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _communication(
    run: Sections, found: dict[str, float | None], jobs: Evidence
) -> Iterator[Finding]:
    """Communication-bound on exposed transfer (plus exposed unmatched, said), never on
    waiting: when its own figure passes `_COMM_BOUND`, or the exposed communication does and
    transfer outweighs waiting."""
    if not _moving_bound(found):
        return
    moving = _exposed_parts(found)[0]
    exposed = found["exposed_comm_fraction"] or 0.0
    evidence = [_moving_evidence(found, exposed)]
    advice = []
    overlap = found["overlap"]
    if overlap is not None and overlap < _LOW_OVERLAP:
        evidence.append(f"only {_pct(overlap)} of communication overlaps compute")
        compute = found["compute_fraction"]
        if compute is not None and compute < moving:
            evidence.append(
                f"compute is {_pct(compute)} of step time: even full overlap hides at most "
                "that much of the exposed communication"
            )
        advice.append(_overlap_advice(run, evidence, jobs))
    advice.extend(_network_advice(run, found, evidence, jobs))
    yield Finding(verdict="communication-bound", evidence=evidence, suggestions=advice)


def _moving_evidence(found: dict[str, float | None], exposed: float) -> str:
    transfer, unmatched = found["exposed_transfer_fraction"], found["exposed_unmatched_fraction"]
    if transfer is None:
        return f"exposed communication is {_pct(exposed)} of step time (mean over ranks)"
    line = (
        f"exposed transfer is {_pct(transfer)} of step time (mean over ranks; exposed "
        f"communication {_pct(exposed)}, of it waiting {_pct(found['exposed_waiting_fraction'])})"
    )
    if unmatched:
        line += (
            f"; {_pct(unmatched)} more is in calls matched to no other rank's call, "
            "counted as communication since its waiting cannot be told apart"
        )
    return line


def _moving_bound(found: dict[str, float | None]) -> bool:
    """Exposed transfer (+ unmatched) past `_COMM_BOUND`, or the exposed communication past it
    with transfer outweighing waiting."""
    moving, waiting = _exposed_parts(found)
    exposed = found["exposed_comm_fraction"] or 0.0
    return moving >= _COMM_BOUND or (exposed >= _COMM_BOUND and moving > waiting)


def _waiting_bound(found: dict[str, float | None]) -> bool:
    """Exposed waiting past `_COMM_BOUND`, or the exposed communication past it with waiting
    outweighing transfer."""
    moving, waiting = _exposed_parts(found)
    exposed = found["exposed_comm_fraction"] or 0.0
    return waiting > 0 and (
        waiting >= _COMM_BOUND or (exposed >= _COMM_BOUND and waiting >= moving)
    )


def _waiting(run: Sections, found: dict[str, float | None], jobs: Evidence) -> Iterator[Finding]:
    """Waiting for the rank the others wait for (imbalance, `_waiting_bound`). Alone, it keeps
    the network's evidence (overlap, traffic, the fits) without its advice: the network is
    not what the time waits on."""
    if not _waiting_bound(found):
        return
    moving, waiting = _exposed_parts(found)
    rank = run.skew.waited_for_rank
    evidence = [
        f"exposed waiting is {_pct(waiting)} of step time (mean over ranks): ranks sit in "
        f"collectives until the last member arrives; exposed transfer is {_pct(moving)}",
        run.skew.evidence,
    ]
    if not _moving_bound(found):
        overlap = found["overlap"]
        if overlap is not None and overlap < _LOW_OVERLAP:
            evidence.append(f"only {_pct(overlap)} of communication overlaps compute")
        _network_advice(run, found, evidence, jobs)  # its evidence only
    staged = _pipeline_wait(run)
    if rank is None and staged is not None:
        verdict, advice = staged
        evidence.append(run.pipeline.evidence or "")
    elif rank is None:
        verdict, advice = (
            f"{WAITING} late ranks (no single rank)",
            (
                "even the ranks' work out before the collectives they wait in (see the late "
                "arrivals): overlap and network tuning cannot recover time spent waiting"
            ),
        )
    else:
        verdict, advice = (
            f"{WAITING} rank {rank}",
            (
                f"look at what rank {rank} does before the collectives the others wait in: its "
                "host's data loading, CPU contention, thermal or clock throttling, uneven work; "
                "overlap and network tuning cannot recover time spent waiting for it"
            ),
        )
    yield Finding(verdict=verdict, evidence=evidence, suggestions=[advice])


def _pipeline_wait(run: Sections) -> tuple[str, str] | None:
    """(verdict, advice) when the waiting is on a pipeline stage's P2P calls (`stages`)."""
    p = run.pipeline
    if p.waited_for_rank is None:
        return None
    stage = f"pipeline stage {p.waited_for_stage} (rank {p.waited_for_rank})"
    if p.waited_for_stage is None:
        stage = f"rank {p.waited_for_rank}'s P2P calls"
    advice = (
        f"balance the pipeline: move layers off {stage} (TorchTitan: "
        "pipeline_parallel_layers_per_stage or split points), or look at what delays its sends"
    )
    return f"{WAITING} {stage}", advice


def _overlap_advice(run: Sections, evidence: list[str], jobs: Evidence) -> str:
    """Advice that names FSDP or DDP only with evidence that the job runs it (`Evidence`);
    DDP's bucket_cap_mb only when a step's all-reduce traffic exceeds DDP's first bucket
    (below it, every gradient travels in one bucket whatever the cap)."""
    advice = (
        "overlap communication with compute: issue collectives ahead of the compute that needs them"
    )
    if jobs.fsdp:
        evidence.append(f"the job runs FSDP: {jobs.fsdp}")
        advice = (
            "overlap communication with compute: FSDP prefetching (forward/backward prefetch, "
            "reshard_after_forward=False for the last blocks)"
        )
    if not jobs.ddp:
        return advice
    evidence.append(f"the job runs DDP: {jobs.ddp}")
    per_step = _allreduce_per_step(run)
    if per_step is None:
        evidence.append("all-reduce traffic per step unknown: no DDP bucket advice")
        return advice
    if per_step > _DDP_FIRST_BUCKET:
        return advice + "; DDP bucket_cap_mb so gradient all-reduces start during backward"
    evidence.append(
        f"all-reduce traffic is {size(per_step)} per step (mean over ranks), within "
        "DDP's first bucket (1 MiB): bucket_cap_mb cannot split it, so no bucket advice"
    )
    return advice


def _allreduce_per_step(run: Sections) -> float | None:
    """AllReduce message bytes per profiled step, mean over ranks (None when unknown)."""
    values = []
    for rank, steps in run.steps.items():
        stats = run.collectives.per_rank.get(rank, {}).get("AllReduce")
        if stats is not None and stats.message_bytes is not None and steps.count:
            values.append(stats.message_bytes / steps.count)
    return mean(values)


def _network_advice(
    run: Sections, found: dict[str, float | None], evidence: list[str], jobs: Evidence
) -> list[str]:
    advice = []
    top = next(iter(run.traffic.items()), None)
    if top and top[1].share is not None and top[1].share >= _DOMINANT_TRAFFIC:
        evidence.append(f"{top[0]} carries {_pct(top[1].share)} of the traffic")
    used, basis = _wait_free_utilization(run)
    if used is None:
        used = found["bandwidth_utilization"]
        basis = "mean bus bandwidth over ranks, waiting included"
    if used is not None and used < _LOW_UTILIZATION:
        evidence.append(f"the network delivers {_pct(used)} of the link peak ({basis})")
        check = (
            "NCCL's topology and transport (NCCL_DEBUG=INFO)"
            if jobs.nccl
            else "the communication library's topology and transport"
        )
        advice.append(
            f"collectives run well below the link: check {check}, and message sizes against "
            "the α-β fit (small messages pay α)"
        )
    for group, kinds in run.alpha_beta.items():
        for kind, fit in kinds.items():
            found_fit = _fit_evidence(group, kind, fit, run.throughput.iterations)
            if found_fit is not None:
                evidence.append(found_fit[0])
                advice.extend(found_fit[1:])
    return advice


def _fit_evidence(group: str, kind: str, fit: AlphaBeta, steps: int) -> tuple[str, ...] | None:
    """(evidence, and the advice it supports): bucketing only when it can help (see
    `_no_bucketing`)."""
    if fit.alpha_s is None or fit.beta_Bps is None:
        return None
    knee = fit.alpha_s * fit.beta_Bps
    line = (
        f"{kind} on group {group}: α = {duration(fit.alpha_s)}, "
        f"β = {rate(fit.beta_Bps)}: messages below {size(knee)} are latency-bound"
    )
    if fit.latency_bound is not None:
        line += f" ({_pct(fit.latency_bound)} of its instances)"
    why_not = _no_bucketing(fit, knee, steps)
    if why_not is not None:
        return (f"{line}; {why_not}",)
    advice = (
        f"bucket {kind} messages above {size(knee)} (group {group}) so that bandwidth, not "
        "latency, dominates"
    )
    return line, advice


def _no_bucketing(fit: AlphaBeta, knee: float, steps: int) -> str | None:
    """Why bucketing cannot help, or None: it helps only when the fit is tight, a real share
    of the instances sits below the knee α·β, and a step's traffic of this collective on this
    group exceeds the knee (below it, even one bucket per step stays latency-bound)."""
    if fit.r2 is None or fit.r2 < _MIN_FIT_R2:
        r2 = "n/a" if fit.r2 is None else f"{fit.r2:.2f}"
        return f"a loose fit (R² {r2}), so no advice from it"
    if fit.latency_bound is None or fit.latency_bound < _LATENCY_BOUND:
        return f"under {_LATENCY_BOUND:.0%} of its instances below the knee: no bucketing advice"
    if fit.bus_bytes is None or not steps:
        return "its traffic per profiled step is unknown, so no bucketing advice"
    if steps < _MIN_STEPS:
        return f"from {steps} profiled step{'s' * (steps != 1)} (under {_MIN_STEPS}): no advice"
    per_step = fit.bus_bytes / steps
    if per_step <= knee:
        return (
            f"its traffic is {size(per_step)} per step, below the knee: bucketing cannot lift "
            "messages above it"
        )
    return None


def _wait_free_utilization(run: Sections) -> tuple[float | None, str]:
    """β / peak of the tight fit (R² ≥ MIN_FIT_R2) with the most instances, and which: the
    bandwidth without the waiting. A loose fit is never quoted."""
    fits = [
        (fit.instances, group, kind, fit)
        for group, kinds in run.alpha_beta.items()
        for kind, fit in kinds.items()
        if fit.peak_ratio is not None and fit.r2 is not None and fit.r2 >= _MIN_FIT_R2
    ]
    if not fits:
        return None, ""
    _, group, kind, fit = max(fits, key=lambda item: item[0])
    return fit.peak_ratio, f"β of the {kind} fit on group {group}, R² {fit.r2:.2f}: no waiting"


def _host(run: Sections, found: dict[str, float | None]) -> Iterator[Finding]:
    busy = found["gpu_busy_fraction"]
    if busy is None or 1.0 - busy < _HOST_BOUND:
        return
    evidence = [
        f"the GPU is busy {_pct(busy)} of step time: idle {_pct(1.0 - busy)} of the profiled "
        "steps (mean over ranks)"
    ]
    span = found["gpu_idle_fraction"]
    if span is not None:
        evidence.append(
            f"between its first and last activity it sits idle {_pct(span)} of the time"
        )
    launches = run.launches.all_ranks
    evidence += _launch_evidence(launches)
    advice = [INPUT_ADVICE, *([LAUNCH_ADVICE] if _launch_bound(launches) else [])]
    yield Finding(verdict="input- or launch-bound", evidence=evidence, suggestions=advice)


def _launch_bound(launches: RankLaunches | None) -> bool:
    """Whether the launch figures show the CPU's launches holding the GPU back: most kernels
    shorter than their launch call, and a median queue delay under LAUNCH_QUEUE_S."""
    if launches is None or launches.shorter_share is None:
        return False
    median = launches.queue_delay_s.median
    return (
        launches.shorter_share >= _LAUNCH_SHORT and median is not None and median < _LAUNCH_QUEUE_S
    )


def _launch_evidence(launches: RankLaunches | None) -> list[str]:
    """The launch figures (all ranks), and what they say of launch overhead."""
    if launches is None or not launches.kernels:
        return ["no kernel joined to a launch call in the traces: launch overhead is neither "
                "shown nor ruled out"]  # fmt: skip
    delay = launches.queue_delay_s
    figures = (
        f"kernel launches (all ranks): {launches.calls:,} calls, {duration(launches.call_time_s)}"
        f" of CPU time; queue delay (kernel start - launch start) median ~{duration(delay.median)},"
        f" p95 ~{duration(delay.p95)}; {launches.shorter:,} of {launches.kernels:,} kernels "
        f"({_pct(launches.shorter_share)}) ran shorter than their launch call"
    )
    if _launch_bound(launches):
        reading = (
            "launch-bound: most kernels run shorter than their launch call and start within "
            f"{duration(_LAUNCH_QUEUE_S)} of it (an empty queue): the CPU cannot launch fast enough"
        )
    else:
        reading = (
            f"not launch-bound: that takes {_pct(_LAUNCH_SHORT)} or more of the kernels shorter "
            f"than their launch call and a median queue delay under {duration(_LAUNCH_QUEUE_S)}"
        )
    return [figures, reading]


def _compute(run: Sections, found: dict[str, float | None]) -> Iterator[Finding]:
    compute, exposed = found["compute_fraction"], found["exposed_comm_fraction"]
    busy = found["gpu_busy_fraction"]
    idle = None if busy is None else 1.0 - busy
    if (
        compute is None
        or compute < _COMPUTE_BOUND
        or (exposed or 0) >= _QUIET
        or (idle or 0) >= _QUIET
    ):
        return
    evidence = [f"compute is {_pct(compute)} of step time; exposed communication "
                f"{_pct(exposed)}, GPU idle {_pct(idle)}"]  # fmt: skip
    advice = []
    share = run.kernels.share
    if share:
        busy_share = sum(share.get(c, 0.0) for c in KERNEL_CATEGORIES)
        light = share.get("elementwise", 0.0) + share.get("reduction", 0.0)
        light = light / busy_share if busy_share else 0.0
        evidence.append(f"elementwise and reduction kernels take {_pct(light)} of compute time")
        if light >= _NON_GEMM:
            advice.append("fuse elementwise and normalization kernels (torch.compile)")
    if found["mfu"] is not None:
        evidence.append(f"MFU {_pct(found['mfu'])}")
    yield Finding(verdict="compute-bound", evidence=evidence, suggestions=advice)


def _enough_instances(run: Sections) -> bool:
    return sum(s.instances for s in run.skew.per_collective.values()) >= _MIN_INSTANCES


def _late_rank(run: Sections, found: dict[str, float | None], judged: bool) -> Iterator[Finding]:
    """Late arrivals, when the waiting verdict (`_waiting`) does not already say them."""
    waiting = found["wait_fraction_of_comm"]
    if waiting is None or waiting < _WAIT_SHARE or not _enough_instances(run):
        return
    if judged and _waiting_bound(found):
        return
    evidence = [f"{_pct(waiting)} of the matched collectives' time is ranks waiting for "
                "late arrivers", run.skew.evidence]  # fmt: skip
    advice = []
    if run.skew.waited_for_rank is not None:
        advice.append(
            f"look at rank {run.skew.waited_for_rank}, the rank the others wait for: its host's "
            "data loading, CPU contention, "
            "thermal or clock throttling, or a slower link"
        )
    yield Finding(verdict="late arrivals", evidence=evidence, suggestions=advice)


def _stragglers(run: Sections) -> Iterator[Finding]:
    if run.stragglers.flagged:
        ranks = ", ".join(map(str, run.stragglers.flagged))
        yield Finding(
            verdict="step-time stragglers",
            evidence=[run.stragglers.evidence],
            suggestions=[f"compare rank(s) {ranks} with the others: host load, GPU clocks, input"],
        )


def assumptions(run: Sections, found: dict[str, float | None]) -> list[str]:
    """What the verdict and figures rest on that the traces themselves do not show."""
    said = list(_capture(run))
    if any(CPU in o.evidence for o in run.overlap.per_rank.values()):
        said.append(
            "CPU-only ranks: compute is the training thread's cpu_op time outside collective "
            "calls, communication the gloo spans (the contract's CPU definition)"
        )
    if found["wait_fraction_of_comm"] is not None:
        said.append(
            "waiting is measured on clocks aligned by assuming that a collective ends together "
            "on all its members"
        )
    if found["bandwidth_utilization"] is not None:
        said.append(f"link peak: {run.network.peak_source}")
    u = run.utilization
    if found["mfu"] is not None:
        said.append(f"GPU peak FLOP/s: {u.peak_source}; FLOPs per token: {u.flops_source}")
    if u.hfu is not None and u.hfu_reason and "assum" in u.hfu_reason:
        said.append(f"HFU: {u.hfu_reason}")
    return said


def _capture(run: Sections) -> Iterator[str]:
    """The ranks whose one step is their export's capture span (`RankSteps.capture_span`)."""
    captured = sum(1 for steps in run.steps.values() if steps.capture_span)
    if captured:
        yield (
            f"step time is the capture span on {captured} of {len(run.steps)} ranks: their "
            "Nsight Systems exports have no NVTX step range in NVTX_EVENTS (ProfilerStep#N, "
            "train_step, iteration N), so each rank's one step runs from the first start to "
            "the last end of its export's GPU activity (CUPTI_ACTIVITY_KIND_KERNEL, _MEMCPY, "
            "_MEMSET); the step figures cover that span, which may hold several training "
            "steps or part of one"
        )


def left_out(run: Sections) -> list[str]:
    """What the step figures leave out: time outside the profiled steps, ranks without one."""
    lines = []
    comm_out = math.fsum(s.comm_outside_s or 0.0 for s in run.steps.values())
    compute_out = math.fsum(s.compute_outside_s or 0.0 for s in run.steps.values())
    if comm_out > 0 or compute_out > 0:
        comm = math.fsum(o.comm_time_s for o in run.overlap.per_rank.values())
        compute = math.fsum(o.compute_time_s for o in run.overlap.per_rank.values())
        lines.append(
            f"outside the profiled steps (summed over ranks): {duration(comm_out)} of "
            f"communication ({_pct(ratio(comm_out, comm))} of it) and {duration(compute_out)} "
            f"of compute ({_pct(ratio(compute_out, compute))} of it)"
        )
    bare = [rank for rank, s in run.steps.items() if not s.count and not s.capture_span]
    if bare and len(bare) < len(run.steps):
        lines.append(f"ranks without a profiled step: {', '.join(bare)}")
    return lines
