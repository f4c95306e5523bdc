"""The text report's intra- vs inter-node section (pure: Report → lines).

Which ranks share a host and what said so, each process group's class, then per link class
(intra-node, inter-node) and collective type: instances, bus bytes, the bus bandwidth over
wait-free durations against the link's own peak, and the α-β fit over the class's instances.
A figure against a peak says where the peak came from; an unknown peak says how to give one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from commscope.exporters.textfmt import pct, rank_runs, row
from commscope.model.schema import Link, LinkCollective, Links, Report
from commscope.model.units import duration, rate, size

_WIDTHS: Final = [13, 9, 6, 10, 10, 8, 10, 10, 6]
HEAD: Final = ["collective", "instances", "sized", "bus", "busbw", "of peak", "α", "β", "R²"]
_MOST_HOSTS: Final = 8
_NAMES: Final = {"intra_node": "Intra-node", "inter_node": "Inter-node"}


def link_lines(report: Report) -> Iterator[str]:
    links = report.links
    if links is None:
        yield "n/a (this report was made without the intra- vs inter-node split)"
        return
    yield "A group is intra-node when all its members run on one host, inter-node when two"
    yield "run on different hosts; busbw = Σ S·F / Σ wait-free time (each instance's fastest"
    yield "member), against the link's own peak; α, β: the α-β fit over the class's instances"
    yield ""
    yield from _hosts(links)
    yield from _groups(links)
    for key, link in (("intra_node", links.intra_node), ("inter_node", links.inter_node)):
        yield ""
        yield from _link(_NAMES[key], link)


def _hosts(links: Links) -> Iterator[str]:
    by_host: dict[str, list[int]] = {}
    for rank, host in links.hosts.items():
        by_host.setdefault(host, []).append(int(rank))
    if not by_host:
        yield f"Hosts: unknown ({links.na_reason})"
        return
    shown = sorted(by_host.items(), key=lambda item: min(item[1]))
    yield f"Hosts: {len(by_host):,} ({_sources(links.host_sources)})"
    for host, ranks in shown[:_MOST_HOSTS]:
        yield f"  {host}: ranks {rank_runs(sorted(ranks))}"
    if len(shown) > _MOST_HOSTS:
        yield f"  … and {len(shown) - _MOST_HOSTS:,} more hosts (every rank in the JSON)"


def _sources(sources: Mapping[str, str]) -> str:
    counts: dict[str, int] = {}
    for source in sources.values():
        counts[source] = counts.get(source, 0) + 1
    return "; ".join(f"{source}: {n:,} ranks" for source, n in sorted(counts.items()))


def _groups(links: Links) -> Iterator[str]:
    counts = {"intra_node": 0, "inter_node": 0, "unknown": 0}
    for found in links.groups.values():
        counts[found] += 1
    yield (
        f"Process groups: {counts['intra_node']:,} intra-node, {counts['inter_node']:,} "
        f"inter-node, {counts['unknown']:,} unknown ({links.unknown_instances:,} instances)"
    )
    if links.na_reason and links.hosts:
        yield f"  n/a: {links.na_reason}"


def _link(name: str, link: Link) -> Iterator[str]:
    peak = rate(link.peak_Bps)
    yield f"{name}: peak {peak} per direction ({link.peak_source})"
    if not link.collectives:
        yield "  no instance"
        return
    yield row(HEAD, _WIDTHS)
    for kind, c in link.collectives.items():
        yield row(cells(kind, c), _WIDTHS)
    for kind, c in link.collectives.items():
        if c.fit is not None and c.fit.na_reason:
            yield f"  {kind} α-β: n/a ({c.fit.na_reason})"


def cells(kind: str, c: LinkCollective) -> list[str]:
    """One collective's row of a link table (the text and the HTML report's)."""
    fit = c.fit
    r2 = f"{fit.r2:.3f}" if fit is not None and fit.r2 is not None else "n/a"
    return [kind, f"{c.instances:,}", f"{c.sized:,}", size(c.bus_bytes), rate(c.busbw_Bps),
            pct(c.peak_ratio), duration(fit.alpha_s if fit else None),
            rate(fit.beta_Bps if fit else None), r2]  # fmt: skip
