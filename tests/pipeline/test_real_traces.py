"""The offline pipeline on the real Kineto traces in ../shared/traces (used in place)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from commscope.collector.discover import find_windows
from commscope.model.schema import Report
from commscope.pipeline.accumulate import pooled_ops
from commscope.pipeline.report import Options
from commscope.pipeline.sections import collective_stats
from commscope.service.offline import analyse, parse_windows
from tools import needs_shared, shared_traces

TRACES = shared_traces("kineto")
pytestmark = needs_shared("kineto")

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


def test_dlrm_all_to_alls_record_no_split_sizes_so_no_all_to_all_v_section(dlrm: Report) -> None:
    # its 5 all_to_all_single calls a rank: c10d::alltoall_base_ with Input Dims only
    assert dlrm.alltoallv is None
    assert all(w.alltoallv is None for w in dlrm.windows)


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


def _raw_nccl_starts(folder: Path) -> dict[int, list[float]]:
    """An independent read of the files: each rank's NCCL kernel starts (µs), in order."""
    starts = {}
    for path in sorted(folder.glob("worker*.json")):
        events = json.loads(path.read_text())["traceEvents"]
        kernels = [e for e in events if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
        starts[int(path.name[6])] = sorted(e["ts"] for e in kernels)
    return starts


def test_dlrm_collectives_are_matched_across_its_8_ranks(dlrm: Report) -> None:
    matching = dlrm.matching
    assert (matching.instances, matching.by_index, matching.desync_count) == (8, 8, 0)
    assert (matching.unmatched, matching.point_to_point) == (0, 0)
    group = matching.groups["(unnamed)"]
    assert (group.members, group.ranks_with_traces) == (list(range(8)), list(range(8)))


def test_dlrm_ranks_share_a_clock(dlrm: Report) -> None:
    """One host: the end-time alignment finds offsets of a few µs at most."""
    offsets = [o.offset_s for o in dlrm.clocks.per_rank.values()]
    assert len(offsets) == 8 and max(map(abs, offsets)) < 5e-6


def test_dlrm_skews_agree_with_the_raw_kernel_starts(dlrm: Report) -> None:
    starts = _raw_nccl_starts(TRACES / "dlrm_8rank_v100")
    skews = sorted(max(col) - min(col) for col in zip(*starts.values(), strict=True))
    kinds = dlrm.skew.per_collective
    assert sum(k.instances for k in kinds.values()) == 8
    assert max(k.skew_s.max or 0 for k in kinds.values()) == pytest.approx(
        skews[-1] * 1e-6, abs=5e-6
    )
    last = {r: a.last for r, a in dlrm.skew.per_rank.items()}
    raw_last = [max(range(8), key=lambda r: starts[r][i]) for i in range(8)]
    assert last == {str(r): raw_last.count(r) for r in range(8)}


def test_dlrm_names_rank_7_as_the_rank_the_others_wait_for(dlrm: Report) -> None:
    assert dlrm.skew.waited_for_rank == 7
    assert dlrm.skew.per_rank["7"].last == 5
    assert "rank 7 arrived last at 5 of 8" in dlrm.skew.evidence


def _raw_split(folder: Path) -> dict[int, tuple[float, float, float]]:
    """An independent read of the files, µs unit by µs unit (integer-µs timestamps): each
    rank's (exposed, exposed transfer, exposed waiting), the instances the i-th NCCL kernel
    of every rank, each waiting from its start to the latest start (clocks taken as equal)."""
    kernels: dict[int, list[tuple[int, int, bool]]] = {}
    for path in sorted(folder.glob("worker*.json")):
        events = json.loads(path.read_text())["traceEvents"]
        found = [e for e in events if e.get("cat") == "kernel"]
        kernels[int(path.name[6])] = [
            (e["ts"], e["ts"] + e["dur"], e["name"].startswith("nccl")) for e in found
        ]
    comm = {r: sorted((s, e) for s, e, nccl in ks if nccl) for r, ks in kernels.items()}
    found_split = {}
    for rank, ks in kernels.items():
        busy = {t for s, e, nccl in ks if not nccl for t in range(s, e)}
        exposed = {t for s, e in comm[rank] for t in range(s, e)} - busy
        waits: set[int] = set()
        moves: set[int] = set()
        for i, (s, e) in enumerate(comm[rank]):
            last = max(calls[i][0] for calls in comm.values())
            waits |= set(range(s, min(last, e)))
            moves |= set(range(max(last, s), e))
        found_split[rank] = (len(exposed), len(exposed & moves), len((exposed & waits) - moves))
    return found_split


def test_dlrm_exposed_communication_is_waiting_for_rank_7_not_transfer(dlrm: Report) -> None:
    raw = _raw_split(TRACES / "dlrm_8rank_v100")
    for rank, row in dlrm.overlap.per_rank.items():
        parts = (row.exposed_transfer_s, row.exposed_waiting_s, row.exposed_unmatched_s)
        assert None not in parts
        transfer, waiting, unmatched = (p or 0.0 for p in parts)
        assert transfer + waiting + unmatched == pytest.approx(row.exposed_comm_time_s, abs=1e-12)
        assert unmatched == 0.0  # every call matched
        exposed, raw_transfer, raw_waiting = (x * 1e-6 for x in raw[int(rank)])
        assert row.exposed_comm_time_s == pytest.approx(exposed, abs=1e-9)
        # the offsets (under 5 µs, 8 instances) are all that separates the two reads
        assert transfer == pytest.approx(raw_transfer, abs=20e-6)
        assert waiting == pytest.approx(raw_waiting, abs=20e-6)
        assert transfer < 0.25e-3 < waiting


def test_dlrm_diagnosis_is_host_bound_and_waiting_for_rank_7_without_network_advice(
    dlrm: Report,
) -> None:
    d = dlrm.diagnosis
    assert d.verdict == "input- or launch-bound; also waiting for rank 7"
    assert [f.verdict for f in d.findings] == ["input- or launch-bound", "waiting for rank 7"]
    advice = " ".join(s for f in d.findings for s in f.suggestions)
    for named in ("NCCL", "bucket", "FSDP", "DDP", "topology"):
        assert named not in advice
    # the network's evidence stays, true as it was, without its advice
    waiting = d.findings[1].evidence
    assert "AllReduce carries 98.7% of the traffic" in waiting
    assert any(line.endswith("from 1 profiled step (under 3): no advice") for line in waiting)
    assert d.confidence == "low" and d.confidence_reason.startswith("from 1 profiled step,")


def test_dlrm_alpha_beta_fits_stay_below_the_v100_link(dlrm: Report) -> None:
    fits = dlrm.alpha_beta["(unnamed)"]
    for kind in ("AllReduce", "AllToAll"):
        fit = fits[kind]
        assert fit.alpha_s is not None and fit.beta_Bps is not None, fit.na_reason
        assert fit.alpha_s > 0 and 0 < fit.beta_Bps < 150e9


def test_v100_memory_peak_is_the_highest_total_allocated_on_its_gpu() -> None:
    path = TRACES / "single_rank" / "v100_allreduce_216k_events_rank1.json.gz"
    with gzip.open(path) as raw:
        events = json.load(raw)["traceEvents"]
    gpu = [e["args"] for e in events if e.get("name") == "[memory]" and e["args"]["Device Type"]]
    report = analyse(path, Options())
    kernels = report.kernels.per_rank["1"]
    assert kernels.memory_peak_bytes == max(a["Total Allocated"] for a in gpu)
    assert kernels.memory_reserved_peak_bytes == max(a["Total Reserved"] for a in gpu)
    # every GPU activity is in one category; the categories add up to all kernel time
    total = sum(e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert sum(kernels.time_s.values()) == pytest.approx(total * 1e-6, rel=1e-9)
    assert kernels.idle_s == pytest.approx(kernels.span_s - kernels.busy_s)


def test_dlrm_over_two_windows_sketches_only_the_whole_run_quantiles(tmp_path: Path) -> None:
    """The DLRM files twice, as two windows: each window's figures stay exact (those of the
    one-window report); the run's count, mean, min and max equal the exact pooled ones and its
    median and p95 lie within 1% of them."""
    for window in ("iteration_1", "iteration_2"):
        (tmp_path / window).mkdir()
        for trace in sorted((TRACES / "dlrm_8rank_v100").iterdir()):
            (tmp_path / window / trace.name).symlink_to(trace)
    report = analyse(tmp_path, Options())
    single = analyse(TRACES / "dlrm_8rank_v100", Options())
    assert report.windows[0].collectives == single.collectives
    parsed, _, _ = parse_windows(find_windows(tmp_path))
    exact = collective_stats(pooled_ops(p.result for p in parsed))
    for kind, run in report.collectives.all_ranks.items():
        for ours, truth in ((run.algbw_Bps, exact[kind].algbw_Bps),
                            (run.busbw_Bps, exact[kind].busbw_Bps)):  # fmt: skip
            assert (ours.mean, ours.min, ours.max) == (truth.mean, truth.min, truth.max)
            assert ours.relative_error == 0.01 and truth.relative_error is None
            for estimate, value in ((ours.median, truth.median), (ours.p95, truth.p95)):
                assert estimate is not None and value is not None
                assert abs(estimate - value) <= 0.01 * value * (1 + 1e-9)
        assert run.count == exact[kind].count == 2 * single.collectives.all_ranks[kind].count


@pytest.fixture(scope="module")
def sampled() -> Report:
    return analyse(TRACES / "sampled_2rank", Options())


def _raw_nccl_kernels(folder: Path) -> dict[int, list[tuple[float, float]]]:
    """An independent read of gzipped files: each rank's NCCL kernels (start, dur µs), in order."""
    kernels = {}
    for rank, path in enumerate(sorted(folder.glob("*.json.gz"))):
        with gzip.open(path) as raw:
            events = json.load(raw)["traceEvents"]
        kernels[rank] = sorted((e["ts"], e["dur"]) for e in events if e.get("cat") == "kernel"
                               and e["name"].startswith("nccl"))  # fmt: skip
    return kernels


def test_sampled_pair_never_pairs_unlike_calls(sampled: Report) -> None:
    """HTA trimmed these two ranks, so by running index (no Seq, no group) their calls pair
    as: 0 AllToAll Long 3072 B / Byte 340 MB, 1 Byte 419 MB / Int 11.4 MB, 2 AllReduce alike,
    3 AllReduce 108 / 105 MB, 4 AllGather alike, 5 AllToAll Byte / Long, 6 AllToAll / AllReduce,
    7 AllReduce / AllToAll, 8 and 9 alike: no AllToAll pairs (no split sizes are recorded, so
    their sizes must agree too)."""
    m = sampled.matching
    assert (m.instances, m.by_index, m.desync_count, m.unmatched) == (4, 4, 6, 0)
    differs = {d.position: d.differs for d in m.desyncs}
    assert differs == {
        0: ["message size", "dtype"],
        1: ["message size", "dtype"],
        3: ["message size"],
        5: ["message size", "dtype"],
        6: ["collective", "message size", "dtype"],
        7: ["collective", "message size", "dtype"],
    }
    assert set(sampled.skew.per_collective) == {"AllGather", "AllReduce"}
    (gap,) = [issue for issue in sampled.health.issues if issue.key == "desync"]
    assert (gap.count, gap.total, len(gap.named)) == (6, 10, 6)
    assert (
        gap.named[0]
        == "group (unnamed) index 0: calls differ in message size, dtype (ranks 0, 1 depart)"
    )


def test_sampled_pair_waits_only_in_genuine_pairs(sampled: Report) -> None:
    """The false AllToAll pairs gave a skew of 109 ms and 27.5% of matched time waiting; the
    genuine pairs (positions 2, 4, 8, 9) give, on the files' own clocks, waits of 3.302 +
    0.084 + 22.328 + 1.292 ms over 281.14 ms of their calls: 9.61%. The report aligns the
    clocks (rank 1 by 23.5 µs a pair), which moves it by 0.03 points."""
    kernels = _raw_nccl_kernels(TRACES / "sampled_2rank")
    pairs = [(kernels[0][i], kernels[1][i]) for i in (2, 4, 8, 9)]
    waits = sum(abs(a[0] - b[0]) for a, b in pairs)
    calls = sum(a[1] + b[1] for a, b in pairs)
    assert (waits, calls) == (27006, 281140)
    fraction = sampled.diagnosis.figures["wait_fraction_of_comm"]
    assert fraction is not None and abs(fraction - waits / calls) < 0.001
    skew_max = max(k.skew_s.max or 0 for k in sampled.skew.per_collective.values())
    assert skew_max == pytest.approx(22.33e-3, abs=0.1e-3)


def test_dlrm_top_kernels_and_launches_match_a_recount_of_the_json(dlrm: Report) -> None:
    """Counted again straight from the files with `json` (kernels by name; launch calls named
    cudaLaunchKernel joined to kernels by args.correlation): 2,104 kernels of 76 names,
    57,407 µs; 1,976 calls for 11,167 µs, each joined to a kernel, 1,369 of those kernels
    shorter than their call; queue delays' median 7 µs and p95 262.25 µs (numpy's)."""
    top = dlrm.top_kernels
    assert (top.count, round(top.time_s * 1e6), len(top.all_ranks)) == (2104, 57407, 76)
    first, second = top.all_ranks[:2]
    assert (first.count, round(first.time_s * 1e6), first.communication) == (40, 37935, True)
    assert (first.name or "").startswith("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t")
    assert (second.count, round(second.time_s * 1e6)) == (24, 10607)
    assert [sum(r.count for r in top.per_rank[str(k)]) for k in range(8)] == [
        245, 310, 246, 315, 251, 245, 246, 246,
    ]  # fmt: skip
    pooled = dlrm.launches.all_ranks
    assert pooled is not None
    assert (pooled.calls, round(pooled.call_time_s * 1e6)) == (1976, 11167)
    assert (pooled.kernels, pooled.shorter) == (1976, 1369)
    assert pooled.queue_delay_s.median == pytest.approx(7e-6, rel=0.01)
    assert pooled.queue_delay_s.p95 == pytest.approx(262.25e-6, rel=0.01)
    assert pooled.queue_delay_s.mean == pytest.approx(81.16599190283401e-6, rel=1e-12)
