"""The HTML report's pipeline table: every rank of a pipeline, in stage order (pure)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from commscope.exporters.pipetext import HEAD, cells, in_stage_order
from commscope.exporters.svg import esc, table_row
from commscope.model.schema import Report

ABOUT: Final = (
    "Within the profiled steps: compute; the bubble (neither computing nor moving data), split "
    "into what a balanced GPipe/1F1B schedule implies and what slower stages add; exposed "
    "waiting on P2P calls for activations, gradients, or to send; the waiting each rank caused "
    "its neighbours, and any rank's waiting it caused at the root (definitions in the text "
    "report and docs/how-it-works.md)."
)


def table(report: Report) -> Iterator[str]:
    p = report.pipeline
    if not p.per_rank:
        return
    source = p.stage_source or p.stage_issue or "unknown"
    yield f'<p class="note">Stages: {esc(str(p.stages or "unknown"))}, from the {esc(source)}.'
    if p.evidence:
        yield f" Waited for: {esc(p.evidence)}."
    yield "</p><table>" + table_row(HEAD, "th")
    for rank, r in in_stage_order(p.per_rank.items()):
        yield table_row(cells(rank, r))
    yield "</table>"
