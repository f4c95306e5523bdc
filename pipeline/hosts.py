"""Intra- vs inter-node: which ranks share a host, and the run's collectives split by link (pure).

A rank's host comes from `--hosts` (rank ranges → host) when given for it, else from its trace
where the format records one (Nsight Systems' `TARGET_INFO_SYSTEM_ENV` Hostname, NCCL
Inspector's `metadata.hostname`; Kineto traces record none), else from the name of one of its
files where `torch.profiler.tensorboard_trace_handler` wrote it (`{hostname}_{pid}.…`,
`names.host_in_name`). A process group is *intra-node*
when its member list is whole (as many members as its size n) and every member's host is known
and all are one host (a group of one rank is intra-node whatever its host), *inter-node* when
two of its members' known hosts differ, and unknown otherwise; each of its instances takes its
group's class (a group's members are fixed). Per class and collective type: the instances,
Σ S·F, the bus bandwidth Σ S·F / Σ wait-free seconds (each instance's fastest member, as
`crossrank.alpha_beta` takes it) against the class's own link peak, and the α-β fit over the
class's instances of every group. Text in, structs out.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, Literal

from commscope.model.errors import ConfigError
from commscope.model.names import base_name, host_in_name
from commscope.model.schema import MAX_LABEL, Link, LinkCollective, LinkGroup, Links, TraceMeta
from commscope.pipeline.crossrank import CrossRank, fitted
from commscope.pipeline.matching import group_order
from commscope.pipeline.stats import ratio

INTRA: Final = "intra_node"
INTER: Final = "inter_node"
UNKNOWN: Final = "unknown"
Locality = Literal["intra_node", "inter_node", "unknown"]

HOSTS_FLAG: Final = "--hosts"
NET_PEAK_FLAG: Final = "--net-peak"
# What gave a rank's host, by the trace's source (`TraceMeta.source`).
RECORDED: Final = {
    "nsys": "Nsight Systems TARGET_INFO_SYSTEM_ENV Hostname",
    "inspector": "NCCL Inspector metadata.hostname",
}
FILE_NAME: Final = "file name"
NO_HOSTS: Final = f"no rank's host is known (Kineto traces record none): give {HOSTS_FLAG}"
NO_INSTANCES: Final = "no collective was matched across ranks"
NO_NIC: Final = f"no trace names the network interface: give {NET_PEAK_FLAG} (GB/s)"
_ENTRY: Final = re.compile(r"^\s*(\d+)(?:\s*-\s*(\d+))?\s*[=:]\s*(\S+)\s*$")
_MAX_RANK: Final = 1 << 24


def parse_hosts(text: str) -> dict[int, str]:
    """`--hosts` as rank → host: entries `R=HOST` or `A-B=HOST` (`:` also separates), apart by
    commas, semicolons or lines (a file's `#` comments ignored). ConfigError when an entry is
    not one, or a rank is given two hosts."""
    hosts: dict[int, str] = {}
    for entry in _entries(text):
        first, last, host = _entry(entry)
        for rank in range(first, last + 1):
            if hosts.setdefault(rank, host) != host:
                raise ConfigError(f"{HOSTS_FLAG}: rank {rank} given two hosts")
    if not hosts:
        raise ConfigError(f"{HOSTS_FLAG}: no RANKS=HOST entry")
    return hosts


def _entries(text: str) -> list[str]:
    lines = (line.split("#", 1)[0] for line in text.splitlines())
    return [part for line in lines for part in re.split(r"[,;]", line) if part.strip()]


def _entry(entry: str) -> tuple[int, int, str]:
    found = _ENTRY.match(entry)
    if found is None:
        raise ConfigError(f"{HOSTS_FLAG}: {entry.strip()!r} is not RANK=HOST or A-B=HOST")
    first = int(found[1])
    last = int(found[2]) if found[2] is not None else first
    host = found[3]
    if last < first or last >= _MAX_RANK or len(host) > MAX_LABEL:
        raise ConfigError(f"{HOSTS_FLAG}: {entry.strip()!r} is not a rank range and a host")
    return first, last, host


def rank_hosts(
    metas: Iterable[tuple[int, TraceMeta]],
    given: Mapping[int, str] | None,
    named: Mapping[int, str] | None = None,
) -> tuple[dict[int, str], dict[int, str]]:
    """(rank → host, rank → what gave it): `given` (`--hosts`) first, else the first of the
    rank's files that records one, else `named` (`named_hosts`: from its files' names)."""
    hosts: dict[int, str] = {}
    sources: dict[int, str] = {}
    for rank, meta in metas:
        if given is not None and rank in given:
            hosts[rank], sources[rank] = given[rank], HOSTS_FLAG
        elif meta.host is not None and rank not in hosts:
            hosts[rank], sources[rank] = meta.host, RECORDED.get(meta.source, meta.source)
    for rank, host in (named or {}).items():
        if rank not in hosts:
            hosts[rank], sources[rank] = host, FILE_NAME
    return dict(sorted(hosts.items())), dict(sorted(sources.items()))


def named_hosts(paths: Iterable[tuple[int, str]]) -> dict[int, str]:
    """Rank → the host the first of its files' names gives (`names.host_in_name`)."""
    found: dict[int, str] = {}
    for rank, path in paths:
        host = host_in_name(base_name(path))
        if host is not None:
            found.setdefault(rank, host)
    return found


def locality(members: Sequence[int], size: int | None, hosts: Mapping[int, str]) -> Locality:
    """Whether a group of these members (n = `size`, None: unknown) stays on one node."""
    known = {hosts[m] for m in members if m in hosts}
    if len(known) > 1:
        return INTER
    whole = size is not None and len(set(members)) >= size
    if whole and (len(set(members)) == 1 or all(m in hosts for m in members)):
        return INTRA  # a group of one rank never leaves its node
    return UNKNOWN


def _group_localities(
    cross: CrossRank, hosts: Mapping[int, str], world: int | None = None
) -> dict[str, Locality]:
    """Each matched process group's class; a group whose size is unknown is taken as large as
    the `world` (it can be no larger: its members are then whole when they are the world)."""
    groups = cross.matching.groups
    return {
        name: locality(groups[name].members, cross.sizes.get(name, world), hosts)
        for name in sorted(groups, key=group_order)
    }


# (process group, collective type) -> (its instances, its sized ones' points flat: S·F, T, …)
Rows = dict[tuple[str, str], tuple[int, "array[float]"]]


def links(
    cross: CrossRank | None,
    hosts: tuple[dict[int, str], dict[int, str]],
    intra_peak: tuple[float | None, str],
    net: tuple[float | None, str],
    world: int | None = None,
) -> Links:
    """The run's (or a window's) `Links` section: `hosts` from `rank_hosts`, `intra_peak`
    (bytes/s, source) the GPU's link peak (`sections.peak_bandwidth`), `net` the network's
    (`nics.net_peak`); `cross` the pooled cross-rank facts (None: no window had any); `world`
    the job's."""
    if cross is None:
        return section({}, None, hosts, intra_peak, net)
    classes = _group_localities(cross, hosts[0], world)
    rows = {key: (n, cross.points.get(key, array("d"))) for key, n in cross.instances.items()}
    return section(rows, classes, hosts, intra_peak, net)


def section(
    rows: Rows,
    classes: Mapping[str, Locality] | None,
    hosts: tuple[dict[int, str], dict[int, str]],
    intra_peak: tuple[float | None, str],
    net: tuple[float | None, str],
) -> Links:
    """`Links` of these rows, each group of the class `classes` gives (None: no instance was
    matched); `links` and `linkmerge.merged` both end here."""
    placed, sources = hosts
    found = Links(
        hosts={str(r): h for r, h in placed.items()},
        host_sources={str(r): s for r, s in sources.items()},
        intra_node=Link(peak_Bps=intra_peak[0], peak_source=intra_peak[1]),
        inter_node=Link(peak_Bps=net[0], peak_source=net[1]),
        na_reason=NO_INSTANCES,
    )
    if classes is None:
        return found
    rows = {key: rows[key] for key in sorted(rows, key=_row_order)}
    found.groups = dict(classes)
    found.intra_node = _link(rows, classes, INTRA, intra_peak)
    found.inter_node = _link(rows, classes, INTER, net)
    found.unknown_instances = sum(
        n for (g, _), (n, _) in rows.items() if classes.get(g, UNKNOWN) == UNKNOWN
    )
    found.na_reason = _why_none(classes, placed)
    found.by_group = _by_group(rows)
    return found


def _row_order(key: tuple[str, str]) -> tuple[tuple[bool, int, str], str]:
    return group_order(key[0]), key[1]


def _by_group(rows: Rows) -> dict[str, dict[str, LinkGroup]]:
    """Each group's rows as `Links.by_group` keeps them."""
    found: dict[str, dict[str, LinkGroup]] = {}
    for (group, kind), (n, flat) in rows.items():
        points = list(zip(flat[::2], flat[1::2], strict=True))
        found.setdefault(group, {})[kind] = LinkGroup(instances=n, points=points)
    return found


def _why_none(classes: Mapping[str, Locality], placed: Mapping[int, str]) -> str | None:
    """Why no instance could be placed (None: some were)."""
    if not classes:
        return NO_INSTANCES
    if any(c != UNKNOWN for c in classes.values()):
        return None
    return NO_HOSTS if not placed else "no process group's hosts are all known"


def _link(
    rows: Rows, classes: Mapping[str, Locality], which: str, peak: tuple[float | None, str]
) -> Link:
    groups = [g for g, c in classes.items() if c == which]
    keys = [key for key in rows if classes.get(key[0]) == which]
    kinds = sorted({kind for _, kind in keys})
    return Link(
        peak_Bps=peak[0],
        peak_source=peak[1],
        groups=groups,
        collectives={
            kind: _collective(rows, [k for k in keys if k[1] == kind], peak[0]) for kind in kinds
        },
    )


def _collective(
    rows: Rows, keys: Sequence[tuple[str, str]], peak_Bps: float | None
) -> LinkCollective:
    """One collective type's instances over the (group, type) keys of one link class."""
    flat = array("d")
    for key in keys:
        flat.extend(rows[key][1])
    instances = sum(rows[key][0] for key in keys)
    bus_bytes = math.fsum(flat[::2]) if flat else None
    busbw = ratio(bus_bytes, math.fsum(flat[1::2])) if flat else None
    return LinkCollective(
        instances=instances,
        sized=len(flat) // 2,
        bus_bytes=bus_bytes,
        busbw_Bps=busbw,
        peak_ratio=ratio(busbw, peak_Bps),
        fit=fitted(instances, flat, peak_Bps),
    )
