"""Live Inspector figures in the aggregator (pure): busbw samples and skew as records arrive."""

from __future__ import annotations

from commscope.model.schema import CommOp, Facts, StreamEnd, StreamStart, TraceMeta
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.aggregation import Aggregation, Verdict
from commscope.pipeline.inspector_live import LiveSkew, RecentSkews, absorbed

STREAM_A, STREAM_B, STREAM_C = "a" * 32, "b" * 32, "c" * 32


def op(
    start_ns: int, seq: int = 1, n: int = 2, kind: str = "AllReduce", size: int = 1_000_000
) -> CommOp:
    return CommOp(kind, start_ns, 100_000, size, n, True, "world 0x1", seq,  # type: ignore[arg-type]
                  "Inspector n_ranks")  # fmt: skip


def part(stream: str, *calls: CommOp, starts: bool = True) -> Facts:
    return Facts(stream=stream, seq=1, calls=list(calls), has_gpu=True, call_starts=starts)


def test_busbw_per_type_as_the_report_counts_it() -> None:
    # 1e6 B in 100 µs, n = 2: algbw 10 GB/s, F = 2(2-1)/2 = 1
    assert absorbed(Accumulator(), part(STREAM_A, op(0))) == {"AllReduce": [1e10]}


def test_a_record_gives_only_the_samples_it_added_to_the_tallies() -> None:
    acc = Accumulator()
    absorbed(acc, part(STREAM_A, op(0), op(200_000, seq=2)))
    # the next record's AllReduce of 2e6 B in 100 µs: 20 GB/s (F = 1); the first two are
    # in the tally already and not given again
    found = absorbed(acc, part(STREAM_A, op(400_000, seq=3, size=2_000_000)))
    assert found == {"AllReduce": [2e10]}
    assert acc.gpu_ops["AllReduce"].count == 3


LOG = "/run/inspector/node0-pid1.log"


def test_a_tailed_logs_record_takes_as_many_seqs_as_it_covers() -> None:
    aggregation = Aggregation()
    aggregation.apply(StreamStart(stream=STREAM_A, node="n", path=LOG, folder="inspector",
                                  root_name="run"))  # fmt: skip
    ops = Facts(stream=STREAM_A, seq=1, calls=[op(0), op(200_000, seq=2)], has_gpu=True, covers=2)
    applied = aggregation.apply(ops)
    # ops 1 and 2: the next record is op 3's (1e6 B in 100 µs, n = 2: 10 GB/s each)
    assert applied.tailed and applied.busbw == {"AllReduce": [1e10, 1e10]}
    assert aggregation.position(STREAM_A) == (3, False)
    assert aggregation.verdict_at(STREAM_A, 2, start=False) is Verdict.DUPLICATE
    end = StreamEnd(stream=STREAM_A, seq=3, meta=TraceMeta(rank=0, world_size=1,
                                                           source="inspector"))  # fmt: skip
    finished = aggregation.apply(end)
    assert finished.tailed and finished.finished is not None
    assert finished.finished.result is not None
    assert finished.finished.result.ops["AllReduce"].count == 2


def test_a_kineto_file_is_not_fed_live() -> None:
    aggregation = Aggregation()
    aggregation.apply(StreamStart(stream=STREAM_B, node="n", path="/run/rank0.json",
                                  folder=".", root_name="run"))  # fmt: skip
    applied = aggregation.apply(part(STREAM_B, op(0)))
    assert not applied.tailed and applied.busbw == {}


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


def test_an_instance_whose_members_disagree_gives_no_skew() -> None:
    # Seq 1 of one communicator: 1 MB on rank A, 2 MB on rank B: a desync, never a pair
    skew = LiveSkew()
    skew.add(STREAM_A, part(STREAM_A, op(1_000_000)))
    assert skew.add(STREAM_B, part(STREAM_B, op(1_030_000, size=2_000_000))) == []
    assert (skew.desynced, skew.pending) == (1, {})


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


def test_recent_skews_are_sorted_again_only_when_they_change() -> None:
    recent = RecentSkews(horizon_s=10.0)
    recent.add("AllReduce", 1.0, 0.0)
    first = recent.stats(1.0)
    assert recent.stats(2.0) == first and recent.sorts == 1  # nothing new: the same figures
    recent.add("AllReduce", 3.0, 3.0)
    assert recent.stats(4.0)["AllReduce"]["max"] == 3.0 and recent.sorts == 2
    # at 10.5 s the value of 0 s has left: sorted again, max 3, p50 3
    assert recent.stats(10.5)["AllReduce"]["p50"] == 3.0 and recent.sorts == 3
