"""A report's per-rank facts (`pipeline.facts`) are the same whatever order the events came in."""

from __future__ import annotations

import msgspec
from commscope.model.schema import FileStats, OpTally, RankResult, TraceMeta
from commscope.pipeline import facts


def result(order: list[int]) -> RankResult:
    """A rank whose dicts were filled in `order` (as events in that order fill them)."""
    tally = OpTally(
        count=len(order),
        bus_parts={n: 10 * n for n in order},
        group_sources={f"source{n}": n for n in order},
    )
    return RankResult(
        evidence_text="gpu kernels",
        ops={f"Op{n}": tally for n in order},
        steps={n: 1000 * n for n in order},
        kernel_ns={f"kind{n}": n for n in order},
    )


def test_the_facts_of_one_rank_are_written_in_key_order_whatever_the_event_order() -> None:
    written = [
        msgspec.json.encode(facts.of(TraceMeta(), FileStats(), result(order)))
        for order in ([1, 2, 3], [3, 1, 2])
    ]
    assert written[0] == written[1]
    decoded = msgspec.json.decode(written[1])["result"]
    assert list(decoded["ops"]) == ["Op1", "Op2", "Op3"]
    assert list(decoded["ops"]["Op3"]["bus_parts"]) == ["1", "2", "3"]
    assert list(decoded["steps"]) == ["1", "2", "3"]
