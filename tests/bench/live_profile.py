"""Where the live aggregation's CPU goes, window by window, on a job already on disk.

Each file is parsed and reduced to its facts first (in 2 processes, outside the measurement;
kept in `--cache` when given), then, per window, the records are applied to one `Aggregation`
and the report built, as the aggregator does when a window completes, under the daemon's GC
policy (`service/heap.py`); cProfile shows the functions that took the time.

With `--against TREE` (a `git archive` of another commit's folders under TREE/commscope/, as
for `service_replay.py`) nothing is profiled: each window's apply + report CPU is measured in
`--runs` subprocesses of each tree in turn, and the least of each tree's runs printed with
their ratio (the machine is shared: the least is the run the others disturbed least); each
window's report (its JSON, hashed) must be the same in both trees, else it stops and says so.

    .venv/bin/python tests/simjob.py 256 /tmp/sj256        # a simulated 256-rank job
    .venv/bin/python tests/bench/live_profile.py /tmp/sj256
    .venv/bin/python tests/bench/live_profile.py /tmp/sj256 --cache /tmp/sj256.facts \\
        --against /tmp/base --runs 7
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import json
import os
import pickle
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from multiprocessing import Pool
from pathlib import Path

import msgspec
from commscope.collector.discover import open_trace
from commscope.collector.kineto import TraceReader
from commscope.model.schema import Record, StreamEnd, StreamStart
from commscope.pipeline.aggregation import Aggregation
from commscope.pipeline.edge import Reduction
from commscope.pipeline.report import Options
from commscope.service import heap

Sent = dict[str, list[list[Record]]]  # window -> each file's records


def records(path: Path) -> list[Record]:
    """What a collector sends of the file: its start, its facts, its end."""
    stream = hashlib.blake2b(str(path).encode(), digest_size=16).hexdigest()
    acc = Reduction()
    with open_trace(path) as raw:
        reader = TraceReader(raw, str(path))
        for batch in reader.batches():
            acc.add_all(batch)
    folder = path.parent.name
    start = StreamStart(stream=stream, node="n", path=str(path), folder=folder, root_name="job")
    parts = list(acc.facts(stream, 1))
    end = StreamEnd(stream=stream, seq=1 + len(parts), meta=reader.meta, stats=reader.stats)
    return [start, *parts, end]


def parsed(root: Path, cache: Path | None) -> Sent:
    """Every window's records, from `cache` when it holds them (written when it does not).
    The cache holds them msgpack-encoded, as a collector sends them, so another tree's
    aggregator (`--against`) reads what this tree's collector sends, as a daemon would
    (fields it does not know are passed over)."""
    if cache is not None and cache.exists():
        return _decoded(pickle.loads(cache.read_bytes()))
    windows = sorted(p for p in root.iterdir() if p.is_dir())
    with Pool(2) as pool:
        sent = {w.name: pool.map(records, sorted(w.iterdir())) for w in windows}
    if cache is not None:
        encode = msgspec.msgpack.encode
        cache.write_bytes(pickle.dumps({w: [[encode(r) for r in f] for f in files]
                                        for w, files in sent.items()}))  # fmt: skip
    return sent


def _decoded(encoded: dict[str, list[list[bytes]]]) -> Sent:
    decode = msgspec.msgpack.Decoder(Record).decode
    return {w: [[decode(r) for r in f] for f in files] for w, files in encoded.items()}


def timed(sent: Sent) -> dict[str, tuple[float, float, str]]:
    """Each window's apply + report CPU seconds and its apply's (the intake), in this process,
    under the daemon's GC policy (`daemon_gc`), and its report's digest (hashed after the
    clock stops)."""
    aggregation, found = Aggregation(), {}
    after_report = daemon_gc()
    for window, files in sent.items():
        began = time.process_time()
        for file in files:
            for record in file:
                aggregation.apply(record)
        applied = time.process_time() - began
        report = aggregation.report(Options())
        after_report()
        cpu = time.process_time() - began
        digest = hashlib.blake2b(msgspec.json.encode(report)).hexdigest()
        found[window] = (cpu, applied, digest)
    return found


def daemon_gc() -> Callable[[], None]:
    """The aggregator daemon's GC policy (`service/heap.py`: fewer collections, what is alive
    after a report frozen), started; what to call after each report. The parsed records are
    frozen first: what collectors would send is not the aggregator's heap."""
    gc.collect()
    gc.freeze()
    freezer = heap.Freezer()
    freezer.start()
    return freezer.after_report


def paired(args: argparse.Namespace) -> None:
    """`timed` in subprocesses of each tree in turn; the least of each tree's runs."""
    parsed(args.root, args.cache)  # the cache, once, before any run
    best: dict[str, dict[str, list[float]]] = {}
    digests: dict[str, set[str]] = {}
    for _ in range(args.runs):
        for name, tree in (("base", args.against), ("this", None)):
            env = {**os.environ, **({"PYTHONPATH": str(tree)} if tree is not None else {})}
            command = [sys.executable, __file__, str(args.root), "--cache", str(args.cache),
                       "--timed"]  # fmt: skip
            out = subprocess.run(command, env=env, check=True, capture_output=True, text=True)
            into = best.setdefault(name, {})
            for window, (cpu, applied, digest) in json.loads(out.stdout).items():
                least = into.get(window, [cpu, applied])
                into[window] = [min(cpu, least[0]), min(applied, least[1])]
                digests.setdefault(window, set()).add(digest)
    if differ := sorted(window for window, found in digests.items() if len(found) > 1):
        sys.exit(f"the reports differ between the trees (or runs) at {', '.join(differ)}")
    for window, (base, base_apply) in best["base"].items():
        this, this_apply = best["this"][window]
        print(f"{window}: apply + report, least of {args.runs}: base {base:.3f} s, "
              f"this {this:.3f} s, this/base {this / base:.2f}; the apply alone: base "
              f"{base_apply:.3f} s, this {this_apply:.3f} s, "
              f"{this_apply / base_apply:.2f}; reports identical")  # fmt: skip


def profiled(sent: Sent, shown: int) -> None:
    aggregation = Aggregation()
    after_report = daemon_gc()
    for window, files in sent.items():
        profile = cProfile.Profile()
        began = time.process_time()
        profile.enable()
        for file in files:
            for record in file:
                aggregation.apply(record)
        applied = time.process_time() - began
        aggregation.report(Options())
        after_report()
        profile.disable()
        total = time.process_time() - began
        print(f"{window}: {len(files)} files, apply {applied:.3f} s CPU, "
              f"apply + report {total:.3f} s CPU")  # fmt: skip
        pstats.Stats(profile).sort_stats("cumulative").print_stats(shown)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("root", type=Path)
    p.add_argument("--cache", type=Path, help="the parsed records (written when missing)")
    p.add_argument("--against", type=Path, help="a tree holding commscope/ (the base)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--shown", type=int, default=18, help="functions the profile lists")
    p.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.timed:
        print(json.dumps(timed(parsed(args.root, args.cache))))
    elif args.against is not None:
        if args.cache is None:
            p.error("--against needs --cache")
        paired(args)
    else:
        profiled(parsed(args.root, args.cache), args.shown)


if __name__ == "__main__":
    main()
