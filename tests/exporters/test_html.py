"""The HTML report: names stay text, the page needs nothing from a network, the plots show
the report's own numbers, large jobs are capped (and say so), missing data is explained."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser

import msgspec
from commscope.exporters import html, htmlplots, svg, text
from commscope.model.schema import (
    AlphaBeta,
    Kernels,
    Network,
    Overlap,
    RankFacts,
    RankKernels,
    RankOverlap,
    RankResult,
    RankSteps,
    Report,
    RunConfig,
    Skew,
    SkewInstances,
    Stragglers,
    Throughput,
    Window,
)

NASTY = "<b>&\"pg'</b>"
TAGS = {"html", "head", "meta", "link", "title", "style", "body", "h1", "h2", "p", "b", "div",
        "ul", "li", "svg", "text", "rect", "circle", "line", "polyline", "details", "summary",
        "pre"}  # fmt: skip


def overlap(ratio: float, exposed_s: float) -> RankOverlap:
    return RankOverlap(
        ratio=ratio,
        comm_time_s=0.01,
        overlapped_time_s=0.01 * ratio,
        exposed_comm_time_s=exposed_s,
        compute_time_s=0.02,
        evidence_text="gpu kernels",
    )


def fit() -> AlphaBeta:
    """α 10 µs, β 10 GB/s, F 1: points at 1 kB, 1 MB, 100 MB taking α + S / β."""
    sizes = (1e3, 1e6, 1e8)
    return AlphaBeta(
        instances=3,
        sizes=3,
        alpha_s=1e-5,
        beta_Bps=1e10,
        r2=0.99,
        points=[(s, 1e-5 + s / 1e10) for s in sizes],
        points_total=3,
        bus_factor=1.0,
        bus_bytes=sum(sizes),
    )


def report(name: str = NASTY, ranks: int = 2) -> Report:
    ranks_ = range(ranks)
    per_rank = {
        str(r): overlap(0.25 * (r % 4 + 1), 0.0075 - 0.0025 * (r % 2)) for r in range(ranks)
    }
    return Report(
        ranks=list(range(ranks)),
        world_size=ranks,
        config=RunConfig(model=name, gpu_name="NVIDIA H100", backend="nccl"),
        overlap=Overlap(mean=0.375, per_rank=per_rank),
        windows=[Window(name=name, ranks=list(range(ranks)), overlap=Overlap(per_rank=per_rank))],
        alpha_beta={name: {"AllReduce": fit()}},
        network=Network(peak_bandwidth_Bps=5e10),
        skew=Skew(
            waited_for_rank=1,
            evidence="rank 1 arrived last at 2 of 3",
            instances={"AllReduce": SkewInstances(skew_s=[1e-4, 2e-4, 0.0], last=[1, 0, None])},
        ),
        kernels=Kernels(per_rank={"0": RankKernels(time_s={"gemm": 4e-3, "communication": 2e-3})}),
        steps={str(r): RankSteps(count=2, mean_s=0.02, min_s=0.019, max_s=0.021) for r in ranks_},
        stragglers=Stragglers(flagged=[1]),
        throughput=Throughput(iterations=2, iteration_time_s=0.02),
    )


class Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()
        self.data: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.attrs += attrs

    def handle_data(self, data: str) -> None:
        self.data.append(data)


def parsed(page: str) -> Page:
    found = Page()
    found.feed(page)
    return found


def test_names_with_markup_stay_text() -> None:
    page = parsed(html.render(report()))
    assert page.tags <= TAGS  # the name's <b> never became an element
    assert sum(NASTY in data for data in page.data) >= 3  # title, heading, window row, panel


def test_every_plot_is_well_formed_svg() -> None:
    page = html.render(report())
    drawn = re.findall(r"<svg .*?</svg>", page, flags=re.S)
    assert len(drawn) == 6  # two heat maps, one α-β panel, one skew panel, kernels, steps
    for one in drawn:
        ET.fromstring(one)  # raises on a stray < or &


def test_the_page_asks_nothing_of_a_network() -> None:
    page = html.render(report())
    links = [value for name, value in parsed(page).attrs if name in {"href", "src"}]
    assert links == ["data:,"]  # the favicon link, which stops the browser asking for one
    assert "<script" not in page and "url(" not in page and "@import" not in page
    assert set(re.findall(r"https?://[^\"' ]+", page)) == {"http://www.w3.org/2000/svg"}


def test_heat_map_cells_carry_the_text_reports_numbers() -> None:
    maps = htmlplots.overlap_maps(report())
    # rank 0: 25% overlap, 7.5 ms exposed; rank 1: 50%, 5 ms (text report: pct, ms)
    for shown in ("25.00%", "50.00%", "7.50 ms", "5.00 ms"):
        assert f">{shown}</text>" in maps


def test_the_text_report_is_on_the_page_whole() -> None:
    found = report()
    assert svg.esc(text.render(found)) in html.render(found)


def test_bandwidth_points_and_fit_are_busbw_against_message_size() -> None:
    one = fit()
    # busbw = S·F / T: at 1 MB, T = 10 µs + 100 µs
    assert htmlplots.bandwidth_points(one)[1] == (1e6, 1e6 / (1e-5 + 1e6 / 1e10))
    twice = AlphaBeta(instances=1, sizes=1, points=one.points, bus_factor=2.0)
    assert htmlplots.bandwidth_points(twice)[0][0] == 500.0  # S = S·F / F
    assert htmlplots.fit_curve(one, [1e6]) == [(1e6, 1e6 / (1e-5 + 1e6 / 1e10))]


def test_fit_curve_leaves_out_sizes_where_a_negative_alpha_gives_no_time() -> None:
    negative = AlphaBeta(instances=3, sizes=3, alpha_s=-1e-5, beta_Bps=1e10, bus_factor=1.0)
    # T = -10 µs + S / 10 GB/s is positive above S = 100 kB only
    assert [x for x, _ in htmlplots.fit_curve(negative, [1e4, 1e5, 1e6])] == [1e6]


def test_the_arrivals_of_the_rank_the_others_wait_for_are_highlighted() -> None:
    drawn = htmlplots.skew_panels(report())
    assert drawn.count(f'fill="{svg.VERMILLION}"') == 2  # one instance, and its legend swatch
    assert "rank 1 (the others wait for it) arrived last" in drawn


def test_step_plot_marks_the_flagged_straggler_and_the_iteration_time() -> None:
    drawn = htmlplots.step_plot(report())
    assert drawn.count(f'stroke="{svg.VERMILLION}"') == 1  # rank 1's min-max line
    assert "iteration time 20.0 ms (mean over ranks)" in drawn


def test_a_large_job_is_capped_and_says_so() -> None:
    page = html.render(report(ranks=100))
    assert page.count(f"Showing the first {htmlplots.MAX_RANKS} of 100 ranks.") == 2  # maps, steps
    plots = page.split("<details>")[0]  # the text report after it lists every rank
    assert "rank 99" not in plots and "rank 63" in plots  # the cap holds in every plot


def test_a_report_without_data_explains_every_empty_plot() -> None:
    page = html.render(Report())
    for why in (
        "nothing to plot",
        "needs the members' wait-free durations",
        "arrival skew needs two ranks' calls",
        "No GPU activity in the traces",
        "No ProfilerStep spans",
    ):
        assert svg.esc(why) in page


def test_each_step_of_each_window_is_drawn_beside_its_ranks_summary() -> None:
    found = report()
    steps = {1: 19_000_000, 2: 21_000_000}  # ns: the rank's min and max
    kept = {"0": RankFacts(result=RankResult(evidence_text="gpu kernels", steps=steps))}
    found.windows = [Window(name="a", facts=kept), Window(name="b", facts=kept)]
    assert htmlplots.step_samples(found) == {"0": [0.019, 0.021, 0.019, 0.021]}
    drawn = htmlplots.step_plot(found)
    assert drawn.count("rank 0: a step of 19.0 ms") == 2 and "rank 1: a step" not in drawn


def test_the_header_tells_unnamed_gpus_from_no_gpu_as_the_text_report_does() -> None:
    found = report()
    found.config.gpu_name = None
    assert "GPU unnamed in the traces" in "".join(html.header(found))  # rank 0's kernels
    found.kernels = Kernels()
    for entry in found.overlap.per_rank.values():
        entry.evidence_text = "nccl inspector"  # NCCL Inspector logs: no kernels, but NCCL's GPUs
    assert "GPU unnamed in the traces" in "".join(html.header(found))
    for entry in found.overlap.per_rank.values():
        entry.evidence_text = "cpu (gloo)"
    assert "no GPU in the traces" in "".join(html.header(found))


def test_a_fit_without_a_positive_size_draws_no_panel() -> None:
    found = report()
    found.alpha_beta = {"0": {"AllReduce": AlphaBeta(instances=1, sizes=1, points=[(0.0, 1e-5)])}}
    assert svg.esc("needs the members' wait-free durations") in htmlplots.bandwidth_panels(found)


def test_thinned_points_say_how_many_are_shown() -> None:
    one = fit()
    one.points_total = 500
    assert "; 3 of 500 shown" in htmlplots.bandwidth_panel("0", "AllReduce", one, None)


def test_a_gpu_time_key_without_a_colour_is_drawn_grey_not_dropped() -> None:
    found = report()
    found.kernels.per_rank["0"].time_s["future"] = 1e-3
    drawn = htmlplots.kernel_bars(found)
    assert ">future</text>" in drawn and "rank 0, future: 1.00 ms" in drawn


def test_a_long_window_name_is_cut_with_the_whole_name_as_its_tooltip() -> None:
    name = "iteration_" + "9" * 30
    drawn = htmlplots.overlap_maps(report(name=name))
    assert "><title>" + name + "</title>iteration_999999999…</text>" in drawn


def test_tooltips_and_legends_write_figures_as_the_text_report_does() -> None:
    found = report()
    found.skew.instances = {"AllReduce": SkewInstances(skew_s=[0.010234], last=[1])}
    found.network.peak_bandwidth_Bps = 23.456e9
    drawn = htmlplots.skew_panels(found) + htmlplots.bandwidth_panels(found)
    assert "skew 10.2 ms" in drawn  # duration(0.010234); the plots' own copy wrote 10.23 ms
    assert "link peak 23.5 GB/s" in drawn  # rate(23.456e9), not 23.46 GB/s
    # the fit's point at 1 kB: busbw = 1e3 B / (10 µs + 1e3 B / 10 GB/s) = 99.0099 MB/s
    assert "1.00 KB: 99.0 MB/s" in drawn


QUANTITY = re.compile(r"(\d+(?:\.\d+)?) (?:ns|µs|ms|s|B|KB|MB|GB|TB|PB)(?:/s)?(?![\w/])")


def test_no_figure_in_the_plots_has_more_than_three_significant_figures() -> None:
    plots = html.render(report()).split("<details>")[0]  # the plots, their tooltips, legends
    figures = [m.group(1) for m in QUANTITY.finditer(plots)]
    assert len(figures) > 20  # ticks, tooltips, legends and cells were all read
    assert [f for f in figures if len(f.replace(".", "").lstrip("0")) > 3] == []


SVG_NS = "{http://www.w3.org/2000/svg}"


def sticking_out(drawn: str) -> list[str]:
    """Each text of the plots that would reach past its SVG's edges, its width estimated at
    0.6 em a character (0.68 em bold): DejaVu Sans, chromium's sans-serif on Debian, draws
    digits 0.64 em wide and lower case 0.5 to 0.65 em."""
    found = []
    for one in re.findall(r"<svg .*?</svg>", drawn, flags=re.S):
        root = ET.fromstring(one)
        width = float(root.get("width", "0"))
        for label in root.iter(SVG_NS + "text"):
            if label.get("transform"):
                continue  # an axis title turned along the y axis, near the left edge
            content = (label.text or "") + "".join(child.tail or "" for child in label)
            em = 0.68 if label.get("font-weight") == "bold" else 0.6
            wide = len(content) * float(label.get("font-size", "16")) * em
            x = float(label.get("x", "0"))
            left = {"start": x, "middle": x - wide / 2, "end": x - wide}[label.get("text-anchor")]
            if left < 0 or left + wide > width:
                found.append(content)
    return found


def test_no_label_of_the_plots_reaches_past_their_edges() -> None:
    found = report()
    edge = fit()  # points at 20 MB and 77 MB: the axis ends at 1.3 x 77 MB, its last tick 100 MB
    edge.points = [(2e7, 1e-5 + 2e7 / 1e10), (7.7e7, 1e-5 + 7.7e7 / 1e10)]
    group = "tp_group_of_the_first_pipeline_stage_and_some"
    found.alpha_beta = {"0": {"AllReduce": fit()}, group: {"AllGather": edge}}
    drawn = htmlplots.bandwidth_panels(found) + htmlplots.skew_panels(found)
    drawn += htmlplots.overlap_maps(found) + htmlplots.kernel_bars(found)
    assert sticking_out(drawn + htmlplots.step_plot(found)) == []
    assert f"<title>AllGather, group {group}</title>" in drawn  # cut, the whole as its tooltip


def test_a_skew_axis_labels_a_tick_above_every_point() -> None:
    found = report()
    found.skew.instances = {"AllReduce": SkewInstances(skew_s=[1.1e-3], last=[0], total=1)}
    drawn = htmlplots.skew_panels(found)
    # 4 intervals: ticks 0, 500 µs, 1 ms, 1.5 ms and the axis ends at the last (was 1.25 ms,
    # from 5 intervals, above its last label, 1 ms, with the point between them)
    assert ">1.5 ms</text>" in drawn and "AllReduce: 1 matched instance<" in drawn


def test_the_gpu_time_legend_names_only_categories_in_the_bars() -> None:
    found = report()
    found.kernels.per_rank["0"].time_s["attention"] = 0.0
    assert ">attention</text>" not in htmlplots.kernel_bars(found)


def inspected_only() -> Report:
    """Ranks read from NCCL Inspector logs: collectives only, no kernels, no compute."""
    found = report()
    found.kernels = Kernels()
    for entry in found.overlap.per_rank.values():
        entry.evidence_text, entry.ratio = "nccl inspector", None
    return found


def test_an_inspector_page_says_why_it_has_no_overlap_exposed_or_kernel_time() -> None:
    found = inspected_only()
    why = "(n/a: NCCL Inspector has no compute kernels)."
    assert htmlplots.overlap_maps(found) == htmlplots.note(
        f"No overlap or exposed communication to plot {why}"
    )
    assert htmlplots.kernel_bars(found) == htmlplots.note(
        f"No GPU time by kernel category to plot {why}"
    )
    # exposed = comm time under no compute: unknown without compute kernels, not 7.5 ms
    assert ("n/a", "exposed communication (worst rank)") in html.cards(found)


def test_a_skew_series_of_zeros_is_drawn_on_a_microsecond_axis() -> None:
    found = report()
    found.skew.instances = {
        "AllGather": SkewInstances(skew_s=[0.0, 0.0], last=[None, None], total=2)
    }
    drawn = htmlplots.skew_panels(found)
    assert ">1 µs</text>" in drawn and ">1 s</text>" not in drawn  # ticks 0, 250 ns … 1 µs


def test_the_panels_say_why_no_link_peak_is_drawn() -> None:
    found = report()
    found.network = Network(peak_source="GPU unknown (no deviceProperties); give --peak-bandwidth")
    drawn = htmlplots.bandwidth_panels(found)
    assert "No link peak drawn: GPU unknown (no deviceProperties); give --peak-bandwidth." in drawn
    assert "No link peak drawn" not in htmlplots.bandwidth_panels(report())  # 50 GB/s known


def test_each_ranks_exposed_communication_is_drawn_as_transfer_waiting_and_unmatched() -> None:
    found = report()
    for name, row in found.overlap.per_rank.items():
        found.overlap.per_rank[name] = msgspec.structs.replace(
            row, exposed_comm_time_s=0.004, exposed_transfer_s=0.001, exposed_waiting_s=0.003,
            exposed_unmatched_s=0.0,
        )  # fmt: skip
    drawn = htmlplots.split_bars(found)
    assert svg.esc("rank 0, transfer: 1.00 ms (25.0% of the rank's exposed time)") in drawn
    assert svg.esc("rank 0, waiting: 3.00 ms (75.0% of the rank's exposed time)") in drawn
    assert "rank 0, unmatched" not in drawn  # a zero part draws nothing
    assert ">unmatched</text>" in drawn  # but keeps its legend
    assert "Exposed communication: transfer or waiting" in html.render(found)


def test_without_the_split_the_exposed_bars_say_why() -> None:
    assert htmlplots.split_bars(report()) == htmlplots.note(
        "No exposed communication split to plot (no rank's cross-rank facts)."
    )
