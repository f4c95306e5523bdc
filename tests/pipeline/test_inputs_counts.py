"""The report's input counts (`report._inputs`), each window's files counted once while they are
the same (`WindowCache.file_counts`), against the oracle: every used file counted anew, as the
contract says (files parsed or skipped; bytes, events, drops, unknown sizes, notes and sources
over the files used, a parsed file skipped later not among them)."""

from __future__ import annotations

from collections import Counter

from commscope.model.schema import FileStats, Inputs, RankResult, Skipped, TraceMeta
from commscope.pipeline.report import ParsedFile, _inputs
from commscope.pipeline.reuse import WindowCache
from hypothesis import given, settings
from hypothesis import strategies as st


def oracle(parsed: list[ParsedFile], skipped: list[Skipped], notes: list[str]) -> Inputs:
    bad = {s.path for s in skipped}
    used = [p for p in parsed if p.path not in bad]
    dropped: Counter[str] = Counter()
    for item in used:
        dropped.update(item.stats.dropped)
    return Inputs(
        files=len({p.path for p in parsed} | bad),
        skipped=sorted(skipped, key=lambda s: s.path),
        bytes_read=sum(p.stats.bytes_read for p in used),
        events=sum(p.stats.events for p in used),
        dropped_events=dict(sorted(dropped.items())),
        sizes_unknown=sum(p.stats.sizes_unknown for p in used),
        notes=[*notes, *dict.fromkeys(f"{p.path}: {p.note}" for p in used if p.note)],
        sources=dict(sorted(Counter(p.meta.source for p in used).items())),
    )


def parsed_file(window: str, name: str, size: int, *, drop: str | None, note: str | None,
                source: str) -> ParsedFile:  # fmt: skip
    stats = FileStats(bytes_read=size, events=size // 3, sizes_unknown=size % 2,
                      dropped={drop: 1} if drop else {})  # fmt: skip
    meta = TraceMeta(source=source)  # type: ignore[arg-type]
    result = RankResult(evidence_text="none")
    return ParsedFile(window, f"{window}/{name}", None, meta, result, stats, note)


files = st.lists(
    st.builds(
        parsed_file,
        st.sampled_from(["iteration_1", "iteration_2", "iteration_3"]),
        st.sampled_from(["rank0.json", "rank1.json", "rank2.json"]),
        st.integers(0, 10**6),
        drop=st.none() | st.sampled_from(["json error", "no end"]),
        note=st.none() | st.sampled_from(["rank from name", "nsys"]),
        source=st.sampled_from(["kineto", "nsys"]),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(files, st.lists(st.integers(0, 11), max_size=4), st.lists(st.text(max_size=3), max_size=2))
def test_counted_window_by_window_as_every_file_anew(
    parsed: list[ParsedFile], bad: list[int], notes: list[str]
) -> None:
    """Files in any order (a window's files apart too), some skipped by path (parsed or not),
    counted twice by one cache (the second time from its counts)."""
    skipped = [Skipped(parsed[i].path if i < len(parsed) else f"gone/{i}", "why") for i in bad]
    cache = WindowCache()
    expected = oracle(parsed, skipped, notes)
    assert _inputs(parsed, skipped, notes) == expected
    assert _inputs(parsed, skipped, notes, cache.file_counts) == expected
    assert _inputs(parsed, skipped, notes, cache.file_counts) == expected
