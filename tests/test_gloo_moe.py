"""A real expert-parallel gloo job with a skewed router: the report names the rank whose
experts draw the traffic, with its exact bytes.

tests/gloo_job/moe.py runs 4 ranks, 2 experts each; every rank routes 64 tokens of 64 B rows,
8, 8, 40 and 8 of them to ranks 0-3 (expert 4, on rank 2, is hot). Per profiled step (2 of
them): a counts exchange (even all-to-all), the dispatch and the combine (all-to-all-v).
"""

from __future__ import annotations

import json
import os

import pytest
from gloo_job.launch import MOE, only, report_on_job

if not os.environ.get("CI"):
    pytest.importorskip("torch", reason="torch (CPU) is installed by scripts/test.sh")

pytestmark = pytest.mark.slow
ROW = 64  # bytes: 16 floats
ROUTED = [8, 8, 40, 8]  # rows each rank sends to ranks 0-3 at dispatch
STEPS = 2


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, str]:
    out = report_on_job(tmp_path_factory.mktemp("moe"), script=MOE, nproc=4)
    return json.loads(only(out, "*.json")), only(out, "*.txt"), only(out, "*.alltoallv.csv")


def test_the_report_names_the_rank_of_the_hot_expert(reported: tuple[dict, str, str]) -> None:
    found, text, _ = reported
    a2a = found["alltoallv"]
    assert a2a["busiest_rank"] == 2
    assert "Busiest rank (most bytes sent or received): rank 2" in text
    # dispatch: rank 2 receives 4 x 40 rows of 256; combine: it sends them back
    assert a2a["call_received_imbalance"]["max"] == pytest.approx(4 * 40 / 64)
    assert a2a["sent_imbalance"] == pytest.approx(1.75)  # 224 of 512 rows x 4 / 512


def test_the_matrix_is_the_routed_traffic(reported: tuple[dict, str, str]) -> None:
    a2a = reported[0]["alltoallv"]
    assert a2a["calls"] == 2 * STEPS and a2a["unknown_bytes"] == 0
    assert a2a["matrix_ranks"] == [0, 1, 2, 3]
    # i -> j: dispatch ROUTED[j] rows, combine ROUTED[i] rows back, each step
    expected = [[STEPS * (ROUTED[j] + ROUTED[i]) * ROW for j in range(4)] for i in range(4)]
    assert a2a["matrix_bytes"] == expected
    assert [s["step"] for s in a2a["steps"]] == [2, 3]
    assert all(s["busiest_rank"] == 2 and s["calls"] == 2 for s in a2a["steps"])


def test_the_replay_file_is_nccl_tests_alltoallv_input(reported: tuple[dict, str, str]) -> None:
    found, text, replay = reported
    rows = [[float(v) for v in line.split(",")] for line in replay.splitlines()]
    assert rows[2] == [0.6, 0.6, 1.0, 0.6] and rows[0] == [0.2, 0.2, 0.6, 0.2]
    assert found["alltoallv"]["replay_bytes"] == 10240 // (2 * STEPS) * 4
    assert "alltoallv_perf -b 10240 -e 10240 -s" in text
