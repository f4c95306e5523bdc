"""Intra- vs inter-node on the HTML page: the hosts and one table per link class (pure).

Formatted as the text report formats them (`linktext`); every rank's host is in the JSON and
in the text report folded at the end of the page.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from commscope.exporters.linktext import HEAD, cells
from commscope.exporters.svg import esc, table_row
from commscope.model.schema import Link, Report
from commscope.model.units import rate

ABOUT: Final = (
    "A process group is intra-node when all its members run on one host (NVLink or the "
    "host's fabric), inter-node when two run on different hosts (the network). Bus bandwidth "
    "Σ S·F / Σ T over each instance's fastest member, against that link's own peak."
)


def tables(report: Report) -> Iterator[str]:
    links = report.links
    if links is None:
        yield '<p class="note">n/a (made without the intra- vs inter-node split)</p>'
        return
    hosts = len(set(links.hosts.values()))
    known = f"{hosts:,} hosts over {len(links.hosts):,} ranks" if hosts else "hosts unknown"
    yield f"<p>{esc(known)}{_reason(links.na_reason)}</p>"
    yield from _table("Intra-node", links.intra_node)
    yield from _table("Inter-node", links.inter_node)


def _reason(reason: str | None) -> str:
    return f" — n/a: {esc(reason)}" if reason else ""


def _table(name: str, link: Link) -> Iterator[str]:
    peak = rate(link.peak_Bps)
    yield f"<p><b>{esc(name)}</b>: peak {esc(peak)} ({esc(link.peak_source)})</p>"
    if not link.collectives:
        yield '<p class="note">no instance</p>'
        return
    yield "<table>" + table_row(HEAD, "th")
    for kind, c in link.collectives.items():
        yield table_row(cells(kind, c))
    yield "</table>"
