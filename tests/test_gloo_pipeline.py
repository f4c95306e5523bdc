"""A real 3-stage pipeline (torch.distributed.pipelining, ScheduleGPipe, gloo on CPU) with
stage 1 slowed on purpose (40 wasted 256 x 256 matmuls in each microbatch's forward): the
report pairs every send with its receive, places the stages from the P2P pattern, and names
stage 1 as the stage the others wait for.

tests/gloo_job/pipeline_train.py profiles steps 2-4 (iteration_5/): 4 microbatches a step,
so per step 4 activation and 4 gradient transfers between each pair of neighbours.
"""

from __future__ import annotations

import json
import os

import pytest
from gloo_job.launch import PIPELINE, only, report_on_job

if not os.environ.get("CI"):
    pytest.importorskip("torch", reason="torch (CPU) is installed by scripts/test.sh")

pytestmark = pytest.mark.slow
STEPS = 3
SLOW = ("--slow-stage", "1", "--slow-matmuls", "40")


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = report_on_job(tmp_path_factory.mktemp("pipeline"), *SLOW, script=PIPELINE, nproc=3)
    return json.loads(only(out, "*.json")), only(out, "*.txt")


def test_every_send_pairs_with_its_receive(reported: tuple[dict, str]) -> None:
    matching = reported[0]["matching"]
    # 2 neighbour links x 2 directions x 4 microbatches x 3 steps
    assert (matching["p2p_pairs"], matching["p2p_unpaired"], matching["p2p_desyncs"]) == (
        2 * 2 * 4 * STEPS,
        0,
        0,
    )


def test_the_stages_come_from_the_p2p_chain(reported: tuple[dict, str]) -> None:
    pipeline = reported[0]["pipeline"]
    assert pipeline["stages"] == 3
    assert pipeline["stage_source"].startswith("P2P pattern")
    assert pipeline["microbatches"] == 4
    assert {rank: row["stage"] for rank, row in pipeline["per_rank"].items()} == {
        "0": 0,
        "1": 1,
        "2": 2,
    }


def test_the_report_names_the_slowed_stage(reported: tuple[dict, str]) -> None:
    report, text = reported
    pipeline = report["pipeline"]
    assert (pipeline["waited_for_stage"], pipeline["waited_for_rank"]) == (1, 1), pipeline
    rows = pipeline["per_rank"]
    assert rows["1"]["compute_s"] > 4 * max(rows["0"]["compute_s"], rows["2"]["compute_s"])
    # its neighbours wait: stage 2 for activations, stage 0 to hand it activations (its sends)
    assert rows["2"]["waiting_activations_s"] > rows["1"]["waiting_activations_s"]
    assert rows["0"]["neighbour_bubble_s"] > rows["1"]["neighbour_bubble_s"]
    assert "The Stage the Others Wait For: stage 1, rank 1" in text


def test_the_diagnosis_points_at_the_stage(reported: tuple[dict, str]) -> None:
    verdict = reported[0]["diagnosis"]["verdict"]
    assert "waiting for pipeline stage 1 (rank 1)" in verdict.split("; ")
