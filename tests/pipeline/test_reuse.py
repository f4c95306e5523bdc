"""The reports that reuse earlier work: a finished window is analysed once however often the
report is rebuilt, and each report is the one built anew."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import msgspec
import pytest
from commscope.exporters import jsonreport, text
from commscope.exporters.prometheus import Snapshot, families
from commscope.model.schema import (
    Clocks,
    CommOp,
    Diagnosis,
    FileStats,
    Health,
    Matching,
    Network,
    OpTally,
    RankResult,
    Report,
    Sketch,
    Skew,
    Summary,
    TraceMeta,
)
from commscope.pipeline import accumulate, crossrank, reuse
from commscope.pipeline.accumulate import Accumulator, Sketcher, merge_results
from commscope.pipeline.crossrank import CrossRank
from commscope.pipeline.report import Options, ParsedFile, build_report
from commscope.pipeline.reuse import WindowCache
from crossrank_builder import Scenario, calls, results
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.metrics_core import Metric


def files(seed: int) -> list[ParsedFile]:
    per_rank, _ = calls(Scenario(ranks=3, instances=12, slow_rank=1, late_ns=400_000, seed=seed))
    meta = TraceMeta(world_size=3)
    return [
        ParsedFile(window, f"{window}/rank{rank}.json", rank, meta, result, FileStats())
        for window in ("a", "b")
        for rank, result in results(per_rank).items()
    ]


def test_an_unchanged_window_is_reused_and_gives_the_same_report() -> None:
    cache, parsed = WindowCache(), files(seed=1)
    first = cache.build(["a", "b"], parsed, Options())
    again = cache.build(["a", "b"], parsed, Options())
    assert [w is v for w, v in zip(first.windows, again.windows, strict=True)] == [True, True]
    assert again == build_report(["a", "b"], parsed, Options())


def test_a_window_whose_files_changed_is_analysed_again() -> None:
    cache, parsed = WindowCache(), files(seed=1)
    first = cache.build(["a", "b"], parsed, Options())
    changed = [p for p in parsed if p.window == "a"] + [p for p in files(seed=2) if p.window == "b"]
    again = cache.build(["a", "b"], changed, Options())
    assert again.windows[0] is first.windows[0]
    assert again.windows[1] is not first.windows[1]
    assert again == build_report(["a", "b"], changed, Options())


def test_a_changed_context_is_analysed_again() -> None:
    cache, parsed = WindowCache(), files(seed=1)
    first = cache.build(["a", "b"], parsed, Options())
    again = cache.build(["a", "b"], parsed, Options(peak_override_Bps=1e9))
    assert again.windows[0] is not first.windows[0]
    assert again.windows[0].network.peak_bandwidth_Bps == 1e9


def test_cross_rank_facts_outlive_a_rename_and_a_new_context() -> None:
    """They depend on the files alone: after a rename or a new context they are not found
    again (a file whose call list was dropped could not be matched again)."""
    cache, parsed = WindowCache(), files(seed=1)
    first = cache.build(["a", "b"], parsed, Options())
    for item in parsed:
        item.result.calls = []  # as the live aggregation drops them
    renamed = [replace(p, window={"a": "x/a", "b": "x/b"}[p.window]) for p in parsed]
    again = cache.build(["x/a", "x/b"], renamed, Options(peak_override_Bps=1e9))
    assert [w.name for w in again.windows] == ["x/a", "x/b"]
    assert again.matching == first.matching and first.matching.instances == 24
    assert [w.skew for w in again.windows] == [w.skew for w in first.windows]
    assert again.windows[0].network.peak_bandwidth_Bps == 1e9


def test_cross_rank_facts_of_windows_gone_are_forgotten() -> None:
    cache, parsed = WindowCache(), files(seed=1)
    cache.build(["a", "b"], parsed, Options())
    only_a = [p for p in parsed if p.window == "a"]
    cache.build(["a"], only_a, Options())
    assert len(cache._cross) == 1 and len(cache._sections) == 1


def test_exact_samples_are_read_only_within_the_hook_and_a_rename_reads_none() -> None:
    """`exact` sees each window's results when its sections are found (`again` False) and the
    run's ranks of one window (`again` True: each report reads them); a renamed window's
    sections are reused, reading nothing."""
    seen: list[tuple[int, bool]] = []

    @contextmanager
    def exact(results: Sequence[RankResult], again: bool) -> Iterator[None]:
        seen.append((len(results), again))
        yield

    cache, parsed = WindowCache(exact), files(seed=1)
    first = cache.build(["a", "b"], parsed, Options())
    assert seen == [(3, False), (3, False), (0, True)]  # 3 ranks a window, each in both
    seen.clear()
    renamed = [replace(p, window={"a": "x/a", "b": "x/b"}[p.window]) for p in parsed]
    again = cache.build(["x/a", "x/b"], renamed, Options())
    assert seen == [(0, True)] and [w.name for w in again.windows] == ["x/a", "x/b"]
    for renamed_window, window in zip(again.windows, first.windows, strict=True):
        assert msgspec.structs.replace(renamed_window, name=window.name) == window
    seen.clear()
    cache.build(["x/a"], [p for p in renamed if p.window == "x/a"], Options())
    assert seen == [(3, True)]  # one window left: the run's figures are its exact ones


def test_a_new_window_is_folded_into_the_run_of_the_earlier_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reports over windows a, b then a, b, c: the second merges each rank's run of a and b
    (cached by the first) with c alone, two results a merge, and gives the report a build
    from scratch gives."""
    cache = WindowCache()
    parsed = files(seed=1) + [replace(p, window="c") for p in files(seed=3) if p.window == "a"]
    cache.build(["a", "b"], [p for p in parsed if p.window != "c"], Options())
    merged: list[int] = []

    def counted(
        results: Iterable[RankResult], sketcher: Sketcher | None = None, samples: bool = True
    ) -> RankResult:
        given = list(results)
        merged.append(len(given))
        return merge_results(given, sketcher, samples)

    monkeypatch.setattr(reuse, "merge_results", counted)
    again = cache.build(["a", "b", "c"], parsed, Options())
    assert merged == [2, 2, 2]  # 3 ranks, each its run of a and b, and c
    monkeypatch.undo()
    assert again == build_report(["a", "b", "c"], parsed, Options())


# ---------------------------------------------------------------- a report for /metrics alone
def metrics(found: Report) -> list[Metric]:
    return families(Snapshot(job="j", report=found))


def test_a_metrics_only_report_gives_the_metrics_of_the_full_one() -> None:
    """Over one window, then two (the first folded into the second), with a third open."""
    cache, parsed = WindowCache(), files(seed=1)
    third = [replace(p, window="c") for p in files(seed=3) if p.window == "a" and p.name_rank]
    for names, chosen in (
        (["a"], parsed[:3]),
        (["a", "b"], parsed),
        (["a", "b", "c"], parsed + third),
    ):
        full = build_report(names, chosen, Options(waiting={"c"}))
        lean = cache.build(names, chosen, Options(waiting={"c"}, metrics_only=True))
        assert metrics(lean) == metrics(full) and lean.windows == full.windows
        assert lean.inputs == full.inputs and lean.skew.per_rank == full.skew.per_rank


def test_a_metrics_only_report_leaves_out_the_run_sections_metrics_do_not_read() -> None:
    """Rank 0 made 12 AllReduces of 1 MiB a window (crossrank_builder): 24 over the run, their
    bandwidths left unread; no health, diagnosis, traffic, steps, plots or per-rank tallies."""
    lean = build_report(["a", "b"], files(seed=1), Options(metrics_only=True))
    stats = lean.collectives.all_ranks["AllReduce"]
    assert (stats.count, stats.message_bytes) == (3 * 24, 3 * 24 << 20)
    assert stats.algbw_Bps == stats.busbw_Bps == Summary()
    assert lean.collectives.per_rank == {} and lean.traffic == {} and lean.steps == {}
    assert (lean.health, lean.diagnosis) == (Health(), Diagnosis())
    assert lean.skew.instances == {}
    unknown = "GPU unknown (no deviceProperties); give --peak-bandwidth"
    assert lean.network == Network(peak_source=unknown)  # its peak alone
    assert all(fit.points == [] for kinds in lean.alpha_beta.values() for fit in kinds.values())


def test_the_runs_counts_and_sums_fold_from_one_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reports over a, then a and b: the second folds each rank's b into its a (one merge of
    two a rank), and gives what a build from scratch gives."""
    cache, parsed = WindowCache(), files(seed=1)
    cache.build(["a"], parsed[:3], Options(metrics_only=True))
    merged: list[tuple[int, bool]] = []

    def counted(
        results: Iterable[RankResult], sketcher: Sketcher | None = None, samples: bool = True
    ) -> RankResult:
        given = list(results)
        merged.append((len(given), samples))
        return merge_results(given, sketcher, samples)

    monkeypatch.setattr(reuse, "merge_results", counted)
    again = cache.build(["a", "b"], parsed, Options(metrics_only=True))
    assert merged == [(2, False)] * 3
    monkeypatch.undo()
    assert again == build_report(["a", "b"], parsed, Options(metrics_only=True))


def test_results_merged_without_samples_keep_their_counts_and_sums() -> None:
    """Two windows of one AllReduce of 1 MB in 1 ms (algbw 1e9 B/s), of 4 ranks: F = 2 x 3/4,
    so bus_parts {4: 1 MB x 6} each; merged, counts and sums add up and no sample is kept."""
    one = Accumulator()
    one.add(CommOp("AllReduce", 0, 10**6, 10**6, 4, True, "0", 0))
    window = one.result()
    assert window.ops["AllReduce"].algbw_Bps  # the window keeps its sample
    tally = merge_results([window, window], samples=False).ops["AllReduce"]
    assert type(tally) is OpTally and (tally.algbw_Bps, tally.busbw_Bps) == (b"", b"")
    assert (tally.count, tally.sized_count, tally.message_bytes) == (2, 2, 2 * 10**6)
    assert (tally.bus_parts, tally.time_ns, tally.bus_count) == ({4: 12 * 10**6}, 2 * 10**6, 2)


def test_the_runs_cross_rank_facts_take_only_the_new_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Reports over windows a, b then a, b, c: the second pools the run of a and b (pooled by
    the first) with c alone, its clocks the median over the three; a report for /metrics
    alone finds no run clocks. Each gives what a build from scratch gives."""
    cache = WindowCache()
    parsed = files(seed=1) + [replace(p, window="c") for p in files(seed=3) if p.window == "a"]
    cache.build(["a", "b"], [p for p in parsed if p.window != "c"], Options())
    pooled: list[int] = []
    medians: list[int] = []
    real_pooled, real_clocks = crossrank.pooled, crossrank.merge_clocks

    def counted(windows: Sequence[CrossRank], clocked: bool = True) -> CrossRank:
        pooled.append(len(windows))
        return real_pooled(windows, clocked)

    def clocked(parts: Sequence[Clocks]) -> Clocks:
        medians.append(len(parts))
        return real_clocks(parts)

    monkeypatch.setattr(crossrank, "pooled", counted)
    monkeypatch.setattr(crossrank, "merge_clocks", clocked)
    again = cache.build(["a", "b", "c"], parsed, Options())
    lean = cache.build(["a", "b", "c"], parsed, Options(metrics_only=True))
    assert (pooled, medians) == ([2], [3])  # the pool of a, b, c is known to the second
    monkeypatch.undo()
    assert again == build_report(["a", "b", "c"], parsed, Options())
    assert lean == build_report(["a", "b", "c"], parsed, Options(metrics_only=True))


def test_merged_windows_merge_again_as_their_windows_would() -> None:
    """merge_results is a left fold, evidence included: a gloo window then two GPU windows
    give "cpu (gloo) + gpu kernels" whether merged at once or the third into the first two."""
    first, second, third = (
        RankResult(evidence_text=evidence, comm_ns=ns, steps={ns: ns})
        for evidence, ns in (("cpu (gloo)", 1), ("gpu kernels", 2), ("gpu kernels", 3))
    )
    at_once = merge_results([first, second, third])
    assert at_once.evidence_text == "cpu (gloo) + gpu kernels" and at_once.comm_ns == 6
    assert merge_results([merge_results([first, second]), third]) == at_once


# ---------------------------------------------------------------- sketched once
def count_sketches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets one item each time `accumulate.sketch_of` makes a sketch."""
    sketched: list[int] = []
    real = accumulate.sketch_of

    def counted(values: Iterable[float]) -> Sketch:
        sketched.append(1)
        return real(values)

    monkeypatch.setattr(accumulate, "sketch_of", counted)
    return sketched


def test_each_window_tally_is_sketched_once_however_often_reported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window's algbw and busbw samples are sketched for its facts; merging its rank's
    windows and pooling the run reuse those sketches: 2 sketches a tally in all (the rank's
    windows merged as before, `merge_results` sketching each window anew)."""
    parsed = files(seed=1)
    sketched = count_sketches(monkeypatch)
    cache = WindowCache()
    first = cache.build(["a", "b"], parsed, Options())
    assert len(sketched) == 2 * sum(len(item.result.ops) for item in parsed)
    again = cache.build(["a", "b"], parsed, Options())
    assert len(sketched) == 2 * sum(len(item.result.ops) for item in parsed)
    assert first == again
    for rank in range(3):
        windows = [item.result for item in parsed if item.name_rank == rank]
        assert cache.merged(windows) == merge_results(windows)  # sketched again: the same


def test_a_forgotten_tally_is_sketched_again() -> None:
    """`forget` lets a tally's sketches go; asked again, they are found anew, equal."""
    cache = WindowCache()
    tally = files(seed=1)[0].result.ops["AllReduce"]
    found = cache.sketch(tally, "algbw")
    assert cache.sketch(tally, "algbw") is found
    cache.forget([tally])
    assert cache.sketch(tally, "algbw") is not found
    assert cache.sketch(tally, "algbw") == found


# ---------------------------------------------------------------- open windows


def test_a_waiting_window_has_no_cross_rank_sections_and_the_report_says_so() -> None:
    """Window b open: its per-rank sections are those of the whole report, its cross-rank
    ones empty; the run's cross-rank sections are those of window a alone; the report names
    b as open (`inputs.open_windows`, and a line of the text report).
    The next report without `waiting` is the full one."""
    cache, parsed = WindowCache(), files(seed=1)
    mid = cache.build(["a", "b"], parsed, Options(waiting={"b"}))
    full = build_report(["a", "b"], parsed, Options())
    only_a = build_report(["a"], [p for p in parsed if p.window == "a"], Options())
    open_b = mid.windows[1]
    assert (open_b.matching, open_b.clocks, open_b.skew, open_b.alpha_beta) == (
        Matching(),
        Clocks(),
        Skew(),
        {},
    )
    assert open_b.collectives == full.windows[1].collectives
    # its facts but for the exposed split, which rests on the cross-rank facts: not in yet
    unsplit = {r: msgspec.structs.replace(f, split=None) for r, f in full.windows[1].facts.items()}
    assert unsplit == open_b.facts
    assert all(row.exposed_waiting_s is None for row in open_b.overlap.per_rank.values())
    assert mid.windows[0] == full.windows[0]
    assert (mid.matching, mid.clocks, mid.skew) == (only_a.matching, only_a.clocks, only_a.skew)
    assert mid.alpha_beta == only_a.alpha_beta
    assert mid.inputs.open_windows == ["b"]
    assert "Mid-run: b still open, shown without cross-rank sections" in text.render(mid)
    assert "Mid-run" not in text.render(full)
    assert cache.build(["a", "b"], parsed, Options()) == full


def test_a_waiting_window_keeps_cross_rank_facts_already_known() -> None:
    """Facts found for the window's files (`prime`, as at a restart) outlive reports that
    leave them out: the report giving them does not match the files again."""
    cache, parsed = WindowCache(), files(seed=1)
    cache.prime([p for p in parsed if p.window == "b"])
    for _ in range(3):
        cache.build(["a", "b"], parsed, Options(waiting={"b"}))
    full = build_report(["a", "b"], parsed, Options())
    for item in parsed:
        item.result.calls = []  # as the live aggregation drops them: they cannot be matched
    assert cache.build(["a", "b"], parsed, Options()) == full


def test_sketches_found_for_a_window_serve_the_next_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Window a reported alone (its sketches found for its facts), then a and b: the run's
    merge of a and b sketches only b's tallies (a's are those the first report found)."""
    parsed = files(seed=1)
    window_a = [p for p in parsed if p.window == "a"]
    cache = WindowCache()
    cache.build(["a"], window_a, Options())
    sketched = count_sketches(monkeypatch)
    found = cache.build(["a", "b"], parsed, Options())
    assert len(sketched) == 2 * sum(len(p.result.ops) for p in parsed if p.window == "b")
    monkeypatch.undo()
    assert found == build_report(["a", "b"], parsed, Options())


def test_reports_mid_window_fit_the_runs_alpha_beta_and_skew_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Windows a and b complete, c open and gaining a rank between two reports for /metrics:
    the run's pooled cross-rank facts (a and b) are the same for both, so its α-β fits and
    skew section are found once; c completing makes them new. Each report is what a build
    from scratch gives."""
    cache = WindowCache()
    c = [replace(p, window="c") for p in files(seed=3) if p.window == "a"]
    parsed = files(seed=1)
    fits: list[int] = []
    real = crossrank.alpha_beta

    def counted(cross: CrossRank, peak_Bps: float | None) -> dict[str, Any]:
        fits.append(1)
        return real(cross, peak_Bps)

    monkeypatch.setattr(crossrank, "alpha_beta", counted)
    found = []
    for inputs, waiting in ((parsed + c[:1], {"c"}), (parsed + c[:2], {"c"}), (parsed + c, set())):
        report_ = cache.build(["a", "b", "c"], inputs, Options(waiting=waiting, metrics_only=True))
        found.append((len(fits), report_, inputs, waiting))
    # fits so far: a's, b's and the run's (a+b); none; c's and the run's (a+b+c)
    assert [n for n, *_ in found] == [3, 3, 5]
    monkeypatch.undo()
    for _, report_, inputs, waiting in found:
        again = build_report(["a", "b", "c"], inputs, Options(waiting=waiting, metrics_only=True))
        assert report_ == again


WINDOWS = ("a", "b", "c")
Step = tuple[str, str, int, int]  # (what, window, seed, ranks given of an open window)
steps = st.lists(
    st.tuples(
        st.sampled_from(["set", "open", "drop", "rename", "same"]),
        st.sampled_from(WINDOWS),
        st.integers(1, 3),
        st.integers(1, 2),
    ),
    min_size=1,
    max_size=6,
)


class Run:
    """Each window's files as a live run changes them; each (window, seed) made once, so a
    window given the same seed again is the very same files (what the cache reuses)."""

    def __init__(self) -> None:
        self.made: dict[tuple[str, int], list[ParsedFile]] = {}
        self.windows: dict[str, list[ParsedFile]] = {}
        self.waiting: set[str] = set()

    def apply(self, step: Step) -> None:
        what, window, seed, ranks = step
        self.waiting.discard(window)
        if what == "drop":
            self.windows.pop(window, None)
        elif what == "rename" and window in self.windows:
            other = WINDOWS[(WINDOWS.index(window) + 1) % len(WINDOWS)]
            moved = [replace(p, window=other) for p in self.windows.pop(window)]
            self.windows[other] = moved
            self.waiting.discard(other)
        elif what in ("set", "open"):
            whole = self._made(window, seed)
            self.windows[window] = whole if what == "set" else whole[:ranks]
            if what == "open":
                self.waiting.add(window)

    def _made(self, window: str, seed: int) -> list[ParsedFile]:
        key = (window, seed)
        if key not in self.made:
            self.made[key] = [replace(p, window=window) for p in files(seed) if p.window == "a"]
        return self.made[key]

    def inputs(self) -> tuple[list[str], list[ParsedFile]]:
        names = sorted(self.windows)
        return names, [p for name in names for p in self.windows[name]]


@settings(max_examples=30, deadline=None, database=None)
@given(steps, st.lists(st.booleans(), min_size=6, max_size=6), st.booleans())
def test_reports_reusing_earlier_work_are_those_built_anew(
    changes: list[Step], lean: list[bool], peaked: bool
) -> None:
    """Oracle: over any sequence of window updates (windows completed, changed, open with some
    ranks, dropped, renamed, or left as they were), each report the cache builds is,
    byte for byte as JSON, the report `build_report` builds from scratch."""
    cache, run = WindowCache(), Run()
    for step, metrics_only in zip(changes, lean, strict=False):
        run.apply(step)
        names, present = run.inputs()
        options = Options(
            peak_override_Bps=1e9 if peaked else None,
            waiting=frozenset(run.waiting),
            metrics_only=metrics_only,
        )
        found = cache.build(names, present, options)
        assert jsonreport.render(found) == jsonreport.render(build_report(names, present, options))
