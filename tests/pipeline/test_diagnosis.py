"""The diagnosis: each verdict from the figures that trigger it, and no advice without one."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
from commscope.model.schema import (
    AlphaBeta,
    Collectives,
    CollectiveSkew,
    CollectiveStats,
    CommOp,
    Event,
    FileStats,
    Finding,
    GpuOp,
    Kernels,
    Launches,
    Network,
    Overlap,
    RankLaunches,
    RankOverlap,
    RankSteps,
    Report,
    RunConfig,
    Sections,
    Skew,
    Step,
    Summary,
    Throughput,
    TraceMeta,
)
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.config import parse_config
from commscope.pipeline.diagnosis import INPUT_ADVICE, LAUNCH_ADVICE, diagnose
from commscope.pipeline.report import Options, ParsedFile, build_report
from commscope.service.offline import analyse


def run(*, comm: float, exposed: float, compute: float, busy: float | None = 0.95,
        idle: float | None = None, step_total: float = 1.0,
        shares: dict[str, float] | None = None, steps: int = 2) -> Sections:  # fmt: skip
    """One rank, `steps` steps taking `step_total` seconds in all, one kind of collective
    (4 calls); times in seconds, all within the steps (`busy`: GPU busy time within them;
    `idle`: the GPU's idle share of its active span)."""
    overlap = RankOverlap(ratio=(comm - exposed) / comm if comm else None, comm_time_s=comm,
                          overlapped_time_s=comm - exposed, exposed_comm_time_s=exposed,
                          compute_time_s=compute, evidence_text="gpu kernels")  # fmt: skip
    stepped = RankSteps(count=steps, mean_s=step_total / steps, min_s=None, max_s=None,
                      span_s=step_total, comm_s=comm, exposed_comm_s=exposed, compute_s=compute,
                      gpu_busy_s=busy, comm_outside_s=0.0, compute_outside_s=0.0)  # fmt: skip
    stats = CollectiveStats(count=4, sized_count=4, message_bytes=4 * 2**20, bus_bytes=None,
                            time_s=comm, algbw_Bps=Summary(), busbw_Bps=Summary())  # fmt: skip
    return Sections(
        ranks=[0],
        overlap=Overlap(mean=overlap.ratio, per_rank={"0": overlap}),
        steps={"0": stepped},
        kernels=Kernels(idle_ratio_mean=idle, share=shares or {}),
        collectives=Collectives(
            per_rank={"0": {"AllReduce": stats}}, all_ranks={"AllReduce": stats}
        ),
        throughput=Throughput(iterations=steps),
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


def test_a_gpu_idle_within_the_steps_is_input_or_launch_bound() -> None:
    found = diagnose(run(comm=0.1, exposed=0.05, compute=0.4, busy=0.65, idle=0.05))
    assert found.verdict == "input- or launch-bound"
    assert found.findings[0].evidence == [
        "the GPU is busy 65.0% of step time: idle 35.0% of the profiled steps (mean over ranks)",
        "between its first and last activity it sits idle 5.0% of the time",
        "no kernel joined to a launch call in the traces: launch overhead is neither shown nor "
        "ruled out",
    ]
    # without launch figures, no launch advice
    assert found.findings[0].suggestions == [INPUT_ADVICE]


def host_bound(launches: RankLaunches) -> Finding:
    sections = run(comm=0.1, exposed=0.05, compute=0.4, busy=0.65, idle=0.05)
    sections.launches = Launches(all_ranks=launches, per_rank={"0": launches})
    (finding,) = diagnose(sections).findings
    return finding


def test_short_kernels_started_at_once_back_launch_bound_and_its_advice() -> None:
    # 600 of 1000 kernels shorter than their launch call (60% >= 50%), median delay 8 µs < 50 µs
    delay = Summary(median=8e-6, p95=300e-6, relative_error=0.01)
    launches = RankLaunches(calls=1000, call_time_s=5e-3, kernels=1000, queue_delay_s=delay,
                            shorter=600, shorter_share=0.6)  # fmt: skip
    finding = host_bound(launches)
    assert finding.evidence[2:] == [
        "kernel launches (all ranks): 1,000 calls, 5.00 ms of CPU time; queue delay (kernel start"
        " - launch start) median ~8.00 µs, p95 ~300 µs; 600 of 1,000 kernels (60.0%) ran shorter"
        " than their launch call",
        "launch-bound: most kernels run shorter than their launch call and start within 50.0 µs "
        "of it (an empty queue): the CPU cannot launch fast enough",
    ]
    assert finding.suggestions == [INPUT_ADVICE, LAUNCH_ADVICE]


@pytest.mark.parametrize(("shorter", "median_s"), [(400, 8e-6), (600, 2e-3)])
def test_long_kernels_or_a_full_queue_refute_launch_bound(shorter: int, median_s: float) -> None:
    # 40% short (below half), or kernels waiting a median 2 ms in the queue: no launch advice
    delay = Summary(median=median_s, p95=median_s, relative_error=0.01)
    launches = RankLaunches(calls=1000, call_time_s=5e-3, kernels=1000, queue_delay_s=delay,
                            shorter=shorter, shorter_share=shorter / 1000)  # fmt: skip
    finding = host_bound(launches)
    assert finding.evidence[3] == (
        "not launch-bound: that takes 50.0% or more of the kernels shorter than their launch "
        "call and a median queue delay under 50.0 µs"
    )
    assert finding.suggestions == [INPUT_ADVICE]


def test_several_verdicts_are_ranked_by_their_figure() -> None:
    # idle within the steps 1 - 0.4 = 0.6 outweighs exposed communication 0.3
    found = diagnose(run(comm=0.5, exposed=0.3, compute=0.3, busy=0.4))
    assert found.verdict == "input- or launch-bound; also communication-bound"
    # and the report's findings come in the verdict's order, the one named first on top
    bound = [f.verdict for f in found.findings if f.verdict.endswith("-bound")]
    assert bound == ["input- or launch-bound", "communication-bound"]


def test_without_steps_there_is_too_little_to_judge() -> None:
    sections = Sections(ranks=[0], steps={"0": RankSteps(count=0, mean_s=None, min_s=None,
                                                         max_s=None, span_s=0.0)})  # fmt: skip
    assert diagnose(sections).verdict == (
        "too little to judge: no profiled step (ProfilerStep) in the traces; "
        "the verdicts weigh step time"
    )


def test_under_a_millisecond_of_step_time_is_too_little_to_judge() -> None:
    # everything past its threshold, but 0.8 ms of profiled step time: no verdict from it
    found = diagnose(run(comm=0.0008, exposed=0.0007, compute=0.0001, busy=0.0002,
                         step_total=0.0008))  # fmt: skip
    assert found.verdict == (
        "too little to judge: 800 µs of profiled step time per rank, under the 1 ms minimum"
    )
    assert found.findings == []
    assert found.figures["exposed_comm_fraction"] == pytest.approx(0.875)  # still shown


def test_without_communication_there_is_no_balance_to_speak_of() -> None:
    sections = run(comm=0.0, exposed=0.0, compute=0.6, busy=0.9)
    sections.collectives = Collectives()
    found = diagnose(sections)
    assert (
        found.verdict == "no communication in the traces (compute only); nothing past a threshold"
    )
    assert [f.verdict for f in found.findings] == ["no communication"]


def test_late_arrivals_name_the_rank_only_when_the_skew_named_it() -> None:
    sections = run(comm=0.5, exposed=0.3, compute=0.3)
    waits = {"AllReduce": CollectiveSkew(instances=8, skew_s=Summary(), wait_s=0.4,
                                         wait_in_call_s=0.4, call_time_s=0.5)}  # fmt: skip
    sections.skew = Skew(per_collective=waits, waited_for_rank=3, evidence="why")
    (late,) = [f for f in diagnose(sections).findings if f.verdict == "late arrivals"]
    assert late.evidence == [
        "80.0% of the matched collectives' time is ranks waiting for late arrivers",
        "why",
    ]
    assert late.suggestions[0].startswith("look at rank 3, the rank the others wait for: ")
    sections.skew = Skew(per_collective=waits, waited_for_rank=None, evidence="why")
    (late,) = [f for f in diagnose(sections).findings if f.verdict == "late arrivals"]
    assert late.suggestions == []


def test_two_matched_collectives_are_too_few_to_judge_late_arrivals_by() -> None:
    sections = run(comm=0.5, exposed=0.3, compute=0.3)
    waits = {"AllReduce": CollectiveSkew(instances=2, skew_s=Summary(), wait_s=0.4,
                                         wait_in_call_s=0.4, call_time_s=0.5)}  # fmt: skip
    sections.skew = Skew(per_collective=waits, waited_for_rank=None, evidence="why")
    assert "late arrivals" not in [f.verdict for f in diagnose(sections).findings]


def fitted(sections: Sections, **fit: object) -> Finding:
    """The communication-bound finding with one AllReduce fit on group 0 (α·β = 20 µs x
    50 GB/s = 1 MB) of `fit`'s R², share below the knee, bus bytes and peak ratio."""
    values: dict[str, object] = {"instances": 10, "sizes": 5, "alpha_s": 20e-6,
                                 "beta_Bps": 50e9, **fit}  # fmt: skip
    sections.alpha_beta = {"0": {"AllReduce": AlphaBeta(**values)}}  # type: ignore[arg-type]
    (finding,) = diagnose(sections).findings
    return finding


KNEE_LINE = (
    "AllReduce on group 0: α = 20.0 µs, β = 50.0 GB/s: messages below 1.00 MB are latency-bound"
)


def test_a_tight_fit_with_traffic_above_the_knee_advises_bucketing() -> None:
    # 10 MB of AllReduce bus bytes over 4 steps: 2.5 MB per step, above the 1 MB knee
    finding = fitted(run(comm=0.5, exposed=0.45, compute=0.3, steps=4), r2=0.97,
                     latency_bound=0.4, bus_bytes=10e6, peak_ratio=0.2)  # fmt: skip
    assert f"{KNEE_LINE} (40.0% of its instances)" in finding.evidence
    assert (
        "the network delivers 20.0% of the link peak "
        "(β of the AllReduce fit on group 0, R² 0.97: no waiting)"
    ) in finding.evidence
    assert finding.suggestions[-1] == (
        "bucket AllReduce messages above 1.00 MB (group 0) so that bandwidth, not latency, "
        "dominates"
    )


@pytest.mark.parametrize(
    ("r2", "below", "bus_bytes", "says"),
    [
        (0.5, 0.4, 10e6, "a loose fit (R² 0.50), so no advice from it"),
        (None, 0.4, 10e6, "a loose fit (R² n/a), so no advice from it"),
        (0.97, 0.1, 10e6, "under 25% of its instances below the knee: no bucketing advice"),
        # the 6.8k-parameter job: 108.8 kB over 4 steps is 27.2 KB per step, under the knee
        (0.97, 0.4, 108_800, "its traffic is 27.2 KB per step, below the knee: bucketing "
                             "cannot lift messages above it"),
        (0.97, 0.4, None, "its traffic per profiled step is unknown, so no bucketing advice"),
    ],
)  # fmt: skip
def test_no_bucketing_advice_unless_it_can_help(
    r2: float | None, below: float, bus_bytes: float | None, says: str
) -> None:
    finding = fitted(run(comm=0.5, exposed=0.45, compute=0.3, steps=4), r2=r2,
                     latency_bound=below, bus_bytes=bus_bytes)  # fmt: skip
    assert f"{KNEE_LINE} ({below:.1%} of its instances); {says}" in finding.evidence
    assert not any(s.startswith("bucket") for s in finding.suggestions)


def test_no_bucketing_advice_from_a_tight_fit_over_fewer_than_three_steps() -> None:
    # the DLRM traces: one profiled step; 10 MB over 2 steps would be well above the knee
    finding = fitted(run(comm=0.5, exposed=0.45, compute=0.3, steps=2), r2=0.97,
                     latency_bound=0.4, bus_bytes=10e6)  # fmt: skip
    assert (
        f"{KNEE_LINE} (40.0% of its instances); from 2 profiled steps (under 3): no advice"
    ) in finding.evidence
    assert not any(s.startswith("bucket") for s in finding.suggestions)


def test_a_loose_fit_is_never_quoted_as_what_the_network_delivers() -> None:
    # the DLRM AllToAll: R² 0.319, β/peak 14.22%; the mean bus bandwidth is 30% of the peak
    sections = run(comm=0.5, exposed=0.45, compute=0.3)
    sections.network = Network(utilization=0.3)
    finding = fitted(sections, r2=0.319, latency_bound=1.0, bus_bytes=10e6, peak_ratio=0.1422)
    assert (
        "the network delivers 30.0% of the link peak "
        "(mean bus bandwidth over ranks, waiting included)"
    ) in finding.evidence
    assert not any("14.2%" in line for line in finding.evidence)


def test_no_ddp_bucket_advice_when_a_steps_all_reduce_fits_the_first_bucket() -> None:
    # the sample's 6.8k-parameter job: 27.2 kB of AllReduce per step, under DDP's 1 MiB
    sections = run(comm=0.5, exposed=0.45, compute=0.3)
    stats = sections.collectives.per_rank["0"]["AllReduce"]
    stats.message_bytes = 2 * 27_200  # over the 2 steps
    (finding,) = diagnose(sections).findings
    assert not any("bucket_cap_mb so" in s for s in finding.suggestions)
    assert (
        "all-reduce traffic is 27.2 KB per step (mean over ranks), within DDP's first "
        "bucket (1 MiB): bucket_cap_mb cannot split it, so no bucket advice"
    ) in finding.evidence


def test_no_ddp_bucket_advice_when_the_all_reduce_sizes_are_unknown() -> None:
    sections = run(comm=0.5, exposed=0.45, compute=0.3)
    sections.collectives.per_rank["0"]["AllReduce"].message_bytes = None
    (finding,) = diagnose(sections).findings
    assert not any("bucket_cap_mb so" in s for s in finding.suggestions)
    assert "all-reduce traffic per step unknown: no DDP bucket advice" in finding.evidence


def test_ddp_bucket_advice_when_a_steps_all_reduce_exceeds_the_first_bucket() -> None:
    # run(): 4 MiB of AllReduce over 2 steps, 2 MiB per step
    (finding,) = diagnose(run(comm=0.5, exposed=0.45, compute=0.3)).findings
    assert finding.suggestions[0].endswith(
        "DDP bucket_cap_mb so gradient all-reduces start during backward"
    )


def test_full_overlap_could_hide_no_more_than_the_compute() -> None:
    (finding,) = diagnose(run(comm=0.7, exposed=0.66, compute=0.12)).findings
    assert (
        "compute is 12.0% of step time: even full overlap hides at most that much of the "
        "exposed communication"
    ) in finding.evidence


# ---------------------------------------------------------------- from hand-made events

MS = 1_000_000  # ns
US = 1000


def report_of(events: list[Event]) -> Report:
    accumulator = Accumulator()
    accumulator.add_all(events)
    meta = TraceMeta(rank=0, world_size=1, gpu_name="NVIDIA H100 80GB HBM3")
    parsed = ParsedFile("w", "w/rank0.json", 0, meta, accumulator.result(), FileStats())
    return build_report(["w"], [parsed], Options())


def test_a_gpu_busy_a_sliver_of_the_step_is_input_bound_not_balanced() -> None:
    # one 100 ms step; the GPU runs 20 µs of compute then 10 µs of communication, back to
    # back: idle 0% of its active span (which gave "balanced"), busy 30 µs = 0.03% of the step
    report = report_of([
        Step(1, 0, 100 * MS, 1),
        GpuOp("compute", 50 * MS, 20 * US, "gemm"),
        CommOp("AllReduce", 50 * MS + 20 * US, 10 * US, 4096, 2, True),
    ])  # fmt: skip
    d = report.diagnosis
    assert d.figures["gpu_idle_fraction"] == 0.0
    assert d.figures["gpu_busy_fraction"] == pytest.approx(0.0003)
    assert d.verdict == "input- or launch-bound"
    assert d.findings[0].evidence[0] == (
        "the GPU is busy 0.0% of step time: idle 100.0% of the profiled steps (mean over ranks)"
    )


def test_a_trace_without_collectives_is_never_called_balanced() -> None:
    # a 10 ms step: 7 ms of compute and 2 ms of memcpy (busy 90%, compute 70%), no collective
    report = report_of([
        Step(1, 0, 10 * MS, 1),
        GpuOp("compute", 0, 7 * MS, "gemm"),
        GpuOp("memcpy", 7 * MS, 2 * MS),
    ])  # fmt: skip
    assert report.diagnosis.verdict == (
        "no communication in the traces (compute only); nothing past a threshold"
    )
    assert [f.verdict for f in report.diagnosis.findings] == ["no communication"]


def test_a_trace_without_steps_is_too_little_to_judge() -> None:
    report = report_of([GpuOp("compute", 0, 7 * MS, "gemm"),
                        CommOp("AllReduce", 7 * MS, 5 * MS, 4096, 2, True)])  # fmt: skip
    assert report.diagnosis.verdict.startswith("too little to judge: no profiled step")
    assert report.diagnosis.figures["exposed_comm_fraction"] is None


def test_the_bundled_6_8k_parameter_cpu_job_gets_no_bucket_advice() -> None:
    # samples/gloo_ddp_2rank: 2 ranks of DDP over gloo, ~27 kB of all-reduce per step
    root = Path(__file__).resolve().parents[2] / "samples"
    config = parse_config((root / "mlp_ddp.toml").read_text(), "mlp_ddp.toml")
    report = analyse(root / "gloo_ddp_2rank", Options(config=config, config_path="mlp_ddp.toml"))
    advice = [s for f in report.diagnosis.findings for s in f.suggestions]
    assert advice and not any("bucket" in s for s in advice)


# ---------------------------------------------------------------- waiting is not communication


def split(sections: Sections, transfer: float, waiting: float, unmatched: float) -> Sections:
    """`sections` with rank 0's exposed communication split (seconds within the steps)."""
    steps = sections.steps["0"]
    assert steps.exposed_comm_s == pytest.approx(transfer + waiting + unmatched)
    sections.steps["0"] = msgspec.structs.replace(
        steps, exposed_transfer_s=transfer, exposed_waiting_s=waiting,
        exposed_unmatched_s=unmatched,
    )  # fmt: skip
    return sections


def named(sections: Sections, rank: int | None) -> Sections:
    sections.skew = Skew(waited_for_rank=rank, evidence="rank 3 caused 90% of all waiting")
    return sections


def test_exposed_waiting_is_a_verdict_of_its_own_naming_the_rank_the_others_wait_for() -> None:
    # the DLRM shape: 45% exposed, of it 43% waiting and 2% transfer
    sections = named(split(run(comm=0.5, exposed=0.45, compute=0.3), 0.02, 0.43, 0.0), 3)
    found = diagnose(sections)
    assert found.verdict == "waiting for rank 3"
    assert found.figures["exposed_waiting_fraction"] == pytest.approx(0.43)
    (finding,) = found.findings
    assert finding.evidence == [
        "exposed waiting is 43.0% of step time (mean over ranks): ranks sit in collectives "
        "until the last member arrives; exposed transfer is 2.0%",
        "rank 3 caused 90% of all waiting",
        "only 10.0% of communication overlaps compute",  # true, kept: evidence, no advice
    ]
    (advice,) = finding.suggestions
    assert advice.startswith("look at what rank 3 does before the collectives")


def test_waiting_without_a_named_rank_says_no_single_rank() -> None:
    sections = named(split(run(comm=0.5, exposed=0.45, compute=0.3), 0.02, 0.43, 0.0), None)
    assert diagnose(sections).verdict == "waiting for late ranks (no single rank)"


def test_communication_bound_weighs_transfer_and_unmatched_and_says_the_unmatched() -> None:
    sections = split(run(comm=0.5, exposed=0.45, compute=0.3), 0.15, 0.20, 0.10)
    found = diagnose(named(sections, 3))
    # transfer + unmatched 25% and waiting 20% both pass a fifth: both verdicts, by weight
    assert found.verdict == "communication-bound; also waiting for rank 3"
    assert found.findings[0].evidence[0] == (
        "exposed transfer is 15.0% of step time (mean over ranks; exposed communication "
        "45.0%, of it waiting 20.0%); 10.0% more is in calls matched to no other rank's call, "
        "counted as communication since its waiting cannot be told apart"
    )


def test_exposed_communication_past_a_fifth_goes_to_the_larger_of_its_parts() -> None:
    # 30% exposed: 12% transfer, 18% waiting: neither passes a fifth alone
    sections = named(split(run(comm=0.5, exposed=0.30, compute=0.3), 0.12, 0.18, 0.0), 3)
    assert diagnose(sections).verdict == "waiting for rank 3"
    sections = named(split(run(comm=0.5, exposed=0.30, compute=0.3), 0.18, 0.12, 0.0), 3)
    assert diagnose(sections).verdict == "communication-bound"


def test_late_arrivals_are_not_said_twice_when_waiting_is_the_verdict() -> None:
    sections = named(split(run(comm=0.5, exposed=0.45, compute=0.3), 0.02, 0.43, 0.0), 3)
    sections.skew.per_collective = {
        "AllReduce": CollectiveSkew(
            instances=8, skew_s=Summary(), wait_s=0.4, wait_in_call_s=0.4, call_time_s=0.5
        )
    }
    assert [f.verdict for f in diagnose(sections).findings] == ["waiting for rank 3"]


# ---------------------------------------------------------------- advice needs evidence


def verdicts_advice(sections: Sections, config: RunConfig | None = None) -> str:
    return " ".join(s for f in diagnose(sections, config).findings for s in f.suggestions)


def test_fsdp_advice_needs_fsdp_in_the_config_or_the_calls() -> None:
    sections = run(comm=0.5, exposed=0.45, compute=0.3)
    assert "FSDP" not in verdicts_advice(sections)  # all-reduces only: DDP's pattern
    fsdp = RunConfig(parallelism={"data_parallel_shard_degree": 8})
    (finding,) = diagnose(sections, fsdp).findings
    assert "the job runs FSDP: config data_parallel_shard_degree = 8" in finding.evidence
    assert "FSDP prefetching" in finding.suggestions[0]


def test_fsdp_is_seen_in_parameter_all_gathers_and_gradient_reduce_scatters() -> None:
    sections = run(comm=0.5, exposed=0.45, compute=0.3)
    gather = CollectiveStats(count=8, sized_count=0, message_bytes=None, bus_bytes=None,
                             time_s=0.1, algbw_Bps=Summary(), busbw_Bps=Summary())  # fmt: skip
    scatter = msgspec.structs.replace(gather, count=4)
    sections.collectives.all_ranks = {"AllGather": gather, "ReduceScatter": scatter}
    sections.collectives.per_rank = {"0": {"AllGather": gather, "ReduceScatter": scatter}}
    (finding,) = diagnose(sections).findings
    assert (
        "the job runs FSDP: 8 all-gathers and 4 reduce-scatters over 2 profiled steps "
        "(parameters gathered, gradients reduce-scattered)"
    ) in finding.evidence
    assert "FSDP prefetching" in finding.suggestions[0]


def test_a_ddp_config_gets_no_fsdp_advice() -> None:
    # the 2-rank DDP sample's config
    ddp = RunConfig(
        parallelism={"data_parallel_replicate_degree": 2, "data_parallel_shard_degree": 1}
    )
    (finding,) = diagnose(run(comm=0.5, exposed=0.45, compute=0.3), ddp).findings
    assert "the job runs DDP: config data_parallel_replicate_degree = 2, no sharding" in (
        finding.evidence
    )
    assert "FSDP" not in " ".join(finding.suggestions)


def test_a_config_naming_neither_gets_neither_advice() -> None:
    tp = RunConfig(parallelism={"tensor_parallel_degree": 8, "data_parallel_shard_degree": 1})
    advice = verdicts_advice(run(comm=0.5, exposed=0.45, compute=0.3), tp)
    assert "FSDP" not in advice and "DDP" not in advice
    assert advice.startswith("overlap communication with compute: issue collectives ahead")


def test_nccl_is_named_only_for_an_nccl_job() -> None:
    sections = run(comm=0.5, exposed=0.45, compute=0.3)
    sections.network = Network(utilization=0.1)
    assert "NCCL" not in verdicts_advice(sections, RunConfig(backend="gloo"))
    assert "NCCL's topology" in verdicts_advice(sections, RunConfig(backend="nccl"))


# ---------------------------------------------------------------- confidence


@pytest.mark.parametrize(
    ("steps", "level", "reason"),
    [
        (1, "low", "from 1 profiled step, fewer than 3: one step's noise can decide the "
                   "verdict, and no advice rests on a fit over steps"),
        (2, "low", "from 2 profiled steps, fewer than 3: one step's noise can decide the "
                   "verdict, and no advice rests on a fit over steps"),
        (3, "medium", "from 3 profiled steps, fewer than 10"),
        (10, "high", "from 10 profiled steps"),
    ],
)  # fmt: skip
def test_the_diagnosis_rates_its_confidence_by_the_profiled_steps(
    steps: int, level: str, reason: str
) -> None:
    found = diagnose(run(comm=0.5, exposed=0.45, compute=0.3, steps=steps))
    assert (found.confidence, found.confidence_reason) == (level, reason)


def test_a_capture_span_taken_as_one_step_gives_low_confidence() -> None:
    sections = run(comm=0.5, exposed=0.45, compute=0.3, steps=1)
    sections.steps["0"] = msgspec.structs.replace(sections.steps["0"], capture_span=True)
    sections.throughput = Throughput(iterations=0)  # a capture span is no iteration
    found = diagnose(sections)
    assert (found.confidence, found.confidence_reason) == (
        "low",
        "from an Nsight Systems capture span taken as one step (no step range)",
    )
