"""The HTML report's pipeline table: every rank of a pipeline, in stage order (pure)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from commscope.exporters.pipetext import stage_cell
from commscope.exporters.svg import esc
from commscope.model.schema import Report
from commscope.model.units import duration

ABOUT: Final = (
    "Within the profiled steps: compute; the bubble (neither computing nor moving data), split "
    "into what a balanced GPipe/1F1B schedule implies and what slower stages add; exposed "
    "waiting on P2P calls for activations, gradients, or to send; the waiting each rank caused "
    "its neighbours, and any rank's waiting it caused at the root (definitions in the text "
    "report and docs/how-it-works.md)."
)
_HEAD: Final = ("rank", "stage", "compute", "bubble", "schedule", "neighbour", "wait acts",
                "wait grads", "wait send", "transfer", "caused", "root")  # fmt: skip


def table(report: Report) -> Iterator[str]:
    p = report.pipeline
    if not p.per_rank:
        return
    source = p.stage_source or p.stage_issue or "unknown"
    yield f'<p class="note">Stages: {esc(str(p.stages or "unknown"))}, from the {esc(source)}.'
    if p.evidence:
        yield f" Waited for: {esc(p.evidence)}."
    yield "</p><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in _HEAD) + "</tr>"
    rows = sorted(p.per_rank.items(), key=lambda item: (item[1].stage is None, item[1].stage or 0))
    for rank, r in rows:
        cells = [rank, stage_cell(r), duration(r.compute_s),
                 duration(r.bubble_s), duration(r.schedule_bubble_s),
                 duration(r.neighbour_bubble_s), duration(r.waiting_activations_s),
                 duration(r.waiting_gradients_s), duration(r.waiting_to_send_s),
                 duration(r.transfer_s), duration(r.caused_waiting_s),
                 duration(r.root_caused_waiting_s)]  # fmt: skip
        yield "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in cells) + "</tr>"
    yield "</table>"
