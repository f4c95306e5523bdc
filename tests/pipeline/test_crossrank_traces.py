"""Hand-built Kineto traces of three ranks on three hosts, with known clock offsets, trace base
times, a slow rank and a known link: `commscope report`'s pipeline recovers all of them."""

from __future__ import annotations

import random

import pytest
from commscope.model.schema import Report
from commscope.pipeline.report import Options
from commscope.service.offline import analyse
from kineto_builder import collective_args, dist_head, kernel, trace

RANKS = 3
OFFSETS_NS = {0: 0, 1: 2_500_000, 2: -1_200_000}  # each host's clock minus true time
EPOCH_NS = 1_700_000_000_000_000_000  # true time of the first instance
# Kineto writes ts relative to each process's baseTimeNanoseconds: the ranks' bases differ
BASES_NS = {0: EPOCH_NS - 60 * 10**9, 1: EPOCH_NS - 55 * 10**9, 2: EPOCH_NS - 70 * 10**9}
SLOW, LATE_NS, JITTER_NS = 2, 300_000, 20_000
ALPHA_S, BETA_BPS = 15e-6, 100e9
SIZES = [2**16, 2**19, 2**22, 2**24, 2**26]  # bytes: 64 KiB … 64 MiB
INSTANCES = 30


def rank_events(rng: random.Random) -> dict[int, list[dict]]:
    events: dict[int, list[dict]] = {r: [] for r in range(RANKS)}
    for i in range(INSTANCES):
        size = SIZES[i % len(SIZES)]
        start = {r: i * 5_000_000 + rng.randrange(JITTER_NS) for r in range(RANKS)}
        start[SLOW] += LATE_NS
        bus = size * 2 * (RANKS - 1) / RANKS  # AllReduce: F = 2(n-1)/n
        end = max(start.values()) + round((ALPHA_S + bus / BETA_BPS) * 1e9)
        args = collective_args("allreduce", size // 4, size // 4, "Float")
        args.update({"Group size": RANKS, "Process Group Name": "0", "Seq": i})
        for rank in range(RANKS):
            local_ns = EPOCH_NS + start[rank] + OFFSETS_NS[rank] - BASES_NS[rank]
            duration_ns = end - start[rank]
            name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
            events[rank].append(kernel(name, local_ns / 1000, duration_ns / 1000, args))
    return events


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    folder = tmp_path_factory.mktemp("iteration_10")
    for rank, events in rank_events(random.Random(7)).items():
        head = dist_head(rank=rank, world_size=RANKS, gpu="NVIDIA H100 80GB HBM3")
        tail = {"baseTimeNanoseconds": BASES_NS[rank]}
        (folder / f"rank{rank}_trace.json").write_bytes(trace(events, head, tail))
    return analyse(folder, Options())


def test_every_collective_is_matched_by_seq(report: Report) -> None:
    assert (report.matching.instances, report.matching.by_seq) == (INSTANCES, INSTANCES)
    assert report.matching.desync_count == 0


def test_clock_offsets_are_recovered_within_1pct_of_the_skew_scale(report: Report) -> None:
    scale = LATE_NS + JITTER_NS
    for rank, offset in report.clocks.per_rank.items():
        assert abs(offset.offset_s * 1e9 - OFFSETS_NS[int(rank)]) <= 0.01 * scale


def test_the_slow_rank_is_named(report: Report) -> None:
    assert report.skew.waited_for_rank == SLOW
    assert report.skew.per_rank[str(SLOW)].last == INSTANCES
    skew = report.skew.per_collective["AllReduce"].skew_s
    assert (LATE_NS - JITTER_NS) * 1e-9 <= skew.min <= skew.max <= (LATE_NS + JITTER_NS) * 1e-9


def test_the_link_is_recovered_by_the_alpha_beta_fit(report: Report) -> None:
    fit = report.alpha_beta["0"]["AllReduce"]
    assert fit.alpha_s == pytest.approx(ALPHA_S, rel=0.05)
    assert fit.beta_Bps == pytest.approx(BETA_BPS, rel=0.05)
    assert fit.peak_ratio == pytest.approx(BETA_BPS / 450e9, rel=0.05)  # H100 link
    assert fit.sizes == len(SIZES)
