"""CUDA graphs: the tallies of graph launches merged, and their report section (pure).

A rank's `GraphTally` (`collector.graphs`) sums over its files and windows: counts add, and
the rows of one graph id add (a row per id, MAX_GRAPHS ids kept, later ones summed into the
row without an id). The section gives per rank and pooled over the ranks: the graph launch
calls and their CPU time, the launches none of whose kernels is in the trace (`empty`), the
kernels replayed (joined by correlation id, or by graph id alone when their launch is not in
the trace) and their Σ GPU time, the kernels a launch replays on average (over the launches
with kernels), and the communication kernels among them (`collector.families`); per rank,
each graph by id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from commscope.model.report import GraphReplays, Graphs, GraphStats
from commscope.model.wire import MAX_GRAPHS, GraphRow, GraphTally, RankResult
from commscope.pipeline.stats import ratio

_NS: Final = 1e-9
NO_GRAPHS: Final = (
    "no CUDA graph launch (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch) and no kernel "
    "with a graph id in the traces"
)


def merge(tallies: Iterable[GraphTally | None]) -> GraphTally | None:
    """The tallies summed (rows by graph id); None when none is known."""
    known = [t for t in tallies if t is not None]
    if not known:
        return None
    return GraphTally(
        launches=sum(t.launches for t in known),
        call_ns=sum(t.call_ns for t in known),
        empty=sum(t.empty for t in known),
        unlaunched=sum(t.unlaunched for t in known),
        rows=merge_rows(row for t in known for row in t.rows),
    )


def merge_rows(rows: Iterable[GraphRow]) -> list[GraphRow]:
    """Rows of one graph id summed, in id order (the row without an id last); past
    MAX_GRAPHS ids, the rest into the row without an id."""
    sums: dict[int | None, list[int]] = {}
    for row in rows:
        graph = row.graph if row.graph in sums or len(sums) < MAX_GRAPHS else None
        into = sums.setdefault(graph, [0, 0, 0, 0, 0])
        for i, value in enumerate(_figures(row)):
            into[i] += value
    ids = sorted(g for g in sums if g is not None)
    keys: list[int | None] = [*ids, *([None] if None in sums else [])]
    return [GraphRow(g, *sums[g]) for g in keys]


def _figures(row: GraphRow) -> tuple[int, int, int, int, int]:
    return row.launches, row.kernels, row.kernel_ns, row.comm_kernels, row.comm_ns


# ---------------------------------------------------------------- the report section


def graphs(results: Mapping[int, RankResult]) -> Graphs:
    """Per rank and pooled over the ranks (results in rank order)."""
    known = {str(r): res.graphs for r, res in results.items() if res.graphs is not None}
    pooled = merge(known.values())
    if pooled is None:
        return Graphs(na_reason=NO_GRAPHS)
    return Graphs(
        all_ranks=stats(pooled),
        per_rank={rank: stats(tally) for rank, tally in known.items()},
        per_graph={rank: replays(tally) for rank, tally in known.items()},
    )


def stats(tally: GraphTally) -> GraphStats:
    """The figures of one tally (a rank's, or every rank's merged)."""
    rows = tally.rows
    kernels = sum(r.kernels for r in rows)
    launched = kernels - tally.unlaunched  # kernels joined to a launch by correlation
    return GraphStats(
        launches=tally.launches,
        call_time_s=tally.call_ns * _NS,
        empty=tally.empty,
        empty_share=ratio(tally.empty, tally.launches),
        kernels=kernels,
        kernel_time_s=sum(r.kernel_ns for r in rows) * _NS,
        kernels_per_launch=ratio(launched, tally.launches - tally.empty),
        comm_kernels=sum(r.comm_kernels for r in rows),
        comm_time_s=sum(r.comm_ns for r in rows) * _NS,
        unlaunched=tally.unlaunched,
        graphs=sum(1 for r in rows if r.graph is not None),
    )


def replays(tally: GraphTally) -> list[GraphReplays]:
    """A rank's graphs, most GPU time first (then by id; the row without an id last)."""
    ordered = sorted(tally.rows, key=lambda r: (r.graph is None, -r.kernel_ns, r.graph or 0))
    return [
        GraphReplays(
            graph=r.graph,
            launches=r.launches,
            kernels=r.kernels,
            kernel_time_s=r.kernel_ns * _NS,
            comm_kernels=r.comm_kernels,
            comm_time_s=r.comm_ns * _NS,
        )
        for r in ordered
    ]
