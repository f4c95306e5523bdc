"""The whole `commscope report` at high collective density, against bare ijson, in one run.

A TorchTitan-shaped job (`tests/simjob.py`: `--ranks` ranks, tp `--tp`, pp `--pp`, FSDP over
the rest, `--layers` layers a stage) is written once, one window, plain JSON in Kineto's
layout, with the filler that brings it to `--density` collectives per MB of JSON
(`simjob.at_density`; 86 is the density of the issue, the scale bench's default is 37) and the
steps that make each rank's file about `--mb` MB. Then, in turns (`--repeat` rounds), each in
a fresh process: `commscope report FOLDER --jobs 1` (the whole command: start-up, parse,
reduce, build, render and write the reports) and bare `ijson.items(f, "traceEvents.item",
use_float=True)` over the same files. Each child's CPU time (utime + stime, from wait4) is
summed per method; the figure is bare ijson's CPU over the report's, so above 1 the report is
faster than a bare parse. Children write and use bytecode as an installed package does (a
first turn, untimed, writes it), and a child that only imports what `commscope report`
imports gives its start-up, printed beside: the ratio past it is the per-MB cost's.
`--against TREE` runs the report on another copy of the code too, in the same turns (TREE
holds `commscope/` with `model/`, `collector/`, ... inside it, e.g. `git archive` of the base
commit rearranged so), and prints its figures beside.
`--profile` runs the report once in this process under cProfile instead and prints the
functions that took the time. Nothing asserts on timings: it prints figures.

    .venv/bin/python tests/bench/dense_bench.py
    .venv/bin/python tests/bench/dense_bench.py --density 37 --repeat 5
    .venv/bin/python tests/bench/dense_bench.py --against /tmp/base --repeat 5
    .venv/bin/python tests/bench/dense_bench.py --profile
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from machineinfo import MB, cpu_and_python
from simjob import Job, at_density, density, expected, file_name, folder, write_trace

IJSON = """import sys, ijson
for path in sys.argv[1:]:
    with open(path, "rb") as f:
        for _ in ijson.items(f, "traceEvents.item", use_float=True):
            pass
"""
STARTUP = "import commscope.service.cli"  # what `commscope report` imports before it reads


def make_job(args: argparse.Namespace) -> Job:
    """The job at the density, with the steps that bring a rank's file to about `--mb` MB."""
    job = Job(args.ranks, tp=args.tp, pp=args.pp, layers=args.layers, steps=1, windows=1,
              gzip_every=0)  # fmt: skip
    job = at_density(job, args.density)
    one = calls(job) * MB / density(job)  # bytes of one step
    return replace(job, steps=max(1, round(args.mb * MB / one)))


def calls(job: Job, rank: int = 0) -> int:
    """The rank's collectives in the window."""
    return sum(expected(job, 0, rank).calls.values())


def write(job: Job, root: Path) -> list[Path]:
    paths = [root / folder(job, 0) / file_name(job, rank) for rank in range(job.ranks)]
    for rank, path in enumerate(paths):
        write_trace(job, 0, rank, path)
    return paths


def child_cpu_s(argv: list[str], env: dict[str, str]) -> float:
    """The CPU time (user + system) of one child process run to its end."""
    popen = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(popen.pid, 0)
    popen.returncode = os.waitstatus_to_exitcode(status)
    if popen.returncode not in (0,):
        err = popen.stderr.read().decode(errors="replace") if popen.stderr else ""
        raise SystemExit(f"{argv[:4]} exited {popen.returncode}: {err[-2000:]}")
    return usage.ru_utime + usage.ru_stime


def report_argv(root: Path, out: Path) -> list[str]:
    return [sys.executable, "-P", "-m", "commscope", "report", str(root), "--jobs", "1",
            "--out", str(out), "--no-progress"]  # fmt: skip


def children(root: Path, paths: list[Path], args: argparse.Namespace, out: Path) -> dict:
    """Each method's child: its argv and environment (bytecode cached, as installed)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    found = {"ijson": ([sys.executable, "-c", IJSON, *map(str, paths)], env)}
    trees = {"this": None, **({"base": args.against} if args.against else {})}
    for name, tree in trees.items():
        tree_env = {**env, **({"PYTHONPATH": str(tree)} if tree else {})}
        found[name] = (report_argv(root, out / name), tree_env)
        found[f"{name} start-up"] = ([sys.executable, "-P", "-c", STARTUP], tree_env)
    return found


def measure(root: Path, paths: list[Path], args: argparse.Namespace, out: Path) -> None:
    """A first untimed turn (bytecode written), then `--repeat` timed turns."""
    methods = children(root, paths, args, out)
    cpu = dict.fromkeys(methods, 0.0)
    for turn in range(args.repeat + 1):
        for name, (argv, env) in methods.items():
            spent = child_cpu_s(argv, env)
            cpu[name] += spent if turn else 0.0
        shown = "  ".join(f"{k} {v / max(turn, 1):.2f} s" for k, v in cpu.items())
        print(f"turn {turn}{' (untimed)' if not turn else ''}: mean CPU {shown}", flush=True)
    for name in methods:
        if name != "ijson" and not name.endswith("start-up"):
            whole = cpu["ijson"] / cpu[name]
            past = cpu["ijson"] / (cpu[name] - cpu[f"{name} start-up"])
            print(f"report ({name}): bare ijson CPU / report CPU = {whole:.2f}x "
                  f"(past its start-up: {past:.2f}x)")  # fmt: skip


def profile(root: Path, out: Path) -> None:
    from commscope.service.cli import main

    profiler = cProfile.Profile()
    profiler.runcall(main, ["report", str(root), "--jobs", "1", "--out", str(out), "--no-progress"])
    pstats.Stats(profiler).sort_stats("tottime").print_stats(40)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--pp", type=int, default=2)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--mb", type=float, default=15.0, help="MB of JSON a rank (about)")
    parser.add_argument("--density", type=float, default=86.0, help="collectives per MB")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--against", type=Path, help="a tree holding commscope/ (the base)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tmp", type=Path, default=None)
    args = parser.parse_args()
    print(cpu_and_python())
    job = make_job(args)
    with tempfile.TemporaryDirectory(dir=args.tmp) as tmp:
        root, out = Path(tmp) / "job", Path(tmp) / "out"
        paths = write(job, root)
        size = sum(p.stat().st_size for p in paths)
        total = sum(calls(job, rank) for rank in range(job.ranks))
        print(f"{job.ranks} ranks (tp {job.tp}, pp {job.pp}, dp {job.dp}), {job.layers} layers, "
              f"{job.steps} steps, filler {job.filler}: {size / MB:.1f} MB of JSON, "
              f"{total:,} collectives, {total * MB / size:.1f} a MB")  # fmt: skip
        if args.profile:
            profile(root, out)
        else:
            measure(root, paths, args, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
