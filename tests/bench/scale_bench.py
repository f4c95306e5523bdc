"""The live service at scale: a simulated TorchTitan-like job through real collectors and one
aggregator on loopback, window by window.

For each rank count R (default 64, 256, 1024) and each `--filler` size: the job of
`tests/simjob.py` (tp 8, pp 2 below 256 ranks and 4 from there, FSDP over the rest; `--windows`
windows of `--steps` steps and `--layers` layers a stage) is generated first into a staging
folder (every file of every window: the generator's time is not the service's), 8 ranks a
node. The aggregator's cost follows the collectives and the ranks; the collectors' follows
the bytes. What sets the share is therefore the trace bytes a collective: the default
`--filler` 48 gives 110 events (27 KB of JSON) a collective, as the densest real training
trace of `../shared/traces` in collectives (V100 all-reduce job: 107 events, 27 KB; the others
411 to 3,321 events), ~1.7 MB a rank and window: a conservative size that keeps 1,024 ranks x
2 windows runnable here. More filler, larger files, a smaller share (docs/performance.md, "Scale").
`--density D` (comma-separated) sets the filler instead from the collectives a MB (10^6 bytes)
of JSON wanted (`simjob.at_density`: rank 0's first window nearest D); the bench's default
filler gives ~37, a TorchTitan-shaped trace with dense communication ~86. Both tables print the
density each window reached (its collective calls, every rank's, over its bytes of JSON).
Below 16 ranks the job is one stage, tp half the ranks (dp 2).

With `--disk-gb G`, each window's files are generated while the service runs instead: each is
renamed into place once written, and deleted once its collector's checkpoint marks its stream
whole at the aggregator, with at most G GB on disk. That is how a 1,024-rank job of
TorchTitan-sized files (`--filler 2700`: ~88 MB a rank, ~70 GB a window as stored) runs on a
disk that cannot hold one window. The generator's processes are the bench's, so their CPU is
not counted; but a window then lasts as long as its generation (it shares the cores), and the
idle rate subtracted over that wall time weighs more: measure it longer (`--idle-s`).
`--spread-s S` (staged windows) renames a window's files evenly over S seconds instead of at
once: the aggregator builds reports for /metrics before the window completes at a quarter,
half and three quarters of its ranks, at most `REBUILD_SHARE` of the wall time
(`service/pacing.py`), a cost the table shows apart ("reports mid-window", from its log).

Then one `commscope aggregate --insecure` on 127.0.0.1 and one `commscope collect --insecure`
per node (8 ranks), each watching its own folder (`node<N>/`, as on a real node): real
processes, each in its own process group, all running for the whole run as beside a training
job; but at most `--max-collectors` (32) of them: an idle collector takes 1-2% of a core (its
loop wakes every 20 ms), and 128 of them (1,024 ranks) kept both cores of this machine busy
while idle (load average 250), so from 512 ranks on a collector watches the files of several
nodes (1,024 ranks: 32 collectors of 32 ranks, as when nodes write to a shared folder).
Window by window, each folder's `iteration_N/` is created and its files renamed into it (as
Kineto renames its `.tmp`), and the bench polls the aggregator's /metrics until
`commscope_windows_completed_total` counts the window. Measured per window:

  collectors CPU, aggregator CPU   utime + stime (+ waited-for children) from /proc/*/stat, of
                                   each daemon's process group (a collector's file workers too),
                                   from before the first rename until the daemons are back to
                                   their idle rate after the window completed, less that idle
                                   rate (measured, once steady, before the first window) over
                                   the same wall time: the CPU the window cost; the aggregator's
                                   also less the bench's own /metrics polls (their number times
                                   the CPU of one: the mean of 100 polls before the window and
                                   100 after it, as a poll costs more once /metrics shows a
                                   report of many ranks; the table prints it). The ratio
                                   aggregator / collectors is the issue's figure; what was
                                   used in all is printed beside it, and the window's wall
                                   time ("window s": what the idle rate is taken over);
  window -> metrics (e2e)          wall time from the last file renamed into place to the
                                   window complete in /metrics (polled every `--poll` s, so
                                   within that): on this machine mostly the collectors parsing
                                   the whole window on the cores there are;
  aggregator's own latency         the gauge `commscope_aggregator_window_latency_seconds`
                                   (from the last message it received to its metrics
                                   published: heartbeats count as messages);
  wire bytes                       `commscope_aggregator_received_bytes_total` (message
                                   payloads; ZeroMQ framing not counted) against the trace
                                   bytes as stored (some ranks gzip) and as JSON;
  peak RSS                         VmHWM of the aggregator (read until it exits, final report
                                   included) and of the collectors (the largest).

The polls ask /metrics for only the families they read (`name[]=`); a Prometheus scraping
every 15 s would not poll five times a second. After the last window the collectors get
SIGTERM (end-of-run); the aggregator must then write its final report with every file of every
window and no file skipped, else the run fails (exit 1). Every wait is bounded; every process
is killed (its whole process group) on the way out, whatever happened (SIGTERM and SIGINT to
the bench too).

Run (from the repo root; ~15 min for all three sizes on 2 cores):
    .venv/bin/python tests/bench/scale_bench.py
    .venv/bin/python tests/bench/scale_bench.py --ranks 64 --windows 3 --tmp /var/tmp --keep
    .venv/bin/python tests/bench/scale_bench.py --ranks 4,256 --density 37,86
    .venv/bin/python tests/bench/scale_bench.py --ranks 1024 --filler 2700 --disk-gb 20 \
        --idle-s 30 --tmp /var/tmp --window-timeout 3600          # ~1 h on 2 cores
It is a script, not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from multiprocessing import Pool
from multiprocessing.pool import AsyncResult
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from commscope.collector.session import load_checkpoint
from commscope.model.errors import ProtocolError
from machineinfo import MB, cpu_and_python
from simjob import Job, at_density, calls_per_step, coords, file_name, folder, write_trace

# CPU spans after each launch: ~2.2 x (FILLER + 3) events a collective, ~1.8 MB of JSON a rank
# and window. The densest real training trace of ../shared/traces in collectives has 107
# events a collective (V100 all-reduce job), the others 411 to 3,321 (docs/performance.md).
FILLER = 48

T = TypeVar("T")
COMMSCOPE = [sys.executable, "-m", "commscope.service.cli"]
CLK_TCK = os.sysconf("SC_CLK_TCK")
WINDOWS_DONE = "commscope_windows_completed_total"
LATENCY = "commscope_aggregator_window_latency_seconds"
RECEIVED = "commscope_aggregator_received_bytes_total"
UP = "commscope_collector_up"
DUPLICATES = "commscope_aggregator_duplicates_total"


class BenchError(Exception):
    pass


# ---------------------------------------------------------------- processes


@dataclass
class Daemon:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def cpu_s(self) -> float:
        """utime + stime + cutime + cstime of every process of the daemon's group (it leads a
        session of its own): the collector's file workers (`--jobs`) are children of a
        forkserver, not of the collector, so the collector's own figures would miss them."""
        return sum(group_cpu(self.popen.pid)) / CLK_TCK

    def hwm_mb(self) -> float | None:
        try:
            text = Path(f"/proc/{self.popen.pid}/status").read_text()
        except OSError:
            return None
        line = next((ln for ln in text.splitlines() if ln.startswith("VmHWM:")), None)
        return None if line is None else int(line.split()[1]) * 1024 / MB

    def signal(self, sig: int) -> None:
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def group_cpu(group: int) -> Iterator[int]:
    """Each live process of process group `group`: its CPU ticks, waited-for children's too."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # gone meanwhile
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == group:
            yield sum(int(f) for f in fields[11:15])


def start(name: str, args: list[str], logs: Path) -> Daemon:
    log = logs / f"{name}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [*COMMSCOPE, *args], stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
    return Daemon(name, popen, log)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(what: str, probe: Callable[[], T | None], timeout_s: float, every_s: float) -> T:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(every_s)
    raise BenchError(f"timed out after {timeout_s:g} s waiting for {what}")


def scrape(port: int, names: tuple[str, ...]) -> dict[str, list[float]]:
    """The samples of `names` on the aggregator's /metrics (only those families asked for)."""
    query = "&".join(f"name[]={n}" for n in names)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics?{query}", timeout=10) as r:
        text = r.read().decode()
    found: dict[str, list[float]] = {n: [] for n in names}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split("{", 1)[0].split(" ", 1)[0]
            if name in found:
                found[name].append(float(line.rsplit(" ", 1)[1]))
    return found


def scrape_or_none(agg: Daemon, port: int, names: tuple[str, ...]) -> dict[str, list[float]] | None:
    if agg.popen.poll() is not None:
        raise BenchError(f"the aggregator exited {agg.popen.returncode}:\n{agg.tail()}")
    try:
        return scrape(port, names)
    except OSError:
        return None


# ---------------------------------------------------------------- the job's files


def _write(task: tuple[Job, int, int, Path]) -> tuple[int, int, int]:
    job, window, rank, path = task
    return (window, *write_trace(job, window, rank, path))


def stage(job: Job, root: Path, per_folder: int, workers: int) -> list[tuple[int, int]]:
    """Every window's files under `root/<window>/node<N>/` (`per_folder` ranks in each): per
    window (bytes stored, bytes of JSON)."""
    tasks = [
        (job, w, r, root / str(w) / f"node{r // per_folder}" / file_name(job, r))
        for w in range(job.windows)
        for r in range(job.ranks)
    ]
    sizes = [(0, 0)] * job.windows
    with Pool(workers) as pool:
        for window, stored, plain in pool.imap_unordered(_write, tasks, chunksize=4):
            sizes[window] = (sizes[window][0] + stored, sizes[window][1] + plain)
    return sizes


def publish(
    job: Job, staged: Path, root: Path, window: int, nodes: int, *, spread_s: float
) -> float:
    """Each node's `iteration_N/`, then its files renamed into it, evenly over `spread_s`
    seconds (0: at once); the time of the last."""
    name = folder(job, window)
    for node in range(nodes):
        (root / f"node{node}" / name).mkdir()
    moves = [
        (path, root / f"node{node}" / name / path.name)
        for node in range(nodes)
        for path in sorted((staged / str(window) / f"node{node}").iterdir())
    ]
    began = time.monotonic()
    for k, (path, target) in enumerate(moves):
        time.sleep(max(0.0, began + k * spread_s / len(moves) - time.monotonic()))
        path.rename(target)
    return time.monotonic()


class Stream:
    """A window's files generated while the service runs (`--disk-gb`): each renamed into
    place as soon as written, and deleted once its collector's checkpoint says the aggregator
    holds its stream whole, so that no more than the budget is on disk at once (a 1,024-rank
    window of TorchTitan-sized files is ~70 GB as stored)."""

    def __init__(self, root: Path, per_folder: int, budget: int, workers: int) -> None:
        self.root, self.per_folder, self.budget, self.workers = root, per_folder, budget, workers
        self.on_disk: dict[Path, int] = {}  # published, not yet consumed: bytes stored

    def window(self, job: Job, window: int, service: Service) -> tuple[float, tuple[int, int]]:
        """Generate, publish and (once consumed) delete the window's files: the time of the last
        rename, and (bytes stored, bytes of JSON)."""
        name, nodes = folder(job, window), -(-job.ranks // self.per_folder)
        for node in range(nodes):
            (self.root / "job" / f"node{node}" / name).mkdir()
        tasks = [
            (job, window, r, self.root / "stage" / file_name(job, r)) for r in range(job.ranks)
        ]
        sizes, pending = (0, 0), list[tuple[Path, AsyncResult[tuple[int, int, int]]]]()
        with Pool(self.workers) as pool:
            for task in [*tasks, None]:
                while pending and (task is None or len(pending) >= self.workers):
                    path, result = pending.pop(0)
                    stored, plain = self._publish(path, name, result.get(3600)[1:], service)
                    sizes = (sizes[0] + stored, sizes[1] + plain)
                if task is not None:
                    self._room(service)
                    pending.append((task[3], pool.apply_async(_write, (task,))))
        return time.monotonic(), sizes

    def _publish(
        self, staged: Path, name: str, size: tuple[int, int], service: Service
    ) -> tuple[int, int]:
        rank = int(staged.name.removeprefix("rank").split("_", 1)[0])
        node = rank // self.per_folder
        target = self.root / "job" / f"node{node}" / name / staged.name
        staged.rename(target)
        self.on_disk[target] = size[0]
        return size

    def _room(self, service: Service) -> None:
        """Wait (bounded) until the files on disk are under the budget less the largest."""
        largest = max(self.on_disk.values(), default=0)
        wait_until(
            "files consumed under the disk budget",
            lambda: self.reap(service) <= self.budget - largest or None,
            1800, 0.5,
        )  # fmt: skip

    def reap(self, service: Service) -> int:
        """Delete the published files whose streams the aggregator holds whole; the bytes left."""
        for done in consumed(service.tmp / "col") & self.on_disk.keys():
            done.unlink()
            del self.on_disk[done]
        return sum(self.on_disk.values())


def consumed(state: Path) -> set[Path]:
    """The files the collectors' checkpoints mark done (their streams whole at the aggregator)."""
    done: set[Path] = set()
    for path in state.glob("*/checkpoint.msgpack"):
        try:
            files = load_checkpoint(path.read_bytes())
        except (OSError, ProtocolError):
            continue  # not written yet (it is replaced atomically, never seen half-written)
        done.update(Path(name) for name, entry in files.items() if entry.done)
    return done


# ---------------------------------------------------------------- the service


@dataclass
class WindowRow:
    stored: int  # trace bytes as written (some gzip)
    plain: int  # trace bytes of JSON
    agg_cpu_s: float
    col_cpu_s: float
    e2e_s: float
    gauge_s: float | None
    wire: int
    duplicates: int  # records the aggregator received again (resent before their ack came)
    polls: int  # /metrics requests the bench made meanwhile
    seconds: float  # wall time between the two CPU readings
    mid_reports: tuple[int, float] = (0, 0.0)  # reports built before the window completed, CPU s
    poll_cpu_s: float = 0.0  # the aggregator's CPU a poll: before and after the window, the mean


@dataclass
class Service:
    """One aggregator and a collector per folder (`nodes` of them), over loopback; `close`
    kills what is left."""

    tmp: Path
    nodes: int
    port: int = field(default_factory=free_port)
    metrics: int = field(default_factory=free_port)
    agg: Daemon | None = None
    collectors: list[Daemon] = field(default_factory=list)
    scrapes: int = 0

    def start(self) -> None:
        logs = self.tmp / "logs"
        logs.mkdir()
        endpoint = f"tcp://127.0.0.1:{self.port}"
        self.agg = start("aggregate", [
            "aggregate", "--listen", endpoint, "--insecure", "--metrics-port", str(self.metrics),
            "--metrics-addr", "127.0.0.1", "--out", str(self.tmp / "out"), "--state",
            str(self.tmp / "agg-state"), "--expect-nodes", str(self.nodes), "--linger", "0",
            "--job", "sim",
        ], logs)  # fmt: skip
        wait_until("the aggregator's /metrics", lambda: self.scrape((WINDOWS_DONE,)), 60, 0.2)
        for node in range(self.nodes):
            watch = self.tmp / "job" / f"node{node}"
            watch.mkdir(parents=True)
            self.collectors.append(start(f"collect-node{node}", [
                "collect", "--insecure", "--watch", str(watch), "--aggregator", endpoint,
                "--node", f"node{node}", "--state", str(self.tmp / "col" / f"node{node}"),
                "--job", "sim",
            ], logs))  # fmt: skip
        wait_until(f"{self.nodes} collectors up", self._all_up, 120 + 2 * self.nodes, 0.5)

    def scrape(self, names: tuple[str, ...]) -> dict[str, list[float]] | None:
        assert self.agg is not None
        self.scrapes += 1
        return scrape_or_none(self.agg, self.metrics, names)

    def scrape_cost(self, count: int = 100) -> float:
        """The aggregator's CPU seconds a poll (measured idle, over `count` polls)."""
        assert self.agg is not None
        before = self.agg.cpu_s()
        for _ in range(count):
            self.scrape((WINDOWS_DONE, LATENCY))
        return (self.agg.cpu_s() - before) / count

    def _all_up(self) -> bool | None:
        for daemon in self.collectors:
            if daemon.popen.poll() is not None:
                raise BenchError(f"{daemon.name} exited:\n{daemon.tail()}")
        got = self.scrape((UP,))
        return True if got and sum(got[UP]) == self.nodes else None

    def cpu(self) -> tuple[float, float]:
        """(aggregator, all collectors) CPU seconds so far."""
        assert self.agg is not None
        return self.agg.cpu_s(), sum(d.cpu_s() for d in self.collectors)

    def rates(self, seconds: float) -> tuple[float, float]:
        """(aggregator, collectors) CPU seconds a second over the next `seconds`."""
        (agg0, col0), started = self.cpu(), time.monotonic()
        time.sleep(seconds)
        (agg1, col1), took = self.cpu(), time.monotonic() - started
        return (agg1 - agg0) / took, (col1 - col0) / took

    def steady(self, timeout_s: float) -> None:
        """Until two 2-second CPU rates of the daemons agree within 10% (+ 0.02 core)."""
        last = [sum(self.rates(2.0))]

        def agrees() -> bool | None:
            rate = sum(self.rates(2.0))
            close, last[0] = abs(rate - last[0]) <= 0.1 * last[0] + 0.02, rate
            return close or None

        wait_until("a steady idle CPU rate", agrees, timeout_s, 0.0)

    def quiet(self, idle: tuple[float, float], timeout_s: float) -> None:
        """Until the daemons are back to their idle CPU rate (within 20% + 0.05 core)."""
        below = 1.2 * sum(idle) + 0.05
        wait_until(f"the daemons under {below:.2f} core",
                   lambda: sum(self.rates(1.0)) <= below or None, timeout_s, 0.0)  # fmt: skip

    def close(self) -> None:
        for daemon in [*self.collectors, *([self.agg] if self.agg else [])]:
            daemon.kill()


def complete(service: Service, count: int) -> tuple[float, dict[str, list[float]]] | None:
    """(when, the scrape) once /metrics counts `count` completed windows."""
    got = service.scrape((WINDOWS_DONE, LATENCY))
    if got and got[WINDOWS_DONE] and got[WINDOWS_DONE][0] >= count:
        return time.monotonic(), got
    return None


def counters(service: Service) -> tuple[int, int]:
    """(bytes received, records received again) so far, from /metrics."""
    got = wait_until("the counters", lambda: service.scrape((RECEIVED, DUPLICATES)), 30, 0.2)
    return int(sum(got[RECEIVED])), int(sum(got[DUPLICATES]))


Publish = Callable[[int], tuple[float, tuple[int, int]]]  # window -> (last rename, sizes)


def run_window(
    service: Service, window: int, publisher: Publish, *, args: argparse.Namespace,
    idle: tuple[float, float],
) -> WindowRow:  # fmt: skip
    """Publish the window's files, wait for it in /metrics, then for the daemons to be idle.
    A poll's cost is measured before and after (it grows with the report /metrics shows)."""
    poll_before = service.scrape_cost()
    (agg0, col0), wire0, polls = service.cpu(), counters(service), service.scrapes
    started, since = time.monotonic(), time.time()
    last, sizes = publisher(window)
    seen, got = wait_until(
        f"window {window} in /metrics",
        lambda: complete(service, window + 1),
        args.window_timeout,
        args.poll,
    )
    service.quiet(idle, 300)
    (agg1, col1), took = service.cpu(), time.monotonic() - started
    gauge = got[LATENCY][0] if got[LATENCY] else None
    wire = tuple(b - a for a, b in zip(wire0, counters(service), strict=True))
    polls = service.scrapes - polls
    cpu = (agg1 - agg0, col1 - col0)
    assert service.agg is not None
    mid = mid_window_reports(service.agg.log, since, time.time())
    poll_cpu = (poll_before + service.scrape_cost()) / 2
    return WindowRow(*sizes, *cpu, seen - last, gauge, *wire, polls, took, mid, poll_cpu)


def mid_window_reports(log: Path, since: float, until: float) -> tuple[int, float]:
    """The reports the aggregator built (its log's "report built" lines, with the CPU of the
    thread that built each) between `since` and `until` that completed no window: how many,
    and their CPU seconds. The aggregator builds one while a window's files arrive at each
    quarter of its ranks, at most `REBUILD_SHARE` of the wall time (`service/pacing.py`)."""
    count, cpu = 0, 0.0
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if (
            isinstance(entry, dict) and entry.get("msg") == "report built"
            and since <= entry.get("ts", 0) <= until and not entry.get("window_completed")
        ):  # fmt: skip
            count, cpu = count + 1, cpu + float(entry.get("cpu_s") or 0.0)
    return count, cpu


@dataclass
class Ending:
    agg_hwm_mb: float
    col_hwm_mb: float
    report: dict[str, object]


def finish(service: Service, job: Job, timeout_s: float) -> Ending:
    """SIGTERM to the collectors (end-of-run); the aggregator's peak RSS until it exits; its
    final report must hold every file of every window, none skipped."""
    assert service.agg is not None
    col_hwm = max(d.hwm_mb() or 0.0 for d in service.collectors)
    for daemon in service.collectors:
        daemon.signal(signal.SIGTERM)
    agg_hwm, deadline = 0.0, time.monotonic() + timeout_s
    while service.agg.popen.poll() is None and time.monotonic() < deadline:
        agg_hwm = max(agg_hwm, service.agg.hwm_mb() or 0.0)
        time.sleep(0.1)
    code = service.agg.popen.poll()
    if code != 0:
        raise BenchError(f"the aggregator ended with {code}:\n{service.agg.tail()}")
    reports = sorted((service.tmp / "out").glob("*.json"))
    if len(reports) != 1:
        raise BenchError(f"expected one final report, found {[p.name for p in reports]}")
    report = json.loads(reports[0].read_text())
    inputs = report["inputs"]
    if inputs["files"] != job.ranks * job.windows or inputs["skipped"]:
        raise BenchError(f"final report: {inputs['files']} files, skipped {inputs['skipped']}")
    return Ending(agg_hwm, col_hwm, report)


@dataclass
class Run:
    job: Job
    nodes: int
    generate_s: float
    idle: tuple[float, float]  # (aggregator, collectors) CPU seconds a second, idle
    poll_cpu_s: float  # the aggregator's CPU a /metrics poll
    rows: list[WindowRow]
    ending: Ending
    idle_after: tuple[float, float] = (0.0, 0.0)  # the idle rate after the last window


def staged(job: Job, service: Service, per_folder: int, args: argparse.Namespace) -> Publish:
    """Every window's files generated before the service starts; a window renamed at once."""
    started = time.perf_counter()
    sizes = stage(job, service.tmp / "stage", per_folder, args.workers)
    total = sum(s[0] for s in sizes), sum(s[1] for s in sizes)
    print(f"{job.windows} windows generated in {time.perf_counter() - started:.0f} s, total "
          f"trace bytes {total[0]:,} as stored, {total[1]:,} of JSON", flush=True)  # fmt: skip

    def publisher(window: int) -> tuple[float, tuple[int, int]]:
        root = service.tmp
        last = publish(
            job, root / "stage", root / "job", window, service.nodes, spread_s=args.spread_s
        )
        return last, sizes[window]

    return publisher


def streamed(job: Job, service: Service, per_folder: int, args: argparse.Namespace) -> Publish:
    """Each window's files generated as it is published (`Stream`)."""
    (service.tmp / "stage").mkdir()
    stream = Stream(service.tmp, per_folder, int(args.disk_gb * 1e9), args.workers)
    return lambda window: stream.window(job, window, service)


def mesh(ranks: int) -> tuple[int, int]:
    """(tp, pp): tp 8 with pp 2 below 256 ranks and 4 from there; below 16 ranks (a node) one
    stage, and tp half the ranks (dp 2: every collective but the pipeline's sends)."""
    if ranks < 16:
        return max(1, ranks // 2), 1
    return 8, 2 if ranks < 256 else 4


def jobs(ranks: int, args: argparse.Namespace) -> list[Job]:
    """The jobs of `ranks` ranks to run: one per `--density` (its filler found by the
    generator, `simjob.at_density`), else one per `--filler`."""
    tp, pp = mesh(ranks)
    base = Job(
        ranks, tp=tp, pp=pp, layers=args.layers, steps=args.steps, windows=args.windows,
        filler=FILLER, gpus_per_node=args.per_node,
    )  # fmt: skip
    if args.density:
        return [at_density(base, float(d)) for d in args.density.split(",")]
    return [replace(base, filler=int(f)) for f in args.filler.split(",")]


def collectives(job: Job) -> int:
    """The collective calls of a window, every rank's (each stage's step has its own plan)."""
    per_stage = [sum(calls_per_step(job, s).values()) for s in range(job.pp)]
    return job.steps * sum(per_stage[coords(job, r)[0]] for r in range(job.ranks))


def run_scale(job: Job, args: argparse.Namespace) -> Run:
    ranks = job.ranks
    per_collector = min(ranks, max(args.per_node, -(-ranks // args.max_collectors)))
    nodes = ranks // per_collector
    if args.tmp is not None:
        Path(args.tmp).mkdir(parents=True, exist_ok=True)  # `--tmp` may name a new folder
    tmp = Path(tempfile.mkdtemp(prefix=f"scale{ranks}-", dir=args.tmp))
    print(f"  folder: {tmp}", flush=True)
    service = Service(tmp, nodes)
    print(f"{ranks} ranks ({nodes} collectors, dp {job.dp} x pp {job.pp} x tp {job.tp})",
          flush=True)  # fmt: skip
    try:
        started = time.perf_counter()
        publisher = (streamed if args.disk_gb else staged)(job, service, per_collector, args)
        generated = time.perf_counter() - started
        service.start()
        service.steady(300)
        idle, poll_cpu = service.rates(args.idle_s), service.scrape_cost()
        rows = [run_window(service, w, publisher, args=args, idle=idle) for w in range(job.windows)]
        idle_after = service.rates(args.idle_s)  # the idle rate again, the windows' state held
        ending = finish(service, job, args.end_timeout)
        return Run(job, nodes, generated, idle, poll_cpu, rows, ending, idle_after)
    finally:
        service.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- the tables


def _mb(n: float) -> str:
    return f"{n / MB:,.1f}"


def density(job: Job, plain: float) -> str:
    """Collective calls a MB (10^6 bytes) of JSON: the window's calls over its bytes."""
    return f"{collectives(job) / (plain / MB):.1f}" if plain else "n/a"


def _s(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def polls_s(run: Run, row: WindowRow) -> float:
    """The aggregator's CPU the bench's /metrics polls cost in the window (an estimate: the
    polls times the cost of one, the mean of that measured before and after the window)."""
    return row.polls * row.poll_cpu_s


def net_cpu(run: Run, row: WindowRow) -> tuple[float, float]:
    """(aggregator, collectors) CPU seconds the window cost: what they used meanwhile less
    their idle rate over the same wall time (and, the aggregator, the bench's polls)."""
    agg = row.agg_cpu_s - run.idle[0] * row.seconds - polls_s(run, row)
    return agg, row.col_cpu_s - run.idle[1] * row.seconds


def windows_table(runs: list[Run]) -> str:
    lines = [
        "| ranks | filler | window | trace MB stored / JSON | collectives / MB "
        "| collectors CPU s (used) "
        "| aggregator CPU s (used) | aggregator / collectors | window → metrics s "
        "| aggregator's latency s | wire MB (records resent) | of it: reports mid-window s (n) "
        "| aggregator less those / collectors | bench's polls (ms each) | window s |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        for w, row in enumerate(run.rows):
            agg, col = net_cpu(run, row)
            lines.append(
                f"| {run.job.ranks:,} | {run.job.filler} | {folder(run.job, w)} | "
                f"{_mb(row.stored)} / "
                f"{_mb(row.plain)} | {density(run.job, row.plain)} | "
                f"{col:.1f} ({row.col_cpu_s:.1f}) | {agg:.2f} "
                f"({row.agg_cpu_s:.2f}) | {agg / col:.1%} | {row.e2e_s:.1f} | "
                f"{_s(row.gauge_s)} | {_mb(row.wire)} ({row.duplicates:,}) | "
                f"{row.mid_reports[1]:.2f} ({row.mid_reports[0]}) | "
                f"{(agg - row.mid_reports[1]) / col:.1%} | "
                f"{row.polls:,} ({row.poll_cpu_s * 1e3:.1f}) | {row.seconds:,.0f} |"
            )
    return "\n".join(lines)


def pooled(run: Run, rows: list[WindowRow]) -> tuple[float, float]:
    """(aggregator, collectors) CPU seconds over these windows."""
    costs = [net_cpu(run, row) for row in rows]
    return sum(c[0] for c in costs), sum(c[1] for c in costs)


def _share(agg: float, col: float) -> str:
    return f"{agg / col:.1%}" if col > 0 else "n/a"


def summary_table(runs: list[Run]) -> str:
    """One row per job: means over its windows; the CPU ratio pools them (Σ over Σ), over
    every window and over those after the first (the first also pays each collector's
    file workers starting: the steady cost is the later windows')."""
    lines = [
        "| ranks | filler | collectors | trace MB per window (JSON) | collectives / MB "
        "| collectors CPU s per window "
        "| aggregator CPU s per window | aggregator / collectors CPU | after the first window "
        "| window → metrics s | aggregator peak RSS MB | wire MB per window | wire / trace JSON |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        n, rows = len(run.rows), run.rows
        agg, col = pooled(run, rows)
        plain, wire = sum(r.plain for r in rows), sum(r.wire for r in rows)
        later = "n/a" if n < 2 else f"{_share(*pooled(run, rows[1:]))}"
        lines.append(
            f"| {run.job.ranks:,} | {run.job.filler} | {run.nodes} | {_mb(plain / n)} | "
            f"{density(run.job, plain / n)} | "
            f"{col / n:.1f} | {agg / n:.2f} | {_share(agg, col)} | {later} | "
            f"{sum(r.e2e_s for r in rows) / n:.1f} | {run.ending.agg_hwm_mb:.0f} | "
            f"{_mb(wire / n)} | {wire / plain:.2%} |"
        )
    return "\n".join(lines)


def describe(runs: list[Run], args: argparse.Namespace) -> str:
    job = runs[0].job
    return (
        f"job: {job.windows} windows x {job.steps} steps, {job.layers} layers a stage, "
        f"{f'density {args.density} collectives / MB' if args.density else 'filler ' + args.filler}"
        f", tp {job.tp}, {args.per_node} ranks a node, at most "
        f"{args.max_collectors} collectors, every {job.gzip_every}th rank gzip; /metrics polled "
        f"every {args.poll:g} s; "
        "CPU: what the window cost, less the idle rate over the same time (and the polls)\n"
        + "\n".join(
            f"{r.job.ranks} ranks, filler {r.job.filler}: {generation(r, args)}; "
            "idle: aggregator "
            f"{r.idle[0]:.3f} core, collectors {r.idle[1]:.3f} (after the last window: "
            f"{r.idle_after[0]:.3f} and {r.idle_after[1]:.3f}); a /metrics poll "
            f"{r.poll_cpu_s * 1e3:.1f} ms of the aggregator's CPU idle; largest collector peak RSS "
            f"{r.ending.col_hwm_mb:.0f} MB"
            for r in runs
        )
    )


def generation(run: Run, args: argparse.Namespace) -> str:
    if args.disk_gb:
        return f"generated as published, at most {args.disk_gb:g} GB on disk"
    return f"generated in {run.generate_s:.0f} s"


def machine() -> str:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False,
        cwd=Path(__file__).resolve().parent,
    ).stdout.strip()  # fmt: skip
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"{cpu_and_python()}; {now}; commit {commit}; load average {load}"


# ---------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="64,256,1024", help="rank counts, comma-separated")
    p.add_argument("--windows", type=int, default=2)
    p.add_argument("--steps", type=int, default=2, help="ProfilerSteps a window")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks a stage")
    p.add_argument(
        "--filler", default=str(FILLER), help="CPU spans a launch (file size), comma-separated"
    )
    p.add_argument(
        "--density", default="",
        help="collective calls a MB of JSON, comma-separated (sets the filler; overrides --filler)",
    )  # fmt: skip
    p.add_argument("--per-node", type=int, default=8, help="ranks a node (a clock each)")
    p.add_argument("--max-collectors", type=int, default=32, help="more nodes: a few a collector")
    p.add_argument("--workers", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--poll", type=float, default=0.2, help="seconds between /metrics polls")
    p.add_argument("--window-timeout", type=float, default=1800.0)
    p.add_argument("--end-timeout", type=float, default=600.0)
    p.add_argument("--tmp", default=None, help="where the job's folders go")
    p.add_argument("--keep", action="store_true", help="keep the job's folders")
    p.add_argument(
        "--disk-gb", type=float, default=0.0,
        help="generate each window while the service runs, at most this many GB on disk "
        "(0: every window generated first)",
    )  # fmt: skip
    p.add_argument("--idle-s", type=float, default=5.0, help="seconds the idle rate is measured")
    p.add_argument(
        "--spread-s", type=float, default=0.0,
        help="rename a window's files evenly over this many seconds (without --disk-gb)",
    )  # fmt: skip
    return p.parse_args(argv)


def _interrupted(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through every `finally`: the daemons are killed


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, _interrupted)  # even when started in the background
    print(machine(), flush=True)
    runs: list[Run] = []
    try:
        for ranks in (int(r) for r in args.ranks.split(",")):
            for job in jobs(ranks, args):
                runs.append(run_scale(job, args))
            print(windows_table(runs[-1:]), flush=True)
    except BenchError as exc:
        print(f"scale_bench: {exc}", file=sys.stderr)
        return 1
    finally:
        if runs:
            print(f"\n{describe(runs, args)}\n{machine()}\n\n{windows_table(runs)}\n")
            print(summary_table(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
