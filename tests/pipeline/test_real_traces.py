"""The offline pipeline on the real Kineto traces in ../shared/traces (used in place)."""

from __future__ import annotations

from pathlib import Path

import pytest
from commscope.collector.schema import Report
from commscope.pipeline.report import Options
from commscope.pipeline.run import analyse

TRACES = Path(__file__).resolve().parents[3] / "shared" / "traces" / "kineto"
pytestmark = pytest.mark.skipif(not TRACES.is_dir(), reason=f"{TRACES} not present")

# Holistic Trace Analysis get_comm_comp_overlap() on the same files (shared/traces/README.md)
PEER_OVERLAP_PCT = [4.50, 2.47, 7.88, 3.31, 0.56, 0.64, 7.56, 9.51]


@pytest.fixture(scope="module")
def dlrm() -> Report:
    return analyse(TRACES / "dlrm_8rank_v100", Options())


def test_dlrm_overlap_matches_the_peer_to_a_hundredth_of_a_point(dlrm: Report) -> None:
    ours = [dlrm.overlap.per_rank[str(r)].ratio for r in range(8)]
    for rank, (mine, peer) in enumerate(zip(ours, PEER_OVERLAP_PCT, strict=True)):
        assert mine is not None
        assert abs(mine * 100 - peer) <= 0.005 + 1e-9, f"rank {rank}: {mine * 100:.4f} vs {peer}"


def test_dlrm_collective_counts_and_sizes(dlrm: Report) -> None:
    for rank in map(str, range(8)):
        stats = dlrm.collectives.per_rank[rank]
        assert {k: v.count for k, v in stats.items()} == {"AllReduce": 3, "AllToAll": 5}
        # AllReduce buckets from nccl:all_reduce Input Dims: 394241 + 112 + 226960 floats
        assert stats["AllReduce"].message_bytes == (394241 + 112 + 226960) * 4
        assert stats["AllToAll"].sized_count == 5
    assert dlrm.world_size == 8 and dlrm.ranks == list(range(8))
    assert dlrm.network.peak_bandwidth_Bps == 150e9  # V100
    assert dlrm.throughput.iterations == 1
    assert dlrm.inputs.skipped == [] and dlrm.inputs.sizes_unknown == 0


def test_sampled_pair_is_one_window_of_two_ranks_of_128() -> None:
    report = analyse(TRACES / "sampled_2rank", Options())
    assert report.world_size == 128 and report.ranks == [0, 1]
    assert report.throughput.iterations == 2
    assert report.network.peak_bandwidth_Bps is None  # no deviceProperties: n/a, not a guess
    assert "give --peak-bandwidth" in (report.network.peak_source or "")
    counts = {k: v.count for k, v in report.collectives.per_rank["0"].items()}
    assert counts == {"AllGather": 2, "AllReduce": 4, "AllToAll": 4}


def test_single_rank_files_report_unknown_sizes_as_null() -> None:
    report = analyse(TRACES / "single_rank" / "v100_allreduce_216k_events_rank1.json.gz", Options())
    allreduce = report.collectives.per_rank["1"]["AllReduce"]
    assert (allreduce.count, allreduce.sized_count, allreduce.message_bytes) == (2020, 0, None)
    assert report.network.per_rank["1"].bus_bandwidth_Bps is None
    assert report.inputs.sizes_unknown == 2020
