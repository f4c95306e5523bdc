"""The text report of a 1,024-rank job stays readable: every per-rank table (and the groups,
fits, windows and long lists) shows its extremes, the ranks the report names and a summary
line, under 600 lines in all; the HTML folds a copy with every row; a job of 16 ranks keeps
every row. The reports are built as structs (no traces), with figures whose extremes are
known by construction."""

from __future__ import annotations

import re

import pytest
from commscope.exporters import html, svg, text
from commscope.model.schema import (
    AlphaBeta,
    ClockOffset,
    Clocks,
    Collectives,
    CollectiveSkew,
    CollectiveStats,
    Desync,
    GroupMatch,
    Inputs,
    KernelRow,
    Kernels,
    Launches,
    Matching,
    Network,
    Overlap,
    RankArrival,
    RankKernels,
    RankLaunches,
    RankNetwork,
    RankOverlap,
    RankSteps,
    Report,
    Skew,
    Skipped,
    Stragglers,
    Summary,
    TopKernels,
    Window,
)

US = 1e-6
MS = 1e-3
WAITED_FOR = 700  # the rank the others wait for
STRAGGLERS = [12, 640]
LOW, HIGH = 333, 444  # the lowest and highest rank of every per-rank figure


def figure(rank: int) -> float:
    """A rank's figure in [1000, 2023]; rank LOW well below, rank HIGH well above."""
    return {LOW: 10.0, HIGH: 9000.0}.get(rank, 1000.0 + rank)


def overlap(rank: int) -> RankOverlap:
    exposed = figure(rank) * US
    return RankOverlap(
        ratio=figure(rank) / 10_000,
        comm_time_s=10 * MS,
        overlapped_time_s=10 * MS - exposed,
        exposed_comm_time_s=exposed,
        compute_time_s=20 * MS,
        evidence_text="gpu kernels",
    )


def stats() -> CollectiveStats:
    summary = Summary(mean=1e9, median=1e9, min=1e9, max=1e9, p95=1e9)
    return CollectiveStats(
        count=4,
        sized_count=4,
        message_bytes=4_000_000,
        bus_bytes=3_500_000,
        time_s=4 * MS,
        algbw_Bps=summary,
        busbw_Bps=summary,
    )


def steps(rank: int) -> RankSteps:
    exposed = figure(rank) * US
    return RankSteps(
        count=2,
        mean_s=20 * MS,
        min_s=19 * MS,
        max_s=21 * MS,
        span_s=40 * MS,
        comm_s=10 * MS,
        exposed_comm_s=exposed,
        compute_s=20 * MS,
        gpu_busy_s=30 * MS,
        comm_outside_s=0.0,
        compute_outside_s=0.0,
    )


def fit(group: int) -> AlphaBeta:
    if group % 3:
        return AlphaBeta(instances=2, sizes=1, na_reason="fewer than 3 distinct sizes")
    return AlphaBeta(instances=9, sizes=3, alpha_s=10 * US, beta_Bps=(100 + group) * 1e9, r2=0.99)


def windows(count: int) -> list[Window]:
    """Windows of two ranks, the exposed time of window w's ranks figure(w) and figure(w + 1) µs."""
    return [
        Window(
            name=f"iteration_{10 * w}",
            ranks=[0, 1],
            overlap=Overlap(per_rank={"0": overlap(w), "1": overlap(w + 1)}),
        )
        for w in range(count)
    ]


def network(ranks: list[str]) -> Network:
    found = {
        r: RankNetwork(bus_bandwidth_Bps=figure(int(r)) * 1e8, simple_bandwidth_Bps=1e11,
                       message_bytes=8_000_000, bus_bytes=7_000_000, ops=8)
        for r in ranks
    }  # fmt: skip
    return Network(per_rank=found)


def kernels(ranks: list[str]) -> Kernels:
    found = {
        r: RankKernels(busy_s=30 * MS, span_s=40 * MS, idle_s=10 * MS,
                       idle_ratio=figure(int(r)) / 10_000)
        for r in ranks
    }  # fmt: skip
    return Kernels(time_s={"gemm": 1.0}, share={"gemm": 1.0}, per_rank=found)


def groups(world: int) -> dict[str, GroupMatch]:
    """The world ("0", 2 instances), then TP groups of 8 with 8 + g % 5 instances; group 9 has
    desyncs."""
    found = {"0": GroupMatch(members=list(range(world)), ranks_with_traces=list(range(world)),
                             key="seq", instances=2)}  # fmt: skip
    for g in range(world // 8):
        members = list(range(8 * g, 8 * g + 8))
        found[str(1 + g)] = GroupMatch(members=members, ranks_with_traces=members, key="seq",
                                       instances=8 + g % 5)  # fmt: skip
    found["9"] = GroupMatch(members=list(range(64, 72)), key="seq", instances=8, desyncs=2)
    return found


def matching(ranks: list[str]) -> Matching:
    calls = {r: "AllReduce 4096 B" if int(r) < 512 else "AllReduce 2048 B" for r in ranks}
    desync = Desync(process_group="0", key="seq", position=5, calls=calls)
    return Matching(instances=1000, by_seq=1000, groups=groups(len(ranks)), desync_count=2,
                    desyncs=[desync])  # fmt: skip


def clocks(ranks: list[str]) -> Clocks:
    found = {r: ClockOffset(offset_s=(figure(int(r)) - 10) * US, uncertainty_s=US, samples=16)
             for r in ranks}  # fmt: skip
    return Clocks(reference_rank=0, method="median polish", per_rank=found)


def skew(ranks: list[str]) -> Skew:
    kinds = {"AllReduce": CollectiveSkew(instances=1000, skew_s=Summary(), wait_s=1.0)}
    found = {r: RankArrival(instances=16, last=1, caused_wait_s=figure(int(r)) * US)
             for r in ranks}  # fmt: skip
    return Skew(waited_for_rank=WAITED_FOR, evidence="rank 700 arrived last",
                per_collective=kinds, per_rank=found)  # fmt: skip


def top_kernels(ranks: list[str]) -> TopKernels:
    """Each rank's top kernel, its share of the rank's GPU time figure(rank) / 10,000."""

    def row(share: float) -> KernelRow:
        return KernelRow(name="void gemm<float>(float*)", count=10, time_s=share, mean_s=share / 10,
                         share=share, communication=False)  # fmt: skip

    per_rank = {r: [row(figure(int(r)) / 10_000)] for r in ranks}
    return TopKernels(count=10 * len(ranks), time_s=1.0, names_kept=200, all_ranks=[row(0.5)],
                      per_rank=per_rank)  # fmt: skip


def launches(ranks: list[str]) -> Launches:
    """Each rank's median queue delay figure(rank) µs."""

    def rank(delay_us: float) -> RankLaunches:
        delay = Summary(median=delay_us * US)
        return RankLaunches(calls=100, call_time_s=0.001, kernels=100, shorter=50,
                            shorter_share=0.5, queue_delay_s=delay)  # fmt: skip

    return Launches(all_ranks=rank(1500.0), per_rank={r: rank(figure(int(r))) for r in ranks})


def big(world: int = 1024) -> Report:
    ranks = [str(r) for r in range(world)]
    skipped = [Skipped(f"w/rank{r}.json", "truncated") for r in range(50)]
    return Report(
        ranks=list(range(world)),
        world_size=world,
        overlap=Overlap(mean=0.15, per_rank={r: overlap(int(r)) for r in ranks}),
        network=network(ranks),
        collectives=Collectives(
            per_rank={r: {"AllGather": stats(), "AllReduce": stats()} for r in ranks}
        ),
        steps={r: steps(int(r)) for r in ranks},
        kernels=kernels(ranks),
        top_kernels=top_kernels(ranks),
        launches=launches(ranks),
        matching=matching(ranks),
        clocks=clocks(ranks),
        skew=skew(ranks),
        stragglers=Stragglers(
            flagged=STRAGGLERS, robust_z_threshold=3.5, robust_z={"12": 4.0, "640": 5.0}
        ),
        alpha_beta={str(g): {"AllGather": fit(g)} for g in range(130)},
        windows=windows(40),
        inputs=Inputs(files=world + 50, skipped=skipped, notes=[f"note {n}" for n in range(30)]),
    )


@pytest.fixture(scope="module")
def rendered() -> str:
    return text.render(big())


def section(report: str, title: str) -> list[str]:
    """The lines of the section whose title starts with `title`."""
    found = re.split(r"\n={80}\n", report)
    at = next(i for i, part in enumerate(found) if part.startswith(title))
    return found[at + 1].splitlines()


def ranks_in(lines: list[str]) -> list[int]:
    """The ranks that start the table rows (`  700   …`) or name a rank block (`  rank 7:`)."""
    found = (re.match(r"^  (?:rank )?(\d+)(?::|  )", line) for line in lines)
    return [int(m.group(1)) for m in found if m]


def test_the_report_of_1024_ranks_stays_under_600_lines(rendered: str) -> None:
    assert len(rendered.splitlines()) < 600


def test_every_per_rank_table_shows_the_extremes_and_the_named_ranks(rendered: str) -> None:
    # lowest: LOW, then ranks 0 and 1 (1000, 1001); highest: HIGH, 1023, 1022
    extremes = {0, 1, LOW, 1022, 1023, HIGH}
    named = {WAITED_FOR, *STRAGGLERS}
    for title, more in (
        ("2. COMMUNICATION", set()),
        ("3. NETWORK LOAD", set()),
        ("10. GPU TIME", set()),
        ("10a. TOP KERNELS", set()),
        ("10b. KERNEL LAUNCHES", set()),
        ("12. ARRIVAL SKEW", set()),
    ):
        assert set(ranks_in(section(rendered, title))) == extremes | named | more, title
    exposed = section(rendered, "5. EXPOSED")
    assert ranks_in(exposed) == sorted(extremes | named) * 2  # both tables, in rank order
    matching = section(rendered, "11. COLLECTIVES")
    clocks = matching[next(i for i, line in enumerate(matching) if line.startswith("Clock")) :]
    assert set(ranks_in(clocks)) == extremes | named  # the reference rank 0 among them


def test_each_cut_table_ends_with_its_summary_line(rendered: str) -> None:
    exposed = [line for line in section(rendered, "5. EXPOSED") if line.startswith("  … ")]
    # exposed over 1,024 ranks: 1000 + r µs but rank LOW 10 µs, rank HIGH 9 ms: mean 1.52 ms;
    # median the 512th and 513th of 10, 1000-1332, 1334-1443, 1445-2023, 9000: 1512.5 µs
    assert exposed[0] == (
        "  … 9 of 1,024 ranks shown (the 3 lowest and 3 highest by exposed, and ranks named in "
        "the report: 12, 640, 700; all in the JSON and HTML); exposed over all: mean "
        "1.52 ms, median 1.51 ms, min 10.0 µs, max 9.00 ms"
    )
    summaries = [line for line in rendered.splitlines() if " shown (" in line]
    assert len(summaries) == 12  # 9 per-rank tables, groups, fits, windows
    assert sum("of 1,024 ranks shown" in line for line in summaries) == 9


def test_groups_fits_and_windows_show_their_extremes(rendered: str) -> None:
    matching = section(rendered, "11. COLLECTIVES")
    assert (
        "  … 7 of 129 groups shown (the 3 lowest and 3 highest by instances, and groups "
        "named in the report: 9; all in the JSON and HTML)" in "\n".join(matching)
    )
    fits = section(rendered, "13. NETWORK MODEL")
    assert "  n/a (fewer than 3 distinct sizes): 86 of 130 fits (first: 1 AllGather)" in fits
    assert sum(line.startswith("  … 6 of 130 fits shown") for line in fits) == 1
    table = section(rendered, "7. PER-WINDOW")
    shown = [line.split()[0] for line in table if line.startswith("  iteration_")]
    assert shown == [f"iteration_{10 * w}" for w in (0, 1, 2, 37, 38, 39)]
    # exposed/rank of window w: (figure(w) + figure(w + 1)) / 2 = 1000.5 + w µs, w = 0-39
    assert table[-1].endswith(
        "exposed/rank over all: mean 1.02 ms, median 1.02 ms, min 1.00 ms, max 1.04 ms"
    )


def test_long_lists_show_their_first_lines(rendered: str) -> None:
    inputs = section(rendered, "15. INPUTS")
    assert "  … 38 more skipped files in the JSON and HTML reports" in inputs
    assert "  … 18 more notes in the JSON and HTML reports" in inputs
    desync = "    AllReduce 4.10 KB: ranks 0-511; AllReduce 2.05 KB: ranks 512-1023"
    assert desync in section(rendered, "11. COLLECTIVES")
    stragglers = section(rendered, "12. ARRIVAL SKEW")
    assert any(line.startswith("  flagged: 12, 640;") for line in stragglers)


def test_the_html_folds_a_copy_with_every_row(rendered: str) -> None:
    report = big()
    page = html.render(report, rendered)
    assert " shown (" not in page and svg.esc(text.render(report, every_row=True)) in page
    assert set(re.findall(r"\n  rank (\d+): ", page)) == {str(r) for r in range(1024)}


def test_a_job_of_16_ranks_keeps_every_row() -> None:
    report = big(16)
    assert text.render(report) == text.render(report, every_row=True)
    assert "  … " not in text.render(report)


def test_the_header_writes_the_traced_ranks_as_runs() -> None:
    traced = [r for r in range(1024) if r % 100 != 7]  # 11 ranks without a trace
    header = text.render(Report(ranks=traced, world_size=1024)).splitlines()
    assert (
        "Ranks: 0-6, 8-106, 108-206, 208-306, 308-406, 408-506, 508-606, 608-706, … (1,013 ranks "
        "in all)  (1013 of 1024 ranks have traces)"
    ) in header
