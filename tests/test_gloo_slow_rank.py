"""A real gloo job with rank 1 slowed on purpose (a 60 ms sleep before backward every step):
the report names rank 1 as the rank the others wait for, with the evidence.

tests/gloo_job/train.py profiles 4 steps in each of two windows (steps 2-5 → iteration_6,
8-11 → iteration_12). Each step, rank 0 reaches DDP's gradient all_reduce about 60 ms before
rank 1 and waits there; the other collectives of the step start nearly together.
"""

from __future__ import annotations

import json
import os

import pytest
from gloo_job.launch import only, report_on_job

if not os.environ.get("CI"):
    pytest.importorskip("torch", reason="torch (CPU) is installed by scripts/test.sh")

pytestmark = pytest.mark.slow
SLEEP_S = 0.060
PROFILED_STEPS = 8
SLOW = ("--slow-rank", "1", "--slow-ms", str(SLEEP_S * 1e3), "--active", "4", "--steps", "12")


@pytest.fixture(scope="module")
def reported(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str]:
    out = report_on_job(tmp_path_factory.mktemp("slow"), *SLOW)
    return json.loads(only(out, "*.json")), only(out, "*.txt")


def test_the_report_names_the_slowed_rank(reported: tuple[dict, str]) -> None:
    report, text = reported
    skew = report["skew"]
    assert skew["waited_for_rank"] == 1, skew["evidence"]
    assert skew["evidence"].startswith("rank 1 arrived last at ")
    assert "The Rank the Others Wait For: rank 1" in text


def test_the_wait_it_caused_is_about_its_sleep(reported: tuple[dict, str]) -> None:
    """Rank 0 waits for rank 1 about once per profiled step, about the length of the sleep."""
    arrivals = reported[0]["skew"]["per_rank"]
    assert arrivals["1"]["last"] >= PROFILED_STEPS
    assert arrivals["1"]["caused_wait_s"] >= 0.8 * PROFILED_STEPS * SLEEP_S
    assert arrivals["0"]["waited_s"] >= 0.8 * PROFILED_STEPS * SLEEP_S


def test_the_diagnosis_points_at_it(reported: tuple[dict, str]) -> None:
    diagnosis = reported[0]["diagnosis"]
    assert "waiting for rank 1" in diagnosis["verdict"].split("; ")
    (waiting,) = [f for f in diagnosis["findings"] if f["verdict"] == "waiting for rank 1"]
    assert waiting["suggestions"][0].startswith("look at what rank 1 does before the collectives")


def test_rank_0s_exposed_waiting_is_about_the_sleep_and_rank_1_waits_little(
    reported: tuple[dict, str],
) -> None:
    """Rank 0 sits in DDP's all_reduce for rank 1's sleep every profiled step: exposed waiting
    (not transfer); rank 1, the rank the others wait for, waits far less."""
    rows = reported[0]["overlap"]["per_rank"]
    for row in rows.values():
        parts = (row["exposed_transfer_s"], row["exposed_waiting_s"], row["exposed_unmatched_s"])
        assert sum(parts) == pytest.approx(row["exposed_comm_time_s"], abs=1e-9)
    assert rows["0"]["exposed_waiting_s"] >= 0.8 * PROFILED_STEPS * SLEEP_S
    assert rows["1"]["exposed_waiting_s"] < 0.5 * rows["0"]["exposed_waiting_s"]


def test_each_window_is_matched_across_both_ranks(reported: tuple[dict, str]) -> None:
    windows = reported[0]["windows"]
    assert [w["name"] for w in windows] == ["iteration_6", "iteration_12"]
    for window in windows:
        # 4 steps x (DDP all_reduce, broadcast, all_gather, all_gather_single, reduce_scatter)
        assert (window["matching"]["instances"], window["matching"]["desync_count"]) == (20, 0)
