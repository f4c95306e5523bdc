"""PyTorch Flight Recorder dumps as commscope holds them once read (pure): a rank's process
groups, their progress and the ring buffer's entries, whatever the dump's version or form
(pickle or JSON). Read by `collector.flight`, analysed by `pipeline.flight`; on the wire
msgpack-encoded in parts (`wire.Facts.flight`), its strings bounded as every label's.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec
from commscope.model.base import MAX_LABEL, CollectiveType, Name, Rank

# A name a dump gives (a group, an op, a dtype, a state): a label's bounds, empty allowed
_Label = Annotated[str, msgspec.Meta(max_length=MAX_LABEL, pattern="^[^\\x00-\\x1f\\x7f]*$")]
_FrameText = Annotated[str, msgspec.Meta(max_length=4096)]
MAX_FLIGHT_BYTES: Final = 256 * 2**20  # a dump msgpack-encoded, at most (`collector.flight`)


class FlightFrame(msgspec.Struct, frozen=True, array_like=True):
    """One frame of the Python stack that issued an entry."""

    name: _FrameText
    filename: _FrameText
    line: int


class FlightEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of the ring buffer: a collective or point-to-point op a rank enqueued."""

    record_id: int
    group: _Label  # the process group's name (`process_group[0]`): the same on every rank
    group_desc: _Label = ""  # its description (`process_group[1]`, e.g. default_pg)
    collective_seq_id: int = 0
    p2p_seq_id: int = 0
    op_id: int = 0
    is_p2p: bool = False
    profiling_name: _Label = ""  # e.g. nccl:all_reduce, gloo:all_gather
    collective: CollectiveType = "Other"  # its type (`profiling_name` read as commscope does)
    input_sizes: list[list[int]] = []
    input_dtypes: list[_Label] = []
    output_sizes: list[list[int]] = []
    output_dtypes: list[_Label] = []
    state: _Label = "scheduled"  # scheduled, started or completed
    created_ns: int | None = None
    started_ns: int | None = None  # when the watchdog saw it start (None: not seen)
    completed_ns: int | None = None
    duration_ms: float | None = None  # only with timing enabled (TORCH_NCCL_ENABLE_TIMING)
    frames: list[FlightFrame] = []


class FlightStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A process group's progress on one rank (`pg_status`): the last sequence ids it
    enqueued, saw start and saw complete (None: none, PyTorch's -1)."""

    group: _Label
    enqueued: int | None = None
    started: int | None = None
    completed: int | None = None


class FlightDump(msgspec.Struct, frozen=True, kw_only=True):
    """One rank's dump."""

    rank: Rank  # from the file's name (a dump does not hold its rank)
    path: Name
    version: _Label = ""
    members: dict[_Label, list[Rank]] = {}  # pg_config: group name -> its ranks (where non-empty)
    status: list[FlightStatus] = []  # pg_status (versions from 2.3)
    entries: list[FlightEntry] = []
