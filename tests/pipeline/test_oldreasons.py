"""Drop reasons as commscope wrote them up to protocol 9 / state 3 / schema 5 (English
sentences) load under their snake_case keys: in stored stats and in old JSON reports."""

from __future__ import annotations

import msgspec
from commscope.model.schema import (
    EVENT_DROP_REASONS,
    REASONS,
    FileStats,
    RankFacts,
    RankResult,
    Report,
)
from commscope.pipeline.compare import load
from commscope.pipeline.oldreasons import OLD_KEYS, renamed, upgrade_report, upgrade_stats

OLD_SPAN = "span without numeric ts/dur (or out of range)"
OLD_LINE = "inspector line that is not JSON"


def test_every_old_sentence_is_the_text_of_its_key() -> None:
    """The old sentences of the event drop reasons are their texts now; the collector's own
    three were reworded."""
    for sentence, key in OLD_KEYS.items():
        assert key in REASONS
        assert key not in EVENT_DROP_REASONS or REASONS[key] == sentence


def test_renamed_keeps_current_keys_and_adds_up_counts() -> None:
    assert renamed({OLD_SPAN: 2, "bad_span": 1, "bad_tid": 4}) == {"bad_span": 3, "bad_tid": 4}


def test_only_stats_with_an_old_reason_are_touched() -> None:
    holder = {"stats": {"events": 9, "dropped": {OLD_SPAN: 2}}}
    assert upgrade_stats(holder) and holder == {"stats": {"events": 9, "dropped": {"bad_span": 2}}}
    for other in ({"stats": {"dropped": {"bad_span": 1}}}, {"stats": 3}, [1], {"x": 1}):
        assert not upgrade_stats(other)


def test_an_old_report_loads_with_its_reasons_keyed() -> None:
    document = msgspec.to_builtins(Report(schema_version=5))
    document["inputs"]["dropped_events"] = {OLD_SPAN: 3, OLD_LINE: 1}
    data = msgspec.json.encode(document)
    report = load(data, "old.json")
    assert report.inputs.dropped_events == {"bad_span": 3, "inspector_not_json": 1}


def test_an_old_report_s_rank_facts_decode_after_the_upgrade() -> None:
    facts = msgspec.to_builtins(
        RankFacts(result=RankResult(evidence_text="none"), stats=FileStats(events=5))
    )
    facts["stats"]["dropped"] = {OLD_LINE: 2}
    document = {"windows": [{"facts": {"0": facts}}], "inputs": {}}
    upgrade_report(document)
    keyed = msgspec.convert(document["windows"][0]["facts"]["0"], RankFacts)  # type: ignore[index]
    assert keyed.stats.dropped == {"inspector_not_json": 2}
