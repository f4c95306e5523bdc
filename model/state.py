"""Saved state (pure): the collector's checkpoint and the aggregator's store, versioned by
`STATE_VERSION` and `STORE_VERSION`."""

from __future__ import annotations

from typing import Final, Literal

import msgspec
from commscope.model.base import (
    Count,
    Instance,
    NodeName,
    StreamId,
)
from commscope.model.flight import FlightDump
from commscope.model.wire import (
    FileStats,
    RankResult,
    TraceMeta,
)

# Persisted state (the collector's checkpoint, the aggregator's store). Version 1 carried no
# version field; readers migrate it explicitly.
STATE_VERSION: Final = 2
# The aggregator's state folder (its `version.msgpack`): versions 1 and 2 went with
# STATE_VERSION; 3 is one journal (`JournalEntry` frames in segments), which `service.store`
# migrates version 1 and 2 folders to; 4 keys drop reasons as protocol 10 does.
STORE_VERSION: Final = 4


# ---------------------------------------------------------------- aggregator state
#
# The aggregator's state folder (`pipeline.store`): `version.msgpack` (a `StateVersion`: the
# format of everything beside it; a folder without one is version 1), `done/<stream>.msgpack`
# (a `FinishedFile`), `nodes.msgpack` (`Nodes`), `retired.msgpack` (`Retired`), and the open
# streams' logs (the wire records as received). Version 1 held the same structs, unchecked,
# and bandwidth samples as lists of floats; `pipeline.store` migrates it explicitly.


class StateVersion(msgspec.Struct, kw_only=True):
    version: int


Nodes = dict[NodeName, bool]  # each collector seen -> whether it has sent end-of-run
EndedBy = dict[NodeName, Instance]  # each ended node -> the collector instance that ended it
Retired = list[StreamId]  # superseded streams


class RunEnd(msgspec.Struct, kw_only=True):
    """`ended.msgpack`: the run is over and its final reports are written. An aggregator
    started again on this state folder writes nothing and exits as the run did (its code
    follows from `lost`)."""

    reports: list[str]  # the final reports' paths
    lost: list[str] = []  # what never finished (the aggregator's `lost`)
    generated_utc: str = ""  # when the reports were written (ISO 8601)


# What a frame of the aggregator's journal says about `stream` (state version 3).
JournalKind = Literal["record", "finished", "forget", "forget_log"]


class JournalEntry(msgspec.Struct, array_like=True, frozen=True):
    """One frame of the aggregator's journal: a record of an open stream as received
    (`data`), a finished file's result (`data`: a msgpack `FinishedFile`), or that the
    stream's records and result ("forget") or only its records ("forget_log") are gone."""

    kind: JournalKind
    stream: StreamId
    data: bytes = b""


class FinishedFile(msgspec.Struct, kw_only=True):
    """One trace stream the aggregator has seen end: its result, or why it is unusable.
    Persisted by the aggregator, so a restart keeps every finished file."""

    stream: str
    node: str
    path: str
    folder: str
    root_name: str
    name_rank: int | None = None
    next_seq: int = 0
    size_bytes: int = 0
    meta: TraceMeta = TraceMeta()
    stats: FileStats = msgspec.field(default_factory=FileStats)
    result: RankResult | None = None
    error: str | None = None
    lost: bool = False  # its collector could not read it (StreamEnd.lost)
    flight: FlightDump | None = None  # a Flight Recorder dump's (it holds no result)


class AggregatorStats(msgspec.Struct, kw_only=True):
    """The aggregator's own counters (exported as `commscope_aggregator_*`)."""

    messages: dict[str, int] = {}  # by kind
    events: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    rejected: dict[str, int] = {}  # by reason
    acks: int = 0
    log_bytes: int = 0
    window_latency_s: float | None = None
    refused: dict[str, int] = {}  # connections refused at the Curve handshake, by reason
    received_bytes: int = 0  # message payloads as received, refused ones included
    io_errors: dict[str, int] = {}  # I/O errors survived (retried), by where: loop, reports


# ---------------------------------------------------------------- collector state


class CheckpointEntry(msgspec.Struct, kw_only=True):
    """A file's checkpoint: its stream, how many leading bytes its fingerprint covers (fewer
    than 64 KiB when the file was shorter as its stream began), what the aggregator holds
    durably (`acked` records), and whether the stream has ended there (`done`)."""

    stream: str
    fingerprint_bytes: Count
    acked: Count = 0
    done: bool = False


class Checkpoint(msgspec.Struct, kw_only=True):
    """The collector's persisted state (version 1 was a bare map of path to entry)."""

    version: int = STATE_VERSION
    files: dict[str, CheckpointEntry] = {}
