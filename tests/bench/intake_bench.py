"""The aggregator's intake alone: records received, applied, made durable and acknowledged
through `Aggregator.receive` and `commit` in drains of up to 512 messages (as the loop's
`_drain` does), without reports, on a real state folder (real fsyncs).

Each rank file of a window is a StreamStart, one Facts record (`--calls` collectives and as
many kernels) and a StreamEnd, from 32 nodes, the files of a window interleaved as the
collectors' credit windows interleave them. Per run: CPU seconds (process time), wall seconds
and fsyncs a window. To compare two checkouts, give each one's interpreter (`--python`, in
turn): the runs alternate between them, so both see the same load; ratios within one
invocation are the figure to quote.

    .venv/bin/python tests/bench/intake_bench.py --python /work/main/.venv/bin/python \
        --python .venv/bin/python --ranks 256 --windows 3 --runs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

DRAIN = 512
NODES = 32


def window_records(window: int, ranks: int, calls: int) -> list[tuple[str, bytes]]:
    """(node, payload) of every record of a window, interleaved across files."""
    import msgspec
    from commscope.model.schema import CommOp, GpuOp, StreamEnd, StreamStart, TraceMeta
    from commscope.pipeline.edge import Reduction

    files = []
    for rank in range(ranks):
        node = f"node{rank % NODES}"
        stream = f"{window:08x}{rank:024x}"
        reduction = Reduction()
        events: list[Any] = []
        for n in range(calls):
            events.append(GpuOp("compute", n * 1000, 400))
            events.append(CommOp("AllReduce", n * 1000 + 400, 500, 2**20, 1, True, "0", ranks))
        reduction.add_all(events)
        path = f"/job/iteration_{window}/rank{rank}.json"
        start = StreamStart(
            stream=stream, node=node, path=path, folder=f"iteration_{window}", root_name="job"
        )
        parts = list(reduction.facts(stream, 1))
        meta = TraceMeta(rank=rank, world_size=ranks, backend="nccl")
        end = StreamEnd(stream=stream, seq=1 + len(parts), meta=meta)
        files.append([(node, msgspec.msgpack.encode(r)) for r in (start, *parts, end)])
    longest = max(map(len, files))
    return [f[i] for i in range(longest) for f in files if i < len(f)]


def child(args: argparse.Namespace) -> None:
    """One run in this interpreter's commscope: a JSON line per window."""
    from commscope.service.aggregate import Aggregator, AggregatorSettings

    fsyncs = [0]
    real = os.fsync

    def counted(fd: int) -> None:
        fsyncs[0] += 1
        real(fd)

    os.fsync = counted
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        settings = AggregatorSettings(
            listen="tcp://127.0.0.1:*", out=Path(tmp) / "out", state=Path(tmp) / "state"
        )
        aggregator = Aggregator(settings)
        for window in range(args.windows):
            sent = window_records(window, args.ranks, args.calls)
            fsyncs[0] = 0
            cpu, wall = time.process_time(), time.perf_counter()
            for at in range(0, len(sent), DRAIN):
                for node, payload in sent[at : at + DRAIN]:
                    aggregator.receive([node.encode(), payload], peer=node)
                aggregator.commit()
                aggregator._acks.clear()  # what `_send` would answer
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            line = {"window": window, "cpu_s": cpu, "wall_s": wall, "fsyncs": fsyncs[0]}
            print(json.dumps({**line, "messages": len(sent)}), flush=True)
        aggregator.store.close()


def parent(args: argparse.Namespace) -> None:
    results: dict[str, list[dict[str, float]]] = {p: [] for p in args.python}
    for run in range(args.runs):
        for python in args.python:
            sizes = ["--ranks", str(args.ranks), "--windows", str(args.windows)]
            command = [python, __file__, "--child", *sizes, "--calls", str(args.calls)]
            command += ["--tmp", args.tmp]
            out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=900)
            lines = [json.loads(line) for line in out.stdout.splitlines()]
            results[python] += lines
            print(f"run {run} {python}: " + ", ".join(
                f"w{r['window']} {r['cpu_s']:.2f} s CPU {r['wall_s']:.2f} s wall "
                f"{r['fsyncs']} fsyncs" for r in lines), flush=True)  # fmt: skip
    base = args.python[0]
    print(f"\n{args.ranks} ranks, {args.windows} windows, {args.runs} runs; load {os.getloadavg()}")
    for python, rows in results.items():
        cpu = statistics.median(r["cpu_s"] for r in rows)
        wall = statistics.median(r["wall_s"] for r in rows)
        fs = statistics.median(r["fsyncs"] for r in rows)
        ratio = cpu / statistics.median(r["cpu_s"] for r in results[base])
        wratio = wall / statistics.median(r["wall_s"] for r in results[base])
        print(f"{python}: median a window {cpu:.3f} s CPU ({ratio:.2f}x), {wall:.3f} s wall "
              f"({wratio:.2f}x), {fs:.0f} fsyncs, {rows[0]['messages']} messages")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", action="append", default=[], help="an interpreter (in turn)")
    p.add_argument("--ranks", type=int, default=256)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--calls", type=int, default=200, help="collectives a rank file")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tmp", default=tempfile.gettempdir())
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
    else:
        args.python = args.python or [sys.executable]
        parent(args)


if __name__ == "__main__":
    main()
