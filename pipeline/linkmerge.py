"""The intra- vs inter-node section of shard reports merged (`commscope merge`, pure).

Each shard's section keeps, per process group and collective type, its instances and the
(S·F, wait-free T) point of each sized one (`Links.by_group`). The merged section takes the
groups whose traced members all lie in one shard (`merge`'s `groups_inside`) from that shard,
with the class it found, and pools them into the link classes as `hosts.section` does for one
process: the sums are exact sums and the fit a function of the points alone, so the merged
section is the one `commscope report` gives on all the files, over those groups. A group
across shards is left out (the merge's notes name it). Hosts are the union of the shards'.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from typing import Final

from commscope.model.schema import Link, Links
from commscope.pipeline import hosts

ACROSS: Final = "every process group lies across shards: not analysed by a merge"


def merged(views: Mapping[int, Links | None], inside: Mapping[str, int]) -> Links | None:
    """The section of shards (shard -> its section) over the groups `inside` one shard (group
    -> shard); None when no shard has one."""
    held = {shard: links for shard, links in views.items() if links is not None}
    if not held:
        return None
    first = held[min(held)]
    classes, rows = _inside(held, inside)
    placed = _hosts(held.values())
    found = hosts.section(rows, classes, placed, _peak(first.intra_node), _peak(first.inter_node))
    if not classes and any(links.groups for links in held.values()):
        found.na_reason = ACROSS
    return found


def _inside(
    held: Mapping[int, Links], inside: Mapping[str, int]
) -> tuple[dict[str, hosts.Locality], hosts.Rows]:
    """The classes and rows of the groups inside one shard, from that shard's section."""
    classes: dict[str, hosts.Locality] = {}
    rows: hosts.Rows = {}
    for group, shard in inside.items():
        own = held.get(shard)
        if own is not None and group in own.groups:
            classes[group] = _locality(own.groups[group])
            for kind, part in own.by_group.get(group, {}).items():
                flat = array("d", [x for point in part.points for x in point])
                rows[group, kind] = (part.instances, flat)
    return classes, rows


def _locality(name: str) -> hosts.Locality:
    """A class as a section names it."""
    return (
        hosts.INTRA
        if name == hosts.INTRA
        else hosts.INTER
        if name == hosts.INTER
        else hosts.UNKNOWN
    )


def _hosts(sections: Iterable[Links]) -> tuple[dict[int, str], dict[int, str]]:
    """Every shard's ranks' hosts and what gave each (the first shard naming a rank's)."""
    placed: dict[int, str] = {}
    sources: dict[int, str] = {}
    for links in sections:
        for rank, host in links.hosts.items():
            if int(rank) not in placed:
                placed[int(rank)] = host
                sources[int(rank)] = links.host_sources.get(rank, "")
    return dict(sorted(placed.items())), dict(sorted(sources.items()))


def _peak(link: Link) -> tuple[float | None, str]:
    return link.peak_Bps, link.peak_source
