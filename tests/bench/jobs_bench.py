"""Many small files at once: `report --jobs` and the collector's end-of-document (a script).

Builds a run folder of WINDOWS windows, each a copy of the 8 DLRM rank files (64 windows: 512
files), then, in one run:

1. `commscope report` with `--jobs 1` (in process) and `--jobs N` (the command and N - 1
   worker processes): wall seconds each (the lowest of `--repeat` runs), their ratio, and
   whether their text and JSON reports are byte-identical (their provenance aside); given
   `--before REV`, `--jobs N` with the code of git revision REV too (extracted with
   `git archive`, run from PYTHONPATH), in the same rounds.
2. Unless `--report-only`: `commscope collect --once` into one `commscope aggregate`: the
   collector's wall seconds (launch to exit) against its own CPU seconds (user + system, from
   wait4), with this tree's code and, given `--before REV`, with REV's.

    .venv/bin/python tests/bench/jobs_bench.py --windows 64 --jobs 2 --before <rev>

Timings depend on the machine and its load: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aggregator_bench import DLRM, BenchError, free_port, tail, wait
from aggregator_bench import wait_listening as listening
from machineinfo import cpu_and_python
from tree_memory import checkout, same_reports

WAIT_S = 900.0


def build(source: Path, windows: int, root: Path) -> int:
    """`windows` copies of the rank files in `source`, as iteration_K folders: the file count."""
    files = sorted(p for p in source.iterdir() if p.name.endswith((".json", ".json.gz")))
    for window in range(windows):
        folder = root / f"iteration_{window}"
        folder.mkdir(parents=True)
        for path in files:
            shutil.copyfile(path, folder / path.name)
    return windows * len(files)


def commscope(env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    return [sys.executable, "-P", "-m", "commscope"], {**os.environ, **(env or {})}


def report(
    root: Path, jobs: int, out: Path, env: dict[str, str] | None = None
) -> tuple[float, float]:
    """(wall, CPU) seconds of `commscope report --jobs jobs` (with `env`: another revision's
    code); CPU: the command's and its workers' (wait4 counts the children it waited for)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd, env = commscope(env)
    cmd += ["report", str(root), "--out", str(out), "--jobs", str(jobs), "--no-progress"]
    started = time.perf_counter()
    with started_process(cmd, out.with_suffix(".log"), env) as proc:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode:
        log = out.with_suffix(".log").read_text(errors="replace")[-2000:]
        raise BenchError(f"report --jobs {jobs} exited {proc.returncode}: {log}")
    return wall, usage.ru_utime + usage.ru_stime


def collect(root: Path, tmp: Path, quiet: float, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one `collect --once` streaming `root` into an aggregator."""
    cmd, env = commscope(env)
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    aggregate = [*cmd, "aggregate", "--listen", endpoint, "--insecure", "--expect-nodes", "1"]
    aggregate += ["--out", str(tmp / "out"), "--state", str(tmp / "agg")]
    collector = [*cmd, "collect", "--insecure", "--watch", str(root), "--aggregator", endpoint]
    collector += ["--node", "n", "--state", str(tmp / "col"), "--once", "--quiet", str(quiet)]
    with started_process(aggregate, tmp / "aggregate.log", env) as agg:
        listening(agg, port, tmp / "aggregate.log")
        started = time.perf_counter()
        with started_process(collector, tmp / "collect.log", env) as col:
            _, status, usage = os.wait4(col.pid, 0)
            wall = time.perf_counter() - started
            col.returncode = os.waitstatus_to_exitcode(status)
            agg_rc = wait(agg, tmp / "aggregate.log")
    if agg_rc or col.returncode:
        raise BenchError(f"aggregate exited {agg_rc}, collect {col.returncode}: {tail(tmp)}")
    return wall, usage.ru_utime + usage.ru_stime


class started_process:  # noqa: N801 (a context manager used like a function)
    """A child process with `env` and its output in a log; killed on exit if still running."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str]) -> None:
        self.cmd, self.log, self.env = cmd, log, {**env, "PYTHONUNBUFFERED": "1"}

    def __enter__(self) -> subprocess.Popen[bytes]:
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(
                self.cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env
            )
        return self.popen

    def __exit__(self, *_: object) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)


def main() -> None:
    args = arguments()
    print(cpu_and_python())
    with tempfile.TemporaryDirectory(prefix="jobs_bench") as folder:
        tmp = Path(folder)
        files = build(args.source, args.windows, tmp / "run")
        print(f"{files} files ({args.windows} windows of {args.source.name})")
        before = checkout(args.before, tmp / "before") if args.before else None
        reports(args, tmp, before)
        if args.report_only:
            return
        runs = [("this tree", {}), *([(f"revision {args.before}", before)] if before else [])]
        for index, (label, env) in enumerate(runs):
            work = tmp / f"collect{index}"
            work.mkdir()
            wall, cpu = collect(tmp / "run", work, args.quiet, env)
            print(
                f"collect --once --quiet {args.quiet:g} ({label}): {wall:.1f} s wall, "
                f"{cpu:.1f} s CPU, wall/CPU {wall / cpu:.2f}"
            )


def reports(args: argparse.Namespace, tmp: Path, before: dict[str, str] | None) -> None:
    """`report --jobs 1`, `--jobs N` and `--jobs N` at REV, in rounds: each one's best."""
    runs = [("--jobs 1", 1, None), (f"--jobs {args.jobs}", args.jobs, None)]
    if before is not None:
        runs.append((f"--jobs {args.jobs} at {args.before}", args.jobs, before))
    times: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in runs}
    for _ in range(args.repeat):
        for index, (label, jobs, env) in enumerate(runs):
            times[label].append(report(tmp / "run", jobs, tmp / f"r{index}", env))
            wall, cpu = times[label][-1]
            print(f"report {label}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    (one, one_cpu), *others = (min(runs) for runs in times.values())
    same = same_reports(tmp / "r0", tmp / "r1")
    for label, (wall, cpu) in zip(list(times)[1:], others, strict=True):
        print(f"report {label}: best {wall:.1f} s wall ({cpu:.1f} s CPU), "
              f"speed-up over --jobs 1 x{one / wall:.2f}")  # fmt: skip
    print(f"  --jobs 1 best {one:.1f} s wall ({one_cpu:.1f} s CPU); "
          f"text and JSON reports identical: {same}")  # fmt: skip


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=DLRM, help="a folder of rank files")
    parser.add_argument("--windows", type=int, default=64, help="copies of the folder")
    parser.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument("--quiet", type=float, default=2.0, help="collect --quiet S")
    parser.add_argument("--before", metavar="REV", help="also this revision's code")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the reports")
    parser.add_argument("--report-only", action="store_true", help="no collect run")
    return parser.parse_args()


if __name__ == "__main__":
    main()
