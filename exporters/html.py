"""The HTML report (pure: Report → str): one self-contained page with the plots.

Inline CSS and inline SVG only: no script, no font, no image or style sheet from anywhere, so
the page reads the same offline and a browser makes no request to show it. The header gives
the verdict and the figures a reader looks for first (with the text report's own formatting);
then the six plots of `htmlplots`, the top kernels and launches (`kernelhtml`), the
diagnosis, and the whole text report folded at the end, so every number of the text and JSON
reports is on the page as well.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from commscope.exporters import (
    alltoallvhtml,
    extremes,
    flighthtml,
    graphhtml,
    htmlplots,
    kernelhtml,
    linkhtml,
    pipehtml,
    text,
)
from commscope.exporters.svg import esc
from commscope.exporters.textfmt import pct
from commscope.model.inspector import inspected
from commscope.model.schema import Report
from commscope.model.units import duration, rate

_STYLE: Final = """
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: #222; background: #fff; margin: 0 auto; max-width: 960px; padding: 16px 24px 48px; }
h1 { font-size: 24px; margin: 8px 0 4px; }
h2 { font-size: 19px; margin: 32px 0 6px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p { margin: 4px 0 8px; }
.sub { color: #555; }
.verdict { font-size: 18px; margin: 12px 0; }
.verdict b { color: #D55E00; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 12px 0 4px; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 8px 12px; min-width: 150px; }
.card .v { font-size: 20px; font-weight: 600; }
.card .k { color: #555; font-size: 13px; }
.note { color: #555; font-style: italic; }
.panels { display: flex; flex-wrap: wrap; gap: 12px 20px; }
svg { max-width: 100%; height: auto; font-family: inherit; }
pre { font-size: 12px; overflow-x: auto; background: #f7f7f7; padding: 10px; }
details { margin-top: 24px; }
ul { margin: 4px 0 8px; padding-left: 22px; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0 10px; }
th, td { padding: 2px 8px; text-align: right; border-bottom: 1px solid #eee; }
th.n, td.n { text-align: left; }
"""


def render(report: Report, text_report: str | None = None) -> str:
    """The page: header, the six plots, the diagnosis, the text report folded with every row
    (`text_report`: `text.render(report)` when the caller has it already; rendered again with
    every row when that one leaves rows out)."""
    if text_report is None or extremes.cuts(report):
        text_report = text.render(report, every_row=True)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<link rel="icon" href="data:,">',  # no favicon request
        f"<title>{esc(title(report))}</title><style>{_STYLE}</style></head><body>",
        *header(report),
        *flighthtml.section(report),
        *section("Communication hidden and exposed, per window and rank", _OVERLAP_ABOUT),
        htmlplots.overlap_maps(report),
        *section("Exposed communication: transfer or waiting", _SPLIT_ABOUT),
        htmlplots.split_bars(report),
        *section("Bus bandwidth against message size", _BANDWIDTH_ABOUT),
        htmlplots.bandwidth_panels(report),
        *section("Arrival skew per matched collective", _SKEW_ABOUT),
        htmlplots.skew_panels(report),
        *section("All-to-all-v traffic between ranks", alltoallvhtml.ABOUT),
        alltoallvhtml.heat_map(report),
        *(section("Pipeline stages", pipehtml.ABOUT) if report.pipeline.per_rank else ()),
        *pipehtml.table(report),
        *section("Intra- vs inter-node", linkhtml.ABOUT),
        *linkhtml.tables(report),
        *section("GPU time by kernel category", ""),
        htmlplots.kernel_bars(report),
        *section("Top kernels and kernel launches", kernelhtml.ABOUT),
        *kernelhtml.tables(report),
        *section("CUDA graphs", graphhtml.ABOUT),
        *graphhtml.tables(report),
        *section("Step times per rank", ""),
        htmlplots.step_plot(report),
        *diagnosis(report),
        "<details><summary>The text report (every figure, with its definition)</summary>",
        f"<pre>{esc(text_report)}</pre></details>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"


_OVERLAP_ABOUT: Final = (
    "Overlap is the share of a rank's communication time that compute ran under; exposed "
    "communication is the rest, time the rank spent communicating with nothing else to do."
)
_SPLIT_ABOUT: Final = (
    "Each rank's exposed communication, split on aligned clocks: waiting from its start at a "
    "matched collective until the last member arrived (imbalance: the network cannot help), "
    "transfer the rest (what overlap and the network can change), unmatched for calls no "
    "other rank's call was matched to."
)
_BANDWIDTH_ABOUT: Final = (
    "Each dot is one collective matched across its group, timed by its fastest member (the "
    "one that did not wait for the others): busbw = S·F / T (nccl-tests). The line is the "
    "α-β fit T = α + S·F / β; the dashed line is the link's peak."
)
_SKEW_ABOUT: Final = (
    "Skew is the time between the first and the last member starting a collective; the "
    "instances where the rank the others wait for arrived last are highlighted."
)


def title(report: Report) -> str:
    name = report.config.model_name or "commscope report"
    ranks = len(report.ranks)
    return f"{name}: {ranks} rank{'s' if ranks != 1 else ''}"


def header(report: Report) -> Iterator[str]:
    config = report.config
    where = ", ".join(x for x in (text.device(report), config.backend) if x)
    windows = len(report.windows)
    yield f"<h1>{esc(title(report))}</h1>"
    yield (
        f'<p class="sub">{esc(where)}; world size {esc(report.world_size or "n/a")}; '
        f"{windows} profiling window{'s' if windows != 1 else ''}; "
        f"{report.throughput.iterations} step{'s' if report.throughput.iterations != 1 else ''}"
        "</p>"
    )
    yield f'<p class="verdict">Verdict: <b>{esc(report.diagnosis.verdict)}</b></p>'
    d = report.diagnosis
    why = f" ({d.confidence_reason})" if d.confidence_reason else ""
    yield f'<p class="sub">Confidence: {esc(d.confidence)}{esc(why)}</p>'
    yield '<div class="cards">'
    for value, label in cards(report):
        yield (
            f'<div class="card"><div class="v">{esc(value)}</div>'
            f'<div class="k">{esc(label)}</div></div>'
        )
    yield "</div>"


def cards(report: Report) -> list[tuple[str, str]]:
    """(value, what it is) for the header, formatted as the text report formats them."""
    awaited = report.skew.waited_for_rank
    ranks = report.overlap.per_rank.values()  # an Inspector rank's exposed time is unknown
    exposed = [o.exposed_comm_time_s for o in ranks if not inspected(o.evidence)]
    return [
        (duration(report.throughput.iteration_time_s), "iteration time (mean over ranks)"),
        (pct(report.overlap.mean), "overlap (mean over ranks)"),
        (duration(max(exposed)) if exposed else "n/a", "exposed communication (worst rank)"),
        (rate(report.network.mean_bus_bandwidth_Bps), "bus bandwidth (mean over ranks)"),
        ("none named" if awaited is None else f"rank {awaited}", "the rank the others wait for"),
    ]


def section(heading: str, about: str) -> Iterator[str]:
    yield f"<h2>{esc(heading)}</h2>"
    if about:
        yield f"<p>{esc(about)}</p>"


def diagnosis(report: Report) -> Iterator[str]:
    found = report.diagnosis
    yield from section("Diagnosis", "")
    for finding in found.findings:
        yield f"<p><b>{esc(finding.verdict)}</b></p><ul>"
        yield from (f"<li>{esc(line)}</li>" for line in finding.evidence)
        yield from (f"<li>Suggestion: {esc(line)}</li>" for line in finding.suggestions)
        yield "</ul>"
    if found.assumptions:
        yield "<p>Assumptions:</p><ul>"
        yield from (f"<li>{esc(line)}</li>" for line in found.assumptions)
        yield "</ul>"
