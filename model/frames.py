"""A report as pandas DataFrames for notebooks (pure: pandas is imported when called).

`tables` lays the report out as rows, one table per kind of row (ranks, collective types,
instances, kernels, the windows' ranks); `frames` makes each a DataFrame. Every value is the
report's own, unconverted and under the same unit-suffixed name; None (NaN or <NA> in a frame)
is unknown, as in the JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from commscope.model.schema import CollectiveStats, KernelRow, Report, Sections, Summary

if TYPE_CHECKING:
    from pandas import DataFrame

Row = dict[str, Any]
INSTALL: Final = "pip install 'commscope[pandas]'"

_RANK_COLUMNS: Final = (
    "rank",
    "overlap_ratio",
    "comm_time_s",
    "overlapped_time_s",
    "exposed_comm_time_s",
    "compute_time_s",
    "exposed_transfer_s",
    "exposed_waiting_s",
    "exposed_unmatched_s",
    "steps",
    "step_mean_s",
    "step_min_s",
    "step_max_s",
    "bus_bandwidth_Bps",
    "simple_bandwidth_Bps",
    "bus_bytes",
    "comm_ops",
    "arrived_last",
    "last_share",
    "caused_wait_s",
    "waited_s",
    "robust_z",
)
_TOTALS: Final = ("count", "sized_count", "message_bytes", "bus_bytes", "time_s")
_SUMMARY: Final = ("mean", "median", "min", "max")
_STATS: Final = (
    *_TOTALS,
    *(f"{bw}_{stat}_Bps" for bw in ("algbw", "busbw") for stat in _SUMMARY),
)
_COLLECTIVE_COLUMNS: Final = (
    "collective",
    *_STATS,
    "traffic_share",
    "instances",
    "skew_mean_s",
    "skew_median_s",
    "skew_max_s",
    "wait_s",
)
_RANK_COLLECTIVE_COLUMNS: Final = ("rank", "collective", *_STATS)
_INSTANCE_COLUMNS: Final = ("collective", "position", "skew_s", "last_rank")
_KERNEL_COLUMNS: Final = ("name", "count", "time_s", "mean_s", "share", "communication")
_RANK_KERNEL_COLUMNS: Final = ("rank", *_KERNEL_COLUMNS)
_WINDOW_COLUMNS: Final = ("window", *_RANK_COLUMNS)
COLUMNS: Final = {
    "ranks": _RANK_COLUMNS,
    "collectives": _COLLECTIVE_COLUMNS,
    "rank_collectives": _RANK_COLLECTIVE_COLUMNS,
    "instances": _INSTANCE_COLUMNS,
    "kernels": _KERNEL_COLUMNS,
    "rank_kernels": _RANK_KERNEL_COLUMNS,
    "windows": _WINDOW_COLUMNS,
}


@dataclass(frozen=True)
class Frames:
    """The report's tables as DataFrames, one row per: rank (`ranks`), collective type over
    all ranks (`collectives`) and per rank (`rank_collectives`), matched instance
    (`instances`: arrival skew and last arriver, as the report keeps them), kernel name
    over all ranks (`kernels`) and per rank (`rank_kernels`), and rank in each window
    (`windows`)."""

    ranks: DataFrame
    collectives: DataFrame
    rank_collectives: DataFrame
    instances: DataFrame
    kernels: DataFrame
    rank_kernels: DataFrame
    windows: DataFrame


def frames(report: Report) -> Frames:
    """The report's `tables` as DataFrames; ImportError naming the extra without pandas."""
    try:
        import pandas  # noqa: PLC0415  (an optional extra: imported only when asked)
    except ImportError:
        raise ImportError(f"commscope.frames needs pandas: {INSTALL}") from None
    found = tables(report)
    made = {name: _frame(pandas, rows, COLUMNS[name]) for name, rows in found.items()}
    return Frames(**made)


def _frame(pandas: Any, rows: list[Row], columns: tuple[str, ...]) -> DataFrame:
    frame = pandas.DataFrame(rows, columns=list(columns))
    if "rank" in frame:
        frame["rank"] = frame["rank"].astype("int64")
    return frame


def tables(report: Report) -> dict[str, list[Row]]:
    """The rows of each frame (`COLUMNS` names their keys, in order)."""
    return {
        "ranks": _rank_rows(report),
        "collectives": _collective_rows(report),
        "rank_collectives": _rank_collective_rows(report),
        "instances": _instance_rows(report),
        "kernels": [_kernel(row) for row in report.top_kernels.all_ranks],
        "rank_kernels": _rank_kernel_rows(report),
        "windows": [{"window": w.name, **row} for w in report.windows for row in _rank_rows(w)],
    }


def _rank_rows(sections: Sections) -> list[Row]:
    """One row per rank of `sections` (the run's, or a window's)."""
    return [{"rank": rank, **_rank(sections, str(rank))} for rank in sections.ranks]


def _rank(sections: Sections, rank: str) -> Row:
    overlap = sections.overlap.per_rank.get(rank)
    steps = sections.steps.get(rank)
    network = sections.network.per_rank.get(rank)
    arrival = sections.skew.per_rank.get(rank)
    return {
        "overlap_ratio": overlap and overlap.ratio,
        "comm_time_s": overlap and overlap.comm_time_s,
        "overlapped_time_s": overlap and overlap.overlapped_time_s,
        "exposed_comm_time_s": overlap and overlap.exposed_comm_time_s,
        "compute_time_s": overlap and overlap.compute_time_s,
        "exposed_transfer_s": overlap and overlap.exposed_transfer_s,
        "exposed_waiting_s": overlap and overlap.exposed_waiting_s,
        "exposed_unmatched_s": overlap and overlap.exposed_unmatched_s,
        "steps": steps and steps.count,
        "step_mean_s": steps and steps.mean_s,
        "step_min_s": steps and steps.min_s,
        "step_max_s": steps and steps.max_s,
        "bus_bandwidth_Bps": network and network.bus_bandwidth_Bps,
        "simple_bandwidth_Bps": network and network.simple_bandwidth_Bps,
        "bus_bytes": network and network.bus_bytes,
        "comm_ops": network and network.ops,
        "arrived_last": arrival and arrival.last,
        "last_share": arrival and arrival.last_share,
        "caused_wait_s": arrival and arrival.caused_wait_s,
        "waited_s": arrival and arrival.waited_s,
        "robust_z": sections.stragglers.robust_z.get(rank),
    }


def _collective_rows(report: Report) -> list[Row]:
    """One row per collective type over all ranks, with its traffic share and arrival skew."""
    return [
        {"collective": name, **_stats(stats), **_skew(report, name)}
        for name, stats in report.collectives.all_ranks.items()
    ]


def _skew(report: Report, name: str) -> Row:
    skew = report.skew.per_collective.get(name)
    traffic = report.traffic.get(name)
    summary = skew.skew_s if skew else Summary()
    return {
        "traffic_share": traffic and traffic.share,
        "instances": skew and skew.instances,
        "skew_mean_s": summary.mean,
        "skew_median_s": summary.median,
        "skew_max_s": summary.max,
        "wait_s": skew and skew.wait_s,
    }


def _rank_collective_rows(report: Report) -> list[Row]:
    per_rank = report.collectives.per_rank
    return [
        {"rank": int(rank), "collective": name, **_stats(stats)}
        for rank, table in _by_rank(per_rank)
        for name, stats in table.items()
    ]


def _stats(stats: CollectiveStats) -> Row:
    """A `CollectiveStats` as columns, its bandwidth summaries spread out."""
    row: Row = {key: getattr(stats, key) for key in _TOTALS}
    for bw, summary in (("algbw", stats.algbw_Bps), ("busbw", stats.busbw_Bps)):
        row.update({f"{bw}_{stat}_Bps": getattr(summary, stat) for stat in _SUMMARY})
    return row


def _instance_rows(report: Report) -> list[Row]:
    """One row per instance the report keeps (`Skew.instances`: evenly thinned to at most
    `PLOT_POINTS` a type; its `total` counts them all): skew and the rank that arrived last."""
    return [
        {"collective": name, "position": i, "skew_s": skew_s, "last_rank": last}
        for name, kept in report.skew.instances.items()
        for i, (skew_s, last) in enumerate(zip(kept.skew_s, kept.last, strict=True))
    ]


def _kernel(row: KernelRow) -> Row:
    return {key: getattr(row, key) for key in _KERNEL_COLUMNS}


def _rank_kernel_rows(report: Report) -> list[Row]:
    return [
        {"rank": int(rank), **_kernel(row)}
        for rank, rows in _by_rank(report.top_kernels.per_rank)
        for row in rows
    ]


def _by_rank(per_rank: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A per-rank table's entries in rank order (its keys are ranks as text)."""
    return sorted(per_rank.items(), key=lambda item: int(item[0]))
