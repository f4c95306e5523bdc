"""CUDA graphs on the HTML page: graph launches per rank and each rank's graphs (pure).

The figures the text report prints (`graphtext`), every rank and every graph of each.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from commscope.exporters import graphtext
from commscope.exporters.svg import esc, table_row
from commscope.exporters.textfmt import pct, plain
from commscope.model.report import GraphReplays, GraphStats, Report
from commscope.model.units import duration

ABOUT: Final = graphtext.ABOUT
_STATS_HEAD = ["rank", "launches", "CPU time", "empty", "kernels", "per launch", "GPU time",
               "comm kernels", "comm time", "graphs"]  # fmt: skip
_GRAPH_HEAD = ["rank", "graph", "launches", "kernels", "GPU time", "comm kernels", "comm time"]


def tables(report: Report) -> Iterator[str]:
    found = report.graphs
    if found.all_ranks is None:
        yield f'<p class="note">CUDA graphs: n/a ({esc(found.na_reason or "")})</p>'
        return
    yield "<table>" + table_row(_STATS_HEAD, "th")
    yield table_row(_stats("all", found.all_ranks))
    for rank, figures in found.per_rank.items():
        yield table_row(_stats(rank, figures))
    yield "</table>"
    yield "<table>" + table_row(_GRAPH_HEAD, "th")
    for rank, replays in found.per_graph.items():
        for replay in replays:
            yield table_row(_graph(rank, replay))
    yield "</table>"


def _stats(label: str, g: GraphStats) -> list[str]:
    return [label, str(g.launches), duration(g.call_time_s), f"{g.empty} ({pct(g.empty_share, 0)})",
            str(g.kernels), plain(g.kernels_per_launch), duration(g.kernel_time_s),
            str(g.comm_kernels), duration(g.comm_time_s), str(g.graphs)]  # fmt: skip


def _graph(rank: str, g: GraphReplays) -> list[str]:
    return [rank, "not recorded" if g.graph is None else str(g.graph), str(g.launches),
            str(g.kernels), duration(g.kernel_time_s), str(g.comm_kernels),
            duration(g.comm_time_s)]  # fmt: skip
