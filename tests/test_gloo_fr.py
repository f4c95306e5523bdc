"""A real hung gloo job with Flight Recorder on (tests/gloo_job/fr.py): 3 ranks run 4 steps of
an all_reduce on the world group and an all_gather on ranks 0-1; rank 2 returns before the
4th all_reduce, the others time out in it, and every rank dumps its buffer (a pickle, or JSON
with --json) and writes its Kineto trace (--profile). The report of the dumps alone names rank 2
as stopped after AllReduce #3 of group 0 (default_pg); with the traces beside them it joins
that with rank 2's last profiled step (step 2: gloo's spans name no group or sequence, so its
last collective is unnumbered)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from gloo_job.launch import torchrun

if not os.environ.get("CI"):
    pytest.importorskip("torch", reason="torch (CPU) is installed by scripts/test.sh")

pytestmark = pytest.mark.slow
FR = Path(__file__).resolve().parent / "gloo_job" / "fr.py"


@pytest.fixture(scope="module", params=["pickle", "json"])
def dumps(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fr") / "dumps"
    form = ("--json",) if request.param == "json" else ()
    traces = root.parent / "traces"
    torchrun(root, "--steps", "4", "--stop-at", "3", "--profile", str(traces), *form, script=FR,
             nproc=3)  # fmt: skip
    return root


def _report(folder: Path, out: Path) -> tuple[dict, str]:
    command = [sys.executable, "-m", "commscope.service.cli", "report", str(folder),
               "--out", str(out)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    (path,) = out.glob("*.json")
    (text,) = out.glob("*.txt")
    return json.loads(path.read_text()), text.read_text()


@pytest.fixture(scope="module")
def reported(dumps: Path) -> tuple[dict, str]:
    return _report(dumps, dumps.parent / "out")


@pytest.fixture(scope="module")
def joined(dumps: Path) -> tuple[dict, str]:
    """The report of the dumps and the traces in one folder."""
    both = dumps.parent / "both"
    shutil.copytree(dumps, both)
    for trace in (dumps.parent / "traces").iterdir():
        shutil.copy(trace, both / trace.name)
    return _report(both, dumps.parent / "joined")


def test_every_rank_dumped(dumps: Path) -> None:
    names = sorted(p.name.removesuffix(".json") for p in dumps.iterdir())
    assert names == ["nccl_trace_rank_0", "nccl_trace_rank_1", "nccl_trace_rank_2"]
    path = next(dumps.glob("nccl_trace_rank_0*"))
    assert path.read_bytes()[:1] == (b"{" if path.suffix == ".json" else pickle.PROTO)


def test_the_report_names_the_stuck_rank_and_collective(reported: tuple[dict, str]) -> None:
    report, text = reported
    (stuck,) = report["flight_recorder"]["stuck"]
    assert (stuck["rank"], stuck["group"], stuck["desc"]) == (2, "0", "default_pg")
    assert (stuck["after_seq"], stuck["after_op"]) == (3, "AllReduce")
    assert (stuck["missed_seq"], stuck["missed_op"], stuck["entered_by"]) == (
        4,
        "AllReduce",
        [0, 1],
    )
    assert "Stuck: rank 2 stopped after AllReduce #3 of group 0 (default_pg)" in text


def test_the_pair_group_is_complete_and_nothing_mismatches(reported: tuple[dict, str]) -> None:
    found = reported[0]["flight_recorder"]
    pair = [p for p in found["progress"] if p["group"] != "0"]
    assert [(p["rank"], p["enqueued"], p["last_op"]) for p in pair] == [
        (0, 3, "AllGather"), (1, 3, "AllGather")
    ]  # fmt: skip
    assert found["mismatch_count"] == 0 and found["versions"] == ["2.10"]


def test_the_profiles_of_the_same_job_join_the_stuck_rank(joined: tuple[dict, str]) -> None:
    """Rank 2's last profiled step is 2 (it returned before step 3), the others' last is 3;
    torch 2.13's gloo spans carry no Process Group Name and no Seq: the join is by rank."""
    report, text = joined
    tails = {t["rank"]: t for t in report["profile_tails"]}
    assert [tails[r]["step"] for r in (0, 1, 2)] == [3, 3, 2]
    assert {c["group"] for t in tails.values() for c in t["calls"]} == {None}
    (join,) = report["flight_recorder"]["joined"]
    assert (join["rank"], join["group"], join["after_seq"], join["step"]) == (2, "0", 3, 2)
    assert (join["agreement"], join["profile_op"], join["others_median_s"] > 0) == (
        "unnumbered", "AllReduce", True)  # fmt: skip
    flat = " ".join(text.split())
    assert (
        "Joined: rank 2 stopped after AllReduce #3 of group 0 (default_pg); its last profiled "
        "step shows step 2 of "
    ) in flat
    assert "its profile's last collective, AllReduce, is unnumbered" in flat
