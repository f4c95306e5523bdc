"""The simulated TorchTitan-like job of the scale benchmark (`simjob.py`): its process groups,
and what `commscope report` (a real process) finds in the traces it writes.

The job: 16 ranks, tp 4, pp 2, so dp = 16 / (4 x 2) = 2; 4 GPUs a node; 2 layers per stage,
2 steps per window, 2 windows; every 4th rank (3, 7, 11, 15) writes `.json.gz`.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import replace

import pytest
from commscope.collector.kineto import TraceReader
from sim_instances import true_offset_ns
from simjob import (
    FILLER_SPAN_NS,
    PID,
    US,
    Job,
    at_density,
    coords,
    density,
    expected,
    folder,
    groups,
    head,
    trace_text,
    write_job,
)

JOB = Job(16, tp=4, pp=2, layers=2, steps=2, windows=2, filler=2, gpus_per_node=4)
# Group names as PyTorch gives them: "0" the world, then pp's dp x tp = 8 subgroups (1-8),
# dp's pp x tp = 8 (9-16), tp's pp x dp = 4 (17-20).
DP_GROUPS = {str(n) for n in range(9, 17)}
TP_GROUPS = {str(n) for n in range(17, 21)}


def test_a_rank_belongs_to_one_group_of_each_mesh_dim() -> None:
    # rank 5 = (stage 0 x dp 2 + dp 1) x tp 4 + tp 1: stage 0, dp index 1, tp index 1
    assert coords(JOB, 5) == (0, 1, 1)
    found = {dim: (g.name, g.ranks) for dim, g in groups(JOB, 5).items()}
    assert found == {
        "world": ("0", tuple(range(16))),
        "pp": ("6", (5, 13)),  # pp subgroup dp 1 x tp 4 + tp 1 = 5, named 1 + 5
        "dp": ("10", (1, 5)),  # dp subgroup stage 0 x tp 4 + tp 1 = 1, named 9 + 1
        "tp": ("18", (4, 5, 6, 7)),  # tp subgroup stage 0 x dp 2 + dp 1 = 1, named 17 + 1
    }
    pg_config = head(JOB, 5)["distributedInfo"]["pg_config"]
    assert [(g["pg_name"], g["ranks"]) for g in pg_config] == [
        ("0", list(range(16))),
        ("6", [5, 13]),
        ("10", [1, 5]),
        ("18", [4, 5, 6, 7]),
    ]


@pytest.mark.parametrize("target", [37.0, 86.0])
def test_at_density_picks_the_filler_nearest_the_density(target: float) -> None:
    """Nearest in bytes a call: no neighbouring filler comes nearer the target's."""
    job = at_density(JOB, target)
    miss = [
        abs(1e6 / density(replace(job, filler=job.filler + d)) - 1e6 / target) for d in (-1, 0, 1)
    ]
    assert miss[1] == min(miss)
    assert job.filler > 1


def test_the_traces_take_the_readers_fast_path() -> None:
    reader = TraceReader(io.BytesIO(trace_text(JOB, 1, 13).encode()), "rank13_trace.json")
    ops = sum(1 for batch in reader.batches() for _ in batch)
    assert reader.parser == "fast"
    assert ops > 0 and reader.meta.rank == 13 and reader.meta.world_size == 16


def test_each_event_block_is_its_event_through_json_dumps() -> None:
    # The filler spans are written from a %-format, not a dict: each block must still be
    # exactly json.dumps of the event it decodes to (ts and dur floats as repr gives them).
    job = replace(JOB, filler=5)
    text = trace_text(job, 1, 6)
    blocks = text.split('"traceEvents": [\n', 1)[1].rsplit("\n  ],\n", 1)[0].split(",\n  {")
    events = json.loads(text)["traceEvents"]
    fillers = [e for e in events if e["cat"] == "python_function"]
    assert len(blocks) == len(events) and len(fillers) > 5 * 10
    for k, (block, event) in enumerate(zip(blocks, events, strict=True)):
        assert ("" if k == 0 else "  {") + block == "  {\n    " + json.dumps(event)[1:-1] + "\n  }"
    # ...and the event the old dict gave: ids counted from 1, 5 spans in 18 us, each 1.8 us long
    pitch_us = FILLER_SPAN_NS // 5 / US
    for k, e in enumerate(fillers, start=1):
        assert e["args"] == {"Python parent id": k - 1, "Python id": k, "Python thread": 0}
        assert (e["pid"], e["tid"], e["ph"], e["dur"]) == (PID, PID, "X", pitch_us / 2)
    first = fillers[:5]
    assert [round(e["ts"] - first[0]["ts"], 3) for e in first] == [k * pitch_us for k in range(5)]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("simjob")
    write_job(JOB, root / "job")
    out = root / "out"
    cmd = [sys.executable, "-m", "commscope.service.cli", "report", str(root / "job")]
    done = subprocess.run(
        [*cmd, "--out", str(out), "--no-progress"], capture_output=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    (path,) = out.glob("*.json")
    return json.loads(path.read_text())


def test_every_file_is_read(report: dict) -> None:
    assert report["inputs"]["files"] == 32  # 16 ranks x 2 windows, 8 of them gzip
    assert report["inputs"]["skipped"] == []
    assert [w["name"] for w in report["windows"]] == [folder(JOB, 0), folder(JOB, 1)]
    assert [w["ranks"] for w in report["windows"]] == [list(range(16))] * 2


def test_each_window_matches_every_group_collective(report: dict) -> None:
    # Per step and layer TP calls 4 (forward and backward: all-gather, reduce-scatter) and
    # FSDP 3 (forward all-gather; backward all-gather, reduce-scatter): with 2 layers, 8 per
    # step on each of the 4 TP groups and 6 on each of the 8 FSDP groups, and one world
    # all-reduce: 4 x 8 + 8 x 6 + 1 = 81 instances a step, 162 in a window of 2 steps. PP's
    # send/recv are not matched: each rank makes 2 a step, 16 x 2 x 2 = 64 in a window.
    for window in report["windows"]:
        matching = window["matching"]
        assert (matching["instances"], matching["by_seq"]) == (162, 162)
        assert (matching["unmatched"], matching["desync_count"]) == (0, 0)
        assert matching["point_to_point"] == 64
        found = {name: g["instances"] for name, g in matching["groups"].items()}
        assert found == {"0": 2} | dict.fromkeys(DP_GROUPS, 12) | dict.fromkeys(TP_GROUPS, 16)


def test_collective_counts_are_the_generated_ones(report: dict) -> None:
    # Per rank and step: all-gathers 2 layers x (TP 2 + FSDP 2) = 8, reduce-scatters
    # 2 x (TP 2 + FSDP 1) = 6, one all-reduce, 2 send/recv; x 16 ranks x 4 steps.
    counts = {kind: t["count"] for kind, t in report["traffic"].items()}
    assert counts == {"AllGather": 512, "ReduceScatter": 384, "AllReduce": 64, "SendRecv": 128}


def test_overlap_is_the_fsdp_share_of_communication(report: dict) -> None:
    # By construction FSDP's calls lie inside a GEMM and every other call in a gap of the
    # compute stream, without two calls overlapping: |C ∩ P| = Σ FSDP call time.
    for rank in range(16):
        runs = [expected(JOB, window, rank) for window in range(2)]
        comm_ns, overlap_ns = sum(e.comm_ns for e in runs), sum(e.overlap_ns for e in runs)
        found = report["overlap"]["per_rank"][str(rank)]
        assert found["comm_time_s"] == pytest.approx(comm_ns / 1e9, rel=1e-12)
        assert found["overlapped_time_s"] == pytest.approx(overlap_ns / 1e9, rel=1e-12)
    assert 0.6 < report["overlap"]["mean"] < 0.7  # 64%: what FSDP's share comes to here


def test_each_nodes_clock_is_recovered_from_the_files(report: dict) -> None:
    # 4 nodes of 4 ranks, each node's clock up to 400 µs off node 0's; every member of a
    # collective ends at the same true instant. Through the files (µs timestamps with 3
    # decimals, parsed to ns) the offsets come back within 1 µs, far below the 30 µs jitter.
    found = report["clocks"]["per_rank"]
    assert len({true_offset_ns(JOB, r) for r in range(16)}) == 4
    for rank in range(16):
        assert abs(found[str(rank)]["offset_s"] * 1e9 - true_offset_ns(JOB, rank)) < 1000
