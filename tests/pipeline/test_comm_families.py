"""Reports of hand-made traces whose communication is not named `nccl*` (`families_builder`):
the communication is found, typed and overlapped; fused kernels are apart; look-alikes are
named in trace health. Every figure is worked by hand in the builder's docstrings."""

from __future__ import annotations

from pathlib import Path

import pytest
from commscope.exporters import text
from commscope.model.schema import Report
from commscope.pipeline.report import Options
from commscope.service.offline import analyse
from families_builder import BUILDERS, RANKS, write_job

US = 1e-6


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Report]:
    root = tmp_path_factory.mktemp("families")
    return {
        name: analyse(write_job(root / name / "iteration_1", build), Options())
        for name, build in BUILDERS.items()
    }


def overlap(report: Report) -> list[float | None]:
    """Per rank in turn: overlap ratio, |C|, |C ∩ P| and exposed communication (s)."""
    figures = [(r.ratio, r.comm_time_s, r.overlapped_time_s, r.exposed_comm_time_s)
               for r in report.overlap.per_rank.values()]  # fmt: skip
    return [value for rank in figures for value in rank]


def test_a_deepep_moe_step_has_its_communication_found(reports: dict[str, Report]) -> None:
    moe = reports["moe"]
    assert overlap(moe) == pytest.approx([0.75, 400 * US, 300 * US, 100 * US] * RANKS)
    assert list(moe.collectives.all_ranks) == ["AllToAll"]
    all_to_all = moe.collectives.all_ranks["AllToAll"]
    assert (all_to_all.count, all_to_all.sized_count) == (2 * RANKS, 0)
    assert moe.kernels.time_s["communication"] == pytest.approx(2 * 400 * US)
    assert moe.kernels.time_s["other"] == pytest.approx(2 * 10 * US)  # DeepEP's layout kernel
    assert "no communication" not in text.render(moe)


def test_an_mtia_step_counts_its_all_gathers(reports: dict[str, Report]) -> None:
    mtia = reports["mtia"]
    gathers = mtia.collectives.all_ranks["AllGather"]
    assert (gathers.count, gathers.sized_count, gathers.message_bytes) == (
        3 * RANKS, 3 * RANKS, 3 * RANKS * 8192)  # fmt: skip
    assert overlap(mtia) == pytest.approx([1 / 3, 300 * US, 100 * US, 200 * US] * RANKS)
    assert mtia.kernels.time_s["gemm"] == pytest.approx(RANKS * 600 * US)


def test_a_fused_kernel_is_in_neither_union_and_shown_apart(reports: dict[str, Report]) -> None:
    fused = reports["fused"]
    assert overlap(fused) == pytest.approx([0.5, 100 * US, 50 * US, 50 * US] * RANKS)
    assert [r.compute_time_s for r in fused.overlap.per_rank.values()] == pytest.approx(
        [500 * US] * RANKS
    )
    assert list(fused.collectives.all_ranks) == ["AllReduce"]
    assert fused.kernels.time_s["fused"] == pytest.approx(RANKS * 200 * US)
    assert fused.kernels.per_rank["0"].time_s["fused"] == pytest.approx(200 * US)
    assert fused.kernels.per_rank["0"].busy_s == pytest.approx(550 * US)  # [0, 400] ∪ [500, 650]
    report = text.render(fused)
    assert "Fused compute+communication kernels" in report
    assert (
        "  400 µs GPU time over all ranks, in neither the communication nor the compute" in report
    )


def test_no_fused_category_without_fused_kernels(reports: dict[str, Report]) -> None:
    assert "fused" not in reports["moe"].kernels.time_s
    assert "Fused compute" not in text.render(reports["moe"])


def test_look_alike_kernels_are_named_in_trace_health(reports: dict[str, Report]) -> None:
    issues = {issue.key: issue for issue in reports["lookalike"].health.issues}
    gap = issues["comm_lookalike"]
    assert (gap.count, gap.total, gap.unit) == (RANKS * 150_000, RANKS * 450_000,
                                                "ns of GPU kernel time")  # fmt: skip
    assert gap.kernels == pytest.approx(
        {
            "my_moe::alltoall_dispatch_kernel": RANKS * 100 * US,
            "custom_allgather_v2": RANKS * 50 * US,
        }
    )
    lines = text.render(reports["lookalike"])
    assert "the 2 longest (GPU time, all ranks):" in lines
    assert "my_moe::alltoall_dispatch_kernel" in lines


@pytest.mark.parametrize("name", ["moe", "mtia", "fused"])
def test_family_kernels_are_no_look_alikes(reports: dict[str, Report], name: str) -> None:
    assert "comm_lookalike" not in {issue.key for issue in reports[name].health.issues}
    assert "comm_lookalike" in reports[name].health.checked


def test_the_builders_write_one_window_of_every_rank(tmp_path: Path) -> None:
    folder = write_job(tmp_path / "iteration_1", BUILDERS["moe"])
    assert sorted(p.name for p in folder.iterdir()) == [f"rank{r}_trace.json" for r in range(RANKS)]
