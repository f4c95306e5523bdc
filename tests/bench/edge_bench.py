"""Edge reduction (issue 11, item 1): wire bytes and aggregator CPU per file, before and after,
on real traces, with the collector's CPU for the same files measured in the same run.

Per file (the 8 DLRM ranks, and the largest single-rank traces of ../shared/traces):

- collector parse: `TraceReader` over the file (what a collector spends either way), and the
  same plus the reduction (`pipeline.edge.Reduction.add_all`, then its `Facts`): the edge's
  own extra cost;
- before (protocol 4): the wire records `StreamStart`, `Batch`es of 4096 events, `StreamEnd`,
  msgpack-encoded; the aggregator's CPU to decode them, feed an `Accumulator` and make the
  file's result (`result()`), as protocol 4's aggregation did;
- after (protocol 5): `StreamStart`, the file's `Facts`, `StreamEnd`; the aggregator's CPU to
  decode them, `Aggregation.verdict` and `apply` (absorb, then `result()` at the end).

Times are `time.process_time` (one core), best of `--repeat`. The two results must be equal
(the run fails otherwise); nothing asserts on timings. Run from the repo root:

    .venv/bin/python tests/bench/edge_bench.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec
from commscope.collector.discover import open_trace
from commscope.collector.kineto import TraceReader
from commscope.model.schema import (
    Batch,
    Event,
    Facts,
    RankResult,
    Record,
    StreamEnd,
    StreamStart,
)
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.aggregation import Aggregation, Verdict
from commscope.pipeline.edge import Reduction
from machineinfo import cpu_and_python

TRACES: Final = Path("/work/shared/traces/kineto")
FILES: Final = [
    *sorted((TRACES / "dlrm_8rank_v100").glob("worker*.json")),
    TRACES / "single_rank" / "v100_allreduce_216k_events_rank1.json.gz",
    TRACES / "single_rank" / "mi300_rccl_generic_rank0.json.gz",
]
STREAM: Final = "0123456789abcdef0123456789abcdef"
BATCH: Final = 4096
OLD: Final = msgspec.msgpack.Decoder(StreamStart | Batch | StreamEnd)
NEW: Final = msgspec.msgpack.Decoder(Record)


@dataclass
class Row:
    name: str
    events: int
    trace_bytes: int
    parse_s: float
    reduce_s: float  # parse and reduction
    before_bytes: int
    after_bytes: int
    before_s: float
    after_s: float


def best(repeat: int, work: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        started = time.process_time()
        work()
        times.append(time.process_time() - started)
    return min(times)


def parse(path: Path) -> tuple[list[list[Event]], StreamEnd]:
    with open_trace(path) as handle:
        reader = TraceReader(handle, str(path))
        batches = list(reader.batches(BATCH))
    end = StreamEnd(stream=STREAM, seq=0, meta=reader.meta, stats=reader.stats)
    return batches, end


def reduce(path: Path) -> Reduction:
    reduction = Reduction()
    with open_trace(path) as handle:
        for batch in TraceReader(handle, str(path)).batches(BATCH):
            reduction.add_all(batch)
    list(reduction.facts(STREAM, 1))
    return reduction


def start(path: Path) -> StreamStart:
    return StreamStart(stream=STREAM, node="bench", path=str(path), folder=".", root_name="r")


def wire(path: Path, batches: list[list[Event]], end: StreamEnd) -> tuple[list[bytes], list[bytes]]:
    """The file's records as protocol 4 and as protocol 5 send them, encoded."""
    events = [event for batch in batches for event in batch]  # in Batches of 4096 at most
    cuts = range(0, len(events), BATCH)
    old: list[Record | Batch] = [start(path)]
    old += [
        Batch(stream=STREAM, seq=i, events=events[c : c + BATCH]) for i, c in enumerate(cuts, 1)
    ]
    reduction = Reduction()
    for batch in batches:
        reduction.add_all(batch)
    new: list[Record] = [start(path), *reduction.facts(STREAM, 1)]
    encode = msgspec.msgpack.encode
    old_end = msgspec.structs.replace(end, seq=len(old))
    new_end = msgspec.structs.replace(end, seq=len(new))
    return [encode(r) for r in [*old, old_end]], [encode(r) for r in [*new, new_end]]


def before(payloads: list[bytes]) -> RankResult:
    """Protocol 4's aggregator: every event into an Accumulator, the result at the end."""
    accumulator = Accumulator()
    result = None
    for payload in payloads:
        record = OLD.decode(payload)
        if isinstance(record, Batch):
            accumulator.add_all(record.events)
        elif isinstance(record, StreamEnd):
            result = accumulator.result([str(record.stream)])
    assert result is not None
    return result


def after(payloads: list[bytes]) -> RankResult:
    """Protocol 5's aggregator: `Aggregation` absorbs the facts, the result at the end."""
    aggregation = Aggregation()
    for payload in payloads:
        record = NEW.decode(payload)
        if aggregation.verdict(record) is Verdict.APPLY:
            aggregation.apply(record)
    result = aggregation.finished[STREAM].result
    assert result is not None
    return result


def measure(path: Path, repeat: int) -> Row:
    batches, end = parse(path)
    old, new = wire(path, batches, end)
    if msgspec.structs.replace(before(old), files=[]) != msgspec.structs.replace(
        after(new), files=[]
    ):
        raise SystemExit(f"{path.name}: the facts give another result than the events")
    parts = sum(1 for p in new if isinstance(NEW.decode(p), Facts))
    print(f"  {path.name}: {len(old)} records before, {len(new)} after ({parts} Facts)")
    return Row(
        name=path.name,
        events=sum(map(len, batches)),
        trace_bytes=path.stat().st_size,
        parse_s=best(repeat, lambda: parse(path)),
        reduce_s=best(repeat, lambda: reduce(path)),
        before_bytes=sum(map(len, old)),
        after_bytes=sum(map(len, new)),
        before_s=best(repeat, lambda: before(old)),
        after_s=best(repeat, lambda: after(new)),
    )


def table(rows: list[Row]) -> None:
    print(
        f"{'file':<44} {'events':>8} {'wire B before':>13} {'after':>9} {'ratio':>6}"
        f" {'agg ms before':>13} {'after':>7} {'ratio':>6} {'parse ms':>8} {'+reduce':>8}"
        f" {'agg/coll before':>15} {'after':>6}"
    )
    for r in rows:
        print(
            f"{r.name[:44]:<44} {r.events:>8,} {r.before_bytes:>13,} {r.after_bytes:>9,}"
            f" {r.before_bytes / r.after_bytes:>5.1f}x {r.before_s * 1e3:>13.1f}"
            f" {r.after_s * 1e3:>7.2f} {r.before_s / r.after_s:>5.0f}x {r.parse_s * 1e3:>8.0f}"
            f" {r.reduce_s * 1e3:>8.0f} {r.before_s / r.parse_s:>14.1%}"
            f" {r.after_s / r.reduce_s:>6.2%}"
        )


def totals(rows: list[Row]) -> None:
    b_bytes, a_bytes = sum(r.before_bytes for r in rows), sum(r.after_bytes for r in rows)
    b_s, a_s = sum(r.before_s for r in rows), sum(r.after_s for r in rows)
    parse_s, reduce_s = sum(r.parse_s for r in rows), sum(r.reduce_s for r in rows)
    trace = sum(r.trace_bytes for r in rows)
    print(
        f"all {len(rows)} files ({trace / 1e6:.1f} MB of traces as stored):"
        f" wire {b_bytes / 1e6:.2f} MB -> {a_bytes / 1e6:.3f} MB ({b_bytes / a_bytes:.1f}x less);"
        f" aggregator CPU {b_s:.3f} s -> {a_s:.4f} s ({b_s / a_s:.0f}x less)"
    )
    print(
        f"aggregator CPU against the collectors' CPU: before {b_s / parse_s:.1%} of parsing,"
        f" after {a_s / reduce_s:.2%} of parsing and reducing"
        f" (the reduction adds {reduce_s / parse_s - 1:.1%} to the collectors' CPU)"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    files = [f for f in FILES if f.is_file()]
    if not files:
        print(f"{TRACES}: no traces", file=sys.stderr)
        return 1
    print(cpu_and_python())
    rows = [measure(path, args.repeat) for path in files]
    table(rows)
    totals(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
