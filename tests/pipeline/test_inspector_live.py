"""Live Inspector figures in the aggregator (pure): busbw samples and skew as records arrive."""

from __future__ import annotations

from commscope.collector.schema import CommOp, Facts
from commscope.pipeline.inspector_live import LiveSkew, RecentSkews, busbw_samples

STREAM_A, STREAM_B, STREAM_C = "a" * 32, "b" * 32, "c" * 32


def op(start_ns: int, seq: int = 1, n: int = 2, kind: str = "AllReduce") -> CommOp:
    return CommOp(kind, start_ns, 100_000, 1_000_000, n, True, "world 0x1", seq,  # type: ignore[arg-type]
                  "Inspector n_ranks")  # fmt: skip


def part(stream: str, *calls: CommOp, starts: bool = True) -> Facts:
    return Facts(stream=stream, seq=1, calls=list(calls), has_gpu=True, call_starts=starts)


def test_busbw_per_type_as_the_report_counts_it() -> None:
    # 1e6 B in 100 µs, n = 2: algbw 10 GB/s, F = 2(2-1)/2 = 1
    assert busbw_samples(part(STREAM_A, op(0))) == {"AllReduce": [1e10]}


def test_an_instance_gives_its_skew_once_every_member_has_sent_it() -> None:
    skew = LiveSkew()
    assert skew.add(STREAM_A, part(STREAM_A, op(1_000_000))) == []
    # rank B starts 30 µs later: skew 30 µs
    assert skew.add(STREAM_B, part(STREAM_B, op(1_030_000))) == [("AllReduce", 30e-6)]
    assert skew.pending == {}


def test_no_skew_from_calls_without_starts_seq_or_between_two() -> None:
    skew = LiveSkew()
    untimed = [part(s, op(0), starts=False) for s in (STREAM_A, STREAM_B)]
    assert [skew.add(p.stream, p) for p in untimed] == [[], []]
    p2p = [part(s, op(0, kind="SendRecv")) for s in (STREAM_A, STREAM_B)]
    assert [skew.add(p.stream, p) for p in p2p] == [[], []]
    assert skew.pending == {}


def test_instances_waiting_for_an_untailed_member_are_bounded() -> None:
    skew = LiveSkew(max_pending=2)
    for seq in (1, 2, 3):
        skew.add(STREAM_A, part(STREAM_A, op(0, seq=seq, n=3)))
    assert list(skew.pending) == [("world 0x1", 2, "AllReduce"), ("world 0x1", 3, "AllReduce")]
    assert skew.dropped == 1
    skew.add(STREAM_B, part(STREAM_B, op(5, seq=3, n=3)))
    assert skew.add(STREAM_C, part(STREAM_C, op(9, seq=3, n=3))) == [("AllReduce", 9e-9)]


def test_recent_skews_keep_the_horizon() -> None:
    recent = RecentSkews(horizon_s=10.0)
    for now, value in ((0.0, 5.0), (5.0, 1.0), (6.0, 2.0), (7.0, 3.0)):
        recent.add("AllReduce", value, now)
    # at 12 s the value added at 0 s has left; 1, 2, 3: p50 2, p95 2.9, max 3
    stats = recent.stats(12.0)["AllReduce"]
    assert stats["p50"] == 2.0 and abs(stats["p95"] - 2.9) < 1e-12 and stats["max"] == 3.0
