"""The window cache: a finished window is analysed once however often the report is rebuilt."""

from __future__ import annotations

from commscope.collector.schema import FileStats, TraceMeta
from commscope.pipeline.report import Options, ParsedFile, WindowCache, build_report
from crossrank_builder import Scenario, calls, results


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
    first = build_report(["a", "b"], parsed, [], Options(), cache=cache)
    again = build_report(["a", "b"], parsed, [], Options(), cache=cache)
    assert [w is v for w, v in zip(first.windows, again.windows, strict=True)] == [True, True]
    assert again == build_report(["a", "b"], parsed, [], Options())


def test_a_window_whose_files_changed_is_analysed_again() -> None:
    cache, parsed = WindowCache(), files(seed=1)
    first = build_report(["a", "b"], parsed, [], Options(), cache=cache)
    changed = [p for p in parsed if p.window == "a"] + [p for p in files(seed=2) if p.window == "b"]
    again = build_report(["a", "b"], changed, [], Options(), cache=cache)
    assert again.windows[0] is first.windows[0]
    assert again.windows[1] is not first.windows[1]
    assert again == build_report(["a", "b"], changed, [], Options())


def test_a_changed_context_is_analysed_again() -> None:
    cache, parsed = WindowCache(), files(seed=1)
    first = build_report(["a", "b"], parsed, [], Options(), cache=cache)
    again = build_report(["a", "b"], parsed, [], Options(peak_override_Bps=1e9), cache=cache)
    assert again.windows[0] is not first.windows[0]
    assert again.windows[0].network.peak_bandwidth_Bps == 1e9
