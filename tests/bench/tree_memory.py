"""Peak memory of `commscope report`'s whole process tree, `--jobs 1` against the default.

Builds RANKS (4) Kineto traces of about 107 MB each: the real V100 trace of ../shared/traces
scaled as parse_bench.py does (its events written again and again, each copy 2 s later), each
file then given its own rank in `distributedInfo` (rank r of RANKS). Then runs `commscope
report` on them with `--jobs 1` (in process) and with the default `--jobs` (one process per
core: the command and a worker for each other core), each `--repeat` times, while a sampler
reads every `--every-ms` ms (25 by default) the memory of the command's process and all its
descendants (its worker processes; before they ran over plain pipes, multiprocessing's
resource tracker too) from /proc:

  tree RSS  the sum of the processes' VmRSS (/proc/PID/statm): pages processes share (the
            interpreter's, a forked process's) count once per process, as `ps` and `top` add;
  tree PSS  the sum of their Pss (/proc/PID/smaps_rollup): each shared page split between
            the processes that map it, so shared pages count once in the sum.

It prints, per run, the peak of each sum, the largest process's own VmHWM and the sum of
the sampled processes' VmHWM (an upper bound of their tree RSS's peak), the wall and CPU
seconds, then the default's peak over --jobs 1's (the ratio), and whether the two runs'
text and JSON reports are byte-identical (their provenance aside: time and command line).
A sample can miss a peak shorter than the interval: the peaks are lower bounds. The sampling
thread asks for a higher priority (nice -10, as root) so that a loaded machine delays it less.

    .venv/bin/python tests/bench/tree_memory.py                    # 4 x 107 MB, repeat 1
    .venv/bin/python tests/bench/tree_memory.py --repeat 3 --keep /var/tmp/tree_memory
    .venv/bin/python tests/bench/tree_memory.py --before REV --detail   # and REV's code

`--before REV` also runs the default `--jobs` with the code of git revision REV (extracted
with `git archive`, run from PYTHONPATH); `--detail` prints each process at the peak.

It is a script, not a test: nothing here asserts on memory or time. 1 MB = 10^6 bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from machineinfo import cpu_and_python
from parse_bench import REAL_TRACE, scale_real

MB = 1_000_000
REPO = Path(__file__).resolve().parents[2]
PAGE = os.sysconf("SC_PAGE_SIZE")
RANKS, SIZE_MB = 4, 107
_RANK_FIELD = b'"distributedInfo": {"backend": "nccl", "rank": 1, "world_size": 2}'


def build(folder: Path, ranks: int = RANKS, size_mb: int = SIZE_MB) -> list[Path]:
    """`ranks` scaled copies of the real V100 trace in `folder`, rank r in rank{r}_trace.json."""
    folder.mkdir(parents=True, exist_ok=True)
    first = folder / "scaled.json"
    scale_real(first, size_mb, REAL_TRACE)
    paths = [_renumbered(first, folder / f"rank{rank}_trace.json", rank, ranks) for rank in
             range(ranks)]  # fmt: skip
    first.unlink()
    return paths


def _renumbered(source: Path, path: Path, rank: int, ranks: int) -> Path:
    """`source` with its distributedInfo saying rank `rank` of `ranks`."""
    new = b'"distributedInfo": {"backend": "nccl", "rank": %d, "world_size": %d}' % (rank, ranks)
    with source.open("rb") as src, path.open("wb") as out:
        head = src.read(1 << 16)
        if _RANK_FIELD not in head:
            raise SystemExit(f"{REAL_TRACE.name}: no {_RANK_FIELD.decode()} in its header")
        out.write(head.replace(_RANK_FIELD, new, 1))
        shutil.copyfileobj(src, out, 1 << 20)
    return path


_PROVENANCE = re.compile(
    rb'\n *"generated_utc": [^\n]*|"command": \[[^\]]*\]|\n(Generated|Command): [^\n]*'
)


def same_reports(one: Path, other: Path) -> bool:
    """Whether two runs wrote the same text and JSON reports, byte for byte, but for when
    and how each was run (the provenance: its time and command line)."""

    def written(out: Path) -> dict[str, bytes]:
        return {path.suffix: _PROVENANCE.sub(b"", path.read_bytes()) for path in out.iterdir()
                if path.suffix in {".json", ".txt"}}  # fmt: skip

    return written(one) == written(other) != {}


# ------------------------------------------------------------------ the process tree's memory


def tree(root: int) -> list[int]:
    """`root` and its descendants now (one pass over /proc: each process's parent)."""
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _read(f"/proc/{entry.name}/stat")
            if stat:  # "pid (comm) state ppid ...": comm may hold spaces and parentheses
                parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    members, grown = {root}, True
    while grown:
        found = {pid for pid, ppid in parents.items() if ppid in members} - members
        members |= found
        grown = bool(found)
    return sorted(members)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:  # the process ended in between
        return ""


def rss_bytes(pid: int) -> int:
    fields = _read(f"/proc/{pid}/statm").split()
    return int(fields[1]) * PAGE if fields else 0


def pss_bytes(pid: int) -> int:
    for line in _read(f"/proc/{pid}/smaps_rollup").splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_ticks(pid: int) -> int:
    """User + system clock ticks the process has used so far (/proc/PID/stat)."""
    fields = _read(f"/proc/{pid}/stat").rsplit(")", 1)[-1].split()
    return int(fields[11]) + int(fields[12]) if len(fields) > 12 else 0


def name(pid: int) -> str:
    """What the process runs: its command line's last words, shortened."""
    words = _read(f"/proc/{pid}/cmdline").split("\0")
    return " ".join(word for word in words if word)[-60:] or str(pid)


def hwm_bytes(pid: int) -> int:
    for line in _read(f"/proc/{pid}/status").splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


@dataclass
class Peaks:
    """The largest sums seen, and the largest process's own high-water mark."""

    rss: int = 0
    pss: int = 0
    hwm: int = 0
    processes: int = 0
    samples: int = 0
    hwms: dict[int, int] = field(default_factory=dict)
    cpu_ticks: dict[int, int] = field(default_factory=dict)
    at_peak: list[tuple[str, int]] = field(default_factory=list)  # (process, RSS) at peak RSS

    def sample(self, root: int) -> None:
        pids = tree(root)
        rss = {pid: rss_bytes(pid) for pid in pids}
        if sum(rss.values()) > self.rss:
            self.rss, self.at_peak = sum(rss.values()), [(name(pid), rss[pid]) for pid in pids]
        self.pss = max(self.pss, sum(map(pss_bytes, pids)))
        self.hwms |= {pid: max(self.hwms.get(pid, 0), hwm_bytes(pid)) for pid in pids}
        self.hwm = max(self.hwms.values(), default=0)
        self.processes = max(self.processes, len(pids))
        self.cpu_ticks |= {pid: max(self.cpu_ticks.get(pid, 0), cpu_ticks(pid)) for pid in pids}
        self.samples += 1


@contextmanager
def sampled(root: int, every_s: float) -> Iterator[Peaks]:
    """Sample `root`'s tree in a thread until the block ends."""
    peaks, done = Peaks(), threading.Event()

    def loop() -> None:
        with contextlib.suppress(OSError):  # ahead of a loaded machine's other work (root only)
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
        while not done.is_set():
            peaks.sample(root)
            done.wait(every_s)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield peaks
    finally:
        done.set()
        thread.join(60)


@dataclass
class Run:
    label: str
    wall_s: float
    cpu_s: float
    peaks: Peaks


def measured(
    label: str, cmd: list[str], every_s: float, log: Path, env: dict[str, str] | None = None
) -> Run:
    """Run `cmd` with its tree sampled, its output in `log` (and `log`.err): wall seconds, CPU
    seconds of the whole tree (each process's user + system time at its last sample, summed;
    or the command's own with the children it waited for, from wait4, if more), the peaks.
    SystemExit when it fails."""
    started = time.perf_counter()
    with log.open("wb") as out, log.with_suffix(".err").open("wb") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
    try:
        with sampled(proc.pid, every_s) as peaks:
            _, status, usage = os.wait4(proc.pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - started
    if proc.returncode:
        tail = log.with_suffix(".err").read_text(errors="replace")[-2000:]
        raise SystemExit(f"{label} exited {proc.returncode}: {tail}")
    ticks = sum(peaks.cpu_ticks.values()) / os.sysconf("SC_CLK_TCK")
    return Run(label, wall, max(ticks, usage.ru_utime + usage.ru_stime), peaks)


def checkout(rev: str, into: Path) -> dict[str, str]:
    """The package of git revision `rev` under into/commscope: the environment that runs it
    (`python -P -m commscope` finds it on PYTHONPATH before the editable install: -P keeps the
    current folder, which may hold this checkout's package, off sys.path)."""
    folders = ["commscope", "model", "collector", "pipeline", "exporters", "service"]
    archive = subprocess.run(["git", "-C", str(REPO), "archive", rev, *folders],
                             capture_output=True, check=True).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    for folder in folders[1:]:
        (into / folder).rename(into / "commscope" / folder)
    return {**os.environ, "PYTHONPATH": str(into)}


def commscope_report(root: Path, out: Path, jobs: int | None) -> list[str]:
    cmd = [sys.executable, "-P", "-m", "commscope", "report", str(root), "--out", str(out)]
    return [*cmd, "--no-progress", *(["--jobs", str(jobs)] if jobs else [])]


def line(run: Run) -> str:
    p = run.peaks
    return (
        f"{run.label:<28} tree RSS {p.rss / MB:7.1f} MB  tree PSS {p.pss / MB:7.1f} MB  "
        f"largest VmHWM {p.hwm / MB:6.1f} MB (all {sum(p.hwms.values()) / MB:6.1f})  "
        f"{p.processes} processes  "
        f"{run.wall_s:6.1f} s wall  {run.cpu_s:6.1f} s CPU  ({p.samples} samples)"
    )


def best(runs: list[Run]) -> Run:
    """The run of lowest peak tree RSS (the load of a shared machine only adds)."""
    return min(runs, key=lambda run: run.peaks.rss)


def bench(args: argparse.Namespace, tmp: Path) -> None:
    root = args.keep or tmp / "run"
    files = sorted(root.glob("rank*_trace.json")) if args.keep else []
    if len(files) != args.ranks:
        files = build(root, args.ranks, args.size_mb)
    sizes = ", ".join(f"{path.stat().st_size / MB:.1f}" for path in files)
    print(f"{len(files)} files of {sizes} MB ({REAL_TRACE.name} scaled) in {root}")
    every = args.every_ms / 1000
    runs: list[tuple[str, int | None, dict[str, str] | None]] = [
        ("--jobs 1", 1, None), ("default --jobs", None, None)
    ]  # fmt: skip
    if args.before:
        runs.append((f"default --jobs at {args.before}", None, checkout(args.before, tmp / "rev")))
    results: dict[str, list[Run]] = {label: [] for label, _, _ in runs}
    for _ in range(args.repeat):
        for label, jobs, env in runs:
            out = tmp / f"out-{label.replace(' ', '_')}"
            shutil.rmtree(out, ignore_errors=True)
            run = measured(label, commscope_report(root, out, jobs), every, tmp / "log", env)
            print(line(run), flush=True)
            if args.detail:
                print("\n".join(f"    {mb / MB:6.1f} MB  {who}" for who, mb in run.peaks.at_peak))
            results[label].append(run)
    one = best(results["--jobs 1"])
    for label in list(results)[1:]:
        many = best(results[label])
        print(f"{label} / --jobs 1: peak tree RSS {many.peaks.rss / one.peaks.rss:.2f}x, "
              f"peak tree PSS {many.peaks.pss / one.peaks.pss:.2f}x")  # fmt: skip
    same = same_reports(tmp / "out---jobs_1", tmp / "out-default_--jobs")
    print(f"text and JSON reports byte-identical (provenance aside): {same}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=RANKS)
    parser.add_argument("--size-mb", type=int, default=SIZE_MB)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--every-ms", type=float, default=25.0, help="sampling interval")
    parser.add_argument("--before", metavar="REV", help="also the default --jobs at git REV")
    parser.add_argument("--detail", action="store_true", help="each process at the peak")
    parser.add_argument("--keep", type=Path, help="build the inputs here (reused if present)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(cpu_and_python())
    with tempfile.TemporaryDirectory(prefix="tree_memory") as folder:
        bench(args, Path(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main())
