"""`commscope timeline` and `report --timeline`: one trace of all ranks on aligned clocks.

A hand-built two-rank job whose rank 1 clock runs 5 µs ahead: every event of rank 1 comes out
5 µs earlier, the waiting and transfer slices exact; the output's schema; reading it back with
commscope's own reader gives every event of each rank, shifted; gzip; the DLRM traces."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from builders import GEMM, GPU, JAN_NS, write
from commscope.exporters.timeline import CATEGORY
from commscope.model.schema import CommOp, CpuSpan, GpuOp, MemoryPeak, Step
from commscope.pipeline.report import Options
from commscope.service import offline
from commscope.service.cli import main
from kineto_builder import annotation, collective_args, dist_head, kernel, read, trace
from msgspec.structs import replace
from tools import require_shared

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AHEAD_US = 5  # rank 1's clock runs this far ahead of rank 0's
# true (start, end) µs of each rank's AllReduce #seq: rank 1 last at #1 and #2, rank 0 at #3
CALLS = {0: [(100, 200), (400, 500), (720, 800)], 1: [(130, 200), (410, 500), (700, 800)]}
WHOLE = {"ph", "ts", "pid", "tid", "name"}


def rank_events(rank: int) -> list[dict[str, Any]]:
    own = AHEAD_US * rank
    names = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "ts": 0,
              "args": {"name": "stream 7"}}]  # fmt: skip
    flow = {"cat": "ac2g", "name": "ac2g", "id": 9, "pid": 0}
    flows = [{**flow, "ph": "s", "tid": 1, "ts": 20 + own},
             {**flow, "ph": "f", "tid": 7, "ts": 30 + own, "bp": "e"}]  # fmt: skip
    calls = [
        kernel(ALLREDUCE, start + own, end - start, collective_args(
            "allreduce", 1000, 1000, "Float",
            **{"Group size": 2, "Process Group Name": "0", "Seq": seq}))
        for seq, (start, end) in enumerate(CALLS[rank], start=1)
    ]  # fmt: skip
    return [*names, annotation("ProfilerStep#1", own, 1000), kernel(GEMM, 10 + own, 80),
            *flows, *calls]  # fmt: skip


def rank_doc(rank: int, base_ns: int = JAN_NS) -> bytes:
    head = dist_head(rank, 2, gpu=GPU, pg_sizes={"0": 2})
    return trace(rank_events(rank), head=head, tail={"baseTimeNanoseconds": base_ns})


@pytest.fixture
def job(tmp_path: Path) -> Path:
    for rank in (0, 1):
        write(tmp_path / "job" / f"rank{rank}_trace.json", rank_doc(rank))
    return tmp_path / "job"


def timeline(job: Path, out: Path, *flags: str) -> dict[str, Any]:
    assert main(["timeline", str(job), "--out", str(out), "--jobs", "1", *flags]) == 0
    data = out.read_bytes()
    loaded: dict[str, Any] = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    return loaded


def slices(doc: dict[str, Any], rank: int) -> list[tuple[str, float, float]]:
    return [(e["name"], e["ts"], e.get("dur", 0)) for e in doc["traceEvents"]
            if e.get("cat") == CATEGORY and e["pid"] == rank]  # fmt: skip


def test_rank_1_is_shifted_by_its_offset_and_waiting_and_transfer_are_exact(
    job: Path, tmp_path: Path
) -> None:
    doc = timeline(job, tmp_path / "t.json")
    assert doc["baseTimeNanoseconds"] == JAN_NS  # rank 0's step starts the job, at JAN_NS
    calls = {r: [(e["ts"], e["dur"]) for e in doc["traceEvents"]
                 if e["pid"] == r and e["name"] == ALLREDUCE] for r in (0, 1)}  # fmt: skip
    assert calls == {r: [(s, e - s) for s, e in CALLS[r]] for r in (0, 1)}  # true times
    assert slices(doc, 0) == [
        ("waiting", 100, 30), ("transfer", 130, 70),
        ("waiting", 400, 10), ("transfer", 410, 90),
        ("transfer", 720, 80), ("last to arrive", 720, 0),
    ]  # fmt: skip
    assert slices(doc, 1) == [
        ("transfer", 130, 70), ("last to arrive", 130, 0),
        ("transfer", 410, 90), ("last to arrive", 410, 0),
        ("waiting", 700, 20), ("transfer", 720, 80),
    ]  # fmt: skip
    (first,) = [e for e in doc["traceEvents"] if e["pid"] == 0 and e["name"] == ALLREDUCE][:1]
    assert first["args"][CATEGORY] == {
        "instance": "job:0", "collective": "AllReduce", "process_group": "0", "position": 1,
        "members": 2, "waiting_us": 30, "transfer_us": 70, "last_arrival_rank": 1}  # fmt: skip


def test_the_offsets_and_their_uncertainty_are_in_the_metadata(job: Path, tmp_path: Path) -> None:
    doc = timeline(job, tmp_path / "t.json")
    other = doc["otherData"]["commscope"]
    clock = other["clocks"]["job"]["per_rank"]["1"]
    assert (clock["offset_s"], clock["samples"]) == (5e-6, 3)
    assert "uncertainty_s" in clock
    labels = {e["pid"]: e["args"] for e in doc["traceEvents"] if e["name"] == "process_labels"}
    assert labels[1]["clock_offsets"]["job"]["applied_ns"] == 5000
    assert labels[1]["labels"].startswith("clock offset 5.000 µs ± ")
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}


def test_every_event_is_whole_and_flows_stay_within_their_rank(job: Path, tmp_path: Path) -> None:
    doc = timeline(job, tmp_path / "t.json")
    events = doc["traceEvents"]
    assert all(set(e) >= WHOLE for e in events)
    assert all("dur" in e for e in events if e["ph"] == "X")
    flows = Counter((e["pid"], e["id"]) for e in events if e["ph"] in "sf")
    assert flows == {(0, (1 << 32) + 9): 2, (1, (2 << 32) + 9): 2}
    assert doc["commscopeDropped"] == {}


def readback(doc: dict[str, Any], rank: int, world: int = 2) -> list[Any]:
    """The rank's events in the timeline as commscope's reader reads them (tids aside)."""
    own = [e for e in doc["traceEvents"] if e["pid"] == rank and e.get("cat") != CATEGORY]
    head = {"distributedInfo": {"rank": rank, "world_size": world}}
    tail = {"baseTimeNanoseconds": doc["baseTimeNanoseconds"]}
    return timed(read(trace(own, head=head, tail=tail)).events)


def timed(events: list[Any], shift_ns: int = 0) -> list[Any]:
    """The reader's events in time, shifted by `shift_ns`, thread ids set to 0, sorted."""
    found = []
    for event in events:
        if isinstance(event, CpuSpan):
            end = event.end_ns + shift_ns
            found.append(replace(event, tid=0, start_ns=event.start_ns + shift_ns, end_ns=end))
        elif isinstance(event, (CommOp, GpuOp, Step)):
            moved = replace(event, start_ns=event.start_ns + shift_ns)
            found.append(replace(moved, tid=0) if isinstance(moved, Step) else moved)
        elif isinstance(event, MemoryPeak):
            found.append(event)
    return sorted(found, key=repr)


def test_reading_a_rank_back_gives_every_event_shifted(job: Path, tmp_path: Path) -> None:
    doc = timeline(job, tmp_path / "t.json")
    for rank in (0, 1):
        original = read(rank_doc(rank)).events
        assert readback(doc, rank) == timed(original, -AHEAD_US * 1000 * rank)
        assert len(readback(doc, rank)) == 5  # a step, a GEMM, three AllReduces


def test_gzip_when_the_name_ends_in_gz_or_when_asked(job: Path, tmp_path: Path) -> None:
    plain = timeline(job, tmp_path / "t.json")
    assert (tmp_path / "t.json.gz").exists() is False
    assert timeline(job, tmp_path / "t.json.gz") == plain
    assert timeline(job, tmp_path / "z.trace", "--gzip") == plain
    assert (tmp_path / "z.trace").read_bytes()[:2] == b"\x1f\x8b"
    assert not list(tmp_path.glob("*.tmp"))


def test_report_writes_the_timeline_beside_its_reports(job: Path, tmp_path: Path) -> None:
    out = tmp_path / "line.json"
    argv = ["report", str(job), "--out", str(tmp_path / "reports"), "--jobs", "1"]
    assert main([*argv, "--no-progress", "--timeline", str(out)]) == 0
    assert json.loads(out.read_bytes()) == timeline(job, tmp_path / "t.json")


def test_two_windows_of_a_rank_are_one_process_with_its_threads_once(tmp_path: Path) -> None:
    """iteration_2 starts 10 s after iteration_1: its calls 10 s later on the same tracks,
    its instances and flows its own, each window's offsets in the metadata."""
    for window, base in (("iteration_1", JAN_NS), ("iteration_2", JAN_NS + 10**10)):
        for rank in (0, 1):
            write(tmp_path / "run" / window / f"rank{rank}_trace.json", rank_doc(rank, base))
    doc = timeline(tmp_path / "run", tmp_path / "t.json")
    events = doc["traceEvents"]
    firsts = [e for e in events if e["name"] == ALLREDUCE and e["args"][CATEGORY]["position"] == 1]
    calls = [(e["pid"], e["tid"], e["ts"], e["args"][CATEGORY]["instance"]) for e in firsts]
    assert [(pid, ts, instance) for pid, _, ts, instance in calls] == [
        (0, 100, "iteration_1:0"), (0, 10_000_100, "iteration_2:0"),
        (1, 130, "iteration_1:0"), (1, 10_000_130, "iteration_2:0"),
    ]  # fmt: skip
    assert len({(pid, tid) for pid, tid, _, _ in calls}) == 2  # one stream track per rank
    assert len({e["id"] for e in events if e["ph"] == "s"}) == 4
    assert sorted(doc["otherData"]["commscope"]["clocks"]) == ["iteration_1", "iteration_2"]


def test_timeline_exits_0_with_every_input_on_it(job: Path, tmp_path: Path) -> None:
    assert main(["timeline", str(job), "--out", str(tmp_path / "t.json"), "--jobs", "1"]) == 0


def test_timeline_exits_3_naming_the_files_left_out(
    job: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A truncated third file: the two others on the timeline, the third named."""
    (job / "rank2_trace.json").write_bytes(b'{"traceEvents": [{"ph": "X"')
    assert main(["timeline", str(job), "--out", str(tmp_path / "t.json"), "--jobs", "1"]) == 3
    assert f"left out {job / 'rank2_trace.json'}: truncated" in capsys.readouterr().err
    doc = json.loads((tmp_path / "t.json").read_bytes())
    assert doc["commscopeSkipped"][0]["path"] == str(job / "rank2_trace.json")


def test_timeline_without_out_is_a_usage_error_exit_2(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["timeline", str(tmp_path)])
    assert stopped.value.code == 2


def test_no_kineto_trace_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["timeline", str(tmp_path / "empty"), "--out", str(tmp_path / "t.json")]) == 1


# ---------------------------------------------------------------- the DLRM traces


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = require_shared("kineto", "dlrm_8rank_v100")
    out = tmp_path_factory.mktemp("dlrm") / "dlrm.json.gz"
    return root, timeline(root, out)


def test_dlrm_has_eight_ranks_and_the_waiting_for_rank_7(dlrm: tuple[Path, dict[str, Any]]) -> None:
    """The report: rank 7 is the rank the others wait for (arrived last at 5 of 8). The
    timeline: eight processes, rank 7 marked, each other rank's waiting for it visible."""
    root, doc = dlrm
    report = offline.analyse(root, Options())
    assert report.skew.waited_for_rank == 7
    events = doc["traceEvents"]
    assert sorted({e["pid"] for e in events}) == list(range(8))
    labels = {e["pid"]: e["args"] for e in events if e["name"] == "process_labels"}
    assert [r for r, args in labels.items() if args["waited_for"]] == [7]
    assert labels[7]["labels"].endswith("; the rank the others wait for")
    waits = Counter(e["pid"] for e in events if e.get("cat") == CATEGORY
                    and e["name"] == "waiting" and e["args"]["last_arrival_rank"] == 7)  # fmt: skip
    assert set(waits) == set(range(7))
    lasts = Counter(e["pid"] for e in events if e["name"] == "last to arrive")
    assert lasts[7] == report.skew.per_rank["7"].last == 5


def test_dlrm_read_back_gives_every_event_of_every_rank(
    dlrm: tuple[Path, dict[str, Any]],
) -> None:
    root, doc = dlrm
    clocks = doc["otherData"]["commscope"]["clocks"][root.name]["per_rank"]
    for path in sorted(root.glob("*.json")):
        rank = int(path.name.removeprefix("worker").split("_")[0])
        shift = -doc["baseTimeNanoseconds"] - round(clocks[str(rank)]["offset_s"] * 1e9)
        original = read(path.read_bytes())
        back = readback(doc, rank, original.meta.world_size or 1)
        assert back == timed(original.events, shift), path
