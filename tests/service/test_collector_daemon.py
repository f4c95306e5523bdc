"""The collector daemon as a process: what it says at start, its own /metrics (collector
families only, `promtool check metrics` clean, `commscope_collector_connected` following the
aggregator), one clear line for a bad endpoint, and a SIGTERM during start-up that still ends
with end-of-run. Every wait is bounded and waits on an event (a log line, a scrape)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import msgspec
import pytest
import zmq
from commscope.exporters.metricnames import COLLECTOR_FAMILIES, FAMILIES
from commscope.model.schema import PROTOCOL_VERSION, Reject
from tools import require_tool

from service.harness import (
    Aggregate,
    Proc,
    Processes,
    collector_args,
    free_port,
    sample_value,
    wait_for,
)

pytestmark = pytest.mark.timeout(120)
ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "gloo_ddp_2rank"
ENTRY = [sys.executable, "-m", "commscope.service.main"]


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        return response.read().decode()


def exposed(text: str) -> set[str]:
    """Family names as served (a counter's `_total` taken off, as prometheus-client varies)."""
    types = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    return {name.removesuffix("_total") for name in types}


def connected(port: int, value: float) -> str | None:
    text = scrape(port)
    return text if sample_value(text, "commscope_collector_connected", node="n1") == value else None


def test_the_collectors_metrics_are_its_own_and_follow_the_link(
    procs: Processes, tmp_path: Path
) -> None:
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port())
    port = free_port()
    args = collector_args(
        tmp_path / "watch",
        aggregate.endpoint,
        "n1",
        tmp_path / "st",
        "--metrics-port",
        str(port),
        "--metrics-addr",
        "127.0.0.1",
        "--silence",
        "1",
    )
    collector = procs.start("collector", *args)
    text = wait_for("/metrics with the link down", lambda: connected(port, 0.0))
    checked = subprocess.run(
        [require_tool("promtool"), "check", "metrics"],
        input=text.encode(),
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    ours = {f.name.removesuffix("_total") for f in COLLECTOR_FAMILIES}
    assert exposed(text) <= ours
    assert not exposed(text) & {f.name.removesuffix("_total") for f in FAMILIES} - ours
    wait_for("the warning", lambda: _said(collector, "aggregator not answering"))
    aggregate.start()
    wait_for("/metrics with the link up", lambda: connected(port, 1.0))
    wait_for("the all-clear", lambda: _said(collector, "aggregator answers"))
    (start,) = [line for line in collector.lines() if line["msg"] == "collector starting"]
    assert start["aggregator"] == aggregate.endpoint and start["version"]
    assert start["metrics"] == f"127.0.0.1:{port}"
    assert [line["msg"] for line in collector.lines()].count("aggregator not answering") == 1


def _said(proc: Proc, message: str) -> bool:
    return any(line["msg"] == message for line in proc.lines())


@pytest.mark.parametrize(
    ("endpoint", "says"),
    [
        ("127.0.0.1:5555", "not an endpoint (expected tcp://HOST:PORT or ipc://PATH)"),
        ("tcp://127.0.0.1:70000", "port '70000' is not a number in 1..65535"),
    ],
)
def test_a_malformed_aggregator_endpoint_is_one_line_and_exit_1(
    tmp_path: Path, endpoint: str, says: str
) -> None:
    args = collector_args(tmp_path / "w", endpoint, "n1", tmp_path / "st")
    done = subprocess.run([*ENTRY, *args], capture_output=True, timeout=60, check=False)
    assert done.returncode == 1
    lines = done.stderr.decode().strip().splitlines()
    assert lines == [f"commscope: error: --aggregator {endpoint!r}: {says}"]


@pytest.mark.parametrize("busy", [True, False], ids=["in use", "out of range"])
def test_an_unusable_metrics_port_is_one_line_and_exit_1(tmp_path: Path, busy: bool) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1] if busy else 70000
        args = collector_args(
            tmp_path / "w", "tcp://127.0.0.1:9", "n1", tmp_path / "st", "--metrics-port", str(port)
        )
        args = (*args, "--metrics-addr", "127.0.0.1")
        done = subprocess.run([*ENTRY, *args], capture_output=True, timeout=60, check=False)
    assert done.returncode == 1
    (line,) = done.stderr.decode().strip().splitlines()
    where = f"127.0.0.1:{port}"
    assert line.startswith(f"commscope: error: --metrics-port: cannot serve /metrics on {where}")


def test_a_sigterm_during_start_up_still_ends_the_run(procs: Processes, tmp_path: Path) -> None:
    """SIGTERM as soon as the process catches it (its /proc status says so), while it has not
    logged anything yet (the CLI's ~0.4 s of imports still to come): the collector starts,
    drains, sends end-of-run and exits 0 once the aggregator acknowledges it — not 143.
    (Before Python runs the entry module's first line, ~50 ms, SIGTERM still kills.)"""
    aggregate = Aggregate(procs, tmp_path, free_port(), free_port())
    aggregate.start()
    args = collector_args(SAMPLE, aggregate.endpoint, "n1", tmp_path / "st")
    log = tmp_path / "early.log"
    with log.open("wb") as handle:
        popen = subprocess.Popen(
            [*ENTRY, *args], stdout=handle, stderr=subprocess.STDOUT, env={**os.environ}
        )
    early = Proc("early", popen, log)
    procs.started.append(early)
    wait_for("the SIGTERM handler", lambda: _catches(popen.pid, signal.SIGTERM), 30)
    assert log.read_bytes() == b""
    popen.send_signal(signal.SIGTERM)
    assert early.wait(60) == 0, early.tail()
    assert _said(early, "end of run acknowledged"), early.tail()


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler for `signum` (the SigCgt mask of /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    (mask,) = [line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")]
    return bool(int(mask, 16) >> (signum - 1) & 1)


def test_an_aggregator_of_another_protocol_is_one_line_naming_both_and_exit_1(
    tmp_path: Path,
) -> None:
    """A (stand-in) protocol-6 aggregator refuses the Hello as a real one does: the collector
    says so in one line with both versions, and exits 1."""
    context = zmq.Context()
    router = context.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    why = f"collector protocol {PROTOCOL_VERSION}, aggregator protocol 6: run the same commscope"
    args = collector_args(tmp_path / "w", f"tcp://127.0.0.1:{port}", "n1", tmp_path / "st")
    collector = subprocess.Popen([*ENTRY, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        assert router.poll(60_000), "no hello within 60 s"
        identity, _ = router.recv_multipart()
        router.send_multipart([identity, msgspec.msgpack.encode(Reject(reason=why))])
        _, err = collector.communicate(timeout=60)
    finally:
        collector.kill()
        collector.wait(10)
        router.close(0)
        context.term()
    assert collector.returncode == 1
    assert err.decode().strip().splitlines() == [
        f"commscope: error: the aggregator refused this collector (protocol {PROTOCOL_VERSION}): "
        f"{why}"
    ]


def test_once_against_a_dead_aggregator_exits_1_after_drain(tmp_path: Path) -> None:
    """Nobody listens on the port: `collect --once --drain 2` sends what is there, hears
    nothing, and exits 1 after 2 s of silence with one line saying so (it waited for ever)."""
    shutil.copytree(SAMPLE / "iteration_4", tmp_path / "w" / "iteration_4")
    dead = f"tcp://127.0.0.1:{free_port()}"
    args = collector_args(tmp_path / "w", dead, "n1", tmp_path / "st", "--once", "--drain", "2")
    done = subprocess.run(
        [*ENTRY, *args, "--jobs", "1"], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 1, done.stdout.decode()[-2000:]
    last = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert last["msg"].startswith("--once: the aggregator has not answered for --drain seconds")
    assert (last["aggregator"], last["drain_s"]) == (dead, 2.0)
