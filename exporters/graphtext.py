"""CUDA graphs in the text report: graph launches and the kernels they replayed (pure).

One row over every rank and one per rank (the extreme ranks past 16, `extremes`), then the
graphs of the rank with the most graph GPU time by id; every rank's graphs are in the JSON
and on the HTML page.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Final

from commscope.exporters.extremes import Cut
from commscope.exporters.textfmt import pct, plain, row
from commscope.model.report import GraphReplays, GraphStats, Report
from commscope.model.units import duration

ABOUT: Final = (
    "Graph launches: cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch and their variants (CPU "
    "time). A kernel is a graph's when its correlation id is a graph launch's, or, its launch "
    "not in the trace, when it carries a graph id (unlaunched); GPU time is Σ durations. "
    "Empty = launches with no kernel in the trace (the profiler skipped the replay: TRACE "
    "HEALTH); per launch = kernels of a launch over the launches with kernels; comm = "
    "communication kernels among them (the kernel-family table)."
)
_TOP_GRAPHS: Final = 8
_WIDTHS: Final = [6, 8, 9, 8, 8, 10, 9, 6, 9, 6]
_GRAPH_WIDTHS: Final = [8, 8, 8, 9, 6, 9]


def graph_lines(report: Report, cut: Cut) -> Iterator[str]:
    found = report.graphs
    if found.all_ranks is None:
        yield f"n/a ({found.na_reason or 'no CUDA graph launches'})"
        return
    yield from textwrap.wrap(ABOUT, 92)
    yield ""
    head = ["rank", "launches", "CPU time", "empty", "kernels", "per launch", "GPU time",
            "comm", "comm time", "graphs"]  # fmt: skip
    yield row(head, _WIDTHS)
    yield _stats_row("all", found.all_ranks)
    shown = cut.ranks(found.per_rank, _gpu_time, "graph GPU time", duration)
    for rank, figures in shown.items:
        yield _stats_row(rank, figures)
    yield from shown.summary
    yield from _graphs(report)


def _gpu_time(figures: GraphStats) -> float | None:
    return figures.kernel_time_s


def _stats_row(label: str, g: GraphStats) -> str:
    cells = [label, str(g.launches), duration(g.call_time_s),
             f"{g.empty} ({pct(g.empty_share, 0)})" if g.empty else "0", str(g.kernels),
             plain(g.kernels_per_launch), duration(g.kernel_time_s), str(g.comm_kernels),
             duration(g.comm_time_s), str(g.graphs)]  # fmt: skip
    return row(cells, _WIDTHS)


def _graphs(report: Report) -> Iterator[str]:
    found = report.graphs
    busiest = max(found.per_rank, key=lambda r: found.per_rank[r].kernel_time_s, default=None)
    rows = found.per_graph.get(busiest, []) if busiest is not None else []
    if not rows:
        return
    yield ""
    yield f"Graphs of rank {busiest} (most graph GPU time), by GPU time; id - = not recorded:"
    head = ["graph", "launches", "kernels", "GPU time", "comm", "comm time"]
    yield row(head, _GRAPH_WIDTHS)
    for replay in rows[:_TOP_GRAPHS]:
        yield _graph_row(replay)
    if len(rows) > _TOP_GRAPHS:
        yield f"  ... {len(rows) - _TOP_GRAPHS} more graphs (every one in the JSON and HTML)"


def _graph_row(g: GraphReplays) -> str:
    cells = ["-" if g.graph is None else str(g.graph), str(g.launches), str(g.kernels),
             duration(g.kernel_time_s), str(g.comm_kernels), duration(g.comm_time_s)]  # fmt: skip
    return row(cells, _GRAPH_WIDTHS)
