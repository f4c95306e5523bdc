"""The live service as users run it: an aggregator and collectors as real processes on
loopback, streaming real 8-rank traces while they are written. Whatever happens on the way
(files appearing, SIGKILL of either side, the aggregator away), the final report is the one
`commscope report` writes for the same files: nothing lost, nothing counted twice."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import msgspec
import pytest
from commscope.model.schema import JournalEntry
from commscope.service.cli import EXIT_LOST
from tools import needs_shared

from service.harness import (
    DLRM,
    Aggregate,
    Processes,
    collector_args,
    free_port,
    normalised,
    offline,
    sample_value,
    wait_for,
    write_slowly,
)

pytestmark = [pytest.mark.timeout(240), needs_shared("kineto", "dlrm_8rank_v100")]

RANKS = sorted(DLRM.glob("worker*.json"))
WINDOW = "dlrm"


@pytest.fixture
def aggregate(procs: Processes, tmp_path: Path) -> Aggregate:
    return Aggregate(procs, tmp_path, free_port(), free_port(), ("--expect-nodes", "2"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """The offline report of the 8 files in one window folder."""
    root = tmp_path_factory.mktemp("all")
    shutil.copytree(DLRM, root / WINDOW, ignore=shutil.ignore_patterns("LICENSE"))
    return normalised(offline(root))


def node_dirs(tmp_path: Path) -> dict[str, Path]:
    return {"node-a": tmp_path / "node-a", "node-b": tmp_path / "node-b"}


def rank_files(node: str) -> list[Path]:
    return RANKS[:4] if node == "node-a" else RANKS[4:]


def start_collectors(
    procs: Processes, aggregate: Aggregate, tmp_path: Path, *extra: str
) -> dict[str, object]:
    started = {}
    for node, watch in node_dirs(tmp_path).items():
        watch.mkdir(exist_ok=True)
        state = tmp_path / f"state-{node}"
        args = collector_args(watch, aggregate.endpoint, node, state, *extra)
        started[node] = procs.start(node, *args)
    return started


def copy_all(tmp_path: Path, slow: Path | None = None) -> None:
    """Every rank file into its node's window folder, one after the other."""
    for node, watch in node_dirs(tmp_path).items():
        for source in rank_files(node):
            target = watch / WINDOW / source.name
            if source == slow:
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target.with_name(target.name + ".tmp"))
            os.replace(target.with_name(target.name + ".tmp"), target)  # as Kineto does


def end_run(collectors: dict[str, object]) -> None:
    for proc in collectors.values():
        proc.terminate()  # type: ignore[attr-defined]
    for proc in collectors.values():
        assert proc.wait(60) == 0, proc.tail()  # type: ignore[attr-defined]


def report_after_end(aggregate: Aggregate, proc: object) -> dict[str, object]:
    assert proc.wait(60) == 0, proc.tail()  # type: ignore[attr-defined]
    return normalised(aggregate.report())


def open_logs(aggregate: Aggregate) -> set[str]:
    """The streams with records in the aggregator's journal and no result yet, read beside
    the running aggregator (whole frames only, nothing cut)."""
    records: set[str] = set()
    for path in sorted((aggregate.folder / "agg-state" / "journal").glob("*.log")):
        data, at = path.read_bytes(), 0
        while at + 4 <= len(data) and at + 4 + int.from_bytes(data[at : at + 4], "little") <= len(
            data
        ):
            size = int.from_bytes(data[at : at + 4], "little")
            entry = msgspec.msgpack.decode(data[at + 4 : at + 4 + size], type=JournalEntry)
            (records.add if entry.kind == "record" else records.discard)(entry.stream)
            at += 4 + size
    return records


def test_two_collectors_stream_files_as_they_appear(
    procs: Processes, aggregate: Aggregate, tmp_path: Path, reference: dict[str, object]
) -> None:
    server = aggregate.start()
    collectors = start_collectors(procs, aggregate, tmp_path, "--batch-events", "512")
    slow = RANKS[5]
    copy_all(tmp_path, slow=slow)
    for _ in write_slowly(slow, tmp_path / "node-b" / WINDOW / slow.name, 12, 0.1):
        pass
    wait_for("the window to complete", lambda: _windows(aggregate) == 1.0, 60)
    end_run(collectors)
    assert report_after_end(aggregate, server) == reference


def test_aggregator_killed_mid_stream_loses_nothing(
    procs: Processes, aggregate: Aggregate, tmp_path: Path, reference: dict[str, object]
) -> None:
    server = aggregate.start()
    collectors = start_collectors(procs, aggregate, tmp_path, "--batch-events", "256")
    slow = RANKS[1]
    copy_all(tmp_path, slow=slow)
    killed = False
    for written in write_slowly(slow, tmp_path / "node-a" / WINDOW / slow.name, 20, 0.15):
        if not killed and written > slow.stat().st_size // 3:
            wait_for("a stream half-received", lambda: open_logs(aggregate), 30)
            server.popen.send_signal(signal.SIGKILL)
            server.popen.wait(10)
            killed = True
            time.sleep(0.5)
            server = aggregate.start()
    assert killed
    end_run(collectors)
    assert report_after_end(aggregate, server) == reference


def test_collector_killed_mid_file_resumes_without_double_counting(
    procs: Processes, aggregate: Aggregate, tmp_path: Path, reference: dict[str, object]
) -> None:
    server = aggregate.start()
    collectors = start_collectors(procs, aggregate, tmp_path, "--batch-events", "256")
    slow = RANKS[6]
    copy_all(tmp_path, slow=slow)
    state = tmp_path / "state-node-b" / "checkpoint.msgpack"
    killed = False
    for written in write_slowly(slow, tmp_path / "node-b" / WINDOW / slow.name, 20, 0.15):
        if not killed and written > slow.stat().st_size // 2:
            wait_for("a checkpoint", state.exists, 30)
            collectors["node-b"].popen.send_signal(signal.SIGKILL)  # type: ignore[attr-defined]
            collectors["node-b"].popen.wait(10)  # type: ignore[attr-defined]
            killed = True
            args = collector_args(
                tmp_path / "node-b",
                aggregate.endpoint,
                "node-b",
                tmp_path / "state-node-b",
                "--batch-events",
                "256",
            )
            collectors["node-b"] = procs.start("node-b", *args)
            # SIGTERM is the end of its run only once Python runs: before that it kills it
            wait_for(
                "the restarted collector", lambda: _said(collectors["node-b"], "collector starting")
            )
    assert killed
    end_run(collectors)
    report = report_after_end(aggregate, server)
    assert report == reference
    assert _aggregator_counter(aggregate, server) is None  # it has exited: nothing to scrape


def test_collector_memory_stays_bounded_while_the_aggregator_is_away(
    procs: Processes, aggregate: Aggregate, tmp_path: Path, reference: dict[str, object]
) -> None:
    window, ports = 4, {"node-a": free_port(), "node-b": free_port()}
    collectors = {}
    for node, watch in node_dirs(tmp_path).items():
        watch.mkdir()
        args = collector_args(
            watch,
            aggregate.endpoint,
            node,
            tmp_path / f"state-{node}",
            "--batch-events",
            "256",
            "--max-unacked",
            str(window),
            "--metrics-port",
            str(ports[node]),
            "--metrics-addr",
            "127.0.0.1",
        )
        collectors[node] = procs.start(node, *args)
    copy_all(tmp_path)
    for node, port in ports.items():
        text = wait_for(
            f"{node} to fill its window",
            lambda port=port, node=node: _full(port, node, window),
            30,
        )
        assert sample_value(text, "commscope_collector_unacked_batches", node=node) == window
    for node, port in ports.items():  # resends go on (two whole windows); nothing more is taken
        text = wait_for(
            f"{node} to resend its window twice",
            lambda port=port, node=node: _resent(port, node, 2 * window),
            30,
        )
        assert sample_value(text, "commscope_collector_unacked_batches", node=node) == window
    server = aggregate.start()
    wait_for("the window to complete", lambda: _windows(aggregate) == 1.0, 60)
    end_run(collectors)
    assert report_after_end(aggregate, server) == reference


def test_the_aggregator_shuts_down_on_sigterm_with_the_report(
    procs: Processes, aggregate: Aggregate, tmp_path: Path, reference: dict[str, object]
) -> None:
    server = aggregate.start()
    collectors = start_collectors(procs, aggregate, tmp_path)
    copy_all(tmp_path)
    wait_for("the window to complete", lambda: _windows(aggregate) == 1.0, 60)
    server.terminate()
    # The collectors are still running (no end-of-run): more files may come, so the exit
    # says files may be lost (6), and the report over what came is written all the same,
    # naming them; the rest is what `commscope report` says of the same files.
    assert server.wait(60) == EXIT_LOST, server.tail()
    found = normalised(aggregate.report())
    assert found["inputs"]["unended_collectors"] == sorted(collectors) == ["node-a", "node-b"]
    found["inputs"]["unended_collectors"] = []  # as offline
    assert found == reference
    for proc in collectors.values():
        proc.terminate()  # type: ignore[attr-defined]


def _windows(aggregate: Aggregate) -> float | None:
    text = aggregate.metrics_text()
    return sample_value(text or "", "commscope_windows_completed_total")


def _scrape(port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
        return response.read().decode()


def _full(port: int, node: str, window: int) -> str | None:
    text = _scrape(port)
    value = sample_value(text, "commscope_collector_unacked_batches", node=node)
    return text if value == window else None


def _resent(port: int, node: str, count: int) -> str | None:
    text = _scrape(port)
    value = sample_value(text, "commscope_collector_batches_resent_total", node=node)
    return text if value is not None and value >= count else None


def _aggregator_counter(aggregate: Aggregate, server: object) -> float | None:
    try:
        text = aggregate.metrics_text()
    except OSError:
        return None
    return sample_value(text or "", "commscope_aggregator_events_total")


def _said(proc: object, message: str) -> bool:
    return any(line.get("msg") == message for line in proc.lines())  # type: ignore[attr-defined]
