"""The timeline made of the report's own analysis: `report --timeline` and `timeline` write the
same bytes (the sample, DLRM); the options that change the report (`--hosts`, `--config`) are
the timeline's too; each file is parsed once by the report and read once more for its events;
the output file is checked before any report is written; the origin is the earliest time
written (a span before the first kept event of a rank whose clock runs behind; a real trace
whose profiler span starts 0.85 s before its first step)."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
from builders import GEMM, GPU, JAN_NS, write
from commscope.collector import discover
from commscope.service import timeline, worker
from commscope.service.cli import main
from kineto_builder import annotation, collective_args, dist_head, kernel, span, trace
from tools import require_shared

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
PROFILER = "PyTorch Profiler (0)"


def loaded(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    document: dict[str, Any] = json.loads(gzip.decompress(data) if path.suffix == ".gz" else data)
    return document


def line(root: Path, out: Path, *flags: str) -> int:
    return main(["timeline", str(root), "--out", str(out), "--jobs", "1", *flags])


def report(root: Path, folder: Path, out: Path, *flags: str) -> int:
    argv = ["report", str(root), "--out", str(folder), "--jobs", "1", "--no-progress"]
    return main([*argv, "--timeline", str(out), *flags])


# ---------------------------------------------------------------- one analysis, one timeline


def test_report_timeline_and_timeline_write_the_same_bytes_on_the_sample(tmp_path: Path) -> None:
    assert report(SAMPLE, tmp_path / "reports", tmp_path / "a.json") == 0
    assert line(SAMPLE, tmp_path / "b.json") == 0
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()


def test_report_timeline_and_timeline_write_the_same_bytes_on_dlrm(tmp_path: Path) -> None:
    """Gzipped: the header holds neither the name nor a time, so the names may differ."""
    root = require_shared("kineto", "dlrm_8rank_v100")
    assert report(root, tmp_path / "reports", tmp_path / "a.json.gz") == 0
    assert line(root, tmp_path / "b.json.gz") == 0
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()


def processes(document: dict[str, Any]) -> dict[int, tuple[str, str]]:
    """Each rank's process name and labels text."""
    found: dict[int, dict[str, Any]] = {}
    for event in document["traceEvents"]:
        if event["name"] in ("process_name", "process_labels"):
            found.setdefault(event["pid"], {}).update(event["args"])
    return {pid: (args["name"], args["labels"]) for pid, args in found.items()}


def test_hosts_name_the_ranks_as_they_place_them_in_the_report(tmp_path: Path) -> None:
    """Kineto traces record no host: without --hosts the ranks have none; with it, each has
    the one the report's intra- vs inter-node section gives it, from either command."""
    assert line(SAMPLE, tmp_path / "plain.json") == 0
    plain = processes(loaded(tmp_path / "plain.json"))
    assert {pid: name for pid, (name, _) in plain.items()} == {0: "rank 0", 1: "rank 1"}
    hosts = ("--hosts", "0=node-a,1=node-b")
    assert line(SAMPLE, tmp_path / "hosts.json", *hosts) == 0
    named = processes(loaded(tmp_path / "hosts.json"))
    assert {pid: name for pid, (name, _) in named.items()} == {
        0: "rank 0 (node-a)", 1: "rank 1 (node-b)",
    }  # fmt: skip
    assert named[1][1] == f"host node-b (from --hosts); {plain[1][1]}"
    assert report(SAMPLE, tmp_path / "reports", tmp_path / "r.json", *hosts) == 0
    assert (tmp_path / "r.json").read_bytes() == (tmp_path / "hosts.json").read_bytes()
    written = json.loads(next((tmp_path / "reports").glob("*.json")).read_bytes())
    assert written["links"]["hosts"] == {"0": "node-a", "1": "node-b"}


def test_the_config_is_the_reports_and_checked_as_report_checks_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = SAMPLE.parent / "mlp_ddp.toml"
    assert line(SAMPLE, tmp_path / "c.json", "--config", str(config)) == 0
    assert report(SAMPLE, tmp_path / "reports", tmp_path / "r.json", "--config", str(config)) == 0
    assert (tmp_path / "r.json").read_bytes() == (tmp_path / "c.json").read_bytes()
    capsys.readouterr()
    assert line(SAMPLE, tmp_path / "m.json", "--config", str(tmp_path / "missing.toml")) == 1
    assert "missing.toml: cannot read" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()


def counted(monkeypatch: pytest.MonkeyPatch, module: object) -> Counter[str]:
    """Each path `module` opens with `open_trace`, counted."""
    opened: Counter[str] = Counter()

    def opening(path: Path) -> IO[bytes]:
        opened[str(path)] += 1
        return discover.open_trace(path)

    monkeypatch.setattr(module, "open_trace", opening)
    return opened


def test_each_file_is_parsed_once_by_the_report_and_read_once_more_for_its_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed, read = counted(monkeypatch, worker), counted(monkeypatch, timeline)
    assert report(SAMPLE, tmp_path / "reports", tmp_path / "t.json") == 0
    files = Counter(str(path) for path in SAMPLE.rglob("*.json.gz"))
    assert len(files) == 4
    assert parsed == files
    assert read == files


@pytest.mark.parametrize(
    "target",
    [
        pytest.param(lambda tmp: tmp / "missing" / "t.json", id="no folder"),
        pytest.param(lambda tmp: tmp, id="a folder"),
    ],
)
def test_a_timeline_that_cannot_be_written_fails_before_any_report(
    tmp_path: Path, target: Callable[[Path], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    out = target(tmp_path)
    assert report(SAMPLE, tmp_path / "reports", out) == 1
    assert f"commscope: error: {out}:" in capsys.readouterr().err
    assert not (tmp_path / "reports").exists()
    assert line(SAMPLE, out) == 1


# ---------------------------------------------------------------- the origin

BEHIND_US = 5  # rank 1's clock runs this far behind rank 0's: its offset is -5 µs
BASE_1 = JAN_NS - 1_000_000  # rank 1's trace base: 1 ms before rank 0's
# true (start, end) µs after JAN_NS of each rank's AllReduce #seq
CALLS = {0: [(100, 200), (400, 500), (720, 800)], 1: [(130, 200), (410, 500), (700, 800)]}


def own(rank: int, true_us: int) -> int:
    """A true time (µs after JAN_NS) on the rank's own clock, after its trace's base."""
    return true_us if rank == 0 else true_us - BEHIND_US + (JAN_NS - BASE_1) // 1000


def behind_doc(rank: int) -> bytes:
    """Rank 0 starts with its step at JAN_NS, a whole second; rank 1's profiler span starts
    300 µs earlier (true time), before its first kept event."""
    calls = [
        kernel(ALLREDUCE, own(rank, start), end - start, collective_args(
            "allreduce", 1000, 1000, "Float",
            **{"Group size": 2, "Process Group Name": "0", "Seq": seq}))
        for seq, (start, end) in enumerate(CALLS[rank], start=1)
    ]  # fmt: skip
    events = [annotation("ProfilerStep#1", own(rank, 0), 1000), kernel(GEMM, own(rank, 10), 80)]
    if rank == 1:
        events.append(span("Trace", PROFILER, own(rank, -300), 2000, 1))
    head = dist_head(rank, 2, gpu=GPU, pg_sizes={"0": 2})
    base = JAN_NS if rank == 0 else BASE_1
    return trace([*events, *calls], head=head, tail={"baseTimeNanoseconds": base})


def test_a_span_before_the_first_kept_event_lowers_the_origin_to_its_second(
    tmp_path: Path,
) -> None:
    """The earliest kept start is JAN_NS (rank 0's step), so the origin was JAN_NS and rank 1's
    profiler span came out at -300 µs; now the origin is the second below it and every time
    is 1 s later, exactly."""
    for rank in (0, 1):
        write(tmp_path / "job" / f"rank{rank}_trace.json", behind_doc(rank))
    assert line(tmp_path / "job", tmp_path / "t.json") == 0
    document = loaded(tmp_path / "t.json")
    origin_ns = JAN_NS - 10**9
    assert document["baseTimeNanoseconds"] == origin_ns
    assert document["otherData"]["commscope"]["origin_ns"] == origin_ns
    clock = document["otherData"]["commscope"]["clocks"]["job"]["per_rank"]["1"]
    assert (clock["offset_s"], clock["samples"]) == (-5e-6, 3)  # -BEHIND_US
    events = document["traceEvents"]
    assert min(e["ts"] for e in events) == 0  # the metadata; nothing before the origin
    assert [e["ts"] for e in events if e["name"] == PROFILER] == [10**6 - 300]
    steps = sorted((e["pid"], e["ts"]) for e in events if e["name"] == "ProfilerStep#1")
    assert steps == [(0, 10**6), (1, 10**6)]
    calls = {r: [(e["ts"], e["dur"]) for e in events if e["pid"] == r and e["name"] == ALLREDUCE]
             for r in (0, 1)}  # fmt: skip
    assert calls == {r: [(10**6 + s, e - s) for s, e in CALLS[r]] for r in (0, 1)}
    waits = [(e["ts"], e["dur"]) for e in events if e["name"] == "waiting" and e["pid"] == 0]
    assert waits == [(10**6 + 100, 30), (10**6 + 400, 10)]


def test_the_rewritten_document_is_the_one_written_from_that_origin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written from the lower origin directly (guessed a second lower, so nothing precedes
    it), the same bytes as the rewrite."""
    for rank in (0, 1):
        write(tmp_path / "job" / f"rank{rank}_trace.json", behind_doc(rank))
    assert line(tmp_path / "job", tmp_path / "moved.json") == 0
    guess = timeline.origin
    monkeypatch.setattr(timeline, "origin", lambda starts: guess([min(starts) - 10**9]))
    assert line(tmp_path / "job", tmp_path / "direct.json") == 0
    assert (tmp_path / "direct.json").read_bytes() == (tmp_path / "moved.json").read_bytes()


def test_a_real_profiler_span_before_the_first_step_is_after_the_origin(tmp_path: Path) -> None:
    """sampled_2rank: rank 0's "PyTorch Profiler (0)" starts 0.85 s before its first step,
    in the second before it."""
    root = require_shared("kineto", "sampled_2rank")
    assert line(root, tmp_path / "t.json") == 0
    document = loaded(tmp_path / "t.json")
    assert document["baseTimeNanoseconds"] == 1_682_725_897 * 10**9
    spans = [e for e in document["traceEvents"] if e["name"] == PROFILER]
    assert spans and min(e["ts"] for e in spans) >= 0
    assert min(e["ts"] for e in document["traceEvents"]) >= 0
