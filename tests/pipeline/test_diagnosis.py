"""The diagnosis: each verdict from the figures that trigger it, and no advice without one."""

from __future__ import annotations

import pytest
from commscope.collector.schema import (
    AlphaBeta,
    CollectiveSkew,
    Kernels,
    Overlap,
    RankOverlap,
    RankSteps,
    Sections,
    Skew,
    Summary,
)
from commscope.pipeline.diagnosis import diagnose


def run(*, comm: float, exposed: float, compute: float, idle: float | None = None,
        step_total: float = 1.0, shares: dict[str, float] | None = None) -> Sections:  # fmt: skip
    """One rank, two steps taking `step_total` seconds in all; times in seconds."""
    overlap = RankOverlap(ratio=(comm - exposed) / comm if comm else None, comm_time_s=comm,
                          overlapped_time_s=comm - exposed, exposed_comm_time_s=exposed,
                          compute_time_s=compute, source="gpu kernels")  # fmt: skip
    steps = RankSteps(count=2, mean_s=step_total / 2, min_s=None, max_s=None)
    return Sections(
        ranks=[0],
        overlap=Overlap(mean=overlap.ratio, per_rank={"0": overlap}),
        steps={"0": steps},
        kernels=Kernels(idle_ratio_mean=idle, share=shares or {}),
    )


def test_exposed_communication_above_a_fifth_of_the_step_is_communication_bound() -> None:
    found = diagnose(run(comm=0.5, exposed=0.45, compute=0.3, idle=0.05))
    assert found.verdict == "communication-bound"
    assert found.figures["exposed_comm_fraction"] == pytest.approx(0.45)
    (finding,) = found.findings
    assert finding.evidence[:2] == [
        "exposed communication is 45.0% of step time (mean over ranks)",
        "only 10.0% of communication overlaps compute",
    ]
    assert finding.suggestions[0].startswith("overlap communication with compute")


def test_nothing_past_a_threshold_is_balanced_without_advice() -> None:
    found = diagnose(run(comm=0.1, exposed=0.05, compute=0.6, idle=0.05))
    assert (found.verdict, found.findings) == ("balanced", [])


def test_a_busy_gpu_with_little_exposed_comm_is_compute_bound() -> None:
    shares = {"gemm": 0.3, "elementwise": 0.3, "reduction": 0.1, "communication": 0.3}
    found = diagnose(run(comm=0.1, exposed=0.02, compute=0.9, idle=0.02, shares=shares))
    assert found.verdict == "compute-bound"
    (finding,) = found.findings
    # elementwise + reduction = 0.4 of the 0.7 of compute kernels
    assert "elementwise and reduction kernels take 57.1% of compute time" in finding.evidence
    assert finding.suggestions == ["fuse elementwise and normalization kernels (torch.compile)"]


def test_an_idle_gpu_is_input_or_launch_bound() -> None:
    found = diagnose(run(comm=0.1, exposed=0.05, compute=0.4, idle=0.35))
    assert found.verdict == "input- or launch-bound"
    assert found.findings[0].evidence == [
        "the GPU sits idle 35.0% of the span it is active (mean over ranks)"
    ]


def test_several_verdicts_are_ranked_by_their_figure() -> None:
    found = diagnose(run(comm=0.5, exposed=0.3, compute=0.3, idle=0.6))
    assert found.verdict == "input- or launch-bound; also communication-bound"


def test_without_steps_or_gpu_there_is_nothing_to_judge() -> None:
    sections = Sections(ranks=[0])
    assert diagnose(sections).verdict.startswith("n/a")


def test_late_arrivals_name_the_rank_only_when_the_skew_named_it() -> None:
    sections = run(comm=0.5, exposed=0.3, compute=0.3, idle=0.05)
    waits = {"AllReduce": CollectiveSkew(instances=8, skew_s=Summary(), wait_s=0.4)}
    sections.skew = Skew(per_collective=waits, slowest_rank=3, evidence="why")
    (late,) = [f for f in diagnose(sections).findings if f.verdict == "late arrivals"]
    assert late.evidence == [
        "80.0% of communication time is ranks waiting for late arrivers",
        "why",
    ]
    assert late.suggestions[0].startswith("look at rank 3: ")
    sections.skew = Skew(per_collective=waits, slowest_rank=None, evidence="why")
    (late,) = [f for f in diagnose(sections).findings if f.verdict == "late arrivals"]
    assert late.suggestions == []


def test_the_alpha_beta_fit_gives_the_latency_bound_size() -> None:
    sections = run(comm=0.5, exposed=0.45, compute=0.3)
    fit = AlphaBeta(instances=10, sizes=5, alpha_s=20e-6, beta_Bps=50e9, r2=0.97,
                    peak_ratio=0.2, latency_bound=0.4)  # fmt: skip
    sections.alpha_beta = {"0": {"AllReduce": fit}}
    (finding,) = diagnose(sections).findings
    # α·β = 20 µs x 50 GB/s = 1 MB
    assert (
        "AllReduce on group 0: α = 20 µs, β = 50 GB/s: messages below 1 MB are latency-bound"
        " (40.0% of its instances)"
    ) in finding.evidence
    assert "the network delivers 20.0% of the link peak" in finding.evidence
    assert finding.suggestions[-1] == (
        "bucket AllReduce messages above 1 MB (group 0) so that bandwidth, not latency, dominates"
    )


@pytest.mark.parametrize(
    ("r2", "below", "says"),
    [
        (0.5, 0.4, "; a loose fit (R² 0.50), so no advice from it"),
        (None, 0.4, "; a loose fit (R² n/a), so no advice from it"),
        (0.97, 0.1, ""),  # tight, but few instances below the knee
    ],
)
def test_no_bucketing_advice_from_a_loose_fit_or_few_small_messages(
    r2: float | None, below: float, says: str
) -> None:
    sections = run(comm=0.5, exposed=0.45, compute=0.3)
    fit = AlphaBeta(instances=10, sizes=5, alpha_s=20e-6, beta_Bps=50e9, r2=r2,
                    latency_bound=below)  # fmt: skip
    sections.alpha_beta = {"0": {"AllReduce": fit}}
    (finding,) = diagnose(sections).findings
    line = (
        "AllReduce on group 0: α = 20 µs, β = 50 GB/s: messages below 1 MB are latency-bound"
        f" ({below:.1%} of its instances){says}"
    )
    assert line in finding.evidence
    assert not any(s.startswith("bucket") for s in finding.suggestions)
