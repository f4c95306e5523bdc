"""One span per ratio: figures against step time are clipped to the profiled steps' span, what
lies outside is reported apart, and no fraction of a whole exceeds 1 (times in ms below)."""

from __future__ import annotations

import pytest
from commscope.model.schema import (
    CommOp,
    CpuSpan,
    Event,
    FileStats,
    GpuOp,
    Report,
    Sections,
    Step,
    TraceMeta,
)
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.report import Options, ParsedFile, build_report
from hypothesis import given, settings
from hypothesis import strategies as st

MS = 1_000_000  # ns
TRAIN, GLOO = 1, 2  # threads


def report_of(*ranks: list[Event], gpu: str | None = None) -> Report:
    files = []
    for rank, events in enumerate(ranks):
        accumulator = Accumulator()
        accumulator.add_all(events)
        meta = TraceMeta(rank=rank, world_size=len(ranks), gpu_name=gpu)
        path = f"w/rank{rank}.json"
        files.append(ParsedFile("w", path, rank, meta, accumulator.result([path]), FileStats()))
    return build_report(["w"], files, [], Options())


# A gloo rank whose gloo spans cover the whole trace, with one ProfilerStep [10, 12):
# C = [0, 10.5) ∪ [11, 21) = 20.5; P = training-thread cpu_op [10, 11.5) minus its collective
# call [11, 11.5) = [10, 11) = 1. Whole trace: exposed = |C| - |C ∩ P| = 20.5 - 0.5 = 20, ten
# times the 2 ms step (1000% before). Within S = [10, 12): C ∩ S = [10, 10.5) ∪ [11, 12) = 1.5,
# C ∩ P ∩ S = [10, 10.5) = 0.5, exposed 1.0 = 50% of the step; compute 1.0 = 50%.
GLOO_RANK: list[Event] = [
    Step(1, 10 * MS, 2 * MS, TRAIN),
    CpuSpan(TRAIN, 10 * MS, 11 * MS + MS // 2, False),
    CpuSpan(TRAIN, 11 * MS, 11 * MS + MS // 2, True),
    CommOp("AllReduce", 0, 10 * MS + MS // 2, 4096, 2, False),
    CommOp("AllReduce", 11 * MS, 10 * MS, 4096, 2, False),
]


def test_gloo_spans_outside_the_one_step_are_left_out_of_the_step_figures() -> None:
    report = report_of(GLOO_RANK)
    steps = report.steps["0"]
    assert steps.span_s == pytest.approx(2e-3)
    assert (steps.comm_s, steps.exposed_comm_s, steps.compute_s) == pytest.approx(
        (1.5e-3, 1.0e-3, 1.0e-3)
    )
    assert steps.gpu_busy_s is None  # no GPU
    assert (steps.comm_outside_s, steps.compute_outside_s) == pytest.approx((19e-3, 0.0))
    figures = report.diagnosis.figures
    assert figures["exposed_comm_fraction"] == pytest.approx(0.5)
    assert figures["compute_fraction"] == pytest.approx(0.5)
    # 19 of the 20.5 ms of communication lie outside the step: 92.7% of it
    assert report.diagnosis.left_out == [
        "outside the profiled steps (summed over ranks): 19.0 ms of communication (92.7% of it) "
        "and 0 s of compute (0.0% of it)"
    ]


# A GPU rank whose kernels run past its last step: steps [0, 10) and [10, 20), compute
# [1, 9) ∪ [11, 19) ∪ [19.5, 27.5) = 24 (120% of the 20 ms of steps before), of which
# 8 + 8 + 0.5 = 16.5 within; communication [9, 10) within, [27.5, 28.5) outside.
GPU_RANK: list[Event] = [
    Step(1, 0, 10 * MS, TRAIN),
    Step(2, 10 * MS, 10 * MS, TRAIN),
    GpuOp("compute", 1 * MS, 8 * MS, "gemm"),
    GpuOp("compute", 11 * MS, 8 * MS, "gemm"),
    GpuOp("compute", 19 * MS + MS // 2, 8 * MS, "gemm"),
    CommOp("AllReduce", 9 * MS, 1 * MS, 4096, 2, True),
    CommOp("AllReduce", 27 * MS + MS // 2, 1 * MS, 4096, 2, True),
]


def test_gpu_kernels_past_the_last_step_are_left_out_of_the_step_figures() -> None:
    report = report_of(GPU_RANK, gpu="NVIDIA H100 80GB HBM3")
    steps = report.steps["0"]
    assert steps.span_s == pytest.approx(20e-3)
    assert (steps.compute_s, steps.comm_s, steps.exposed_comm_s) == pytest.approx(
        (16.5e-3, 1e-3, 1e-3)
    )
    assert steps.gpu_busy_s == pytest.approx(17.5e-3)  # 16.5 compute + 1 communication
    assert (steps.comm_outside_s, steps.compute_outside_s) == pytest.approx((1e-3, 7.5e-3))
    figures = report.diagnosis.figures
    assert figures["compute_fraction"] == pytest.approx(16.5 / 20)  # was 24 / 20 = 120%
    assert figures["exposed_comm_fraction"] == pytest.approx(1 / 20)
    assert figures["gpu_busy_fraction"] == pytest.approx(17.5 / 20)
    assert report.diagnosis.left_out == [
        "outside the profiled steps (summed over ranks): 1.00 ms of communication (50.0% of it) "
        "and 7.50 ms of compute (31.2% of it)"
    ]


def test_a_run_sums_its_windows_step_spans() -> None:
    files = []
    for window, events in (("a", GPU_RANK), ("b", GPU_RANK)):
        accumulator = Accumulator()
        accumulator.add_all(events)
        meta = TraceMeta(rank=0, world_size=1)
        files.append(ParsedFile(window, f"{window}/r0", 0, meta, accumulator.result(), FileStats()))
    report = build_report(["a", "b"], files, [], Options())
    assert report.steps["0"].span_s == pytest.approx(40e-3)
    assert report.steps["0"].compute_outside_s == pytest.approx(15e-3)
    assert report.diagnosis.figures["compute_fraction"] == pytest.approx(16.5 / 20)


# ---------------------------------------------------------------- every fraction within [0, 1]

spans = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 15)), max_size=6)


@st.composite
def rank_events(draw: st.DrawFn) -> list[Event]:
    """Random steps, compute, copies and collectives (µs), on the GPU or on gloo threads."""
    on_gpu = draw(st.booleans())
    events: list[Event] = [
        Step(i, s * 1000, d * 1000, TRAIN) for i, (s, d) in enumerate(draw(spans))
    ]
    for i, (s, d) in enumerate(draw(spans)):
        size = draw(st.sampled_from([None, 4096, 2**20]))
        events.append(CommOp("AllReduce", s * 1000, d * 1000, size, 2, on_gpu, "0", i))
    for s, d in draw(spans):
        if on_gpu:
            events.append(GpuOp(draw(st.sampled_from(["compute", "memcpy"])), s * 1000, d * 1000))
        else:
            events.append(CpuSpan(TRAIN, s * 1000, (s + d) * 1000, draw(st.booleans())))
    return events


def fractions(found: Sections) -> list[float | None]:
    """Every figure of `found` that is a fraction of a whole."""
    out: list[float | None] = [found.overlap.mean, found.overlap.min, found.overlap.max]
    out += [o.ratio for o in found.overlap.per_rank.values()]
    out += [t.share for t in found.traffic.values()]
    out += [found.kernels.idle_ratio_mean, *found.kernels.share.values()]
    for k in found.kernels.per_rank.values():
        out += [k.idle_ratio, *k.share.values()]
    out += [a.last_share for a in found.skew.per_rank.values()]
    out += [f.latency_bound for kinds in found.alpha_beta.values() for f in kinds.values()]
    out += [i.share for i in found.health.issues]
    return out


@given(st.lists(rank_events(), min_size=1, max_size=3))
@settings(max_examples=150, deadline=None)
def test_every_fraction_of_a_whole_lies_within_0_and_1(ranks: list[list[Event]]) -> None:
    report = report_of(*ranks)
    figures = report.diagnosis.figures
    not_of_a_whole = {"bandwidth_utilization", "mfu"}  # rates against a peak, flagged if > 1
    values = [v for k, v in figures.items() if k not in not_of_a_whole]
    values += fractions(report) + [v for w in report.windows for v in fractions(w)]
    assert all(0.0 <= v <= 1.0 for v in values if v is not None), values
