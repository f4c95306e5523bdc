"""Chaos rounds for the live service (shell: real processes, threads, files and clocks).

One round: an aggregator and two collectors (one watched folder each, each with its own
state folder) on loopback, while a writer lays out the DLRM 8-rank traces as three windows
(`iteration_N/rankK_trace.json[.gz]`) the way trainers write them: some under a hidden name
then renamed, some `.json.gz` written in place in pieces (the gzip stream flushed after each,
with pauses), the ranks split across the two folders. A `random.Random(seed)` plans the
writes and 1–3 SIGKILLs of a random daemon at a random moment — just after a rename, between
two pieces of an in-place gzip write, during the catch-up after an aggregator outage, or
during end-of-run — each daemon restarted on its own state folder. Then the collectors are
stopped (SIGTERM: they drain and send end-of-run), the aggregator ends, and its final JSON
report must equal what `commscope report` writes for the same files (absolute roots removed).

`run_round` never raises for a failed round: its `Outcome` says the seed, the kill schedule
and what differed, and names the folder where the logs are kept. Every wait is bounded and
every process is killed before it returns. `run_outage` is the long-outage variant: the
aggregator away for `outage_s` while all windows are written, with the collectors' memory
during the outage and the time to catch up.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from service.harness import (
    COMMSCOPE,
    DLRM,
    RUN_SPECIFIC,
    Proc,
    Processes,
    collector_args,
    free_port,
    sample_value,
    wait_for,
)

NODES = ("node-a", "node-b")
DAEMONS = ("aggregator", *NODES)
WINDOWS = ("iteration_10", "iteration_20", "iteration_30")
MOMENTS = ("rename", "gzip", "catch-up", "end-of-run")
RANKS = 8
DRAIN_S = 15.0  # a collector stopped gives up on its end-of-run after this long
END_S = 60.0  # bound on the end of a round (collectors drained, aggregator ended)


@dataclass(frozen=True)
class Write:
    """One rank file of one window, and how the trainer writes it."""

    window: str
    rank: int
    node: str
    how: str  # "renamed .json", "renamed .json.gz" or "gzip in place"
    pieces: int = 1
    pause_s: float = 0.0

    @property
    def name(self) -> str:
        return f"rank{self.rank}_trace.json" + (".gz" if self.how != "renamed .json" else "")

    @property
    def label(self) -> str:
        return f"{self.window}/{self.name}"


@dataclass(frozen=True)
class Kill:
    """A SIGKILL of `daemon` when the writer reaches `trigger` (+ `delay_s`); `outage_s`:
    for a catch-up kill, how long the aggregator is away first."""

    daemon: str
    moment: str
    trigger: str
    delay_s: float
    restart_after_s: float
    outage_s: float = 0.0

    def __str__(self) -> str:
        outage = f" after a {self.outage_s:.1f}s aggregator outage" if self.outage_s else ""
        return f"{self.daemon} during {self.moment} ({self.trigger} +{self.delay_s:.2f}s{outage})"


@dataclass(frozen=True)
class Plan:
    seed: int
    split: tuple[int, ...]  # node-a's ranks; node-b has the others
    writes: tuple[Write, ...]
    kills: tuple[Kill, ...]
    window_gap_s: float

    def schedule(self) -> str:
        return "; ".join(str(kill) for kill in self.kills) or "no kills"


# ---------------------------------------------------------------- the plan (pure)


def plan(seed: int, kills: int | None = None) -> Plan:
    """The writes and kills of round `seed` (`kills`: how many, default 1–3 at random)."""
    rng = random.Random(seed)
    split = tuple(sorted(rng.sample(range(RANKS), rng.randint(3, 5))))
    writes = tuple(w for window in WINDOWS for w in _window_writes(rng, window, split))
    chosen: list[Kill] = []
    for _ in range(kills if kills is not None else rng.randint(1, 3)):
        kill = _draw_kill(rng, writes, {k.trigger for k in chosen})
        chosen.append(kill)
    return Plan(seed, split, writes, tuple(chosen), rng.uniform(0.3, 1.2))


def _window_writes(rng: random.Random, window: str, split: tuple[int, ...]) -> list[Write]:
    """Each rank once; at least one renamed file and one gzip written in place."""
    hows = [
        rng.choice(("renamed .json", "renamed .json.gz", "gzip in place")) for _ in range(RANKS)
    ]
    forced = rng.sample(range(RANKS), 2)
    hows[forced[0]] = "gzip in place"
    if all(how == "gzip in place" for how in hows):
        hows[forced[1]] = "renamed .json"
    writes = []
    for rank, how in enumerate(hows):
        node = NODES[0] if rank in split else NODES[1]
        pieces, pause = (
            (rng.randint(3, 6), rng.uniform(0.1, 0.4)) if how == "gzip in place" else (1, 0.0)
        )
        writes.append(Write(window, rank, node, how, pieces, pause))
    return writes


def _draw_kill(rng: random.Random, writes: tuple[Write, ...], used: set[str]) -> Kill:
    while True:
        moment, daemon = rng.choice(MOMENTS), rng.choice(DAEMONS)
        trigger = _trigger(rng, moment, writes)
        if trigger not in used:
            break
    outage = rng.uniform(1.0, 3.0) if moment == "catch-up" else 0.0
    return Kill(daemon, moment, trigger, rng.uniform(0.0, 0.4), rng.uniform(0.1, 0.8), outage)


def _trigger(rng: random.Random, moment: str, writes: tuple[Write, ...]) -> str:
    if moment == "rename":
        renamed = [w for w in writes if w.how != "gzip in place"]
        return f"renamed {rng.choice(renamed).label}"
    if moment == "gzip":
        write = rng.choice([w for w in writes if w.how == "gzip in place"])
        return f"gzip {write.label} piece {rng.randint(1, write.pieces - 1)}/{write.pieces}"
    if moment == "catch-up":
        return f"outage before {rng.choice(WINDOWS)}"
    return "end-of-run"


# ---------------------------------------------------------------- comparing reports (pure)


def comparable(document: dict[str, Any], roots: tuple[Path, ...]) -> dict[str, Any]:
    """The report without what is specific to this run: the absolute roots of its paths, and
    who wrote it when with what command line (`RUN_SPECIFIC`)."""
    text = json.dumps({k: v for k, v in document.items() if k not in RUN_SPECIFIC})
    for root in roots:
        text = text.replace(str(root) + "/", "")
    return json.loads(text)  # type: ignore[no-any-return]


def differences(live: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    """What the live report lacks or has more than the reference, most telling first."""
    found = []
    ref_windows = {w["name"]: w for w in reference.get("windows", [])}
    live_windows = {w["name"]: w for w in live.get("windows", [])}
    for name, window in ref_windows.items():
        missing = sorted(set(window["ranks"]) - set(live_windows.get(name, {}).get("ranks", [])))
        if missing:
            found.append(f"{name}: rank(s) {missing} missing")
    found += [f"extra window {name}" for name in live_windows.keys() - ref_windows.keys()]
    for skipped in live.get("inputs", {}).get("skipped", []):
        found.append(f"live report skipped {skipped['path']}: {skipped['reason']}")
    found += [f"differs at {p}" for p in list(_diff_paths(live, reference, "$"))[:6]]
    return found


def _diff_paths(a: Any, b: Any, where: str) -> Iterator[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            yield from _diff_paths(a.get(key), b.get(key), f"{where}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for index, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _diff_paths(x, y, f"{where}[{index}]")
    elif a != b:
        yield f"{where}: live {_short(a)} vs offline {_short(b)}"


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------- outcome


@dataclass
class Outcome:
    seed: int
    schedule: str
    folder: Path
    events: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    kills_planned: int = 0
    kills_landed: int = 0  # outage kills included
    peak_rss_mb: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    exact: bool = False

    def describe(self) -> str:
        head = "exact" if self.exact else "FAILED"
        lines = [f"round seed={self.seed}: {head} ({self.seconds:.1f}s); kills: {self.schedule}"]
        lines += [f"  what happened: {event}" for event in self.events]
        lines += [f"  problem: {problem}" for problem in self.problems]
        lines += [f"  note: {note}" for note in self.notes]
        if not self.exact:
            lines.append(f"  logs kept in {self.folder}")
        return "\n".join(lines)


# ---------------------------------------------------------------- memory


class RssMonitor(threading.Thread):
    """Samples each live daemon's VmRSS and VmHWM (kB, from /proc) every `every_s`."""

    def __init__(self, daemons: Callable[[], dict[str, Proc]], every_s: float = 0.2) -> None:
        super().__init__(name="rss monitor", daemon=True)
        self.daemons, self.every_s = daemons, every_s
        self.samples: list[tuple[float, str, int, int]] = []  # (time, daemon, rss, hwm)
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.every_s):
            for name, proc in self.daemons().items():
                memory = _memory_kb(proc.popen.pid)
                if memory is not None:
                    self.samples.append((time.monotonic(), name, *memory))

    def peak_mb(self, kind: str) -> dict[str, float]:
        """Per daemon, the highest VmHWM seen (`kind` "hwm") or VmRSS ("rss"), in MB."""
        index = 3 if kind == "hwm" else 2
        peaks: dict[str, float] = {}
        for sample in self.samples:
            peaks[sample[1]] = max(peaks.get(sample[1], 0.0), sample[index] / 1024)
        return peaks

    def rss_between(self, start: float, end: float) -> dict[str, float]:
        peaks: dict[str, float] = {}
        for when, name, rss, _ in self.samples:
            if start <= when <= end:
                peaks[name] = max(peaks.get(name, 0.0), rss / 1024)
        return peaks


def _memory_kb(pid: int) -> tuple[int, int] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
    except (KeyError, ValueError, IndexError):
        return None  # a zombie has no memory lines


# ---------------------------------------------------------------- a round


@dataclass(frozen=True)
class Tuning:
    """The daemons' settings in a round: small, so a round takes seconds."""

    batch_events: int = 256
    window: int = 64
    refresh_s: float = 0.5


class Round:
    """The daemons, the writer and the kills of one plan, in `folder`."""

    def __init__(self, plan: Plan, folder: Path, tuning: Tuning | None = None) -> None:
        self.plan, self.folder, self.tuning = plan, folder, tuning or Tuning()
        folder.mkdir(parents=True, exist_ok=True)
        os.environ["PYTHONFAULTHANDLER"] = "1"  # the daemons' stacks on SIGABRT (dump_stacks)
        self.procs = Processes(folder)
        self.lock = threading.Lock()
        self.daemons: dict[str, Proc] = {}
        self.closed = False
        self.ports = {name: free_port() for name in DAEMONS}
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.outcome = Outcome(plan.seed, plan.schedule(), folder, kills_planned=len(plan.kills))
        self.kills = {kill.trigger: kill for kill in plan.kills}
        self.background: list[threading.Thread] = []
        self.late: str | None = None  # a collector restarted during end-of-run
        self.sources: dict[int, bytes] = {}
        self.monitor = RssMonitor(self.live)
        self.t0 = time.monotonic()

    # ------------------------------------------------------------ daemons
    def live(self) -> dict[str, Proc]:
        with self.lock:
            return {n: p for n, p in self.daemons.items() if p.popen.poll() is None}

    def event(self, text: str) -> None:
        self.outcome.events.append(f"{time.monotonic() - self.t0:5.1f}s {text}")

    def start_all(self) -> None:
        self.monitor.start()
        for name in DAEMONS:
            self.start(name)
        self.event("aggregator and collectors up")

    def start(self, name: str) -> Proc | None:
        """Start `name` unless it runs (or the round is over); wait until it serves /metrics
        (or has exited: an aggregator restarted after every end-of-run ends at once)."""
        with self.lock:
            running = self.daemons.get(name)
            if self.closed or (running is not None and running.popen.poll() is None):
                return None
            proc = self.procs.start(name, *self._args(name))
            self.daemons[name] = proc
        port = self.ports[name]
        wait_for(f"{name} to serve /metrics", lambda: _serving(proc, port), 30)
        return proc

    def _args(self, name: str) -> tuple[str, ...]:
        metrics = ("--metrics-port", str(self.ports[name]), "--metrics-addr", "127.0.0.1")
        if name == "aggregator":
            out, state = str(self.folder / "out"), str(self.folder / "agg-state")
            nodes, refresh = str(len(NODES)), str(self.tuning.refresh_s)
            common = ("--listen", self.endpoint, "--out", out, "--state", state, "--insecure")
            ending = ("--refresh", refresh, "--expect-nodes", nodes, "--linger", "0")
            return ("aggregate", *common, *metrics, *ending)
        return collector_args(
            self.folder / name,
            self.endpoint,
            name,
            self.folder / f"state-{name}",
            *(
                "--batch-events",
                str(self.tuning.batch_events),
                "--max-unacked",
                str(self.tuning.window),
            ),
            *(*metrics, "--drain", str(DRAIN_S)),
        )

    def kill(self, name: str, why: str) -> bool:
        """SIGKILL `name` now; False if it was not running."""
        with self.lock:
            proc = self.daemons.get(name)
            landed = proc is not None and proc.popen.poll() is None
            if proc is not None and landed:
                proc.popen.send_signal(signal.SIGKILL)
                proc.popen.wait(10)
        self.event(f"SIGKILL {name} {why}" + ("" if landed else ": missed, it was not running"))
        self.outcome.kills_landed += landed
        return landed

    def spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=self.guarded, args=(target, *args), daemon=True)
        self.background.append(thread)
        thread.start()

    def guarded(self, target: Callable[..., None], *args: Any) -> None:
        try:
            target(*args)
        except Exception as exc:  # a daemon that would not start, a bounded wait run out
            self.outcome.problems.append(f"{target.__name__}: {exc}")

    # ------------------------------------------------------------ kills
    def at(self, trigger: str) -> None:
        """The writer reached `trigger`: the kill planned there, if any, begins."""
        kill = self.kills.get(trigger)
        if kill is not None and kill.moment == "catch-up":
            self.spawn(self._outage, kill)
        elif kill is not None:
            self.spawn(self._kill_and_restart, kill)

    def _kill_and_restart(self, kill: Kill) -> None:
        time.sleep(kill.delay_s)
        if self.kill(kill.daemon, f"during {kill.moment} ({kill.trigger})"):
            time.sleep(kill.restart_after_s)
            self.start(kill.daemon)
            self.event(f"restarted {kill.daemon}")

    def _outage(self, kill: Kill) -> None:
        self.kill("aggregator", f"for a {kill.outage_s:.1f}s outage ({kill.trigger})")
        time.sleep(kill.outage_s)
        self.start("aggregator")
        self.event("restarted aggregator: catch-up begins")
        self._kill_and_restart(kill)

    def _end_kill(self, kill: Kill) -> None:
        time.sleep(kill.delay_s)
        if not self.kill(kill.daemon, "during end-of-run"):
            return
        time.sleep(kill.restart_after_s)
        if kill.daemon == "aggregator":
            self.start("aggregator")
        elif self.daemons["aggregator"].popen.poll() is not None:
            self.event(f"{kill.daemon} not restarted: the aggregator had ended the run")
            return
        else:
            proc = self.start(kill.daemon)
            if proc is not None:
                proc.terminate()
                self.late = kill.daemon
        self.event(f"restarted {kill.daemon}")

    # ------------------------------------------------------------ the writer
    def write_all(self) -> None:
        for window in WINDOWS:
            self.at(f"outage before {window}")
            self.write_window(window)
            time.sleep(self.plan.window_gap_s)
        self.event("every window written")

    def write_window(self, window: str) -> None:
        writes = [w for w in self.plan.writes if w.window == window]
        threads = [
            threading.Thread(target=self.guarded, args=(self._write_in_place, w), daemon=True)
            for w in writes
            if w.how == "gzip in place"
        ]
        for thread in threads:
            thread.start()
        for write in writes:
            if write.how != "gzip in place":
                self._write_renamed(write)
                time.sleep(0.05)
        for thread in threads:
            thread.join(60)

    def _target(self, write: Write) -> Path:
        target = self.folder / write.node / write.window / write.name
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def _source(self, rank: int) -> bytes:
        if rank not in self.sources:
            self.sources[rank] = next(DLRM.glob(f"worker{rank}_*.json")).read_bytes()
        return self.sources[rank]

    def _write_renamed(self, write: Write) -> None:
        """Written under a hidden name, then renamed into place (as Kineto does)."""
        target, data = self._target(write), self._source(write.rank)
        hidden = target.with_name(f".{target.name}.tmp")
        hidden.write_bytes(gzip.compress(data, mtime=0) if target.suffix == ".gz" else data)
        os.replace(hidden, target)
        self.at(f"renamed {write.label}")

    def _write_in_place(self, write: Write) -> None:
        """A gzip stream written under its final name in pieces, flushed after each."""
        target, data = self._target(write), self._source(write.rank)
        step = -(-len(data) // write.pieces)
        with target.open("wb") as handle, gzip.GzipFile(fileobj=handle, mode="wb", mtime=0) as out:
            for piece in range(write.pieces):
                out.write(data[piece * step : (piece + 1) * step])
                out.flush()
                if piece < write.pieces - 1:
                    self.at(f"gzip {write.label} piece {piece + 1}/{write.pieces}")
                    time.sleep(write.pause_s)


def _serving(proc: Proc, port: int) -> bool:
    if proc.popen.poll() is not None:
        return True  # exited: the caller looks at why
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        return response.status == 200


# ---------------------------------------------------------------- running a round


def run_round(seed: int, folder: Path, kills: int | None = None) -> Outcome:
    """One seeded round in `folder` (kept: its logs are there); never raises for a failure."""
    chaos = Round(plan(seed, kills), folder)
    try:
        chaos.start_all()
        writer = threading.Thread(target=chaos.guarded, args=(chaos.write_all,), daemon=True)
        writer.start()
        writer.join(120)
        assert not writer.is_alive(), "the writer did not finish within 120s"
        finish(chaos)
        judge(chaos)
    except AssertionError as exc:  # a bounded wait ran out
        chaos.outcome.problems.append(str(exc))
    except Exception as exc:  # the round itself went wrong: say so, with the seed
        chaos.outcome.problems.append(f"round error: {exc!r}")
    finally:
        close(chaos)
    return chaos.outcome


def finish(chaos: Round) -> None:
    """The job ends: SIGTERM to the collectors (with the end-of-run kill, if planned), then
    wait, bounded, for the aggregator's end and the collectors' exits."""
    for thread in list(chaos.background):
        thread.join(60)
        assert not thread.is_alive(), "a kill or restart did not finish within 60s"
    for node in NODES:
        chaos.daemons[node].terminate()
    chaos.event("SIGTERM to both collectors")
    kill = chaos.kills.get("end-of-run")
    if kill is not None:
        chaos.guarded(chaos._end_kill, kill)
    aggregator = chaos.daemons["aggregator"]
    code = _wait(aggregator, DRAIN_S / 2)
    if isinstance(code, str):  # slow: what the collectors say while they still run
        chaos.event(f"aggregator still running {DRAIN_S / 2:.0f}s after SIGTERM; {said(chaos)}")
        code = _wait(aggregator, END_S)
    chaos.event(f"aggregator exited {code}")
    if isinstance(code, str):
        dump_stacks(chaos)
    if code != 0:
        chaos.outcome.problems.append(f"aggregator exit status {code}:\n{aggregator.tail()}")
    for node in NODES:
        # A collector restarted as the aggregator ended waits --drain for an end-of-run
        # acknowledgement no one will send: once the run is over, its exit says nothing more.
        late = node == chaos.late and aggregator.popen.poll() is not None
        code = _wait(chaos.daemons[node], 3 if late else DRAIN_S + 20)
        if late and isinstance(code, str):
            chaos.event(f"{node}, restarted during end-of-run, still waits for its ack: stopped")
            continue
        if code not in (0, -signal.SIGKILL):  # -9: killed at end-of-run, not restarted
            chaos.outcome.notes.append(f"{node} exit status {code} (log {chaos.daemons[node].log})")


COLLECTOR_GAUGES = (
    "files_total",
    "files_done_total",
    "batches_sent_total",
    "batches_acked_total",
    "batches_resent_total",
    "unacked_batches",
)


def said(chaos: Round) -> str:
    """Each live collector's own counters (from its /metrics)."""
    found = []
    for name, proc in chaos.live().items():
        if name == "aggregator":
            continue
        try:
            url = f"http://127.0.0.1:{chaos.ports[name]}/metrics"
            with urllib.request.urlopen(url, timeout=2) as response:
                text = response.read().decode()
        except OSError as exc:
            found.append(f"{name} (pid {proc.popen.pid}): no /metrics ({exc})")
            continue
        values = [f"{g} {sample_value(text, 'commscope_collector_' + g)}" for g in COLLECTOR_GAUGES]
        found.append(f"{name}: " + ", ".join(values))
    return "; ".join(found) or "no collector running"


def dump_stacks(chaos: Round) -> None:
    """Every live daemon's threads into its log (faulthandler on SIGABRT), to see where a
    daemon that should have ended waits."""
    for name, proc in chaos.live().items():
        proc.popen.send_signal(signal.SIGABRT)
        _wait(proc, 5)
        chaos.event(f"{name} still running: SIGABRT, its threads' stacks are in {proc.log.name}")


def _wait(proc: Proc, timeout_s: float) -> int | str:
    try:
        return proc.popen.wait(timeout_s)
    except subprocess.TimeoutExpired:
        return f"none: still running after {timeout_s:.0f}s"


def judge(chaos: Round) -> None:
    """The live report against `commscope report` on the same files; crashes in the logs."""
    folder, outcome = chaos.folder, chaos.outcome
    outcome.problems += crashes(folder)
    live = newest_report(folder / "out")
    if live is None:
        outcome.problems.append(f"no JSON report in {folder / 'out'}")
        return
    reference = offline_report(folder)
    roots = (*(folder / node for node in NODES), folder / "offline" / "run")
    live, reference = comparable(live, roots), comparable(reference, roots)
    outcome.exact = live == reference and not outcome.problems
    if live != reference:
        outcome.problems += differences(live, reference)


def crashes(folder: Path) -> list[str]:
    found = []
    for log in sorted(folder.glob("*.log")):
        text = log.read_text(errors="replace")
        if "Traceback" in text:
            found.append(f"{log.name} has a traceback: {text.strip().splitlines()[-1]}")
    return found


def newest_report(out: Path) -> dict[str, Any] | None:
    found = sorted(out.glob("*.json"), key=lambda p: p.stat().st_mtime)
    return json.loads(found[-1].read_text()) if found else None


def offline_report(folder: Path) -> dict[str, Any]:
    """`commscope report` (the real CLI) on every written file, both folders in one run."""
    run = folder / "offline" / "run"
    for node in NODES:
        for path in (folder / node).glob("*/*.json*"):
            target = run / path.parent.name / path.name
            target.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, target)
    out = folder / "offline" / "out"
    done = subprocess.run(
        [*COMMSCOPE, "report", str(run), "--out", str(out), "--no-progress"],
        capture_output=True,
        timeout=180,
        check=False,
    )
    report = newest_report(out)
    assert report is not None, f"commscope report wrote nothing: {done.stderr.decode()[-2000:]}"
    return report


def close(chaos: Round) -> None:
    with chaos.lock:
        chaos.closed = True
    chaos.monitor.stop.set()
    chaos.procs.cleanup()
    chaos.outcome.peak_rss_mb = chaos.monitor.peak_mb("hwm")
    chaos.outcome.seconds = time.monotonic() - chaos.t0


def remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------- a long outage


@dataclass
class OutageResult:
    outcome: Outcome
    outage_s: float
    collector_rss_mb: dict[str, float]  # the highest VmRSS each collector reached meanwhile
    catch_up_s: float | None  # from the restarted aggregator serving to every window complete


def run_outage(folder: Path, outage_s: float = 60.0, seed: int = 0) -> OutageResult:
    """The aggregator killed once every daemon is up, away `outage_s` while all three windows
    are written, then restarted; no other kill. Bounded; never raises for a failure."""
    chaos = Round(plan(seed, kills=0), folder)
    result = OutageResult(chaos.outcome, outage_s, {}, None)
    try:
        chaos.start_all()
        chaos.kill("aggregator", f"for a {outage_s:.0f}s outage")
        gone = time.monotonic()
        chaos.write_all()
        time.sleep(max(0.0, gone + outage_s - time.monotonic()))
        back = time.monotonic()
        result.collector_rss_mb = chaos.monitor.rss_between(gone, back)
        chaos.start("aggregator")
        ready = time.monotonic()
        chaos.event(f"aggregator restarted, serving after {ready - back:.1f}s")
        wait_for("every window complete", lambda: _complete(chaos), 300)
        result.catch_up_s = time.monotonic() - ready
        chaos.event(f"caught up {result.catch_up_s:.1f}s after that")
        finish(chaos)
        judge(chaos)
    except AssertionError as exc:
        chaos.outcome.problems.append(str(exc))
    finally:
        close(chaos)
    return result


def _complete(chaos: Round) -> bool:
    port = chaos.ports["aggregator"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        text = response.read().decode()
    return sample_value(text, "commscope_windows_completed_total") == len(WINDOWS)
