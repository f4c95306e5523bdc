"""What the live aggregator's reports cost, on a job already on disk (CPU time, cProfile).

Each file is parsed and reduced to its facts first (in 2 processes, outside the measurement).
Then, as the aggregator meets them: window 1 applied and reported (a window completes); half
of window 2 applied and a mid-window report built; the rest applied and reported (the window
completes); then the final report. Each but the final is followed by `Aggregation.shed` (the
finished files kept in a dict as the store keeps them), timed with it, as the aggregator does.
Each report's CPU is printed, and with `--profile` the functions that took the time.
`--against TREE` runs the same in a subprocess on another copy of the code (e.g. `git archive`
of the base commit, its folders under TREE/commscope/), interleaved in the same run: the
ratios between the two are what to quote (the machine is shared).

    .venv/bin/python tests/simjob.py 64 /tmp/sj64
    .venv/bin/python tests/bench/report_cost.py /tmp/sj64 --against /tmp/base
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pickle
import pstats
import subprocess
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import msgspec
from commscope.model.schema import FinishedFile
from commscope.pipeline.aggregation import Aggregation
from commscope.pipeline.report import Options
from live_profile import records


def parse_all(root: Path, cache: Path) -> None:
    """Every window's records, pickled (parsed once, in 2 processes)."""
    windows = sorted(p for p in root.iterdir() if p.is_dir())
    with Pool(2) as pool:
        sent = {w.name: pool.map(records, sorted(w.iterdir())) for w in windows}
    cache.write_bytes(pickle.dumps(sent))


def measure(cache: Path, mode: str) -> dict[str, float]:
    """The CPU of each report in the scenario (see the module docstring); `mode` "profile":
    printed with cProfile's table too; "calls": the Python function calls made instead (a
    measure of the work the machine's load does not blur)."""
    sent = pickle.loads(cache.read_bytes())
    gc.collect()
    gc.freeze()  # what collectors would send is not the aggregator's heap: no GC walks it
    first, second = sorted(sent)[:2]
    stored: dict[str, bytes] = {}  # the store's finished files, as the aggregator keeps them

    def load(stream: str) -> FinishedFile | None:
        raw = stored.get(stream)
        return None if raw is None else msgspec.msgpack.decode(raw, type=FinishedFile)

    aggregation = Aggregation(load=load)
    half = len(sent[second]) // 2
    steps = [("window 1", sent[first]), ("mid-window", sent[second][:half]),
             ("window 2", sent[second][half:])]  # fmt: skip
    found: dict[str, float] = {}
    for name, files in steps:
        for file in files:
            for record in file:
                done = aggregation.apply(record).finished
                if done is not None:
                    stored[done.stream] = msgspec.msgpack.encode(done)
        found[name] = _timed(name, lambda: _report_and_shed(aggregation), mode)
    found["final"] = _timed("final", lambda: aggregation.report(Options(), final=True), mode)
    return found


def _report_and_shed(aggregation: Aggregation) -> None:
    """A report, then what the aggregator gives up once it is shown (`Aggregation.shed`)."""
    aggregation.report(Options())
    aggregation.shed()


def _timed(name: str, build: object, mode: str) -> float:
    prof = cProfile.Profile() if mode != "time" else None
    gc.collect()  # each report starts from the same GC state: its own allocations decide
    began = time.process_time()
    if prof is not None:
        prof.enable()
    build()  # type: ignore[operator]
    if prof is not None:
        prof.disable()
    spent = time.process_time() - began
    if prof is not None and mode == "calls":
        return float(pstats.Stats(prof).total_calls)  # type: ignore[attr-defined]
    if prof is not None:
        print(f"--- {name}: {spent:.3f} s CPU", file=sys.stderr)
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(14)
    return spent


def run_in(tree: Path | None, cache: Path, mode: str) -> dict[str, float]:
    """`measure` in a subprocess importing commscope from `tree` (None: this one)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    out = subprocess.run(
        [sys.executable, __file__, "--measure", str(cache), "--mode", mode],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path, nargs="?")
    parser.add_argument("--against", type=Path, help="a tree holding commscope/ (the base)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--calls", action="store_true", help="function calls, not CPU seconds")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="time", help=argparse.SUPPRESS)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.mode)))
        return
    cache = Path("/tmp") / f"report_cost_{args.root.name}.pickle"
    if not cache.exists():
        parse_all(args.root, cache)
    if args.profile:
        measure(cache, "profile")
        return
    mode, unit = ("calls", "calls") if args.calls else ("time", "s")
    print(f"load: {os.getloadavg()}")
    trees = {"base": args.against, "this": None} if args.against else {"this": None}
    best: dict[str, dict[str, float]] = {}
    for _ in range(args.repeat):
        for label, tree in trees.items():
            got = run_in(tree, cache, mode)
            got["all four"] = sum(got.values())
            kept = best.setdefault(label, got)
            best[label] = {k: min(v, kept[k]) for k, v in got.items()}
    for step in best["this"]:
        digits = 0 if args.calls else 3
        line = "  ".join(f"{label} {best[label][step]:,.{digits}f} {unit}" for label in trees)
        ratio = f"  this/base {best['this'][step] / best['base'][step]:.2f}" if args.against else ""
        print(f"{step:>10}: {line}{ratio}")
    print(f"load: {os.getloadavg()}")


if __name__ == "__main__":
    main()
