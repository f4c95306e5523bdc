"""The text report's pipeline-parallelism section (pure: Report → lines).

One row per rank in a pipeline (stage order; the extreme rows past FULL_UP_TO ranks), every
time within the rank's profiled steps; definitions in docs/how-it-works.md.
"""

from __future__ import annotations

from collections.abc import Iterator

from commscope.exporters.extremes import Cut
from commscope.exporters.textfmt import row
from commscope.model.schema import Report
from commscope.model.units import duration

_WIDTHS = [6, 6, 10, 10, 10, 10, 11, 10, 10, 10, 10]
_HEAD = ["rank", "stage", "compute", "bubble", "schedule", "neighbour", "wait acts",
         "wait grads", "wait send", "transfer", "caused"]  # fmt: skip


def pipeline_lines(report: Report, cut: Cut) -> Iterator[str]:
    p = report.pipeline
    m = report.matching
    yield (f"P2P calls paired across ranks: {m.p2p_pairs} pairs, {m.p2p_unpaired} unpaired, "
           f"{m.p2p_desyncs} desyncs (size or dtype differ)")  # fmt: skip
    if not p.per_rank:
        yield report.sources.get("pipeline") or "No pipeline: no send/recv pair with a known peer."
        return
    stages = p.stages if p.stages is not None else "unknown"
    yield f"Stages: {stages}, from the {p.stage_source or p.stage_issue}"
    micro = f"{p.microbatches:.3g}" if p.microbatches is not None else "n/a (stages unknown)"
    yield f"Schedule: {p.schedule}"
    yield f"Microbatches per step (activation sends of stage 0 per profiled step): {micro}"
    yield "Within the profiled steps: bubble = neither computing nor moving data; schedule ="
    yield "  min(bubble, (p-1)/m x compute) (GPipe/1F1B), neighbour = the rest; wait = exposed"
    yield "  waiting on P2P calls (acts: from the stage before, grads: from the stage after,"
    yield "  send: posted before the neighbour's receive); caused = neighbours' waiting on it"
    yield ""
    yield row(_HEAD, _WIDTHS)
    shown = cut.ranks(p.per_rank, lambda r: r.caused_waiting_s, "caused", duration)
    ordered = sorted(shown.items, key=lambda item: (item[1].stage is None, item[1].stage or 0))
    for rank, r in ordered:
        cells = [rank, "?" if r.stage is None else str(r.stage), duration(r.compute_s),
                 duration(r.bubble_s), duration(r.schedule_bubble_s),
                 duration(r.neighbour_bubble_s), duration(r.waiting_activations_s),
                 duration(r.waiting_gradients_s), duration(r.waiting_to_send_s),
                 duration(r.transfer_s), duration(r.caused_waiting_s)]  # fmt: skip
        yield row(cells, _WIDTHS)
    yield from shown.summary
    yield ""
    if p.waited_for_rank is None:
        yield "The Stage the Others Wait For: none named (no P2P waiting)"
        return
    stage = f"stage {p.waited_for_stage}, " if p.waited_for_stage is not None else ""
    yield f"The Stage the Others Wait For: {stage}rank {p.waited_for_rank}"
    yield f"  {p.evidence}"
