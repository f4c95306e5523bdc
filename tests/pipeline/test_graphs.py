"""CUDA graphs (`pipeline.graphs`): tallies merged over files, windows and ranks, through the
collector's facts and back, the report section and the trace-health line with hand-worked
values, and a two-rank job read from hand-made traces (text, HTML and JSON)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import msgspec
import pytest
from builders import write
from commscope.exporters import html, jsonreport, text
from commscope.model.report import GraphReplays, GraphStats, Report
from commscope.model.wire import MAX_GRAPHS, GraphRow, GraphTally, RankResult
from commscope.pipeline import graphs
from commscope.pipeline.accumulate import Accumulator, merge_results
from commscope.pipeline.edge import facts, from_facts
from commscope.pipeline.merge import combine
from commscope.pipeline.report import Options
from commscope.service.offline import analyse
from graphs_builder import GEMM, SKIPPED_TALLY, WORKED, WORKED_TALLY, write_job
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import dist_head, trace
from nsys_builder import Export

POOLED = GraphTally(
    launches=6,
    call_ns=27_000,
    empty=3,
    unlaunched=1,
    rows=[
        GraphRow(7, 2, 6, 34_000, 2, 20_000),
        GraphRow(9, 0, 1, 8_000),
        GraphRow(None, 4, 1, 3_000),  # rank 0's two, rank 1's two
    ],
)


def test_tallies_merge_by_graph_id() -> None:
    assert graphs.merge([WORKED_TALLY, None, SKIPPED_TALLY]) == POOLED
    assert graphs.merge([None, None]) is None


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.builds(GraphRow, st.sampled_from([None, 1, 2, 3]), *[st.integers(0, 9)] * 5),
        max_size=12,
    ),
    st.integers(0, 2**32),
)
def test_rows_merge_whatever_their_order(rows: list[GraphRow], seed: int) -> None:
    shuffled = list(rows)
    random.Random(seed).shuffle(shuffled)
    merged = graphs.merge_rows(shuffled)
    assert merged == graphs.merge_rows(rows)
    for graph in {r.graph for r in rows}:  # each id's figures, summed by brute force
        (found,) = [m for m in merged if m.graph == graph]
        assert figures(found) == tuple(
            map(sum, zip(*(figures(r) for r in rows if r.graph == graph), strict=True))
        )


def figures(row: GraphRow) -> tuple[int, ...]:
    return row.launches, row.kernels, row.kernel_ns, row.comm_kernels, row.comm_ns


def test_graph_ids_beyond_the_bound_go_to_the_row_without_an_id() -> None:
    rows = [GraphRow(g, 1, 1) for g in range(1, MAX_GRAPHS + 3)]
    merged = graphs.merge_rows(rows)
    assert len(merged) == MAX_GRAPHS + 1
    assert merged[-1] == GraphRow(None, 2, 2)


def test_the_stats_of_a_tally_worked_by_hand() -> None:
    assert graphs.stats(POOLED) == GraphStats(
        launches=6,
        call_time_s=pytest.approx(27e-6),
        empty=3,
        empty_share=0.5,
        kernels=8,
        kernel_time_s=pytest.approx(45e-6),
        kernels_per_launch=7 / 3,  # 7 kernels joined by correlation over 3 launches with some
        comm_kernels=2,
        comm_time_s=pytest.approx(20e-6),
        unlaunched=1,
        graphs=2,
    )


def test_a_rank_without_kernels_in_its_graphs_has_no_kernels_per_launch() -> None:
    found = graphs.stats(SKIPPED_TALLY)
    assert (found.empty_share, found.kernels, found.kernels_per_launch) == (1.0, 0, None)


def test_a_rank_s_graphs_most_gpu_time_first_and_the_row_without_an_id_last() -> None:
    assert [r.graph for r in graphs.replays(POOLED)] == [7, 9, None]
    assert graphs.replays(WORKED_TALLY)[0] == GraphReplays(
        graph=7, launches=2, kernels=6, kernel_time_s=pytest.approx(34e-6), comm_kernels=2,
        comm_time_s=pytest.approx(20e-6),
    )  # fmt: skip


def test_results_without_graphs_give_the_reason() -> None:
    found = graphs.graphs({0: RankResult(evidence_text="gpu kernels")})
    assert (found.all_ranks, found.na_reason) == (None, graphs.NO_GRAPHS)


def test_windows_merge_their_tallies() -> None:
    results = [
        RankResult(evidence_text="gpu kernels", graphs=t) for t in (WORKED_TALLY, SKIPPED_TALLY)
    ]
    assert merge_results(results).graphs == POOLED


@pytest.mark.parametrize("limit", [2, 3, 1000])
def test_the_facts_carry_the_tally_however_cut(limit: int) -> None:
    acc = Accumulator()
    acc.add_all([SKIPPED_TALLY, WORKED_TALLY])
    decoder = msgspec.msgpack.Decoder(type(next(facts(acc, "0" * 32, 1))))
    parts = [decoder.decode(msgspec.msgpack.encode(p)) for p in facts(acc, "0" * 32, 1, limit)]
    assert from_facts(parts).result(["f"]).graphs == POOLED


# ---------------------------------------------------------------- a job read from traces


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_job(tmp_path_factory.mktemp("graphs"))


def test_a_job_s_graphs_per_rank_and_pooled(report_dir: Path) -> None:
    found = analyse(report_dir, Options()).graphs
    assert found.all_ranks == graphs.stats(POOLED)
    assert found.per_rank == {"0": graphs.stats(WORKED_TALLY), "1": graphs.stats(SKIPPED_TALLY)}
    assert [r.graph for r in found.per_graph["0"]] == [7, 9, None]


def test_launches_without_kernels_are_a_trace_health_issue(report_dir: Path) -> None:
    report = analyse(report_dir, Options())
    (gap,) = [i for i in report.health.issues if i.key == "graph_kernels"]
    assert (gap.count, gap.total, gap.share, gap.unit) == (3, 6, 0.5, "CUDA graph launches")
    assert gap.named == [
        "rank 0: 1 of 4 graph launches without kernels",
        "rank 1: 2 of 2 graph launches without kernels",
    ]
    assert any("under-counted" in line for line in gap.weakens)


def test_the_health_line_says_why_each_profiler_left_the_kernels_out(
    report_dir: Path, tmp_path: Path
) -> None:
    (kineto,) = [
        i for i in analyse(report_dir, Options()).health.issues if i.key == "graph_kernels"
    ]
    assert "the PyTorch profiler did not record the graph's replay" in kineto.missing
    export = Export()  # Nsight Systems' default graph trace: the launch, none of its kernels
    export.launched(4242, 1, 10, corr=1, kernel=(0, 15, 19, GEMM))
    export.call(4242, 1, (20, 26), corr=2, name="cudaGraphLaunch_v10000")
    export.write(tmp_path / "nsys" / "rank0.sqlite")
    (nsys,) = [i for i in analyse(tmp_path / "nsys", Options()).health.issues
               if i.key == "graph_kernels"]  # fmt: skip
    assert (nsys.count, nsys.total) == (1, 1)
    assert "unless run with --cuda-graph-trace=node" in nsys.missing
    assert "PyTorch" not in nsys.missing


def test_a_trace_whose_graphs_are_whole_has_no_health_issue(tmp_path: Path) -> None:
    whole = [e for e in WORKED if (e.get("args") or {}).get("correlation") != 4]
    write(tmp_path / "rank0_trace.json", trace(whole, dist_head(0, 1)))
    report = analyse(tmp_path, Options())
    assert "graph_kernels" in report.health.checked
    assert not [i for i in report.health.issues if i.key == "graph_kernels"]
    assert report.graphs.all_ranks is not None and report.graphs.all_ranks.empty == 0


def test_the_text_report_prints_the_graphs(report_dir: Path) -> None:
    shown = text.render(analyse(report_dir, Options()))
    section = shown.split("10c. CUDA GRAPHS")[1].split("11. COLLECTIVES")[0]
    assert "  all            6    27.0 µs   3 (50%)         8        2.33    45.0 µs" in section
    assert "  1              2    10.0 µs  2 (100%)         0         n/a        0 s" in section
    assert "Graphs of rank 0 (most graph GPU time)" in section
    assert "  7                2         6    34.0 µs       2    20.0 µs" in section


def test_the_html_and_json_reports_carry_every_graph(report_dir: Path) -> None:
    report = analyse(report_dir, Options())
    page = html.render(report)
    assert "<h2>CUDA graphs</h2>" in page
    assert "<td>not recorded</td>" in page
    document = json.loads(jsonreport.render(report))
    assert document["graphs"]["all_ranks"]["launches"] == 6
    assert [g["graph"] for g in document["graphs"]["per_graph"]["0"]] == [7, 9, None]


def test_commscope_merge_keeps_the_graphs(report_dir: Path) -> None:
    report = analyse(report_dir, Options())
    shard = msgspec.json.decode(jsonreport.render(report), type=Report)
    merged = combine([("shard.json", shard)])
    assert merged.graphs == report.graphs
    assert [i.count for i in merged.health.issues if i.key == "graph_kernels"] == [3]


SHARED = Path(__file__).resolve().parents[3] / "shared" / "traces"


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"{SHARED} not present")
@pytest.mark.parametrize("folder", ["kineto/dlrm_8rank_v100", "nsys"])
def test_real_traces_hold_no_graph_launch(folder: str) -> None:
    report = analyse(SHARED / folder, Options())
    assert (report.graphs.all_ranks, report.graphs.na_reason) == (None, graphs.NO_GRAPHS)
    assert report.launches.all_ranks is not None  # their kernel launches, as before
    assert "graph_kernels" in report.health.checked
    assert not [i for i in report.health.issues if i.key == "graph_kernels"]
