"""A real multi-process torch (CPU, gloo) job writes TorchTitan-style traces; we report on it.

tests/gloo_job/train.py trains a 3-layer MLP (32→64→64→8: 6,792 parameters) under DDP for
10 steps, profiling steps 2-3 and 6-7 into iteration_4/ and iteration_8/. Each step it issues:
one DDP gradient all_reduce of the whole bucket (6,792 floats = 27,168 B), a broadcast of 4
floats, an all_gather of 1 float per rank, an all_gather_single of a 16-float shard and a
reduce_scatter_single of 32 floats (gloo runs it as an all_reduce of the full input).
"""

from __future__ import annotations

import json
import os
import socket

import pytest
from gloo_job.launch import only, report_on_job

if not os.environ.get("CI"):
    pytest.importorskip("torch", reason="torch (CPU) is installed by scripts/test.sh")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    # every rank ran here (Kineto traces record no host)
    hosts = ("--hosts", f"0-1={socket.gethostname()}")
    out = report_on_job(tmp_path_factory.mktemp("gloo"), "--gzip", options=hosts)
    return json.loads(only(out, "*.json"))


def test_windows_and_ranks_in_torchtitan_layout(report: dict) -> None:
    assert [(w["name"], w["ranks"]) for w in report["windows"]] == [
        ("iteration_4", [0, 1]),
        ("iteration_8", [0, 1]),
    ]
    assert report["world_size"] == 2
    assert report["throughput"]["iterations"] == 4  # ProfilerStep#2,3,6,7
    assert report["inputs"]["skipped"] == []


def test_the_collectives_it_must_have_seen(report: dict) -> None:
    for rank in ("0", "1"):
        stats = report["collectives"]["per_rank"][rank]
        counts = {kind: s["count"] for kind, s in stats.items()}
        assert counts == {"AllReduce": 8, "AllGather": 8, "Broadcast": 4}  # 4 steps
        # AllReduce: 4 x 27,168 B (DDP bucket) + 4 x 128 B (reduce_scatter as all_reduce)
        assert stats["AllReduce"]["message_bytes"] == 4 * 27_168 + 4 * 128
        # AllGather S = shard x 2 ranks: 4 x (1 float) x 2 + 4 x (16 floats) x 2
        assert stats["AllGather"]["message_bytes"] == 4 * 8 + 4 * 128
        assert stats["AllGather"]["bus_bytes"] == (4 * 8 + 4 * 128) // 2  # F = (2-1)/2
        assert stats["Broadcast"]["message_bytes"] == 4 * 16
        assert all(s["sized_count"] == s["count"] for s in stats.values())


def test_cpu_traces_use_the_gloo_definition(report: dict) -> None:
    for rank in ("0", "1"):
        overlap = report["overlap"]["per_rank"][rank]
        assert overlap["source"] == "cpu (gloo)"
        assert overlap["comm_time_s"] > 0 and overlap["compute_time_s"] > 0
        assert 0 <= overlap["ratio"] <= 1
        assert overlap["exposed_comm_time_s"] == pytest.approx(
            overlap["comm_time_s"] - overlap["overlapped_time_s"]
        )


def test_a_job_on_one_host_is_intra_node_throughout(report: dict) -> None:
    links = report["links"]
    assert links["hosts"] == {"0": socket.gethostname(), "1": socket.gethostname()}
    assert links["host_sources"] == {"0": "--hosts", "1": "--hosts"}
    assert links["groups"] and set(links["groups"].values()) == {"intra_node"}
    assert links["inter_node"]["collectives"] == {}
    assert links["unknown_instances"] == 0
    intra = links["intra_node"]["collectives"]
    assert {"AllReduce", "AllGather", "Broadcast"} <= set(intra)
    assert sum(c["instances"] for c in intra.values()) == report["matching"]["instances"]
