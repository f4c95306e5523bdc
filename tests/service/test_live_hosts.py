"""The live aggregator's intra- vs inter-node section: a real gloo job's sample (one host)
streamed by a collector to an aggregator given `--hosts`; the final report says intra-node for
every collective, as `commscope report` with the same flags does, key for key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from commscope.pipeline.report import Options

from service.harness import Live

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"


def test_a_one_host_job_streamed_live_is_intra_node_as_offline(
    live: Callable[..., Live],
) -> None:
    run = live("--hosts", "0-1=node-1", "--net-peak", "25")
    run.collect(SAMPLE, "--once")
    options = Options(hosts={0: "node-1", 1: "node-1"}, net_peak_Bps=25e9)
    found, reference = run.end(options=options)
    links = found["links"]
    assert links["hosts"] == {"0": "node-1", "1": "node-1"}
    assert set(links["groups"].values()) == {"intra_node"}
    assert links["inter_node"]["collectives"] == {} and links["unknown_instances"] == 0
    assert sum(c["instances"] for c in links["intra_node"]["collectives"].values()) == 20
    assert links == reference["links"]  # normalised: points are JSON arrays, as read
