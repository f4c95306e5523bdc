"""The text report's all-to-all-v section (pure: Report → lines): calls, imbalance, busbw by
the busiest rank, bytes per rank (extremes past 16 ranks), imbalance per step, and the traffic
matrix for at most `_MATRIX_SHOWN` ranks (else its largest entries)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from commscope.exporters.alltoallvcsv import SUFFIX, replay_command
from commscope.exporters.extremes import Cut
from commscope.exporters.textfmt import num, row
from commscope.model.report import AllToAllV
from commscope.model.schema import Report, Summary
from commscope.model.units import rate, size

_MATRIX_SHOWN: Final = 8  # ranks up to which the text prints the whole matrix
_LARGEST: Final = 5  # entries listed of a larger matrix
NONE: Final = "n/a (no all-to-all call recorded its split sizes: `In split size`/`Out split size`)"
MERGED: Final = (
    "n/a (no all-to-all call of any shard recorded its split sizes; shards reported by a "
    "commscope before the merge of all-to-all-v carry no all-to-all calls)"
)


NSYS: Final = (
    "an Nsight Systems export gives split sizes only through NCCL's NVTX payloads (exported "
    "with --include-blobs=true or --include-json=true): each grouped ncclSend/ncclRecv's bytes "
    "and peer (ncclAlltoAll's payload is even)"
)


def why_none(report: Report) -> str:
    """Why the report has no all-to-all-v section."""
    why = MERGED if report.merge is not None else NONE
    return f"{why}; {NSYS}" if "nsys" in report.inputs.sources else why


def alltoallv_lines(report: Report, cut: Cut) -> Iterator[str]:
    found = report.alltoallv
    if found is None:
        yield why_none(report)
        return
    yield from _summary(found)
    yield from _ranks(found, cut)
    yield from _steps(found)
    yield from _matrix(found)


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{num(value)}x"


def _spread(s: Summary) -> str:
    return f"mean {_ratio(s.mean)}, max {_ratio(s.max)}"


def _summary(found: AllToAllV) -> Iterator[str]:
    known = found.calls - found.unknown_bytes
    yield f"Calls with split sizes: {found.calls} ({known} of known bytes; rows x row size)"
    yield f"Bytes sent (Σ over ranks, own slices included): {size(found.total_bytes)}"
    yield (
        f"Load imbalance over the run (max/mean over ranks, 1x = balanced): "
        f"sent {_ratio(found.sent_imbalance)}, received {_ratio(found.received_imbalance)}"
    )
    yield (
        f"Per call: sent {_spread(found.call_sent_imbalance)}; "
        f"received {_spread(found.call_received_imbalance)}"
    )
    busiest = "n/a" if found.busiest_rank is None else f"rank {found.busiest_rank}"
    yield f"Busiest rank (most bytes sent or received): {busiest}"
    bw = found.busbw_Bps
    yield (
        f"busbw by the busiest rank (B / its time x (n-1)/n, nccl-tests): "
        f"median {rate(bw.median)}, min {rate(bw.min)}, max {rate(bw.max)}"
    )


def _ranks(found: AllToAllV, cut: Cut) -> Iterator[str]:
    widths = [8, 8, 12, 12]
    yield ""
    yield row(["rank", "calls", "sent", "received"], widths)
    shown = cut.ranks(found.per_rank, lambda r: r.sent_bytes, "sent", size)
    for rank, r in shown.items:
        yield row([rank, str(r.calls), size(r.sent_bytes), size(r.received_bytes)], widths)
    yield from shown.summary


def _steps(found: AllToAllV) -> Iterator[str]:
    if not found.steps:
        return
    widths = [8, 8, 16, 16, 10]
    yield ""
    yield row(["step", "calls", "sent max/mean", "recv max/mean", "busiest"], widths)
    for s in found.steps:
        busiest = "n/a" if s.busiest_rank is None else str(s.busiest_rank)
        cells = [str(s.step), str(s.calls), _ratio(s.sent_imbalance),
                 _ratio(s.received_imbalance), busiest]  # fmt: skip
        yield row(cells, widths)


def _matrix(found: AllToAllV) -> Iterator[str]:
    yield ""
    if found.matrix_na_reason is not None:
        yield f"Traffic matrix: {found.matrix_na_reason}"
    ranks = found.matrix_ranks
    if not ranks:
        return
    if len(ranks) <= _MATRIX_SHOWN:
        yield "Traffic matrix (bytes over the run; row: sender, column: receiver):"
        widths = [8] + [10] * len(ranks)
        yield row(["from\\to", *map(str, ranks)], widths)
        for rank, line in zip(ranks, found.matrix_bytes, strict=True):
            yield row([str(rank), *map(size, line)], widths)
    else:
        yield from _largest(found)
    command = replay_command(found, f"<report>{SUFFIX}")
    if command is not None:
        yield f"Replay the mean call: {command}"


def _largest(found: AllToAllV) -> Iterator[str]:
    ranks = found.matrix_ranks
    entries = [(v, ranks[i], ranks[j]) for i, line in enumerate(found.matrix_bytes)
               for j, v in enumerate(line)]  # fmt: skip
    entries.sort(key=lambda e: (-e[0], e[1], e[2]))
    yield f"Traffic matrix: {len(ranks)} ranks (every entry in JSON and HTML); the largest:"
    for value, sender, receiver in entries[:_LARGEST]:
        yield f"  rank {sender} -> rank {receiver}: {size(value)}"
