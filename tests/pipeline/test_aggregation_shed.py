"""The live aggregation gives up the bandwidth samples of complete windows (`shed`) and reads
them back from the store whenever a figure needs them exactly: no report ever changes.

Hand-built run: `WORLD` ranks, windows iteration_10/20/30, each rank's file holding three
AllReduces of 1 MB (1, 2 and 4 ms x the window's number in variant 0; x (window + 1) in
variant 1, a rewritten file) and one AllGather, three ProfilerSteps and compute kernels. The
oracle is the aggregation that never sheds (and, once, the hand-worked figures): after any
sequence of files applied, files rewritten, reports, sheds and restarts, the JSON and text
reports of both are byte-identical.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
from commscope.exporters import jsonreport, text
from commscope.exporters.prometheus import Snapshot, families
from commscope.model.schema import (
    CommOp,
    Event,
    FinishedFile,
    GpuOp,
    RankResult,
    Record,
    ShedTally,
    Step,
    StreamEnd,
    StreamStart,
    TraceMeta,
)
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.aggregation import Aggregation, Verdict
from commscope.pipeline.edge import facts
from commscope.pipeline.report import Options
from commscope.service.aggregate import Aggregator
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.pipeline.test_aggregation import loopback_settings, receive_all

WORLD = 3
WINDOWS = ("iteration_10", "iteration_20", "iteration_30")
NODE = "node0"
MS = 1_000_000
PLAIN = Options()
PEAK = Options(peak_override_Bps=1e9)  # another context: every window's sections found anew


def events(window: int, rank: int, variant: int = 0) -> list[Event]:
    """One rank's file of window `window` (1, 2, 3): see the module docstring."""
    scale = window + variant
    found: list[Event] = []
    for i in range(3):
        start = 10 * MS * i + 1000 * rank
        found += [
            Step(window * 100 + i, start, 9 * MS, 1),
            GpuOp("compute", start, 3 * MS),
            CommOp("AllReduce", start + 3 * MS, (MS << i) * scale, MS, WORLD, True, "0", 2 * i),
            CommOp("AllGather", start + 8 * MS, MS // 2, 2 * MS, WORLD, True, "0", 2 * i + 1),
        ]
    return found


def records(window: int, rank: int, variant: int = 0) -> list[Record]:
    folder = WINDOWS[window - 1]
    path = f"/run/{folder}/rank{rank}.json"
    stream = hashlib.blake2b(f"{path}\0{variant}".encode(), digest_size=16).hexdigest()
    start = StreamStart(
        stream=stream, node=NODE, path=path, folder=folder, root_name="run", name_rank=rank
    )
    meta = TraceMeta(rank=rank, world_size=WORLD, gpu_name="NVIDIA H100")
    acc = Accumulator()
    acc.add_all(events(window, rank, variant))
    parts = list(facts(acc, stream, first_seq=1))  # what a collector sends of the file
    end = StreamEnd(stream=stream, seq=1 + len(parts), meta=meta, size_bytes=1000)
    return [start, *parts, end]


class Stored:
    """The store's `done/` as bytes; `held()`, if set, is recorded at every load."""

    def __init__(self) -> None:
        self.done: dict[str, bytes] = {}
        self.loads = 0
        self.held: list[int] = []
        self.holding: Callable[[], int] | None = None

    def keep(self, finished: FinishedFile | None) -> None:
        if finished is not None:
            self.done[finished.stream] = msgspec.msgpack.encode(finished)

    def load(self, stream: str) -> FinishedFile | None:
        self.loads += 1
        if self.holding is not None:
            self.held.append(self.holding())
        raw = self.done.get(stream)
        return None if raw is None else msgspec.msgpack.decode(raw, type=FinishedFile)


class Pair:
    """A shedding aggregation (`lean`, with a store) and one that never sheds (`full`)."""

    def __init__(self) -> None:
        self.stored = Stored()
        self.lean = Aggregation(load=self.stored.load)
        self.full = Aggregation()
        self.open: dict[str, list[Record]] = {}  # records of the streams still open

    def feed(self, items: Sequence[Record]) -> None:
        for record in items:
            if self.full.verdict(record) is not Verdict.APPLY:
                continue
            self.full.apply(record)
            self.stored.keep(self.lean.apply(record).finished)
            self.open.setdefault(record.stream, []).append(record)
            if isinstance(record, StreamEnd):
                del self.open[record.stream]

    def same(self, options: Options = PLAIN, final: bool = False) -> None:
        """Both reports, JSON and text, byte for byte."""
        lean, full = self.lean.report(options, final), self.full.report(options, final)
        assert jsonreport.render(lean) == jsonreport.render(full)
        assert text.render(lean) == text.render(full)

    def same_metrics(self, options: Options = PLAIN) -> None:
        """The shedding aggregation's report for /metrics alone gives the metrics of the
        full report of the one that never sheds."""
        lean = self.lean.report(options, metrics_only=True)
        full = self.full.report(options)
        assert families(Snapshot("j", lean)) == families(Snapshot("j", full))

    def restart(self) -> None:
        """A fresh shedding aggregation from the store and the open streams' logs."""
        self.lean = Aggregation(load=self.stored.load)
        self.lean.restore(
            (self.stored.load(s) for s in sorted(self.stored.done) if s in self.full.finished),
            self.full.retired,
        )
        for stream, logged in self.open.items():
            if stream in self.full.open:  # (not one superseded while open)
                for record in logged:
                    self.lean.apply(record)


def every_file(pair: Pair, windows: Sequence[int] = (1, 2, 3)) -> None:
    for window in windows:
        for rank in range(WORLD):
            pair.feed(records(window, rank))


def shed_files(aggregation: Aggregation) -> dict[str, list[int]]:
    """Per window, the ranks whose samples are shed (their tallies hold sketches)."""
    found: dict[str, list[int]] = {}
    for item in sorted(aggregation.finished.values(), key=lambda f: f.path):
        if item.result is not None and _is_shed(item.result):
            found.setdefault(item.folder, []).append(item.name_rank or 0)
    return found


def _is_shed(result: RankResult) -> bool:
    return any(isinstance(t, ShedTally) for t in result.ops.values())


def exact_held(aggregation: Aggregation) -> int:
    """Finished files holding exact samples."""
    return sum(
        1
        for f in aggregation.finished.values()
        if f.result and any(t.algbw_Bps for t in f.result.ops.values())
    )


# ---------------------------------------------------------------- by hand


def test_a_report_before_and_after_shed_is_the_same() -> None:
    pair = Pair()
    every_file(pair)
    pair.same()
    assert pair.lean.shed() == 9  # 3 windows x 3 ranks: calls and samples given up
    assert shed_files(pair.lean) == {w: [0, 1, 2] for w in WINDOWS}
    assert exact_held(pair.lean) == 0
    pair.same()
    pair.same(final=True)
    assert pair.stored.loads == 0  # the windows' sections were cached: nothing read back


def test_reports_for_metrics_then_shed_leave_the_full_report_as_it_was() -> None:
    """Mid-run reports read no run sample: after them a shed gives up every file's samples
    (a rank of one window's too), and the final report reads them back from the store."""
    pair = Pair()
    every_file(pair, (1,))
    pair.same_metrics()
    assert pair.lean.shed() == 3 and exact_held(pair.lean) == 0
    loads = pair.stored.loads
    pair.same(final=True)
    assert pair.stored.loads - loads == 3  # the run of one window reads its exact samples


def test_window_figures_stay_exact_and_the_run_is_sketched_after_shed() -> None:
    """Rank 0's AllReduce algbw in iteration_10: 1 MB over 1, 2, 4 ms = 1e9, 5e8, 2.5e8 B/s,
    median 5e8 exactly; the run pools 9 values (x1, x1/2, x1/3 per window) from sketches."""
    pair = Pair()
    every_file(pair)
    pair.lean.report(PLAIN)
    pair.lean.shed()
    report = pair.lean.report(PEAK)  # a new context: each window's sections found anew
    window = report.windows[0].collectives.per_rank["0"]["AllReduce"].algbw_Bps
    assert (window.median, window.min, window.max, window.relative_error) == (5e8, 2.5e8, 1e9, None)
    run = report.collectives.per_rank["0"]["AllReduce"].algbw_Bps
    assert (run.min, run.max, run.relative_error) == (2.5e8 / 3, 1e9, 0.01)
    assert shed_files(pair.lean) == {w: [0, 1, 2] for w in WINDOWS}  # shed again after use


def test_a_new_context_reads_the_samples_back_one_window_at_a_time() -> None:
    pair = Pair()
    every_file(pair)
    pair.same()
    pair.lean.shed()
    pair.stored.holding = lambda: exact_held(pair.lean)
    pair.same(PEAK)
    assert pair.stored.loads == 9 and max(pair.stored.held) == WORLD - 1
    assert pair.lean.cache.samples_held() == 0  # nor do the sketches found meanwhile keep them


def test_a_rank_of_one_window_keeps_its_samples_until_its_second_window() -> None:
    """With one window the run's figures are that window's, exact: its samples stay. Once
    the second window is in, the first's are shed (then the second's, once reported)."""
    pair = Pair()
    every_file(pair, [1])
    pair.same()
    assert pair.lean.shed() == 3  # the call lists only
    assert shed_files(pair.lean) == {} and exact_held(pair.lean) == 3
    pair.same()
    every_file(pair, [2])
    pair.same()
    pair.lean.shed()
    assert shed_files(pair.lean) == {w: [0, 1, 2] for w in WINDOWS[:2]}
    pair.same()
    assert pair.stored.loads == 0


def test_a_window_changed_after_shed_is_read_back_and_found_exactly() -> None:
    """Rank 1 of iteration_20 rewritten with other durations: while the new file is open the
    window has 2 files (read back: calls and samples), then 3 again (the new one exact)."""
    pair = Pair()
    every_file(pair)
    pair.same()
    pair.lean.shed()
    rewritten = records(2, 1, variant=1)
    pair.feed(rewritten[:2])
    pair.same()
    assert pair.stored.loads == 2  # iteration_20's ranks 0 and 2
    # rank 1 has two windows left: its files of iteration_10 and _30 keep their sketches
    assert shed_files(pair.lean) == {"iteration_10": [0, 1, 2], "iteration_30": [0, 1, 2]}
    pair.lean.shed()  # iteration_20 is not complete: kept
    pair.feed(rewritten[2:])
    pair.same()
    pair.lean.shed()
    assert shed_files(pair.lean) == {w: [0, 1, 2] for w in WINDOWS}
    pair.same(PEAK, final=True)


def test_a_restart_keeps_samples_as_sketches_and_reads_one_window_at_a_time() -> None:
    pair = Pair()
    every_file(pair)
    pair.same()
    pair.restart()
    assert shed_files(pair.lean) == {w: [0, 1, 2] for w in WINDOWS}
    loads = pair.stored.loads
    pair.stored.holding = lambda: exact_held(pair.lean)
    pair.same()
    # each window's sections from its samples, read back (once matched, calls stay dropped)
    assert pair.stored.loads - loads == 9 and max(pair.stored.held) == WORLD - 1
    pair.lean.shed()
    assert exact_held(pair.lean) == 0


def test_samples_read_back_for_the_run_are_shed_again_once_it_no_longer_reads_them() -> None:
    """A restart with one window sheds its samples; the next report's run (one window: its
    exact samples) reads them back and keeps them; once a second window is in, a shed gives
    them up again (a stream shed once is looked at again when its samples came back)."""
    pair = Pair()
    every_file(pair, [1])
    pair.same()
    pair.restart()
    assert shed_files(pair.lean) == {WINDOWS[0]: [0, 1, 2]}
    pair.same()
    pair.lean.shed()
    assert exact_held(pair.lean) == 3  # the run's figures read them: kept
    every_file(pair, [2])
    pair.same()
    pair.lean.shed()
    assert shed_files(pair.lean) == {w: [0, 1, 2] for w in WINDOWS[:2]}
    assert exact_held(pair.lean) == 0


def test_the_aggregator_sheds_samples_once_stored_and_a_restart_agrees(tmp_path: Path) -> None:
    settings = loopback_settings(tmp_path)
    aggregator = Aggregator(settings)
    try:
        for window in (1, 2):
            for rank in range(WORLD):
                receive_all(aggregator, records(window, rank))
        aggregator.publish()  # not stored yet: nothing is shed
        assert shed_files(aggregator.aggregation) == {}
        aggregator.commit()
        aggregator._tick()  # stored, and the windows complete: published at once
        assert shed_files(aggregator.aggregation) == {w: [0, 1, 2] for w in WINDOWS[:2]}
        report = aggregator.aggregation.report(PEAK)
        assert shed_files(aggregator.aggregation) == {w: [0, 1, 2] for w in WINDOWS[:2]}
    finally:
        aggregator.store.close()
    again = Aggregator(settings)
    try:
        assert shed_files(again.aggregation) == {w: [0, 1, 2] for w in WINDOWS[:2]}
        assert jsonreport.render(again.aggregation.report(PEAK)) == jsonreport.render(report)
    finally:
        again.store.close()


# ---------------------------------------------------------------- any sequence


def assert_samples_shed(aggregation: Aggregation) -> None:
    """What `shed` promises (however often a stream was shed, given back and read again): no
    file of a complete window the last report used as it is keeps exact samples, but those
    the last report's run figures read."""
    folders = aggregation._folders()
    for folder in aggregation.complete_windows():
        if aggregation._reported.get(folder) != folders[folder] or folder in aggregation._held:
            continue
        for stream in folders[folder]:
            result = aggregation.finished[stream].result
            if result is not None and id(result) not in aggregation._kept:
                assert not any(tally.algbw_Bps for tally in result.ops.values()), stream


Apply = st.tuples(st.just("apply"), st.integers(1, 3), st.integers(0, WORLD - 1), st.integers(0, 1))
Half = st.tuples(st.just("half"), st.integers(1, 3), st.integers(0, WORLD - 1), st.integers(0, 1))
Whole = st.tuples(st.just("window"), st.integers(1, 3), st.integers(0, 1))  # every rank's file
Steps = st.lists(
    st.one_of(
        Apply,
        Half,
        Whole,
        st.tuples(st.just("report"), st.booleans()),
        st.tuples(st.just("metrics"), st.booleans()),
        st.just(("shed",)),
        st.just(("restart",)),
    ),
    max_size=25,
)


@settings(max_examples=100, deadline=None)
@given(Steps)
def test_any_sequence_gives_the_reports_of_an_aggregation_that_never_sheds(
    steps: list[tuple[object, ...]],
) -> None:
    """Files applied whole or half, or a window's every file (a rewrite when the variant
    differs: the old stream is superseded), reports in two contexts (whole, or for /metrics
    alone as the aggregator builds them mid-run), sheds and restarts, in any order."""
    pair = Pair()
    for step in steps:
        match step:
            case ("apply", int(window), int(rank), int(variant)):
                pair.feed(records(window, rank, variant))
            case ("half", int(window), int(rank), int(variant)):
                pair.feed(records(window, rank, variant)[:2])
            case ("window", int(window), int(variant)):
                for rank in range(WORLD):
                    pair.feed(records(window, rank, variant))
            case ("report", bool(peak)):
                pair.same(PEAK if peak else PLAIN)
            case ("metrics", bool(peak)):
                pair.same_metrics(PEAK if peak else PLAIN)
            case ("shed",):
                pair.lean.shed()
                assert_samples_shed(pair.lean)
            case ("restart",):
                pair.restart()
    pair.same()
    pair.lean.shed()
    pair.same(PEAK, final=True)
