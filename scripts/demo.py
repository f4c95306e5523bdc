"""The live service on one machine: an aggregator and two collectors ("nodes") on loopback,
while a replay of the bundled 2-rank run writes its traces — rank 0 on node-a, rank 1 on
node-b, each gzip file written in place in pieces, window after window, as a job would.
Prints what Prometheus would scrape during the run, then the final report."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "gloo_ddp_2rank"
COMMSCOPE = [sys.executable, "-m", "commscope.service.cli"]
SHOWN = (
    "commscope_comm_compute_overlap_ratio",
    "commscope_windows_completed_total",
    "commscope_collective_ops_total",
    "commscope_iteration_seconds",
    "commscope_collector_up",
    "commscope_tokens_per_second",
)


def port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def scrape(metrics: int, title: str) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as response:
        lines = response.read().decode().splitlines()
    print(f"\n--- /metrics {title}")
    print("\n".join(line for line in lines if line.startswith(SHOWN)))


def replay(work: Path, window: str) -> None:
    for rank, node in ((0, "node-a"), (1, "node-b")):
        data = (SAMPLE / window / f"rank{rank}_trace.json.gz").read_bytes()
        target = work / node / "profile_trace" / window / f"rank{rank}_trace.json.gz"
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("wb") as handle:
            for start in range(0, len(data), 4096):
                handle.write(data[start : start + 4096])
                handle.flush()
                time.sleep(0.05)


def wait_http(metrics: int) -> None:
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("the aggregator did not start")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="commscope-demo-"))
    listen, metrics = port(), port()
    out = ROOT / "trace_analysis" / "demo"
    aggregator = subprocess.Popen(
        [
            *COMMSCOPE,
            "aggregate",
            "--listen",
            f"tcp://127.0.0.1:{listen}",
            "--metrics-port",
            str(metrics),
            "--metrics-addr",
            "127.0.0.1",
            "--out",
            str(out),
            "--state",
            str(work / "aggregator"),
            "--config",
            str(ROOT / "samples" / "mlp_ddp.toml"),
            "--expect-nodes",
            "2",
            "--refresh",
            "0.5",
            "--insecure",  # loopback only: the demo runs without keys
        ],
        stdout=subprocess.DEVNULL,
    )
    wait_http(metrics)
    collectors = [
        subprocess.Popen(
            [
                *COMMSCOPE,
                "collect",
                "--watch",
                str(work / node / "profile_trace"),
                "--aggregator",
                f"tcp://127.0.0.1:{listen}",
                "--node",
                node,
                "--state",
                str(work / node / "state"),
                "--file-idle",
                "0.5",
                "--heartbeat",
                "0.5",
                "--insecure",
            ],
            stdout=subprocess.DEVNULL,
        )
        for node in ("node-a", "node-b")
    ]
    print(
        f"aggregator on tcp://127.0.0.1:{listen}, /metrics on :{metrics}; collectors node-a, node-b"
    )
    try:
        for window in ("iteration_4", "iteration_8"):
            print(f"training writes {window}/rank0 (node-a) and rank1 (node-b) ...")
            replay(work, window)
            time.sleep(1.5)
            scrape(metrics, f"after {window}")
        print("\nthe job ends: SIGTERM to the collectors (as a pod's end or a Slurm epilog)")
        for collector in collectors:
            collector.send_signal(signal.SIGTERM)
        for process in (*collectors, aggregator):
            process.wait(60)
        report = max(out.glob("*.txt"), key=lambda p: p.stat().st_mtime)
        print(f"\n--- final report: {report.relative_to(ROOT)}\n")
        print(report.read_text())
        return 0
    finally:
        for process in (*collectors, aggregator):
            process.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
