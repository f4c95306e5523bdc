"""The live aggregator's intra- vs inter-node section: a real gloo job's sample (one host)
streamed by a collector to an aggregator given `--hosts`; the final report says intra-node for
every collective, as `commscope report` with the same flags does, key for key."""

from __future__ import annotations

import json
from pathlib import Path

from commscope.pipeline.report import Options

from service.harness import Aggregate, Processes, collector_args, free_port, offline, wait_for

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"


def test_a_one_host_job_streamed_live_is_intra_node_as_offline(
    procs: Processes, tmp_path: Path
) -> None:
    flags = ("--hosts", "0-1=node-1", "--net-peak", "25")
    agg = Aggregate(procs, tmp_path, free_port(), free_port(), flags)
    server = agg.start()
    collector = procs.start(
        "collector", *collector_args(SAMPLE, agg.endpoint, "n1", tmp_path / "st", "--once")
    )
    assert collector.wait(60) == 0, collector.tail()
    wait_for("the report", lambda: list((tmp_path / "out").glob("*.json")))
    assert server.wait(30) == 0, server.tail()
    links = agg.report()["links"]
    assert links["hosts"] == {"0": "node-1", "1": "node-1"}
    assert set(links["groups"].values()) == {"intra_node"}
    assert links["inter_node"]["collectives"] == {} and links["unknown_instances"] == 0
    assert sum(c["instances"] for c in links["intra_node"]["collectives"].values()) == 20
    reference = offline(SAMPLE, Options(hosts={0: "node-1", 1: "node-1"}, net_peak_Bps=25e9))
    assert links == json.loads(json.dumps(reference["links"]))  # points: JSON arrays, as read
