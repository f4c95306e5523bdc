"""PyTorch Flight Recorder dumps as commscope holds them once read (pure): a rank's process
groups, their progress and the ring buffer's entries, whatever the dump's version or form
(pickle or JSON). Read by `collector.flight`, analysed by `pipeline.flight`; never on the
wire (the source is offline only).
"""

from __future__ import annotations

import msgspec
from commscope.model.base import CollectiveType


class FlightFrame(msgspec.Struct, frozen=True, array_like=True):
    """One frame of the Python stack that issued an entry."""

    name: str
    filename: str
    line: int


class FlightEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of the ring buffer: a collective or point-to-point op a rank enqueued."""

    record_id: int
    group: str  # the process group's name (`process_group[0]`): the same on every rank
    group_desc: str = ""  # its description (`process_group[1]`, e.g. default_pg)
    collective_seq_id: int = 0
    p2p_seq_id: int = 0
    op_id: int = 0
    is_p2p: bool = False
    profiling_name: str = ""  # e.g. nccl:all_reduce, gloo:all_gather
    collective: CollectiveType = "Other"  # its type (`profiling_name` read as commscope does)
    input_sizes: list[list[int]] = []
    input_dtypes: list[str] = []
    output_sizes: list[list[int]] = []
    output_dtypes: list[str] = []
    state: str = "scheduled"  # scheduled, started or completed
    created_ns: int | None = None
    started_ns: int | None = None  # when the watchdog saw it start (None: not seen)
    completed_ns: int | None = None
    duration_ms: float | None = None  # only with timing enabled (TORCH_NCCL_ENABLE_TIMING)
    frames: list[FlightFrame] = []


class FlightStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A process group's progress on one rank (`pg_status`): the last sequence ids it
    enqueued, saw start and saw complete (None: none, PyTorch's -1)."""

    group: str
    enqueued: int | None = None
    started: int | None = None
    completed: int | None = None


class FlightDump(msgspec.Struct, frozen=True, kw_only=True):
    """One rank's dump."""

    rank: int  # from the file's name (a dump does not hold its rank)
    path: str
    version: str = ""
    members: dict[str, list[int]] = {}  # pg_config: group name -> its ranks (where non-empty)
    status: list[FlightStatus] = []  # pg_status (versions from 2.3)
    entries: list[FlightEntry] = []
