"""What the live aggregation keeps of the finished part of a run, against the windows.

Usage: .venv/bin/python tests/bench/aggregator_memory.py [ranks] [calls] [windows] [seed]

A simulated run (defaults: 16 ranks, 1,000 collectives a rank a window, 8 windows): every
rank's file of a window holds `calls` collectives in its tensor-parallel group of 8 ranks
(tp0 = ranks 0-7, ...; AllReduce, AllGather, ReduceScatter in turn, sizes from 64 kB to 256 MB
the same on every member, durations drawn per rank), a compute kernel beside each, and 10
ProfilerSteps. Each
window goes through an `Aggregation` as the aggregator daemon drives it: every file applied,
its result written to a real `Store` (a temp folder, as `done/`), then a report and `shed()`
(as `publish` does). After each window, `tracemalloc` gives the bytes still held (after
`gc.collect()`; the generated events are gone by then), for three aggregations in one run:

  kept       no store: nothing is shed (every call list and every sample kept);
  old        call lists dropped once matched, samples kept (as before samples were shed:
             `_shed_samples` disabled, all else as in this tree);
  new        call lists dropped and samples replaced by their packed sketches.

It prints the bytes held per window count, the ratios old / new and kept / new, the growth per
window per rank, and, at the end, how much of it is the report cache's cross-rank facts
(`WindowCache`: per matched instance its skew, its α-β point and its chance-test draw, packed)
and the rest per window per rank. A script that prints figures, not a timed assertion.
"""

from __future__ import annotations

import gc
import random
import sys
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

from commscope.model.schema import (
    Batch,
    CommOp,
    Event,
    GpuOp,
    Record,
    Step,
    StreamEnd,
    StreamStart,
    TraceMeta,
)
from commscope.pipeline.aggregation import Aggregation
from commscope.pipeline.report import Options
from commscope.service.store import Store

KINDS = ("AllReduce", "AllGather", "ReduceScatter")
TP = 8  # ranks a process group: tp0 = ranks 0-7, tp1 = 8-15, ...


class Old(Aggregation):
    """The aggregation before samples were shed: call lists only."""

    def _shed_samples(self, streams: object) -> set[str]:
        return set()


def events(window: int, rank: int, ranks: int, calls: int, seed: int) -> list[Event]:
    shared = random.Random(f"{seed}/{window}")  # the same sizes on every rank
    own = random.Random(f"{seed}/{window}/{rank}")
    period = 100_000  # ns between a rank's collectives
    step = period * calls // 10
    found: list[Event] = [Step(window * 100 + s, s * step, step, 1) for s in range(10)]
    for i in range(calls):
        start = i * period + own.randrange(1000)
        size = 1 << shared.randint(16, 28)
        dur = max(1, round(size / (100e9 * own.lognormvariate(0.0, 0.5)) * 1e9))
        found.append(GpuOp("compute", start, period // 2))
        op = CommOp(KINDS[i % 3], start + period // 2, dur, size, TP, True, f"tp{rank // TP}", i)
        found.append(op)
    return found


def records(window: int, rank: int, ranks: int, calls: int, seed: int) -> Iterator[Record]:
    folder = f"iteration_{window * 10}"
    path = f"/run/{folder}/rank{rank}.json"
    stream = f"{window:08d}{rank:08d}".ljust(32, "0")
    yield StreamStart(
        stream=stream, node="node0", path=path, folder=folder, root_name="run", name_rank=rank
    )
    yield Batch(stream=stream, seq=1, events=events(window, rank, ranks, calls, seed))
    group = rank // TP
    members = {f"tp{group}": list(range(group * TP, group * TP + TP))}
    meta = TraceMeta(rank=rank, world_size=ranks, gpu_name="NVIDIA H100", pg_ranks=members)
    yield StreamEnd(stream=stream, seq=2, meta=meta, size_bytes=1)


def held() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


def run(make: str, ranks: int, calls: int, windows: int, seed: int) -> tuple[list[int], int, int]:
    """Bytes held after each window; at the end those of the cached cross-rank facts, and of
    the cached window sections."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp))
        base = held()
        aggregation = {"kept": Aggregation, "old": Old, "new": Aggregation}[make](
            load=None if make == "kept" else store.load
        )
        found = []
        for window in range(1, windows + 1):
            for rank in range(ranks):
                for record in records(window, rank, ranks, calls, seed):
                    finished = aggregation.apply(record).finished
                    if finished is not None:
                        store.finish(finished)
            aggregation.report(Options())
            aggregation.shed()
            found.append(held() - base)
        cache, start = aggregation.cache, held()
        cache._cross.clear()  # (private: a measurement only)
        cross = start - held()
        cache._sections.clear()
        sections = start - cross - held()
        store.close()
        del aggregation, cache
    return found, cross, sections


def main(ranks: int, calls: int, windows: int, seed: int) -> None:
    tracemalloc.start()
    print(f"{ranks} ranks x {calls:,} collectives a window; bytes held after each window")
    results = {make: run(make, ranks, calls, windows, seed) for make in ("kept", "old", "new")}
    print(f"{'windows':>7} {'kept':>14} {'old':>14} {'new':>14} {'old/new':>8} {'kept/new':>9}")
    for index in range(windows):
        kept, old, new = (results[m][0][index] for m in ("kept", "old", "new"))
        print(
            f"{index + 1:>7} {kept:>14,} {old:>14,} {new:>14,} {old / new:>8.2f} {kept / new:>9.2f}"
        )
    half = windows // 2
    instances = windows * calls * ranks // TP
    for make, (found, cross, sections) in results.items():
        slope = (found[-1] - found[half - 1]) / (windows - half) / ranks
        rest = (found[-1] - cross - sections) / windows / ranks
        print(
            f"{make}: +{slope:,.0f} B a window a rank over the last {windows - half} windows;"
            f" at the end cross-rank facts {cross:,} B ({cross / instances:,.0f} B a matched"
            f" instance), window sections {sections / windows / ranks:,.0f} B and the rest"
            f" {rest:,.0f} B a window a rank"
        )


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [16, 1_000, 8, 0][len(args) :]))
