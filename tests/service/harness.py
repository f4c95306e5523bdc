"""Real aggregator and collector processes on loopback, for the service tests.

Every wait is bounded (`wait_for` raises with what it last saw), and every process started
through a `Processes` is killed at teardown, whatever the test did.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from commscope.exporters import jsonreport
from commscope.pipeline.report import Options
from commscope.service.offline import analyse
from tools import shared_traces

T = TypeVar("T")
COMMSCOPE = [
    sys.executable,
    "-m",
    "commscope.service.main",
]  # the entry point: its stop signals are caught first
SHARED = shared_traces("kineto")
DLRM = SHARED / "dlrm_8rank_v100"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float = 30.0) -> T:
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (OSError, ValueError) as exc:
            last = exc  # type: ignore[assignment]
        else:
            if last is not None and last is not False:
                return last
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def wait(self, timeout_s: float = 60.0) -> int:
        try:
            return self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} still running after {timeout_s}s:\n{self.tail()}"
            ) from None

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait(10)

    def terminate(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def lines(self) -> list[dict[str, Any]]:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


class Processes:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.started: list[Proc] = []

    def start(self, name: str, *args: str) -> Proc:
        return self.spawn(name, *COMMSCOPE, *args)

    def spawn(self, name: str, *argv: str) -> Proc:
        """Any program (a commscope daemon, Prometheus, VictoriaMetrics), its output logged."""
        log = self.folder / f"{name}.{len(self.started)}.log"
        handle = log.open("wb")
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        popen = subprocess.Popen(list(argv), stdout=handle, stderr=subprocess.STDOUT, env=env)
        handle.close()
        proc = Proc(name, popen, log)
        self.started.append(proc)
        return proc

    def cleanup(self) -> None:
        for proc in self.started:
            proc.kill()


@dataclass
class Aggregate:
    """How to start (and restart) one aggregator."""

    procs: Processes
    folder: Path
    listen_port: int
    metrics_port: int
    extra: tuple[str, ...] = ()
    security: tuple[str, ...] = ("--insecure",)  # or ("--keys", DIR, "--allow", DIR)

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.listen_port}"

    def start(self) -> Proc:
        proc = self.procs.start(
            "aggregate",
            "aggregate",
            "--listen",
            self.endpoint,
            "--metrics-port",
            str(self.metrics_port),
            "--metrics-addr",
            "127.0.0.1",
            "--out",
            str(self.folder / "out"),
            "--state",
            str(self.folder / "agg-state"),
            "--refresh",
            "0.2",
            *self.security,
            "--linger",
            "0",
            *self.extra,
        )
        wait_for("the aggregator's /metrics", lambda: self.metrics_text(proc))
        return proc

    def metrics_text(self, proc: Proc | None = None) -> str | None:
        if proc is not None and proc.popen.poll() is not None:
            raise AssertionError(f"aggregator exited:\n{proc.tail()}")
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.read().decode()

    def report(self) -> dict[str, Any]:
        return only_report(self.folder / "out")


def collector_args(
    watch: Path,
    endpoint: str,
    node: str,
    state: Path,
    *extra: str,
    security: tuple[str, ...] = ("--insecure",),  # or ("--keys", DIR, "--server-key", FILE)
) -> tuple[str, ...]:
    return (
        "collect",
        "--watch",
        str(watch),
        "--aggregator",
        endpoint,
        "--node",
        node,
        "--state",
        str(state),
        "--file-idle",
        "0.5",
        "--settle",
        "20",
        "--poll-interval",
        "0.2",
        "--resend-after",
        "0.3",
        "--heartbeat",
        "0.3",
        *security,
        *extra,
    )


class Live:
    """The set-up of the live tests: one aggregator with its flags, started at once, and one
    collector that `collect` starts on a folder; `end` waits for both to exit 0 and gives
    the aggregator's final report beside `commscope report`'s of the same files."""

    def __init__(self, procs: Processes, folder: Path, *flags: str) -> None:
        self.procs, self.folder = procs, folder
        self.aggregate = Aggregate(procs, folder, free_port(), free_port(), flags)
        self.server = self.aggregate.start()
        self.watch = folder / "watch"

    def collect(self, watch: Path, *flags: str, node: str = "n1") -> Proc:
        """The collector on `watch` (`--once` among `flags`: it exits when it has read it)."""
        self.watch = watch
        args = collector_args(watch, self.aggregate.endpoint, node, self.folder / "st", *flags)
        self.collector = self.procs.start("collector", *args)
        return self.collector

    def end(
        self,
        root: Path | None = None,
        options: Options | None = None,
        *,
        stop: bool = False,
        collector_s: float = 60.0,
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(the live report, `commscope report`'s of `root` (default: the watched folder)),
        normalised, once both daemons exited 0 (`stop`: the collector stopped first)."""
        if stop:
            self.collector.terminate()
        assert self.collector.wait(collector_s) == 0, self.collector.tail()
        assert self.server.wait(60) == 0, self.server.tail()
        reference = offline(root or self.watch, options)
        return normalised(self.aggregate.report()), normalised(reference)


def only_report(out: Path) -> dict[str, Any]:
    found = sorted(out.glob("*.json"))
    assert len(found) == 1, f"expected one JSON report in {out}, found {found}"
    return json.loads(found[0].read_text())  # type: ignore[no-any-return]


def offline(root: Path, options: Options | None = None) -> dict[str, Any]:
    """What `commscope report` says of the same files (the reference)."""
    return jsonreport.to_document(analyse(root, options or Options()))


# Who wrote a report, when and with what command line: never the same for a live report and
# its offline reference, so left out of their comparisons (every other key must be equal).
RUN_SPECIFIC: Final = ("provenance",)


def normalised(document: dict[str, Any]) -> dict[str, Any]:
    """A report as JSON text would carry it (tuples and dict keys as in the file), without
    the keys specific to the process that wrote it (`RUN_SPECIFIC`)."""
    found: dict[str, Any] = json.loads(json.dumps(document))
    for key in RUN_SPECIFIC:
        found.pop(key, None)
    return found


def sample_value(text: str, name: str, **labels: str) -> float | None:
    """One sample's value from Prometheus exposition text (None when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def write_slowly(source: Path, target: Path, pieces: int, pause_s: float) -> Iterator[int]:
    """Write `source` to `target` in `pieces` appends; yields after each (bytes so far)."""
    data = source.read_bytes()
    step = -(-len(data) // pieces)
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("wb") as handle:
        for start in range(0, len(data), step):
            handle.write(data[start : start + step])
            handle.flush()
            yield start + step
            time.sleep(pause_s)


def copy_tree(source: Path, target: Path) -> None:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("LICENSE"))


def start_prometheus(procs: Processes, binary: str, folder: Path, config: str) -> int:
    """A real Prometheus server with this configuration (YAML text), on a free loopback
    port; the port, once it says it is ready."""
    port = free_port()
    (folder / "prometheus.yml").write_text(config)
    proc = procs.spawn(
        "prometheus",
        binary,
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    )
    wait_for("Prometheus to be ready", lambda: _ready(proc, f"http://127.0.0.1:{port}/-/ready"))
    return port


def scrape_config(targets: list[int], interval: str = "1s") -> str:
    """Prometheus scrape configuration of aggregators on loopback, as deploy/prometheus has it
    (honor_labels: the aggregator's own `job` label wins)."""
    listed = ", ".join(f"'127.0.0.1:{port}'" for port in targets)
    return (
        f"global: {{scrape_interval: {interval}, evaluation_interval: {interval}}}\n"
        "scrape_configs:\n"
        "  - job_name: commscope\n"
        "    honor_labels: true\n"
        f"    static_configs: [{{targets: [{listed}]}}]\n"
    )


def _ready(proc: Proc, url: str) -> bool:
    if proc.popen.poll() is not None:
        raise AssertionError(f"{proc.name} exited:\n{proc.tail()}")
    with urllib.request.urlopen(url, timeout=2) as response:
        return bool(response.status == 200)


def promql(port: int, query: str) -> list[dict[str, Any]]:
    """The result of an instant PromQL query through the Prometheus HTTP API on `port`
    (Prometheus and VictoriaMetrics both serve /api/v1/query)."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as response:
        answer = json.loads(response.read())
    assert answer["status"] == "success", answer
    return answer["data"]["result"]  # type: ignore[no-any-return]


def promql_value(port: int, query: str) -> float | None:
    """The value of a query's first series (None when it has none yet)."""
    results = promql(port, query)
    return float(results[0]["value"][1]) if results else None
