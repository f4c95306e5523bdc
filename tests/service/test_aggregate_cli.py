"""`commscope aggregate` speaks up: one clear line and exit 1 for an endpoint or port it
cannot use; its endpoints and version logged at start; the run summary a JSON log record
like every other line; exit 6 when files were lost (the report still written); /metrics
kept up `--linger` seconds after the run. In process (main()) unless a process is needed."""

from __future__ import annotations

import gc
import json
import logging
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq
from commscope.service import heap
from commscope.service.cli import EXIT_LOST, LINGER_S, _parser, main
from commscope.service.store import Store

from service.harness import Aggregate, Processes, collector_args, free_port, wait_for

pytestmark = pytest.mark.timeout(120)
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    """main() sets the commscope logger and the signal handlers: put them back."""
    logger = logging.getLogger("commscope")
    handlers, level, propagate = logger.handlers[:], logger.level, logger.propagate
    signals = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate
    for signum, handler in signals.items():
        signal.signal(signum, handler)


def aggregate(out: Path, listen: str, *extra: str) -> int:
    return main(
        ["aggregate", "--listen", listen, "--out", str(out), "--linger", "0", "--insecure", *extra]
    )


def records(text: str) -> list[dict[str, Any]]:
    """Every stdout line is one JSON log record (json.loads raises otherwise)."""
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize(
    ("listen", "says"),
    [
        ("tcp://127.0.0.1", "not an endpoint"),
        ("udp://127.0.0.1:5555", "not an endpoint"),
        ("tcp://127.0.0.1:port", "port 'port' is not a number in 1..65535"),
        ("tcp://127.0.0.1:70000", "port '70000' is not a number in 1..65535"),
        ("tcp://127.0.0.1:0", "port '0' is not a number in 1..65535"),
    ],
)
def test_a_malformed_endpoint_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], listen: str, says: str
) -> None:
    assert aggregate(tmp_path, listen) == 1
    err = capsys.readouterr().err
    assert err.startswith("commscope: error: --listen ") and says in err
    assert err.count("\n") == 1


def test_a_listen_port_in_use_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    context = zmq.Context()
    holder = context.socket(zmq.ROUTER)
    port = holder.bind_to_random_port("tcp://127.0.0.1")
    try:
        assert aggregate(tmp_path, f"tcp://127.0.0.1:{port}") == 1
    finally:
        holder.close(0)
        context.term()
    err = capsys.readouterr().err
    assert err == f"commscope: error: --listen tcp://127.0.0.1:{port}: Address already in use\n"


def test_a_metrics_port_in_use_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        listen = f"tcp://127.0.0.1:{free_port()}"
        code = aggregate(
            tmp_path, listen, "--metrics-port", str(port), "--metrics-addr", "127.0.0.1"
        )
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"commscope: error: --metrics-port {port}: ")
    assert err.count("\n") == 1


def test_lost_files_exit_6_with_the_report_written_and_the_log_all_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A collector seen (n1) never sent end-of-run; the state is under --out by default."""
    store = Store(tmp_path / "state")
    store.save_nodes({"n1": False})
    store.close()
    listen = f"tcp://127.0.0.1:{free_port()}"
    assert aggregate(tmp_path, listen, "--idle-timeout", "0.2") == EXIT_LOST
    assert len(list(tmp_path.glob("*.json"))) == len(list(tmp_path.glob("*.txt"))) == 1
    logged = {r["msg"]: r for r in records(capsys.readouterr().out)}
    started = logged["aggregator started"]
    assert (started["listen"], started["state"]) == (listen, str(tmp_path / "state"))
    assert started["version"] and started["protocol"]
    assert logged["files lost"]["lost"] == ["n1: no end-of-run"]
    assert logged["run summary"]["summary"].startswith("commscope: 0 of 0 files")


def test_a_collector_silent_past_end_grace_ends_the_run_exit_6_and_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--expect-nodes 2, the state says n1 ended and n2 did not (it exited at its drain
    deadline), no --idle-timeout: after --end-grace 0.2 s of silence from n2 the run ends
    (before, it waited for ever); the log and both reports name n2."""
    store = Store(tmp_path / "state")
    store.save_nodes({"n1": True, "n2": False})
    store.close()
    listen = f"tcp://127.0.0.1:{free_port()}"
    grace = ("--expect-nodes", "2", "--end-grace", "0.2")
    assert aggregate(tmp_path, listen, *grace) == EXIT_LOST
    logged = {r["msg"]: r for r in records(capsys.readouterr().out)}
    assert logged["collector silent without end-of-run: no longer waited for"]["node"] == "n2"
    assert logged["files lost"]["lost"] == ["n2: no end-of-run"]
    (report,) = tmp_path.glob("*.json")
    assert json.loads(report.read_text())["inputs"]["unended_collectors"] == ["n2"]
    (text,) = tmp_path.glob("*.txt")
    assert "Incomplete: collectors n2 never sent end-of-run" in text.read_text()


@pytest.mark.parametrize(("given", "shown"), [("0", "0.0"), ("nan", "nan"), ("-1", "-1.0")])
def test_end_grace_must_be_positive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, shown: str
) -> None:
    assert aggregate(tmp_path, f"tcp://127.0.0.1:{free_port()}", "--end-grace", given) == 1
    expected = f"commscope: error: --end-grace must be positive, got {shown}\n"
    assert capsys.readouterr().err == expected


def test_a_restart_after_the_run_writes_nothing_and_exits_as_it_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Run (n1 never ends: exit 6), finish, restart on the same state without --idle-timeout
    (as systemd or a Job would): it does not wait for n1 (gone) for --end-grace, writes no
    second set of reports, says so in one line and exits 6 again."""
    store = Store(tmp_path / "state")
    store.save_nodes({"n1": False})
    store.close()
    listen = f"tcp://127.0.0.1:{free_port()}"
    assert aggregate(tmp_path, listen, "--idle-timeout", "0.2") == EXIT_LOST
    written = sorted(p.name for p in tmp_path.iterdir())
    assert len(written) == 4  # .txt, .json, .html and the state folder
    capsys.readouterr()
    assert aggregate(tmp_path, listen, "--end-grace", "600") == EXIT_LOST
    assert sorted(p.name for p in tmp_path.iterdir()) == written
    *insecure, line = records(capsys.readouterr().out)
    assert [r["msg"].split(":")[0] for r in insecure] == ["--insecure"]  # nothing started
    assert line["msg"].startswith("the run of this state folder has ended and its reports")
    assert sorted(line["reports"]) == [str(tmp_path / n) for n in written if n != "state"]
    assert line["lost"] == ["n1: no end-of-run"]


def test_the_live_report_is_named_by_job(tmp_path: Path) -> None:
    store = Store(tmp_path / "state")
    store.save_nodes({"n1": True})
    store.close()
    assert aggregate(tmp_path, f"tcp://127.0.0.1:{free_port()}", "--job", "llama-7") == 0
    (written,) = tmp_path.glob("*.json")
    assert written.stem.split("_")[2:] == ["llama-7", "cpu0"]


def test_every_collector_ended_exits_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "state")
    store.save_nodes({"n1": True})
    store.close()
    assert aggregate(tmp_path, f"tcp://127.0.0.1:{free_port()}") == 0
    assert "files lost" not in capsys.readouterr().out


def test_a_run_in_process_leaves_the_gc_as_it_found_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon freezes its heap after each report and collects less often
    (`service/heap.py`): so it did during the run (a collector that never ended keeps it
    going until --idle-timeout); returning, it leaves neither behind."""
    store = Store(tmp_path / "state")
    store.save_nodes({"n1": False})
    store.close()
    during: list[tuple[tuple[int, int, int], bool]] = []
    after_report = heap.Freezer.after_report

    def seen(self: heap.Freezer) -> None:
        after_report(self)
        during.append((gc.get_threshold(), gc.get_freeze_count() > 0))

    monkeypatch.setattr(heap.Freezer, "after_report", seen)
    thresholds = gc.get_threshold()
    listen = f"tcp://127.0.0.1:{free_port()}"
    assert aggregate(tmp_path, listen, "--idle-timeout", "0.3") == EXIT_LOST
    assert during and during[0] == (heap.THRESHOLDS, True)
    assert (gc.get_threshold(), gc.get_freeze_count()) == (thresholds, 0)


def test_the_final_json_report_carries_the_version_time_and_command_line(
    tmp_path: Path,
) -> None:
    store = Store(tmp_path / "state")
    store.save_nodes({"n1": True})  # a run already over: it ends at once
    store.close()
    listen = f"tcp://127.0.0.1:{free_port()}"
    assert aggregate(tmp_path, listen) == 0
    (written,) = tmp_path.glob("*.json")
    found = json.loads(written.read_text())["provenance"]
    assert found["tool_version"] and found["generated_utc"].endswith("Z")
    assert found["inputs"] == []  # the live aggregator's inputs are its collectors' streams
    assert found["command"] == ["commscope", "aggregate", "--listen", listen, "--out",
                                str(tmp_path), "--linger", "0", "--insecure"]  # fmt: skip


def test_an_out_folder_that_cannot_be_written_is_one_line_and_exit_1_at_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a-file").write_text("in the way")
    out = tmp_path / "a-file" / "reports"
    assert aggregate(out, f"tcp://127.0.0.1:{free_port()}") == 1
    assert capsys.readouterr().err.startswith(f"commscope: error: {out}: cannot write reports")


def test_the_start_log_names_the_shard(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = Store(tmp_path / "state")
    store.save_nodes({"n1": True})  # a run already over: it ends at once
    store.close()
    assert aggregate(tmp_path, f"tcp://127.0.0.1:{free_port()}", "--shard", "s1") == 0
    logged = {r["msg"]: r for r in records(capsys.readouterr().out)}
    assert logged["aggregator started"]["shard"] == "s1"


def test_linger_defaults_to_two_scrapes_and_a_margin() -> None:
    args = _parser().parse_args(["aggregate", "--listen", "tcp://*:5555"])
    assert args.linger == LINGER_S >= 2 * 15 and args.state is None
    assert (args.max_nodes, args.max_streams) == (1024, 4096)  # AggregatorSettings' own
    assert args.end_grace == 300.0  # AggregatorSettings' own


def test_metrics_stay_up_after_the_run_until_the_linger_ends(
    procs: Processes, tmp_path: Path
) -> None:
    """The run over (report written), /metrics still answers; SIGTERM ends the linger."""
    agg = Aggregate(procs, tmp_path, free_port(), free_port(), ("--linger", "100"))
    server = agg.start()
    collector = procs.start(
        "collector", *collector_args(SAMPLE, agg.endpoint, "n1", tmp_path / "st", "--once")
    )
    assert collector.wait(60) == 0, collector.tail()
    wait_for("the report", lambda: list((tmp_path / "out").glob("*.json")))
    assert "commscope_aggregator_events_total" in (agg.metrics_text(server) or "")
    server.terminate()
    assert server.wait(30) == 0, server.tail()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--node", "node 1"), "--node 'node 1': letters, digits and _.:@- only"),
        (("--node", "n1", "--batch-events", "5000"), "--batch-events must be 1 to 4096"),
    ],
)
def test_a_collector_flag_the_aggregator_would_refuse_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], says: str
) -> None:
    args = [
        "collect", "--watch", str(tmp_path), "--aggregator", "tcp://127.0.0.1:5555", "--insecure"
    ]  # fmt: skip
    assert main([*args, "--state", str(tmp_path / "st"), *flags]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"commscope: error: {says}") and err.count("\n") == 1


def test_a_state_folder_of_a_newer_commscope_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "version.msgpack").write_bytes(msgspec.msgpack.encode({"version": 99}))
    assert aggregate(tmp_path, f"tcp://127.0.0.1:{free_port()}") == 1
    err = capsys.readouterr().err
    assert err.startswith("commscope: error: ") and "state version 99" in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "shard",
    ["rack 7", 'a"b', "-a", "x" * 64, "é"],  # a space, a quote, a leading dash, 64 > 63, not ASCII
)
def test_a_shard_that_is_not_a_safe_label_value_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shard: str
) -> None:
    assert aggregate(tmp_path, f"tcp://127.0.0.1:{free_port()}", f"--shard={shard}") == 1
    err = capsys.readouterr().err
    says = "letters, digits and _.:@- only (63 at most)"
    assert err == f"commscope: error: --shard {shard!r}: {says}\n"


def test_ranks_that_are_not_a_rank_set_are_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert aggregate(tmp_path, f"tcp://127.0.0.1:{free_port()}", "--ranks=0-3,x") == 1
    err = capsys.readouterr().err
    assert err == "commscope: error: --ranks '0-3,x': 'x' is not a rank or a range such as 0-255\n"
