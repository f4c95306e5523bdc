"""The diagnosis: where the run's time goes, in a verdict with the numbers behind it (pure).

From the run's sections: the fraction of step time each rank spends in exposed communication
(not hidden under compute), in compute, and the fraction of the GPU's active span it sits
idle; how much communication time is waiting on late arrivers. Verdicts, each only when its
figure passes its threshold: communication-bound, input- or launch-bound, compute-bound, else
balanced. Every suggestion is tied to a figure that triggered it; no figure, no advice.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Final

from commscope.collector.schema import (
    KERNEL_CATEGORIES,
    AlphaBeta,
    Diagnosis,
    Finding,
    Sections,
)
from commscope.pipeline.stats import mean, ratio

COMM_BOUND: Final = 0.20  # exposed communication / step time
IDLE_BOUND: Final = 0.20  # GPU idle / GPU active span
COMPUTE_BOUND: Final = 0.75  # compute / step time, with exposed comm and idle both below:
QUIET: Final = 0.10
LOW_OVERLAP: Final = 0.50
LOW_UTILIZATION: Final = 0.50
WAIT_SHARE: Final = 0.25  # waiting on late arrivers / communication time
DOMINANT_TRAFFIC: Final = 0.50
NON_GEMM: Final = 0.30  # elementwise + reduction share of GPU compute time
MOSTLY_WAITING: Final = 0.50  # waiting on late arrivers / communication time
MIN_FIT_R2: Final = 0.80  # an α-β fit looser than this gives evidence, not advice
LATENCY_BOUND: Final = 0.25  # share of a fit's instances below α·β worth bucketing for
# A verdict's weight, to rank several: the figure that triggered it.
_WEIGHT: Final = {
    "communication-bound": "exposed_comm_fraction",
    "input- or launch-bound": "gpu_idle_fraction",
    "compute-bound": "compute_fraction",
}


def figures(run: Sections) -> dict[str, float | None]:
    """The few numbers the verdicts rest on (fractions of 1)."""
    steps, exposed, compute = [], [], []
    for rank, overlap in run.overlap.per_rank.items():
        rank_steps = run.steps.get(rank)
        total = rank_steps.mean_s * rank_steps.count if rank_steps and rank_steps.mean_s else None
        steps.append(total)
        exposed.append(ratio(overlap.exposed_comm_time_s, total))
        compute.append(ratio(overlap.compute_time_s, total))
    comm = math.fsum(o.comm_time_s for o in run.overlap.per_rank.values())
    waits = math.fsum(s.wait_s for s in run.skew.per_collective.values())
    return {
        "exposed_comm_fraction": mean(exposed),
        "compute_fraction": mean(compute),
        "gpu_idle_fraction": run.kernels.idle_ratio_mean,
        "overlap": run.overlap.mean,
        "wait_fraction_of_comm": ratio(waits, comm) if run.skew.per_collective else None,
        "bandwidth_utilization": run.network.utilization,
        "mfu": run.utilization.mfu,
    }


def diagnose(run: Sections) -> Diagnosis:
    found = figures(run)
    findings = [
        *_communication(run, found),
        *_idle(found),
        *_compute(run, found),
        *_late_rank(run, found),
        *_stragglers(run),
    ]
    bound = sorted(
        (f for f in findings if f.verdict in _WEIGHT),
        key=lambda f: -(found[_WEIGHT[f.verdict]] or 0.0),
    )
    verdict = _balanced(found)
    if bound:
        verdict = bound[0].verdict + "".join(f"; also {f.verdict}" for f in bound[1:])
    return Diagnosis(verdict=verdict, figures=found, findings=findings)


def _balanced(found: dict[str, float | None]) -> str:
    known = [found["exposed_comm_fraction"], found["compute_fraction"]]
    if all(v is None for v in known) and found["gpu_idle_fraction"] is None:
        return "n/a (no step times and no GPU activity to judge by)"
    return "balanced"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _communication(run: Sections, found: dict[str, float | None]) -> Iterator[Finding]:
    exposed = found["exposed_comm_fraction"]
    if exposed is None or exposed < COMM_BOUND:
        return
    evidence = [f"exposed communication is {_pct(exposed)} of step time (mean over ranks)"]
    advice = []
    overlap = found["overlap"]
    if overlap is not None and overlap < LOW_OVERLAP:
        evidence.append(f"only {_pct(overlap)} of communication overlaps compute")
        advice.append(
            "overlap communication with compute: FSDP prefetching (forward/backward prefetch, "
            "reshard_after_forward=False for the last blocks), DDP bucket_cap_mb so gradient "
            "all-reduces start during backward"
        )
    waiting = found["wait_fraction_of_comm"]
    if waiting is not None and waiting >= MOSTLY_WAITING:
        evidence.append(
            f"{_pct(waiting)} of communication time is waiting for late arrivers: "
            "the imbalance between ranks, not the network, comes first"
        )
        advice.append(
            "even the ranks out first (see the late arrivals): overlap and network tuning "
            "cannot recover time spent waiting for a late rank"
        )
    advice.extend(_network_advice(run, found, evidence))
    yield Finding(verdict="communication-bound", evidence=evidence, suggestions=advice)


def _network_advice(
    run: Sections, found: dict[str, float | None], evidence: list[str]
) -> list[str]:
    advice = []
    top = next(iter(run.traffic.items()), None)
    if top and top[1].share is not None and top[1].share >= DOMINANT_TRAFFIC:
        evidence.append(f"{top[0]} carries {_pct(top[1].share)} of the traffic")
    used = _wait_free_utilization(run) or found["bandwidth_utilization"]
    if used is not None and used < LOW_UTILIZATION:
        evidence.append(f"the network delivers {_pct(used)} of the link peak")
        advice.append(
            "collectives run well below the link: check NCCL's topology and transport "
            "(NCCL_DEBUG=INFO), and message sizes against the α-β fit (small messages pay α)"
        )
    for group, kinds in run.alpha_beta.items():
        for kind, fit in kinds.items():
            found_fit = _fit_evidence(group, kind, fit)
            if found_fit is not None:
                evidence.append(found_fit[0])
                advice.extend(found_fit[1:])
    return advice


def _fit_evidence(group: str, kind: str, fit: AlphaBeta) -> tuple[str, ...] | None:
    """(evidence, and the advice it supports): bucketing only when the fit is tight and a
    good share of the instances sits below the knee α·β."""
    if fit.alpha_s is None or fit.beta_Bps is None:
        return None
    knee = f"{fit.alpha_s * fit.beta_Bps / 1e6:.3g} MB"
    line = (
        f"{kind} on group {group}: α = {fit.alpha_s * 1e6:.3g} µs, "
        f"β = {fit.beta_Bps / 1e9:.3g} GB/s: messages below {knee} are latency-bound"
    )
    if fit.latency_bound is not None:
        line += f" ({_pct(fit.latency_bound)} of its instances)"
    if fit.r2 is None or fit.r2 < MIN_FIT_R2:
        r2 = "n/a" if fit.r2 is None else f"{fit.r2:.2f}"
        return (f"{line}; a loose fit (R² {r2}), so no advice from it",)
    if fit.latency_bound is None or fit.latency_bound < LATENCY_BOUND:
        return (line,)
    advice = (
        f"bucket {kind} messages above {knee} (group {group}) so that bandwidth, not "
        "latency, dominates"
    )
    return line, advice


def _wait_free_utilization(run: Sections) -> float | None:
    """β / peak of the fit with the most instances: bandwidth without the waiting."""
    fits = [f for kinds in run.alpha_beta.values() for f in kinds.values() if f.peak_ratio]
    best = max(fits, key=lambda f: f.instances, default=None)
    return best.peak_ratio if best else None


def _idle(found: dict[str, float | None]) -> Iterator[Finding]:
    idle = found["gpu_idle_fraction"]
    if idle is None or idle < IDLE_BOUND:
        return
    yield Finding(
        verdict="input- or launch-bound",
        evidence=[f"the GPU sits idle {_pct(idle)} of the span it is active (mean over ranks)"],
        suggestions=[
            "the host does not keep the GPU fed: more DataLoader workers with pin_memory, "
            "prefetching; fewer, larger kernels (torch.compile, CUDA graphs) if the gaps "
            "sit between short kernel launches"
        ],
    )


def _compute(run: Sections, found: dict[str, float | None]) -> Iterator[Finding]:
    compute, exposed = found["compute_fraction"], found["exposed_comm_fraction"]
    idle = found["gpu_idle_fraction"]
    if (
        compute is None
        or compute < COMPUTE_BOUND
        or (exposed or 0) >= QUIET
        or (idle or 0) >= QUIET
    ):
        return
    evidence = [f"compute is {_pct(compute)} of step time; exposed communication "
                f"{_pct(exposed)}, GPU idle {_pct(idle)}"]  # fmt: skip
    advice = []
    share = run.kernels.share
    if share:
        busy = sum(share.get(c, 0.0) for c in KERNEL_CATEGORIES)
        light = (
            (share.get("elementwise", 0.0) + share.get("reduction", 0.0)) / busy if busy else 0.0
        )
        evidence.append(f"elementwise and reduction kernels take {_pct(light)} of compute time")
        if light >= NON_GEMM:
            advice.append("fuse elementwise and normalization kernels (torch.compile)")
    if found["mfu"] is not None:
        evidence.append(f"MFU {_pct(found['mfu'])}")
    yield Finding(verdict="compute-bound", evidence=evidence, suggestions=advice)


def _late_rank(run: Sections, found: dict[str, float | None]) -> Iterator[Finding]:
    waiting = found["wait_fraction_of_comm"]
    if waiting is None or waiting < WAIT_SHARE:
        return
    evidence = [f"{_pct(waiting)} of communication time is ranks waiting for late arrivers",
                run.skew.evidence]  # fmt: skip
    advice = []
    if run.skew.slowest_rank is not None:
        advice.append(
            f"look at rank {run.skew.slowest_rank}: its host's data loading, CPU contention, "
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
