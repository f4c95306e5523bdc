"""Telling jobs apart: files that cannot belong to one job are never matched or pooled.

Traces are hand-made (`builders.job_trace`): one step, one AllReduce per rank ending at the
same time on every rank, a time base (`baseTimeNanoseconds`) per job. A file starts at its
base + its first event (ts 0 here), so each job's start is its base exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest
from builders import (
    A100,
    B200,
    DAY_NS,
    GEMM,
    GPU,
    JAN_NS,
    JUN_NS,
    MAR_NS,
    gloo_trace,
    job_trace,
    single_gpu_trace,
)
from commscope.collector.discover import rank_from_name
from commscope.pipeline import jobs, ranks
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.report import Options, ParsedFile, build_report
from commscope.service.offline import analysis
from kineto_builder import annotation, kernel, read, trace
from tools import needs_shared, shared_traces

HOUR_NS = 3600 * 10**9


def parsed(window: str, name: str, doc: bytes) -> ParsedFile:
    got = read(doc)
    accumulator = Accumulator()
    accumulator.add_all(got.events)
    path = f"{window}/{name}"
    return ParsedFile(
        window, path, rank_from_name(Path(name)), got.meta, accumulator.result([path]), got.stats
    )


def three_jobs() -> list[ParsedFile]:
    """One flat folder: 3 ranks of a 16-GPU B200 job (January), 2 of an 8-GPU A100 job
    (March), the 2 ranks of a 2-GPU H100 job (June)."""
    files = [
        parsed("mixed", f"b200_rank{r}.json", job_trace(r, 16, B200, JAN_NS)) for r in range(3)
    ]
    files += [parsed("mixed", f"a100_rank{r}.json", job_trace(r, 8, A100, MAR_NS)) for r in (0, 1)]
    files += [parsed("mixed", f"h100_rank{r}.json", job_trace(r, 2, GPU, JUN_NS)) for r in (0, 1)]
    return files


def names(found: Sequence[jobs.Job]) -> list[list[str]]:
    return [[Path(f.path).name for f in job.files] for job in found]


def test_three_jobs_in_one_folder_are_three_reports_each_with_its_own_ranks() -> None:
    reports = jobs.reports(["mixed"], three_jobs(), [], Options())
    assert [r.world_size for r in reports] == [16, 8, 2]
    assert [r.ranks for r in reports] == [[0, 1, 2], [0, 1], [0, 1]]
    assert [r.config.gpu_name for r in reports] == [B200, A100, GPU]
    for report in reports:
        # each rank's one AllReduce, matched across that job's ranks only, ending together
        assert report.collectives.all_ranks["AllReduce"].count == len(report.ranks)
        matching = report.matching
        assert (matching.instances, matching.desync_count, matching.unmatched) == (1, 0, 0)
        assert {o.offset_s for o in report.clocks.per_rank.values()} == {0.0}
        assert report.inputs.skipped == []
    assert [r.inputs.files for r in reports] == [3, 2, 2]
    assert [r.inputs.job for r in reports] == [1, 2, 3]
    described = [j.description for j in reports[0].inputs.jobs]
    assert described == [
        "world 16, nccl, NVIDIA B200, started 2024-01-01 00:00:00 UTC",
        "world 8, nccl, NVIDIA A100-SXM4-80GB, started 2024-03-01 00:00:00 UTC",
        "world 2, nccl, NVIDIA H100 80GB HBM3, started 2024-06-01 00:00:00 UTC",
    ]
    assert all(r.inputs.jobs == reports[0].inputs.jobs for r in reports)
    assert [j.files for j in reports[0].inputs.jobs] == [3, 2, 2]


def test_one_job_is_one_report_that_names_no_job() -> None:
    files = [parsed("w", f"rank{r}.json", job_trace(r, 2)) for r in (0, 1)]
    (report,) = jobs.reports(["w"], files, [], Options())
    assert (report.inputs.job, report.inputs.jobs, report.ranks) == (None, [], [0, 1])


def test_two_runs_of_one_configuration_months_apart_in_a_flat_folder_are_two_jobs() -> None:
    files = [parsed("flat", f"jan_rank{r}.json", job_trace(r, 2, base_ns=JAN_NS)) for r in (0, 1)]
    files += [parsed("flat", f"mar_rank{r}.json", job_trace(r, 2, base_ns=MAR_NS)) for r in (0, 1)]
    found = jobs.split(files)
    assert names(found.jobs) == [
        ["jan_rank0.json", "jan_rank1.json"],
        ["mar_rank0.json", "mar_rank1.json"],
    ]
    assert [j.start_ns for j in found.jobs] == [JAN_NS, MAR_NS]
    reports = jobs.reports(["flat"], files, [], Options())
    # not four files claiming ranks 0 and 1 twice (all skipped): two clean jobs
    assert [(r.ranks, r.inputs.skipped) for r in reports] == [([0, 1], []), ([0, 1], [])]


def test_a_run_whose_windows_are_days_apart_stays_one_job() -> None:
    bases = {"iteration_10": JAN_NS, "iteration_20": JAN_NS + 3 * DAY_NS, "iteration_30": MAR_NS}
    files = [
        parsed(window, f"rank{r}.json", job_trace(r, 2, base_ns=base))
        for window, base in bases.items()
        for r in (0, 1)
    ]
    (report,) = jobs.reports(list(bases), files, [], Options())
    assert [w.name for w in report.windows] == list(bases)
    assert report.ranks == [0, 1] and report.inputs.jobs == []


def test_the_windows_of_two_runs_join_the_run_nearest_in_time() -> None:
    # window 1 holds both runs (January, March); window 2 only the March run, 2 days later
    files = [parsed("w1", f"jan_rank{r}.json", job_trace(r, 2, base_ns=JAN_NS)) for r in (0, 1)]
    files += [parsed("w1", f"mar_rank{r}.json", job_trace(r, 2, base_ns=MAR_NS)) for r in (0, 1)]
    later = MAR_NS + 2 * DAY_NS
    files += [parsed("w2", f"rank{r}.json", job_trace(r, 2, base_ns=later)) for r in (0, 1)]
    found = jobs.split(files)
    assert names(found.jobs) == [
        ["jan_rank0.json", "jan_rank1.json"],
        ["mar_rank0.json", "mar_rank1.json", "rank0.json", "rank1.json"],
    ]


def test_ranks_of_one_window_an_hour_apart_are_one_run_and_more_are_two() -> None:
    # the gap is chained: 0, +1 h, +2 h is one run; a further +1 h + 1 s starts another
    starts = [JAN_NS, JAN_NS + HOUR_NS, JAN_NS + 2 * HOUR_NS, JAN_NS + 3 * HOUR_NS + 10**9]
    files = [
        parsed("w", f"f{i}_rank{i}.json", job_trace(i, 8, base_ns=t)) for i, t in enumerate(starts)
    ]
    found = jobs.split(files)
    assert [len(j.files) for j in found.jobs] == [3, 1]


def test_a_file_without_a_gpu_name_joins_the_one_job_it_fits() -> None:
    files = [
        parsed("w", "rank0.json", job_trace(0, 2, GPU)),
        parsed("w", "rank1.json", job_trace(1, 2, None)),
    ]
    found = jobs.split(files)
    assert names(found.jobs) == [["rank0.json", "rank1.json"]]
    assert found.jobs[0].gpu_name == GPU and found.skipped == []


def test_a_file_that_fits_two_jobs_joins_the_one_beside_it_in_time() -> None:
    files = [parsed("w", f"h100_rank{r}.json", job_trace(r, 2, GPU, JAN_NS)) for r in (0, 1)]
    files.append(parsed("w", "a100_rank0.json", job_trace(0, 2, A100, MAR_NS)))
    files.append(parsed("w", "nogpu_rank1.json", job_trace(1, 2, None, MAR_NS)))
    found = jobs.split(files)
    assert names(found.jobs) == [
        ["h100_rank0.json", "h100_rank1.json"],
        ["a100_rank0.json", "nogpu_rank1.json"],
    ]


def test_a_file_that_fits_two_jobs_and_is_near_neither_is_skipped_with_the_reason() -> None:
    files = [parsed("w", f"h100_rank{r}.json", job_trace(r, 2, GPU, JAN_NS)) for r in (0, 1)]
    files.append(parsed("w", "a100_rank0.json", job_trace(0, 2, A100, MAR_NS)))
    files.append(parsed("w", "nogpu_rank1.json", job_trace(1, 2, None, JUN_NS)))
    found = jobs.split(files)
    assert len(found.jobs) == 2
    (skipped,) = found.skipped
    assert skipped.path == "w/nogpu_rank1.json"
    assert skipped.reason.startswith(
        "could belong to 2 jobs (world 2, nccl, NVIDIA A100-SXM4-80GB; "
        "world 2, nccl, NVIDIA H100 80GB HBM3): the trace has no GPU model"
    )


def test_a_file_without_a_time_base_joins_the_one_run_of_its_window() -> None:
    files = [
        parsed("w", "rank0.json", job_trace(0, 2, base_ns=JAN_NS)),
        parsed("w", "rank1.json", job_trace(1, 2, base_ns=None)),  # starts at 0: not a date
    ]
    assert jobs.start_time_ns(files[1]) is None
    found = jobs.split(files)
    assert names(found.jobs) == [["rank0.json", "rank1.json"]] and found.skipped == []


def test_a_file_without_a_time_base_beside_two_runs_is_skipped_with_the_reason() -> None:
    files = [parsed("w", f"jan_rank{r}.json", job_trace(r, 2, base_ns=JAN_NS)) for r in (0, 1)]
    files += [parsed("w", f"mar_rank{r}.json", job_trace(r, 2, base_ns=MAR_NS)) for r in (0, 1)]
    files.append(parsed("w", "rank1.json", job_trace(1, 2, base_ns=None)))
    found = jobs.split(files)
    assert len(found.jobs) == 2
    (skipped,) = found.skipped
    assert skipped.path == "w/rank1.json" and "no time base" in skipped.reason


def test_epoch_timestamps_without_a_base_are_a_time_base() -> None:
    # Kineto's older form: ts in µs since the epoch, no baseTimeNanoseconds
    jan_us = JAN_NS // 1000
    doc = trace([annotation("ProfilerStep#1", jan_us, 1000), kernel(GEMM, jan_us + 5, 100)])
    start = jobs.start_time_ns(parsed("w", "rank0.json", doc))
    assert start is not None and abs(start - JAN_NS) < 1000  # µs floats: within a µs


def test_a_cpu_only_job_and_a_single_gpu_trace_are_two_jobs() -> None:
    # the single-GPU trace has no world size nor backend, but a GPU: a gloo job has none
    files = [parsed("w", f"rank{r}.json", gloo_trace(r)) for r in (0, 1)]
    files.append(parsed("w", "solo.json", single_gpu_trace()))
    found = jobs.split(files)
    assert names(found.jobs) == [["rank0.json", "rank1.json"], ["solo.json"]]
    assert [(j.world_size, j.backend, j.gpu_name) for j in found.jobs] == [
        (2, "gloo", jobs.NO_GPU),
        (None, None, GPU),
    ]


def test_the_split_does_not_depend_on_the_order_of_files_in_a_window() -> None:
    files = three_jobs()
    files += [parsed("mixed", f"jan_rank{r}.json", job_trace(r, 2, base_ns=JAN_NS)) for r in (0, 1)]
    forward = names(jobs.split(files).jobs)
    assert names(jobs.split(files[::-1]).jobs) == forward
    assert len(forward) == 4


def test_the_largest_job_is_reported_and_the_other_files_skipped_with_the_reason() -> None:
    chosen = jobs.largest(three_jobs())
    assert [Path(f.path).name for f in chosen.files] == [f"b200_rank{r}.json" for r in range(3)]
    assert chosen.job == 1 and len(chosen.jobs) == 3
    reasons = {s.path: s.reason for s in chosen.skipped}
    assert sorted(reasons) == [
        "mixed/a100_rank0.json",
        "mixed/a100_rank1.json",
        "mixed/h100_rank0.json",
        "mixed/h100_rank1.json",
    ]
    assert reasons["mixed/h100_rank0.json"] == (
        "belongs to another job than the one reported (job 1 of 3: world 16, nccl, NVIDIA "
        "B200, started 2024-01-01 00:00:00 UTC): job 3: world 2, nccl, NVIDIA H100 80GB HBM3, "
        "started 2024-06-01 00:00:00 UTC"
    )


def test_each_jobs_files_are_placed_at_their_ranks_once_a_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three jobs: finding them places each job's files (3 placements), and the reports over
    them reuse those (none more); finding the largest places the three again, and its report
    built from its `Chosen` places nothing. That report is the one built without it."""
    real, placed = ranks.assign, []

    def counted(files: Iterable[ParsedFile]) -> ranks.Placement[ParsedFile]:
        placed.append(1)
        return real(files)

    monkeypatch.setattr(ranks, "assign", counted)
    found = jobs.reports(["mixed"], three_jobs(), [], Options())
    assert len(placed) == 3
    chosen = jobs.largest(three_jobs())
    lean = build_report(["mixed"], chosen.files, Options(placement=chosen.placement))
    assert len(placed) == 6
    monkeypatch.undo()
    assert lean == build_report(["mixed"], chosen.files, Options())
    assert [r.ranks for r in found] == [[0, 1, 2], [0, 1], [0, 1]]


REAL = shared_traces("kineto", "single_rank")


@needs_shared("kineto", "single_rank")
def test_the_real_single_rank_folder_is_four_jobs() -> None:
    """Four traces of four public jobs side by side (shared/traces/README.md): before, three
    claimed rank 0 of one window and were all skipped; now each is its own job."""
    found = analysis(REAL, Options()).reports
    assert [(r.world_size, r.ranks, r.config.gpu_name) for r in found] == [
        (2, [1], "Tesla V100-SXM2-32GB"),
        (2, [0], "NVIDIA A100-PG509-200"),
        (8, [0], "NVIDIA B200"),
        (8, [0], "AMD Instinct MI300X"),
    ]
    # baseTimeNanoseconds (Kineto rounds it down to 3-month steps) + the first event
    assert [j.started_utc for j in found[0].inputs.jobs] == [
        "2022-11-30T04:48:07Z",
        "2024-05-23T00:15:22Z",
        "2026-01-16T09:15:39Z",
        "2026-02-12T21:45:23Z",
    ]
    assert all(r.inputs.skipped == [] for r in found)
