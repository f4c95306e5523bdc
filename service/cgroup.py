"""The CPUs a cgroup's quota buys (pure: the files' text comes in, a reader passed in).

A container's CPU limit is a CFS quota on its cgroup: cgroup v2's `cpu.max` ("200000 100000":
2 CPUs; "max ...": none), cgroup v1's `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1: none).
`quota` finds the process's cgroup folders from `/proc/self/cgroup` and the cgroup mounts in
`/proc/self/mountinfo` (a container sees its own cgroup as the mount's root), and takes the
smallest quota of that folder and its ancestors up to the mount (a parent's limit binds its
children). `usable` turns it into worker processes: whole CPUs, at least one, never more than
the affinity mask allows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

Read = Callable[[str], str | None]  # a file's text by absolute path, None when unreadable

_V2_FILE: Final = "cpu.max"
_V1_QUOTA: Final = "cpu.cfs_quota_us"
_V1_PERIOD: Final = "cpu.cfs_period_us"
_ESCAPE: Final = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space as \040


@dataclass(frozen=True)
class Mount:
    """A cgroup mount holding the cpu controller: its root in the hierarchy, where it sits."""

    root: str
    point: str
    v2: bool


def usable(affinity: int, cpus: float | None) -> int:
    """Workers for `affinity` CPUs under a quota of `cpus` (None: no quota): whole CPUs the
    quota buys, at least 1, at most `affinity`."""
    if cpus is None:
        return max(1, affinity)
    return max(1, min(affinity, math.floor(cpus)))


def quota(cgroup_text: str, mountinfo_text: str, read: Read) -> float | None:
    """The smallest CPU quota over the process's cgroup folders and their ancestors (None:
    no quota anywhere it can see)."""
    paths = memberships(cgroup_text)
    limits = [
        cpus
        for mount in mounts(mountinfo_text)
        for folder in folders(mount, paths.get("" if mount.v2 else "cpu"))
        if (cpus := _folder_cpus(mount, folder, read)) is not None
    ]
    return min(limits, default=None)


def memberships(cgroup_text: str) -> dict[str, str]:
    """`/proc/self/cgroup` as {controller: path}; cgroup v2's line under "" (its
    controllers field is empty)."""
    paths: dict[str, str] = {}
    for line in cgroup_text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for controller in parts[1].split(",") if parts[1] else [""]:
                paths[controller] = parts[2]
    return paths


def mounts(mountinfo_text: str) -> list[Mount]:
    """The cgroup v2 mounts and the v1 mounts holding the cpu controller."""
    found = []
    for line in mountinfo_text.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        fstype, *rest = line.split(" - ", 1)[1].split()
        options = rest[1].split(",") if len(rest) > 1 else []
        if fstype == "cgroup2" or (fstype == "cgroup" and "cpu" in options):
            found.append(Mount(_unescape(fields[3]), _unescape(fields[4]), fstype == "cgroup2"))
    return found


def folders(mount: Mount, path: str | None) -> list[str]:
    """The folders of cgroup `path` and its ancestors inside `mount`, deepest first (none
    when the process's cgroup is not under the mount's root)."""
    if path is None:
        return []
    root = mount.root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return []
    relative = [part for part in path[len(root) :].split("/") if part]
    point = mount.point.rstrip("/")
    return ["/".join([point, *relative[:depth]]) for depth in range(len(relative), -1, -1)]


def v2_cpus(text: str) -> float | None:
    """`cpu.max` ("QUOTA PERIOD", QUOTA "max" for none) as CPUs."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    return _ratio(parts[0], parts[1])


def v1_cpus(quota_text: str, period_text: str) -> float | None:
    """`cpu.cfs_quota_us` over `cpu.cfs_period_us` as CPUs (quota -1: none)."""
    return _ratio(quota_text.strip(), period_text.strip())


def _folder_cpus(mount: Mount, folder: str, read: Read) -> float | None:
    if mount.v2:
        text = read(f"{folder}/{_V2_FILE}")
        return None if text is None else v2_cpus(text)
    quota_text, period_text = read(f"{folder}/{_V1_QUOTA}"), read(f"{folder}/{_V1_PERIOD}")
    if quota_text is None or period_text is None:
        return None
    return v1_cpus(quota_text, period_text)


def _ratio(quota_text: str, period_text: str) -> float | None:
    """quota / period for positive integers, else None (-1, garbage, a zero period)."""
    if not (quota_text.isdigit() and period_text.isdigit()) or int(period_text) == 0:
        return None
    return int(quota_text) / int(period_text) if int(quota_text) > 0 else None


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)
