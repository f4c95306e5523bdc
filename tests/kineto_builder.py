"""Builders for small hand-made Kineto traces, and a one-call reader for the tests.

A trace is built from Python dicts and serialised with `json.dumps`, so the byte layout is
what Kineto writes: header keys, then `traceEvents`, then trailer keys (dicts keep order).
Times in the builders are microseconds, as in Kineto; the reader's output is nanoseconds.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from commscope.collector.kineto import TraceReader
from commscope.model.schema import (
    CommOp,
    CpuSpan,
    Event,
    FileStats,
    KernelTime,
    LaunchDelays,
    TraceMeta,
)
from commscope.model.wire import GraphTally

TALLIES = (KernelTime, LaunchDelays, GraphTally)  # what a file's reader gives at its end
COMPUTE_TID = 1
GPU_STREAM = 7


def trace(
    events: Iterable[Any],
    head: Mapping[str, Any] | None = None,
    tail: Mapping[str, Any] | None = None,
) -> bytes:
    """A Kineto document: `head` keys, then `traceEvents`, then `tail` keys."""
    doc = {**(head or {}), "traceEvents": list(events), **(tail or {})}
    return json.dumps(doc).encode()


def dist_head(
    rank: int = 0,
    world_size: int = 8,
    backend: str = "nccl",
    pg_sizes: Mapping[str, int] | None = None,
    gpu: str | None = None,
) -> dict[str, Any]:
    """Header keys as Kineto writes them (`deviceProperties`, `distributedInfo`)."""
    info: dict[str, Any] = {"backend": backend, "rank": rank, "world_size": world_size}
    if pg_sizes is not None:
        info["pg_config"] = [
            {"pg_name": name, "pg_desc": "pg", "pg_size": size} for name, size in pg_sizes.items()
        ]
    head: dict[str, Any] = {"schemaVersion": 1}
    if gpu is not None:
        head["deviceProperties"] = [{"id": 0, "name": gpu}]
    head["distributedInfo"] = info
    return head


Tid = int | str  # PyTorch 1.8-1.10 write tids as strings: "1234", "stream 7"


def span(cat: str, name: str, ts: float, dur: float, tid: Tid, *, args: Any = None) -> dict:
    """One complete (`ph: X`) event."""
    event: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": tid}
    event["ts"] = ts
    event["dur"] = dur
    if args is not None:
        event["args"] = args
    return event


def kernel(name: str, ts: float, dur: float, args: Any = None) -> dict[str, Any]:
    return span("kernel", name, ts, dur, GPU_STREAM, args=args)


def launch(correlation: int, ts: float, tid: Tid, name: str = "cudaLaunchKernel") -> dict[str, Any]:
    return span("cuda_runtime", name, ts, 1, tid, args={"correlation": correlation})


def cpu_op(name: str, ts: float, dur: float, tid: Tid = COMPUTE_TID, args: Any = None) -> dict:
    return span("cpu_op", name, ts, dur, tid, args=args)


def annotation(name: str, ts: float, dur: float, tid: Tid = COMPUTE_TID, args: Any = None) -> dict:
    return span("user_annotation", name, ts, dur, tid, args=args)


def collective_args(
    name: str, in_nelems: int, out_nelems: int, dtype: str, **extra: Any
) -> dict[str, Any]:
    """The args PyTorch's record_param_comms writes (and recent PyTorch copies to kernels)."""
    return {
        "Collective name": name,
        "In msg nelems": in_nelems,
        "Out msg nelems": out_nelems,
        "dtype": dtype,
        **extra,
    }


def dims_args(dims: list[Any], types: list[str]) -> dict[str, Any]:
    return {"Input Dims": dims, "Input type": types}


# PyTorch 1.8-1.10's category names for today's (the rest were written as they are now)
LEGACY_CATS = {"cpu_op": "Operator", "cuda_runtime": "Runtime", "kernel": "Kernel",
               "gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}  # fmt: skip
_GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")


def legacy_event(event: Any, thread: str = "{}") -> Any:
    """`event` as PyTorch 1.8-1.10 write it: its category capitalised (`Operator`, `Kernel`,
    …), `ProfilerStep#N` an `Operator`, an integer tid a string: a GPU event's `"stream 7"`,
    a thread's `thread` with its number in it (`"4242"`, or a name such as `"thread 4242"`)."""
    if not isinstance(event, dict):
        return event
    cat, tid, name = event.get("cat"), event.get("tid"), event.get("name")
    out = dict(event)
    if isinstance(cat, str):
        out["cat"] = LEGACY_CATS.get(cat, cat)
    if isinstance(name, str) and name.startswith("ProfilerStep#") and cat == "user_annotation":
        out["cat"] = "Operator"
    if type(tid) is int:
        out["tid"] = f"stream {tid}" if cat in _GPU_CATS else thread.format(tid)
    return out


@dataclass(frozen=True)
class Parsed:
    """Everything one pass of TraceReader produced."""

    events: list[Event]  # the timed events (what the file's tallies sum is in `tallies`)
    meta: TraceMeta
    stats: FileStats
    has_gpu: bool
    tallies: list[Event] = field(default_factory=list)  # KernelTime, LaunchDelays, GraphTally

    @property
    def names(self) -> list[KernelTime]:
        return [e for e in self.tallies if isinstance(e, KernelTime)]

    @property
    def launches(self) -> list[LaunchDelays]:
        return [e for e in self.tallies if isinstance(e, LaunchDelays)]

    @property
    def graphs(self) -> list[GraphTally]:
        return [e for e in self.tallies if isinstance(e, GraphTally)]

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]

    @property
    def comm(self) -> list[CommOp]:
        return self.of(CommOp)

    @property
    def cpu(self) -> list[CpuSpan]:
        return sorted(self.of(CpuSpan), key=lambda s: (s.tid, s.comm_call, s.start_ns))

    def counts(self) -> Counter[Event]:
        return Counter(self.events)


def read(doc: bytes, stream: IO[bytes] | None = None, batch: int | None = None) -> Parsed:
    """Parse `doc` (or `stream`, when given) with TraceReader, draining every batch."""
    reader = TraceReader(stream if stream is not None else io.BytesIO(doc), "x.json")
    batches = reader.batches() if batch is None else reader.batches(batch)
    events = [event for chunk in batches for event in chunk]
    timed = [e for e in events if not isinstance(e, TALLIES)]
    tallies = [e for e in events if isinstance(e, TALLIES)]
    return Parsed(timed, reader.meta, reader.stats, reader.has_gpu, tallies)


class ChunkedReader:
    """A binary reader whose `read(n)` returns at most `sizes[i]` bytes, cycling over `sizes`."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self._data = io.BytesIO(data)
        self._sizes = sizes
        self._turn = 0

    def read(self, size: int = -1) -> bytes:
        limit = self._sizes[self._turn % len(self._sizes)]
        self._turn += 1
        return self._data.read(limit if size < 0 else min(size, limit))


def union(intervals: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Brute-force union of closed intervals: sorted, touching ones merged."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
