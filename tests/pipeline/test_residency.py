"""What of the finished files' results memory holds: call lists and samples given up once a
report has used them, and read back from the store whenever they are needed again.

Hand-built: one folder "w" of two ranks' files, each of two AllReduces of 1 MB (1 and 2 ms);
the store holds them as they finished (the aggregation's `load`).
"""

from __future__ import annotations

import msgspec
from commscope.model.schema import CommOp, FinishedFile, RankResult, ShedTally, TraceMeta
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.residency import Residency

MS = 1_000_000


def finished(rank: int) -> FinishedFile:
    acc = Accumulator()
    acc.add_all([CommOp("AllReduce", 10 * MS * i, MS << i, MS, 2, True, "0", i) for i in range(2)])
    return FinishedFile(
        stream=f"s{rank}",
        node="n",
        path=f"/w/rank{rank}.json",
        folder="w",
        root_name="run",
        name_rank=rank,
        meta=TraceMeta(rank=rank, world_size=2),
        result=acc.result(),
    )


class Run:
    """Two finished files, stored as they finished, and a residency over them."""

    def __init__(self, with_store: bool = True) -> None:
        self.files = {f.stream: f for f in (finished(0), finished(1))}
        self.stored = {s: msgspec.msgpack.encode(f) for s, f in self.files.items()}
        streams = {id(f.result): s for s, f in self.files.items()}
        self.residency = Residency(
            self.files, lambda r: streams[id(r)], self.load if with_store else None
        )

    def load(self, stream: str) -> FinishedFile | None:
        return msgspec.msgpack.decode(self.stored[stream], type=FinishedFile)

    def result(self, stream: str) -> RankResult:
        found = self.files[stream].result
        assert found is not None
        return found

    def report_and_shed(self) -> int:
        self.residency.reported({"w": {"s0", "s1"}}, set(), lambda changed: changed)
        return self.residency.shed(["w"], {"w": {"s0", "s1"}})


def test_a_reported_complete_window_gives_up_its_calls_and_samples() -> None:
    run = Run()
    assert len(run.result("s0").calls) == 2
    assert run.report_and_shed() == 2  # both files gave up something
    for stream in ("s0", "s1"):
        result = run.result(stream)
        assert result.calls == []
        tally = result.ops["AllReduce"]
        assert isinstance(tally, ShedTally) and tally.algbw_Bps == bytearray()
        assert (tally.count, tally.time_ns) == (2, 3 * MS)  # the sums stay


def test_exact_samples_are_read_back_for_a_figure_and_given_up_again() -> None:
    run = Run()
    run.report_and_shed()
    result = run.result("s0")
    stored = run.load("s0")
    assert stored is not None and stored.result is not None
    with run.residency.exact([result], again=False):
        assert result.ops["AllReduce"] == stored.result.ops["AllReduce"]
    assert isinstance(result.ops["AllReduce"], ShedTally)


def test_a_window_whose_files_changed_gets_its_calls_and_samples_back() -> None:
    run = Run()
    run.report_and_shed()
    run.residency.reported({"w": {"s0"}}, set(), lambda changed: changed)  # s1 gone since
    result = run.result("s0")
    assert len(result.calls) == 2 and not isinstance(result.ops["AllReduce"], ShedTally)


def test_a_window_left_waiting_keeps_everything() -> None:
    run = Run()
    run.residency.reported({"w": {"s0", "s1"}}, {"w"}, lambda changed: changed)
    assert run.residency.shed(["w"], {"w": {"s0", "s1"}}) == 0
    assert len(run.result("s0").calls) == 2


def test_without_a_store_nothing_is_given_up() -> None:
    run = Run(with_store=False)
    assert run.report_and_shed() == 0
    assert len(run.result("s1").calls) == 2
