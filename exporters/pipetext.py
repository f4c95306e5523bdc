"""The text report's pipeline-parallelism section (pure: Report → lines).

One row per rank in a pipeline (stage order; the extreme rows past FULL_UP_TO ranks), every
time within the rank's profiled steps; definitions in docs/how-it-works.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from commscope.exporters.extremes import Cut
from commscope.exporters.textfmt import row
from commscope.model.schema import PipelineRank, Report
from commscope.model.units import duration

_WIDTHS = [6, 8, 10, 10, 10, 10, 11, 10, 10, 10, 10, 10]
HEAD = ["rank", "stage", "compute", "bubble", "schedule", "neighbour", "wait acts",
         "wait grads", "wait send", "transfer", "caused", "root"]  # fmt: skip


def pipeline_lines(report: Report, cut: Cut) -> Iterator[str]:
    p = report.pipeline
    m = report.matching
    yield (f"P2P calls paired across ranks: {m.p2p_pairs} pairs, {m.p2p_unpaired} unpaired, "
           f"{m.p2p_desyncs} desyncs (size or dtype differ)")  # fmt: skip
    if not p.per_rank:
        yield report.sources.get("pipeline") or "No pipeline: no send/recv pair with a known peer."
        return
    stages = p.stages if p.stages is not None else "unknown"
    if p.stages is not None and p.stages_per_rank and p.stages_per_rank > 1:
        stages = f"{p.stages * p.stages_per_rank} on {p.stages} ranks, {p.stages_per_rank} each"
    yield f"Stages: {stages}, from the {p.stage_source or p.stage_issue}"
    micro = f"{p.microbatches:.3g}" if p.microbatches is not None else "n/a (stages unknown)"
    yield f"Schedule: {p.schedule}; its bubble: {p.bubble_formula or 'unknown'} x compute"
    yield f"Microbatches per step (activation sends of stage 0 per profiled step): {micro}"
    yield "Within the profiled steps: bubble = neither computing nor moving data; schedule ="
    yield "  min(bubble, the schedule's bubble), neighbour = the rest; wait = exposed"
    yield "  waiting on P2P calls (acts: from the stage before, grads: from the stage after,"
    yield "  send: posted before the neighbour's receive); caused = neighbours' waiting on it;"
    yield "  root = any rank's waiting it caused at the root (a wait on a neighbour that was"
    yield "  itself waiting goes on to what that neighbour waited for)"
    yield ""
    yield row(HEAD, _WIDTHS)
    shown = cut.ranks(p.per_rank, lambda r: r.root_caused_waiting_s, "root", duration)
    for rank, r in in_stage_order(shown.items):
        yield row(cells(rank, r), _WIDTHS)
    yield from shown.summary
    yield ""
    if p.waited_for_rank is None:
        said = "none stands out" if p.evidence else "none named (no P2P waiting)"
        yield f"The Stage the Others Wait For: {said}"
        yield from [f"  {p.evidence}"] if p.evidence else []
        return
    stage = f"stage {p.waited_for_stage}, " if p.waited_for_stage is not None else ""
    yield f"The Stage the Others Wait For: {stage}rank {p.waited_for_rank}"
    yield f"  {p.evidence}"


def in_stage_order(items: Iterable[tuple[str, PipelineRank]]) -> list[tuple[str, PipelineRank]]:
    """(rank, row) pairs by stage, ranks of unknown stage last."""
    return sorted(items, key=lambda item: (item[1].stage is None, item[1].stage or 0))


def cells(rank: str, r: PipelineRank) -> list[str]:
    """A rank's row of the pipeline table (`HEAD`), for the text and the HTML report."""
    return [rank, stage_cell(r), duration(r.compute_s),
            duration(r.bubble_s), duration(r.schedule_bubble_s),
            duration(r.neighbour_bubble_s), duration(r.waiting_activations_s),
            duration(r.waiting_gradients_s), duration(r.waiting_to_send_s),
            duration(r.transfer_s), duration(r.caused_waiting_s),
            duration(r.root_caused_waiting_s)]  # fmt: skip


def stage_cell(r: PipelineRank) -> str:
    """A rank's stage, or the virtual stages it holds ("0,4")."""
    if r.virtual_stages:
        return ",".join(map(str, r.virtual_stages))
    return "?" if r.stage is None else str(r.stage)
