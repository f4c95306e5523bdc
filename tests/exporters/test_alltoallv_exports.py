"""The all-to-all-v section in text, HTML and nccl-tests' alltoallv input (`alltoallvtext`,
`alltoallvhtml`, `alltoallvcsv`), on a hand-made section."""

from __future__ import annotations

from commscope.exporters import svg
from commscope.exporters.alltoallvcsv import replay_command, replay_csv
from commscope.exporters.alltoallvhtml import heat_map
from commscope.exporters.alltoallvtext import MERGED, NONE, NSYS, alltoallv_lines
from commscope.exporters.extremes import Cut
from commscope.model.report import AllToAllRank, AllToAllV
from commscope.model.schema import Inputs, MergeInfo, Report, Summary


def section(n: int = 3) -> AllToAllV:
    matrix = [[8 * (i + j) for j in range(n)] for i in range(n)]
    return AllToAllV(
        calls=2,
        total_bytes=sum(map(sum, matrix)),
        sent_imbalance=1.5,
        received_imbalance=1.25,
        busiest_rank=n - 1,
        busbw_Bps=Summary(median=2e9, min=1e9, max=3e9),
        per_rank={
            str(r): AllToAllRank(calls=2, sent_bytes=sum(matrix[r]), received_bytes=sum(matrix[r]))
            for r in range(n)
        },
        matrix_ranks=list(range(n)),
        matrix_bytes=matrix,
        replay_bytes=8 * (2 * n - 2) // 2 * n,
    )


def test_the_csv_is_each_entry_over_the_largest() -> None:
    # entries 8(i+j): the largest 32 (rank 2 -> 2)
    assert replay_csv(section()) == "0,0.25,0.5\n0.25,0.5,0.75\n0.5,0.75,1\n"
    assert replay_csv(None) is None
    assert replay_csv(AllToAllV(calls=1, matrix_ranks=[0], matrix_bytes=[[0]])) is None


def test_the_replay_command_gives_b_and_the_file() -> None:
    assert replay_command(section(), "x.csv") == (
        "alltoallv_perf -b 48 -e 48 -s x.csv  (NVIDIA/nccl-tests PR #157)"
    )


def test_text_prints_the_figures_and_a_small_matrix_whole() -> None:
    lines = list(alltoallv_lines(Report(alltoallv=section()), Cut()))
    assert "Load imbalance over the run (max/mean over ranks, 1x = balanced): sent 1.50x, " \
        "received 1.25x" in lines  # fmt: skip
    assert "Busiest rank (most bytes sent or received): rank 2" in lines
    assert "  2               16 B        24 B        32 B" in lines


def test_text_lists_a_large_matrix_by_its_largest_entries() -> None:
    lines = list(alltoallv_lines(Report(alltoallv=section(12)), Cut()))
    assert "Traffic matrix: 12 ranks (every entry in JSON and HTML); the largest:" in lines
    assert (
        lines.index("  rank 11 -> rank 11: 176 B") == lines.index("  rank 10 -> rank 11: 168 B") - 1
    )


def test_text_and_html_say_why_there_is_nothing() -> None:
    assert list(alltoallv_lines(Report(), Cut())) == [NONE]
    assert f"No traffic matrix: {svg.esc(NONE)}." in heat_map(Report())


def test_the_heat_map_has_a_cell_per_pair_with_its_bytes() -> None:
    drawn = heat_map(Report(alltoallv=section()))
    assert drawn.count("<rect") >= 9
    assert "rank 2 -&gt; rank 1: 24 B" in drawn  # the tooltip, escaped


def test_a_merged_report_without_the_section_says_no_shard_had_one() -> None:
    merged = Report(merge=MergeInfo())
    assert list(alltoallv_lines(merged, Cut())) == [MERGED]
    assert "no all-to-all call of any shard recorded its split sizes" in heat_map(merged)


def test_an_nsight_export_says_its_payloads_carry_no_split_sizes() -> None:
    nsys = Report(inputs=Inputs(sources={"nsys": 2}))
    (line,) = alltoallv_lines(nsys, Cut())
    assert line == f"{NONE}; {NSYS}"
    assert "ncclSend/ncclRecv" in heat_map(nsys)
