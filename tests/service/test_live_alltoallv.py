"""The live aggregator on a real MoE job with uneven all-to-all-v (samples/gloo_moe_4rank:
tests/gloo_job/moe.py's skewed router, 4 gloo ranks, two windows): the window folders appear
one after the other, the all-to-all-v families on /metrics move with each completed window,
and the final report is the one `commscope report` writes for the same files."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from service.harness import Aggregate, Live, sample_value, wait_for

pytestmark = pytest.mark.timeout(240)
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_moe_4rank"
# Rank 2 (the hot expert) receives, per profiled step, 160 rows of 64 B at dispatch and its
# own 64 tokens back at combine: 14,336 B a step, two steps a window. Every rank receives
# 2.5x the mean at dispatch and as much as it sent at combine: over a step, 1.75x.
HOT_PER_WINDOW = 2 * (160 + 64) * 64
RECEIVED = "commscope_alltoallv_received_bytes_total"


def copy_window(name: str, watch: Path) -> None:
    """A window's rank files into the watched folder, each renamed into place (as Kineto)."""
    for source in sorted((SAMPLE / name).glob("*.json.gz")):
        target = watch / name / source.name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target.with_name(target.name + ".tmp"))
        os.replace(target.with_name(target.name + ".tmp"), target)


def completed(aggregate: Aggregate) -> float | None:
    return sample_value(aggregate.metrics_text() or "", "commscope_windows_completed_total")


def test_uneven_all_to_all_streamed_live_moves_per_window_and_ends_as_offline(
    live: Callable[..., Live], tmp_path: Path
) -> None:
    run = live()
    aggregate, watch = run.aggregate, tmp_path / "watch"
    watch.mkdir()
    run.collect(watch)
    seen = []
    for count, name in enumerate(("iteration_4", "iteration_8"), start=1):
        copy_window(name, watch)
        wait_for(f"window {count} to complete", lambda c=count: completed(aggregate) == c, 90)
        text = aggregate.metrics_text() or ""
        seen.append(sample_value(text, RECEIVED, rank="2"))
        assert sample_value(text, "commscope_alltoallv_busiest_rank", rank="2") == 1.0
        assert sample_value(text, "commscope_alltoallv_received_imbalance_ratio") == 1.75
    assert seen == [HOT_PER_WINDOW, 2 * HOT_PER_WINDOW]
    found, reference = run.end(SAMPLE, stop=True)
    assert found["alltoallv"]["per_rank"]["2"]["received_bytes"] == 2 * HOT_PER_WINDOW
    assert found == reference
