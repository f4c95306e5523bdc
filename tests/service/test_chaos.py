"""The chaos test (issue 10, item 1): seeded rounds of random SIGKILLs of any daemon at any
moment — just after a rename, during an in-place gzip write, during the catch-up after an
aggregator outage, during end-of-run — against the DLRM files written as three windows the
way trainers write them; each round's final report equals `commscope report` on the same
files. More rounds: `scripts/chaos_soak.py`."""

from __future__ import annotations

from pathlib import Path

import pytest
from tools import needs_shared

from service.chaos import DAEMONS, MOMENTS, WINDOWS, differences, plan, run_round

# Chosen so that, together, they kill every daemon and reach every moment (checked below):
# 1: aggregator during catch-up, node-b during end-of-run, node-a just after a rename;
# 4: node-a between two pieces of an in-place gzip in its own folder, node-a during
#    catch-up, node-b during end-of-run; 28: the aggregator during a gzip write and during
#    end-of-run.
SEEDS = (1, 4, 28)


@pytest.mark.slow
@pytest.mark.timeout(180)
@needs_shared("kineto", "dlrm_8rank_v100")
@pytest.mark.parametrize("seed", SEEDS)
def test_a_round_of_kills_ends_with_the_offline_report(seed: int, tmp_path: Path) -> None:
    outcome = run_round(seed, tmp_path)
    if not outcome.exact or outcome.kills_landed == 0:
        pytest.fail(outcome.describe(), pytrace=False)


def test_the_ci_seeds_kill_every_daemon_at_every_moment() -> None:
    kills = [kill for seed in SEEDS for kill in plan(seed).kills]
    assert {kill.moment for kill in kills} == set(MOMENTS)
    assert {kill.daemon for kill in kills} == set(DAEMONS)
    gzip_kills = [k for k in kills if k.moment == "gzip" and k.daemon != "aggregator"]
    writes = {f"gzip {w.label}": w.node for seed in SEEDS for w in plan(seed).writes}
    assert any(writes[k.trigger.rsplit(" piece", 1)[0]] == k.daemon for k in gzip_kills)


def test_a_round_is_planned_by_its_seed_alone() -> None:
    first = plan(7)
    assert plan(7) == first
    assert 1 <= len(first.kills) <= 3
    for window in WINDOWS:  # every rank once per window, both ways of writing in each
        writes = [w for w in first.writes if w.window == window]
        assert sorted(w.rank for w in writes) == list(range(8))
        assert {w.how == "gzip in place" for w in writes} == {True, False}


def test_a_lost_rank_window_is_named() -> None:
    # By hand: the reference has ranks 0-2 in iteration_20, the live report lacks rank 2
    # and says why in its inputs.
    reference = {"windows": [{"name": "iteration_20", "ranks": [0, 1, 2]}], "inputs": {}}
    skipped = {"path": "iteration_20/rank2_trace.json.gz", "reason": "unfinished"}
    live = {
        "windows": [{"name": "iteration_20", "ranks": [0, 1]}],
        "inputs": {"skipped": [skipped]},
    }
    found = differences(live, reference)
    assert found[0] == "iteration_20: rank(s) [2] missing"
    assert found[1] == "live report skipped iteration_20/rank2_trace.json.gz: unfinished"
    assert [line.split(":")[0] for line in found[2:]] == [
        "differs at $.inputs.skipped",  # absent from the reference
        "differs at $.windows[0].ranks",
    ]
    assert found[3] == "differs at $.windows[0].ranks: live [0, 1] vs offline [0, 1, 2]"
