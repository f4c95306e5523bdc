"""The matched collectives of a simulated job's window (`simjob.py`), built in memory from the
job's plan without writing or parsing a trace: what `matching.match` finds in its files, with
each rank's times read on its node's clock (true time + `clock_offset_ns`). SendRecv calls are
left out (never matched). Used by the clock tests and the clock benchmark."""

from __future__ import annotations

from commscope.pipeline.matching import Instance
from simjob import (
    Job,
    clock_offset_ns,
    comm_span_ns,
    coords,
    groups,
    node_of,
    stage_plan,
    step_start_ns,
)

Key = tuple[str, int, int]  # (group, global step, the group's call index within the step)


def instances(job: Job, window: int = 0) -> list[Instance]:
    """Every group collective of the window, one Instance per (group, step, call)."""
    found: dict[Key, Instance] = {}
    for rank in range(job.ranks):
        shift = clock_offset_ns(job, node_of(job, rank))
        for k in range(job.steps):
            _step(job, rank, window * job.steps + k, shift + step_start_ns(job, window, k), found)
    return list(found.values())


def _step(job: Job, rank: int, gstep: int, base: int, found: dict[Key, Instance]) -> None:
    """The rank's calls in global step `gstep`, which starts at `base` on the rank's clock."""
    seen: dict[str, int] = {}
    for index, slot in enumerate(stage_plan(job, coords(job, rank)[0])[0]):
        if slot.comm is None or slot.comm.dim == "pp":
            continue
        group = groups(job, rank)[slot.comm.dim]
        n = seen[group.name] = seen.get(group.name, -1) + 1
        start, end = comm_span_ns(job, rank, gstep, index, slot)
        empty = Instance(group.name, len(found), slot.comm.kind, None, len(group.ranks), {}, {})
        instance = found.setdefault((group.name, gstep, n), empty)
        instance.starts[rank] = base + start
        instance.durations[rank] = end - start


def true_offset_ns(job: Job, rank: int) -> int:
    """The rank's clock against rank 0's (node 0's clock is the reference)."""
    return clock_offset_ns(job, node_of(job, rank))
