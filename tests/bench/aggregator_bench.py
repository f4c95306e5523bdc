"""The aggregator's events/s on one core and its window-to-metrics latency, on real traces.

Inputs: the 8-rank DLRM traces (`/work/shared/traces/kineto/dlrm_8rank_v100`, ~0.9 MB of JSON
per rank) and the 2-rank gloo sample (`samples/gloo_ddp_2rank`, two windows). Each file is
parsed and reduced once, as the collector does, into wire records (`StreamStart`, its
`Facts`, `StreamEnd`) and msgpack-encoded: the bytes as they arrive. A run is replayed as
`--copies` copies, each under new stream ids and `iteration_N` folders (new windows).

1. Apply throughput, one core, in-process (`time.process_time`, best of `--repeat`):
     decode only      `msgspec.msgpack.Decoder(ToAggregator)` over every message (baseline);
     apply (memory)   decode + `Aggregation.verdict` + `Aggregation.apply`, no durability;
     aggregator       a real `Aggregator` on a temp state folder: `receive([identity,
                      payload])` per message, `commit()` every 512 messages (as its loop
                      drains), so the per-stream logs are appended and fsynced and each
                      finished file is written atomically (fsync file and folder);
     offline parse    `TraceReader` over the JSON of the same files (what a collector or
                      `commscope report` spends per file, before any aggregation).
   "events" are the normalised events on the wire (what `commscope_aggregator_events_total`
   counts); "trace MB/s": the trace files the replayed events stand for (as stored: gloo's are
   gzip), per CPU second.
   The CPU clock does not count fsync waits: the aggregator's wall time is printed beside it.
2. Window-to-metrics latency (wall, `time.perf_counter`): with 1, 10 and 50 DLRM windows
   already finished, the last record of the next window arrives: `receive()` of its
   `StreamEnd` (the file's result is computed), `commit()` (fsyncs, files written),
   `_tick()` (the loop's own step: sees the window complete, rebuilds the report over every
   finished file and the Prometheus families). Median and max over the repeats. The scrape:
   `generate_latest()` of a registry holding the aggregator's exporter (it calls `collect()`).
3. End to end over loopback (wall, best of `--repeat`): a real `commscope aggregate
   --expect-nodes 1`; once it listens (read from /proc/net/tcp), one `commscope collect --once
   --quiet 0.2` on a copy of the folder; timed from the collector's launch to the aggregator's
   exit (its report written), as when a job starts against a running aggregator. The
   aggregator's own start-up is printed apart. Baseline: `commscope report` on the same copy
   (one process, offline). Both include interpreter start-up (the time to import the CLI is
   printed for reference), so the DLRM folder is also run as `--e2e-copies` windows
   (`iteration_N/`), where it matters less. The run fails (exit 1) unless the live and offline
   runs print the same summary line.

Run (from the repo root):
    .venv/bin/python tests/bench/aggregator_bench.py
    .venv/bin/python tests/bench/aggregator_bench.py --repeat 5 --copies 20 --tmp /var/tmp
It is a script, not a test: nothing here asserts on timings.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import msgspec
from commscope.collector.discover import open_trace, rank_from_name
from commscope.collector.kineto import BATCH_EVENTS, TraceReader
from commscope.model.schema import (
    Event,
    FileStats,
    Record,
    StreamEnd,
    StreamStart,
    ToAggregator,
    TraceMeta,
)
from commscope.pipeline.aggregation import Aggregation, Verdict
from commscope.pipeline.edge import Reduction
from commscope.service.aggregate import _DRAIN, Aggregator, AggregatorSettings
from machineinfo import cpu_and_python
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest

REPO = Path(__file__).resolve().parents[2]
DLRM = Path("/work/shared/traces/kineto/dlrm_8rank_v100")
GLOO = REPO / "samples" / "gloo_ddp_2rank"
COMMSCOPE = [sys.executable, "-m", "commscope.service.cli"]
IDENTITY: Final = b"bench"
PRESENT: Final = (1, 10, 50)  # finished windows present when the latency is measured
MB: Final = 1_000_000
WAIT_S: Final = 120.0


class BenchError(Exception):
    """A replay or a process did not give what was sent, or a process failed."""


# ---------------------------------------------------------------- inputs


@dataclass(frozen=True)
class Trace:
    """One rank file, parsed once: what its stream's records carry."""

    path: Path
    folder: str  # relative to the run's root, "." for the root itself
    batches: list[list[Event]]
    meta: TraceMeta
    stats: FileStats
    size_bytes: int

    @property
    def events(self) -> int:
        return sum(map(len, self.batches))


@dataclass
class Workload:
    name: str
    root: Path
    traces: list[Trace]

    @property
    def events(self) -> int:
        return sum(t.events for t in self.traces)

    @property
    def trace_bytes(self) -> int:
        return sum(t.size_bytes for t in self.traces)


def load(root: Path) -> Workload:
    paths = sorted(p for p in root.rglob("*") if p.name.endswith((".json", ".json.gz")))
    if not paths:
        raise BenchError(f"{root}: no trace files")
    return Workload(root.name, root, [parse(root, p) for p in paths])


def parse(root: Path, path: Path) -> Trace:
    with open_trace(path) as fh:
        reader = TraceReader(fh, str(path))
        batches = list(reader.batches(BATCH_EVENTS))
    folder = path.parent.relative_to(root).as_posix() if path.parent != root else "."
    return Trace(path, folder, batches, reader.meta, reader.stats, path.stat().st_size)


def stream_id(*parts: object) -> str:
    return hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=16).hexdigest()


def records(trace: Trace, copy: int, root_name: str) -> list[Record]:
    """The trace's stream as copy `copy` of the run (its own stream id, path and window)."""
    folder = f"iteration_{copy}" if trace.folder == "." else f"copy{copy}/{trace.folder}"
    path = f"/bench/{root_name}/{folder}/{trace.path.name}"
    stream = stream_id(root_name, copy, trace.path)
    start = StreamStart(
        stream=stream,
        node="bench",
        path=path,
        folder=folder,
        root_name=root_name,
        name_rank=rank_from_name(trace.path),
    )
    reduction = Reduction()  # as the collector does (protocol 5): facts, not events
    for batch in trace.batches:
        reduction.add_all(batch)
    batches = list(reduction.facts(stream, 1))
    end = StreamEnd(
        stream=stream,
        seq=len(batches) + 1,
        meta=trace.meta,
        stats=trace.stats,
        size_bytes=trace.size_bytes,
    )
    return [start, *batches, end]


def window(work: Workload, copy: int) -> list[bytes]:
    """Copy `copy` of the run, encoded, file after file (as one collector sends them)."""
    encode = msgspec.msgpack.encode
    return [encode(r) for t in work.traces for r in records(t, copy, work.name)]


# ---------------------------------------------------------------- 1. apply throughput


@dataclass
class Timing:
    cpu_s: float = float("inf")
    wall_s: float = float("inf")

    def keep_best(self, cpu_s: float, wall_s: float) -> None:
        self.cpu_s, self.wall_s = min(self.cpu_s, cpu_s), min(self.wall_s, wall_s)


def clocks() -> tuple[float, float]:
    return time.process_time(), time.perf_counter()


def since(started: tuple[float, float]) -> tuple[float, float]:
    return time.process_time() - started[0], time.perf_counter() - started[1]


def decode_only(payloads: list[bytes]) -> tuple[float, float]:
    decode = msgspec.msgpack.Decoder(ToAggregator).decode
    started = clocks()
    for payload in payloads:
        decode(payload)
    return since(started)


def apply_in_memory(payloads: list[bytes], expect_events: int) -> tuple[float, float]:
    decode = msgspec.msgpack.Decoder(ToAggregator).decode
    aggregation, events = Aggregation(), 0
    started = clocks()
    for payload in payloads:
        record = decode(payload)
        if aggregation.verdict(record) is Verdict.APPLY:
            events += aggregation.apply(record).events
    elapsed = since(started)
    if events != expect_events:
        raise BenchError(f"in-memory apply counted {events} events, sent {expect_events}")
    return elapsed


def settings(tmp: Path) -> AggregatorSettings:
    return AggregatorSettings(listen="tcp://127.0.0.1:0", out=tmp / "out", state=tmp / "state")


def feed(aggregator: Aggregator, payloads: list[bytes]) -> None:
    """What the loop does with these messages: receive each, commit every `_DRAIN`."""
    receive, commit = aggregator.receive, aggregator.commit
    for count, payload in enumerate(payloads, 1):
        receive([IDENTITY, payload])
        if not count % _DRAIN:
            commit()
    commit()


def apply_durable(payloads: list[bytes], files: int, events: int, tmp: Path) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(dir=tmp) as folder:
        aggregator = Aggregator(settings(Path(folder)))
        try:
            started = clocks()
            feed(aggregator, payloads)
            elapsed = since(started)
            check_applied(aggregator, files, events)
        finally:
            aggregator.store.close()
    return elapsed


def check_applied(aggregator: Aggregator, files: int, events: int) -> None:
    stats, finished = aggregator.stats, aggregator.aggregation.finished
    bad = sum(stats.rejected.values()) + stats.duplicates + stats.out_of_order
    done = sum(1 for f in finished.values() if f.result is not None)
    if stats.events != events or done != files or bad or aggregator.aggregation.open:
        raise BenchError(
            f"aggregator applied {stats.events} events and finished {done} files "
            f"({bad} rejected/duplicate/out of order); sent {events} events in {files} files"
        )


def parse_offline(work: Workload) -> tuple[float, float]:
    started = clocks()
    for trace in work.traces:
        with open_trace(trace.path) as fh:
            for _ in TraceReader(fh, str(trace.path)).batches(BATCH_EVENTS):
                pass
    return since(started)


@dataclass
class Throughput:
    work: Workload
    copies: int
    payloads: list[bytes]
    timings: dict[str, Timing] = field(default_factory=dict)

    @property
    def wire_bytes(self) -> int:
        return sum(map(len, self.payloads))


METHODS: Final = ("decode only", "apply (memory)", "aggregator", "offline parse")


def bench_throughput(work: Workload, copies: int, repeat: int, tmp: Path) -> Throughput:
    payloads = [p for c in range(copies) for p in window(work, c)]
    result = Throughput(work, copies, payloads, {m: Timing() for m in METHODS})
    files, events = copies * len(work.traces), copies * work.events
    runs: dict[str, Callable[[], tuple[float, float]]] = {
        "decode only": lambda: decode_only(payloads),
        "apply (memory)": lambda: apply_in_memory(payloads, events),
        "aggregator": lambda: apply_durable(payloads, files, events, tmp),
        "offline parse": lambda: parse_offline(work),
    }
    for _ in range(repeat):  # round-robin, so a noisy moment hits every method alike
        for method, run in runs.items():
            result.timings[method].keep_best(*run())
    return result


def throughput_table(results: list[Throughput], repeat: int) -> str:
    head = (
        f"{'workload':<16} {'method':<15} {'CPU s':>7} {'wall s':>7} {'events/s':>10} "
        f"{'wire MB/s':>9} {'trace MB/s':>10} {'vs decode':>9}"
    )
    lines = [f"1. apply throughput, one core, in-process (best of {repeat})", head]
    lines.append("-" * len(head))
    for r in results:
        lines += [_throughput_row(r, method) for method in METHODS]
        lines.append(_throughput_note(r))
    return "\n".join(lines)


def _scaled(r: Throughput, method: str) -> tuple[float, float, float]:
    """(events, wire bytes, trace bytes) the method's timing covers."""
    if method == "offline parse":  # one pass over the files, no wire bytes
        return r.work.events, 0.0, r.work.trace_bytes
    return r.copies * r.work.events, r.wire_bytes, r.copies * r.work.trace_bytes


def _throughput_row(r: Throughput, method: str) -> str:
    t, base = r.timings[method], r.timings["decode only"]
    events, wire, trace = _scaled(r, method)
    base_events = _scaled(r, "decode only")[0]
    ratio = (events / t.cpu_s) / (base_events / base.cpu_s)
    wire_rate = f"{wire / MB / t.cpu_s:9.1f}" if wire else f"{'-':>9}"
    return (
        f"{r.work.name:<16} {method:<15} {t.cpu_s:7.3f} {t.wall_s:7.3f} "
        f"{events / t.cpu_s:10,.0f} {wire_rate} {trace / MB / t.cpu_s:10.1f} {ratio:8.3f}x"
    )


def _throughput_note(r: Throughput) -> str:
    agg, parse_t = r.timings["aggregator"], r.timings["offline parse"]
    per_copy = agg.cpu_s / r.copies
    return (
        f"  {r.copies} copies x {len(r.work.traces)} files = {len(r.payloads)} messages, "
        f"{r.copies * r.work.events:,} events, {r.wire_bytes / MB:.1f} MB on the wire "
        f"({r.copies * r.work.trace_bytes / MB:.1f} MB of trace files); aggregator CPU per file "
        f"{1000 * per_copy / len(r.work.traces):.2f} ms vs parse "
        f"{1000 * parse_t.cpu_s / len(r.work.traces):.2f} ms: one aggregator core keeps up "
        f"with ~{parse_t.cpu_s / per_copy:.0f} parsing cores"
    )


# ---------------------------------------------------------------- 2. window-to-metrics


@dataclass
class Latency:
    present: int
    receive_s: list[float] = field(default_factory=list)
    commit_s: list[float] = field(default_factory=list)
    publish_s: list[float] = field(default_factory=list)
    total_s: list[float] = field(default_factory=list)
    scrape_s: list[float] = field(default_factory=list)
    exposition_bytes: int = 0
    files: int = 0


def bench_latency(work: Workload, repeat: int, tmp: Path) -> list[Latency]:
    rows = {n: Latency(n) for n in PRESENT}
    windows = [window(work, c) for c in range(max(PRESENT) + 1)]
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(dir=tmp) as folder:
            aggregator = Aggregator(settings(Path(folder)))
            try:
                latency_run(aggregator, windows, rows)
            finally:
                aggregator.store.close()
    return list(rows.values())


def latency_run(
    aggregator: Aggregator, windows: list[list[bytes]], rows: dict[int, Latency]
) -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(aggregator.exporter)
    for copy, payloads in enumerate(windows):
        if copy not in rows:
            feed(aggregator, payloads)
            aggregator._tick()  # as the loop: the window completed, so it publishes
            continue
        feed(aggregator, payloads[:-1])
        aggregator.publish()  # the state the loop leaves: an earlier refresh has published
        measure(aggregator, payloads[-1], rows[copy])
        scrape(registry, rows[copy])
        rows[copy].files = len(aggregator.aggregation.finished)


def measure(aggregator: Aggregator, last: bytes, row: Latency) -> None:
    completed = len(aggregator.completed)
    t0 = time.perf_counter()
    aggregator.receive([IDENTITY, last])
    t1 = time.perf_counter()
    aggregator.commit()
    t2 = time.perf_counter()
    aggregator._tick()  # the loop's step: a window is complete, so it publishes at once
    t3 = time.perf_counter()
    if len(aggregator.completed) != completed + 1 or aggregator._dirty:
        raise BenchError(f"window {row.present + 1} did not complete and publish")
    row.receive_s.append(t1 - t0)
    row.commit_s.append(t2 - t1)
    row.publish_s.append(t3 - t2)
    row.total_s.append(t3 - t0)


def scrape(registry: CollectorRegistry, row: Latency) -> None:
    t0 = time.perf_counter()
    body = generate_latest(registry)
    row.scrape_s.append(time.perf_counter() - t0)
    row.exposition_bytes = len(body)


def latency_table(rows: list[Latency], work: Workload, repeat: int) -> str:
    head = (
        f"{'present':>7} {'files':>5} {'receive':>13} {'commit':>13} {'publish':>13} "
        f"{'total':>13} {'scrape':>13} {'/metrics KB':>11}"
    )
    lines = [
        f"2. window-to-metrics latency, {work.name} ({len(work.traces)} files a window), "
        f"wall ms, median/max of {repeat}",
        head,
        "-" * len(head),
    ]
    for r in rows:
        cells = [r.receive_s, r.commit_s, r.publish_s, r.total_s, r.scrape_s]
        lines.append(
            f"{r.present:>7} {r.files:>5} "
            + " ".join(f"{_med_max(c):>13}" for c in cells)
            + f" {r.exposition_bytes / 1000:>11.1f}"
        )
    return "\n".join(lines)


def _med_max(samples: list[float]) -> str:
    return f"{1000 * statistics.median(samples):.1f}/{1000 * max(samples):.1f}"


# ---------------------------------------------------------------- 3. end to end


@dataclass
class EndToEnd:
    work: Workload
    copies: int = 1
    startup_s: float = float("inf")
    live_s: float = float("inf")
    offline_s: float = float("inf")
    import_s: float = float("inf")

    @property
    def label(self) -> str:
        return self.work.name if self.copies == 1 else f"{self.work.name} x{self.copies}"

    @property
    def events(self) -> int:
        return self.copies * self.work.events


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_live(folder: Path, tmp: Path) -> tuple[float, float, str]:
    """Aggregator, then one collector once it listens: (the aggregator's start-up, collector
    start to the aggregator's exit) in wall seconds, and the aggregator's summary line."""
    port = free_port()
    endpoint = f"tcp://127.0.0.1:{port}"
    aggregate = [*COMMSCOPE, "aggregate", "--listen", endpoint, "--insecure", "--expect-nodes", "1"]
    aggregate += ["--out", str(tmp / "out"), "--state", str(tmp / "agg")]
    collect = [
        *COMMSCOPE,
        "collect",
        "--insecure",
        "--watch",
        str(folder),
        "--aggregator",
        endpoint,
    ]
    collect += ["--node", "n", "--state", str(tmp / "col"), "--once", "--quiet", "0.2"]
    launched = time.perf_counter()
    with started_process(aggregate, tmp / "aggregate.log") as agg:
        wait_listening(agg, port, tmp / "aggregate.log")
        started = time.perf_counter()
        with started_process(collect, tmp / "collect.log") as col:
            agg_rc = wait(agg, tmp / "aggregate.log")
            elapsed = time.perf_counter() - started
            col_rc = wait(col, tmp / "collect.log")
    if agg_rc or col_rc:
        raise BenchError(f"aggregate exited {agg_rc}, collect {col_rc}: {tail(tmp)}")
    return started - launched, elapsed, summary_line((tmp / "aggregate.log").read_text())


def wait_listening(popen: subprocess.Popen[bytes], port: int, log: Path) -> None:
    """Until 127.0.0.1:`port` is in LISTEN state (read from /proc: no connection is made)."""
    wanted = f"0100007F:{port:04X}"
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and popen.poll() is None:
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[1] == wanted and fields[3] == "0A":
                return
        time.sleep(0.005)
    raise BenchError(f"the aggregator never listened on port {port}: {log}")


class started_process:  # noqa: N801 (a context manager used like a function)
    """A child process with its output in a log; killed on exit if it is still running."""

    def __init__(self, cmd: list[str], log: Path) -> None:
        self.cmd, self.log = cmd, log

    def __enter__(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with self.log.open("wb") as out:
            self.popen = subprocess.Popen(self.cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        return self.popen

    def __exit__(self, *_: object) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)


def wait(popen: subprocess.Popen[bytes], log: Path) -> int:
    try:
        return popen.wait(WAIT_S)
    except subprocess.TimeoutExpired:
        raise BenchError(f"{log.stem} still running after {WAIT_S:g}s: {log}") from None


def tail(tmp: Path) -> str:
    return "\n".join(p.read_text(errors="replace")[-2000:] for p in sorted(tmp.glob("*.log")))


def summary_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("commscope: ")]
    if not lines:
        raise BenchError(f"no summary line in:\n{output[-2000:]}")
    return lines[0]


def run_offline(folder: Path, tmp: Path) -> tuple[float, str]:
    cmd = [*COMMSCOPE, "report", str(folder), "--out", str(tmp / "offline")]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=WAIT_S, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode:
        raise BenchError(f"report exited {proc.returncode}: {proc.stderr[-2000:]}")
    return elapsed, summary_line(proc.stdout)


def run_import() -> float:
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", "import commscope.service.cli"], check=True, timeout=WAIT_S
    )
    return time.perf_counter() - started


def bench_end_to_end(work: Workload, repeat: int, tmp: Path, copies: int = 1) -> EndToEnd:
    result = EndToEnd(work, copies)
    with tempfile.TemporaryDirectory(dir=tmp) as folder:
        copy = Path(folder) / work.name
        for k in range(copies):
            shutil.copytree(work.root, copy / f"iteration_{k}" if copies > 1 else copy)
        for attempt in range(repeat):
            live_dir = Path(folder) / f"live{attempt}"
            live_dir.mkdir()
            startup_s, live_s, live_line = run_live(copy, live_dir)
            offline_s, offline_line = run_offline(copy, Path(folder) / f"offline{attempt}")
            if live_line != offline_line:
                raise BenchError(f"live: {live_line!r}\noffline: {offline_line!r}")
            result.startup_s = min(result.startup_s, startup_s)
            result.live_s = min(result.live_s, live_s)
            result.offline_s = min(result.offline_s, offline_s)
            result.import_s = min(result.import_s, run_import())
    return result


def end_to_end_table(results: list[EndToEnd], repeat: int) -> str:
    head = (
        f"{'workload':<20} {'files':>5} {'events':>7} {'agg up s':>8} {'live s':>7} "
        f"{'events/s':>9} {'report s':>8} {'events/s':>9} {'live/report':>11} {'import s':>8}"
    )
    lines = [f"3. end to end over loopback, wall (best of {repeat})", head, "-" * len(head)]
    for r in results:
        events = r.events
        lines.append(
            f"{r.label:<20} {r.copies * len(r.work.traces):>5} {events:>7} "
            f"{r.startup_s:>8.2f} {r.live_s:>7.2f} {events / r.live_s:>9,.0f} "
            f"{r.offline_s:>8.2f} {events / r.offline_s:>9,.0f} "
            f"{r.live_s / r.offline_s:>10.2f}x {r.import_s:>8.2f}"
        )
    lines.append(
        "  agg up: aggregate launched to listening; live: collect --once launched to the "
        "aggregator's exit (report written);\n  report: commscope report DIR, one process; "
        "import: python -c 'import commscope.service.cli'"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------- the run


def readme_lines(tput: Throughput, latency: list[Latency], e2e: EndToEnd) -> str:
    agg, decode = tput.timings["aggregator"], tput.timings["decode only"]
    events = tput.copies * tput.work.events
    ratio = (events / agg.cpu_s) / (events / decode.cpu_s)
    files = len(tput.work.traces)
    out = [
        f"- aggregator, one core ({tput.work.name}, in-process, fsynced): "
        f"{events / agg.cpu_s:,.0f} events/s of CPU, {tput.wire_bytes / MB / agg.cpu_s:.1f} "
        f"wire MB/s ({ratio:.3f}x a bare msgpack decode of the same messages)"
    ]
    out += [
        f"- window-to-metrics latency with {r.present} finished window(s) of {files} files: "
        f"median {1000 * statistics.median(r.total_s):.0f} ms, max {1000 * max(r.total_s):.0f} ms"
        for r in latency
    ]
    out.append(
        f"- end to end over loopback, {e2e.label}: {e2e.events / e2e.live_s:,.0f} events/s "
        f"({e2e.live_s:.2f} s; commscope report {e2e.offline_s:.2f} s)"
    )
    return "\n".join(out)


def machine(tmp: Path) -> str:
    import zmq

    return (
        f"{cpu_and_python()}, "
        f"msgspec {msgspec.__version__}, pyzmq {zmq.__version__}, temp dir {tmp} "
        f"({filesystem(tmp)})"
    )


def filesystem(path: Path) -> str:
    """The type of the filesystem holding `path` (fsync costs depend on it)."""
    best, kind = "", "?"
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        mount = fields[1]
        inside = str(path.resolve()).startswith(mount.rstrip("/") + "/") or mount == "/"
        if inside and len(mount) > len(best):
            best, kind = mount, fields[2]
    return kind


def bench(args: argparse.Namespace) -> int:
    tmp = Path(args.tmp or tempfile.gettempdir())
    print(machine(tmp), flush=True)
    started = time.perf_counter()
    try:
        dlrm, gloo = load(args.dlrm), load(args.gloo)
        tput = [bench_throughput(w, args.copies, args.repeat, tmp) for w in (dlrm, gloo)]
        print(throughput_table(tput, args.repeat), flush=True)
        latency = bench_latency(dlrm, args.repeat, tmp)
        print(latency_table(latency, dlrm, args.repeat), flush=True)
        e2e = [bench_end_to_end(w, args.repeat, tmp) for w in (dlrm, gloo)]
        e2e.append(bench_end_to_end(dlrm, args.repeat, tmp, args.e2e_copies))
        print(end_to_end_table(e2e, args.repeat), flush=True)
    except BenchError as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    print()
    print(readme_lines(tput[0], latency, e2e[-1]))
    print(f"(total {time.perf_counter() - started:.0f} s)")
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs of each measure (best-of)")
    parser.add_argument(
        "--copies", type=int, default=50, help="copies of each run replayed for throughput"
    )
    parser.add_argument(
        "--e2e-copies", type=int, default=10, help="windows in the larger end-to-end run"
    )
    parser.add_argument("--tmp", help="where state folders go (default: the system temp dir)")
    parser.add_argument("--dlrm", type=Path, default=DLRM, help=argparse.SUPPRESS)
    parser.add_argument("--gloo", type=Path, default=GLOO, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    return bench(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
