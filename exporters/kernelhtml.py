"""Top kernels and kernel launches on the HTML page: two small tables (pure).

The pooled top kernels (short names, each whole in its cell's title) and the launch figures
over all ranks, formatted as the text report formats them (`kerneltext`); the per-rank rows
are in the text report folded at the end of the page and in the JSON.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from commscope.exporters.kerneltext import OTHER, TOP, short_names
from commscope.exporters.svg import esc, table_row
from commscope.exporters.textfmt import pct
from commscope.model.schema import Report
from commscope.model.units import duration

ABOUT: Final = (
    "GPU time per kernel name (Σ durations, all ranks; concurrent streams both count), and "
    "the kernel launches: CPU time in launch calls, each kernel's queue delay after its "
    "launch call (kernel start - call start; quantiles ~ within 1%), and how many kernels "
    "ran shorter than their launch call."
)


def tables(report: Report) -> Iterator[str]:
    yield from _kernels(report)
    yield from _launches(report)


def _kernels(report: Report) -> Iterator[str]:
    top = report.top_kernels
    if not top.all_ranks:
        yield f'<p class="note">Top kernels: n/a ({esc(top.na_reason or "no kernels")})</p>'
        return
    shown = top.all_ranks[:TOP]
    yield "<table><tr><th>count</th><th>total</th><th>mean</th><th>share</th><th></th>"
    yield '<th class="n">kernel</th></tr>'
    for kernel, name in zip(shown, short_names([k.name for k in shown]), strict=True):
        kind = "comm" if kernel.communication else ""
        figures = [str(kernel.count), duration(kernel.time_s), duration(kernel.mean_s),
                   pct(kernel.share), kind]  # fmt: skip
        whole = esc(kernel.name or OTHER)
        cells = "".join(f"<td>{esc(v)}</td>" for v in figures)
        yield f'<tr>{cells}<td class="n" title="{whole}">{esc(name)}</td></tr>'
    yield "</table>"


def _launches(report: Report) -> Iterator[str]:
    launches = report.launches.all_ranks
    if launches is None:
        yield f'<p class="note">Kernel launches: n/a ({esc(report.launches.na_reason or "")})</p>'
        return
    delay = launches.queue_delay_s
    yield "<table>" + table_row(
        ["launch calls", "CPU time", "kernels", "delay median", "delay p95", "shorter"], "th"
    )
    yield table_row([str(launches.calls), duration(launches.call_time_s), str(launches.kernels),
                  f"~{duration(delay.median)}", f"~{duration(delay.p95)}",
                  f"{launches.shorter} ({pct(launches.shorter_share, 1)})"])  # fmt: skip
    yield "</table>"
