"""The aggregator daemon's CPU a window, in process, on a simulated job already on disk: this
tree against another in alternating runs (the machine is shared: the ratios are the figure).

Each file is parsed and reduced to what its collector sends (in 2 processes, once, cached in
`--cache`). Then, per window, every node says Hello once, and the window's records go through
`Aggregator.receive` and `commit` in drains of 512 messages, interleaved across files as the
collectors' credit windows interleave them, with the loop's `_tick` after each drain: the
intake with its journal (real fsyncs), the /metrics refreshes, and the reports, built inline
when the loop would set them out (a window completing at once). This tree runs with the
daemon's GC policy (`service/heap.py`, as `Aggregator.run` sets it); the other tree
(`--against TREE`, a `git archive` of its folders under TREE/commscope/, as for
`report_cost.py`) with whatever its `run` sets, which this replay applies only if it is this
tree's. What it leaves out: ZeroMQ, the report thread beside the loop, resends.

    .venv/bin/python tests/simjob.py 1024 /tmp/sj1024     # or a kept scale_bench.py job
    .venv/bin/python tests/bench/service_replay.py /tmp/sj1024 --against /tmp/base --runs 3
    .venv/bin/python tests/bench/service_replay.py /tmp/sj256 --against /tmp/base --callgrind

`--drain 1` commits and ticks after every message, as when files trickle in one by one (the
default is the daemon's drain of 512). `--callgrind` counts instructions instead (valgrind;
~50x slower): each tree's replay less its set-up alone (every node's Hello), once each, the
figure to quote on a loaded machine.

The job's folders: ROOT/node<N>/iteration_<W>/<files> (scale_bench.py's `job/`) or
ROOT/iteration_<W>/<files> (simjob.py's, one node a folder of 8 ranks). `--windows N` replays
N windows however many the job has: the job's windows in turn, each time under a new folder
name and stream (what a report costs as a run grows, without generating and parsing N); from
20 windows on, the last lines compare each tree's mean CPU of its last 10 windows with its
first 10 (how a window's cost grows with the windows before it).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

DRAIN = 512
Sent = dict[str, list[tuple[str, list[bytes]]]]  # window -> (node, the file's payloads)


def _node(path: Path) -> str:
    parent = path.parent.parent.name
    return parent if parent.startswith("node") else f"node{_rank(path) // 8}"


def _rank(path: Path) -> int:
    digits = "".join(c if c.isdigit() else " " for c in path.name).split()
    return int(digits[0]) if digits else 0


def records(path: Path) -> tuple[str, list[bytes]]:
    """What a collector sends of the file: its start, its facts, its end (msgpack)."""
    import msgspec
    from commscope.collector.discover import open_trace
    from commscope.collector.kineto import TraceReader
    from commscope.model.schema import StreamEnd, StreamStart
    from commscope.pipeline.edge import Reduction

    stream = hashlib.blake2b(str(path).encode(), digest_size=16).hexdigest()
    acc = Reduction()
    with open_trace(path) as raw:
        reader = TraceReader(raw, str(path))
        for batch in reader.batches():
            acc.add_all(batch)
    node = _node(path)
    start = StreamStart(stream=stream, node=node, path=str(path), folder=path.parent.name,
                        root_name="job")  # fmt: skip
    parts = list(acc.facts(stream, 1))
    end = StreamEnd(stream=stream, seq=1 + len(parts), meta=reader.meta, stats=reader.stats)
    return node, [msgspec.msgpack.encode(r) for r in (start, *parts, end)]


def parse_all(root: Path, cache: Path) -> None:
    files = sorted(p for p in root.rglob("*") if p.is_file() and "iteration_" in p.parent.name)
    with Pool(2) as pool:
        got = pool.map(records, files, chunksize=8)
    sent: Sent = {}
    for path, item in zip(files, got, strict=True):
        sent.setdefault(path.parent.name, []).append(item)
    cache.write_bytes(pickle.dumps(sent))


def _daemon_gc(aggregator: object) -> None:
    """The daemon's GC policy, as `Aggregator.run` sets it (this tree only)."""
    try:
        from commscope.service import heap
    except ImportError:
        return
    freezer = heap.Freezer()
    freezer.start()
    cls = type(aggregator)
    built = cls._built  # type: ignore[attr-defined]

    def after(self: object, *args: object, **kwargs: object) -> None:
        built(self, *args, **kwargs)
        freezer.after_report()

    cls._built = after  # type: ignore[attr-defined]


def renamed(sent: Sent, count: int) -> Sent:
    """`count` windows: those sent in turn, the k-th (from 0) as folder iteration_<2k+2>, its
    streams and paths renamed with it."""
    import msgspec
    from commscope.model.schema import Facts, StreamEnd, StreamStart

    decode = msgspec.msgpack.Decoder(StreamStart | Facts | StreamEnd).decode
    given = sorted(sent, key=lambda name: int(name.rsplit("_", 1)[1]))
    found: Sent = {}
    for k in range(count):
        folder = f"iteration_{2 * k + 2}"
        found[folder] = []
        for node, payloads in sent[given[k % len(given)]]:
            start, *rest = map(decode, payloads)
            path = start.path.replace(start.folder, folder)
            stream = hashlib.blake2b(path.encode(), digest_size=16).hexdigest()
            first = msgspec.structs.replace(start, stream=stream, path=path, folder=folder)
            again = [msgspec.structs.replace(r, stream=stream) for r in rest]
            found[folder].append((node, [msgspec.msgpack.encode(r) for r in (first, *again)]))
    return found


def measure(
    cache: Path, tmp: str, windows: int = 0, upto: int | None = None, drain: int = DRAIN
) -> dict[str, float]:
    """CPU seconds (process time) of each window's drains, ticks and reports (of the first
    `upto` windows only, when given: 0 is the set-up alone)."""
    from commscope.service.aggregate import Aggregator, AggregatorSettings

    sent: Sent = pickle.loads(cache.read_bytes())
    sent = renamed(sent, windows) if windows else sent
    gc.collect()
    gc.freeze()  # what collectors would send is not the aggregator's heap
    found: dict[str, float] = {}
    with tempfile.TemporaryDirectory(dir=tmp) as folder:
        settings = AggregatorSettings(listen="tcp://127.0.0.1:*", out=Path(folder) / "out",
                                      state=Path(folder) / "state")  # fmt: skip
        aggregator = Aggregator(settings)
        _daemon_gc(aggregator)
        for window in greet(aggregator, sent)[:upto]:
            found[window] = _window(aggregator, sent[window], drain)
        aggregator.store.close()
    return found


def greet(aggregator: object, sent: Sent) -> list[str]:
    """Each node's Hello received, committed and published; the job's windows in order."""
    import msgspec
    from commscope.model.schema import PROTOCOL_VERSION, Hello

    for node in sorted({node for files in sent.values() for node, _ in files}):
        hello = Hello(node=node, protocol=PROTOCOL_VERSION, instance="replay")
        payload = msgspec.msgpack.encode(hello)
        aggregator.receive([node.encode(), payload], peer=node)  # type: ignore[attr-defined]
    aggregator.commit()  # type: ignore[attr-defined]
    aggregator.publish()  # type: ignore[attr-defined]
    return sorted(sent, key=lambda name: int(name.rsplit("_", 1)[1]))


def _window(aggregator: object, files: list[tuple[str, list[bytes]]], drain: int = DRAIN) -> float:
    longest = max(len(payloads) for _, payloads in files)
    messages = [(n, p[i]) for i in range(longest) for n, p in files if i < len(p)]
    began = time.process_time()
    for at in range(0, len(messages), drain):
        for node, payload in messages[at : at + drain]:
            aggregator.receive([node.encode(), payload], peer=node)  # type: ignore[attr-defined]
        aggregator.commit()  # type: ignore[attr-defined]
        aggregator._acks.clear()  # type: ignore[attr-defined]  # what `_send` would answer
        aggregator._replies.clear()  # type: ignore[attr-defined]
        aggregator._tick()  # type: ignore[attr-defined]
    return time.process_time() - began


def run_in(
    tree: Path | None, cache: Path, tmp: str, windows: int = 0, drain: int = DRAIN
) -> dict[str, float]:
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    command = [sys.executable, __file__, "--measure", str(cache), "--tmp", tmp]
    command += ["--windows", str(windows), "--drain", str(drain)]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def instructions(tree: Path | None, cache: Path, tmp: str, windows: int) -> int:
    """The instructions the replay's windows take (callgrind's count of the whole replay less
    that of its set-up alone): a figure the machine's load does not move."""
    counts = []
    for upto in (None, 0):
        env = {**os.environ, **({"PYTHONPATH": str(tree)} if tree is not None else {})}
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                   sys.executable, __file__, "--measure", str(cache), "--tmp", tmp,
                   "--windows", str(windows)]  # fmt: skip
        command += [] if upto is None else ["--upto", str(upto)]
        out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
        counts.append(int(re.findall(r"Collected : (\d+)", out.stderr)[-1]))
    return counts[0] - counts[1]


def callgrind(trees: dict[str, Path | None], cache: Path, tmp: str, windows: int) -> None:
    found = {name: instructions(tree, cache, tmp, windows) for name, tree in trees.items()}
    print("instructions of the windows (callgrind): "
          + ", ".join(f"{name} {count / 1e6:,.0f}M" for name, count in found.items()))  # fmt: skip
    if "base" in found:
        print(f"  this/base {found['this'] / found['base']:.2f}")


GROWTH = 10  # windows at each end of a run that `growth` compares


def growth(rows: list[dict[str, float]]) -> str:
    """How a window's CPU grew over the run: the median over runs of the mean of its last
    GROWTH windows, against that of its first GROWTH."""
    first = statistics.median(statistics.mean(list(r.values())[:GROWTH]) for r in rows)
    last = statistics.median(statistics.mean(list(r.values())[-GROWTH:]) for r in rows)
    return (
        f"windows 1-{GROWTH} {first:.3f} s, last {GROWTH} {last:.3f} s a window: "
        f"x{last / first:.2f}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path, nargs="?")
    p.add_argument("--cache", type=Path, help="the parsed records (default: ROOT/../NAME.replay)")
    p.add_argument("--against", type=Path, help="a tree holding commscope/ (the base)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tmp", default=tempfile.gettempdir(), help="where the state folders go")
    p.add_argument("--windows", type=int, default=0, help="windows replayed (0: the job's)")
    p.add_argument("--callgrind", action="store_true", help="count instructions (valgrind)")
    p.add_argument("--drain", type=int, default=DRAIN, help="messages a commit (1: a trickle)")
    p.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--upto", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.tmp, args.windows, args.upto, args.drain)))
        return
    cache = args.cache or args.root.parent / f"{args.root.name}.replay"
    if not cache.exists():
        parse_all(args.root, cache)
    trees = {"base": args.against, "this": None} if args.against else {"this": None}
    if args.callgrind:
        callgrind(trees, cache, args.tmp, args.windows)
        return
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    for run in range(args.runs):
        for name, tree in trees.items():
            runs[name].append(found := run_in(tree, cache, args.tmp, args.windows, args.drain))
            print(f"run {run} {name}: " + ", ".join(f"{w} {s:.2f} s" for w, s in found.items()),
                  flush=True)  # fmt: skip
    print(f"\nmedian CPU a window over {args.runs} runs; load average {os.getloadavg()}")
    for window in runs["this"][0]:
        line = {name: statistics.median(r[window] for r in rows) for name, rows in runs.items()}
        ratio = f"  this/base {line['this'] / line['base']:.2f}" if "base" in line else ""
        print(f"  {window}: " + ", ".join(f"{n} {s:.3f} s" for n, s in line.items()) + ratio)
    if "base" in runs:
        total = {n: statistics.median(sum(r.values()) for r in rows) for n, rows in runs.items()}
        print(f"  all windows: this/base {total['this'] / total['base']:.2f}")
    if len(runs["this"][0]) >= 2 * GROWTH:
        for name, rows in runs.items():
            print(f"  {name}: " + growth(rows))


if __name__ == "__main__":
    main()
