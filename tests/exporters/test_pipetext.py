"""The text report's pipeline section (`exporters.pipetext`): the root column and the stage
the others wait for, named or not, with its evidence."""

from __future__ import annotations

from commscope.exporters.extremes import Cut
from commscope.exporters.pipetext import pipeline_lines, stage_cell
from commscope.model.schema import Pipeline, PipelineRank, Report


def _report(rank: int | None, evidence: str | None) -> Report:
    rows = {"0": PipelineRank(stage=0, caused_waiting_s=2e-6, root_caused_waiting_s=3e-6)}
    found = Pipeline(stages=1, per_rank=rows, waited_for_rank=rank, evidence=evidence)
    found.waited_for_stage = 0 if rank is not None else None
    return Report(pipeline=found)


def test_a_named_stage_is_printed_with_its_evidence() -> None:
    lines = list(pipeline_lines(_report(0, "rank 0 (stage 0) arrived last ..."), Cut()))
    assert lines[-2:] == ["The Stage the Others Wait For: stage 0, rank 0",
                          "  rank 0 (stage 0) arrived last ..."]  # fmt: skip
    head, row = lines[-5].split(), lines[-4].split()
    assert head[-2:] == ["caused", "root"]
    assert row[-4:] == ["2.00", "µs", "3.00", "µs"]


def test_no_stage_stands_out_and_the_evidence_says_why() -> None:
    lines = list(pipeline_lines(_report(None, "no stage stands out: rank 0 ..."), Cut()))
    assert lines[-2:] == ["The Stage the Others Wait For: none stands out",
                          "  no stage stands out: rank 0 ..."]  # fmt: skip
    assert list(pipeline_lines(_report(None, None), Cut()))[-1] == (
        "The Stage the Others Wait For: none named (no P2P waiting)")  # fmt: skip


def test_a_rank_of_a_looped_schedule_shows_the_stages_it_holds() -> None:
    assert stage_cell(PipelineRank(stage=1, virtual_stages=[1, 5])) == "1,5"
    assert (stage_cell(PipelineRank(stage=2)), stage_cell(PipelineRank())) == ("2", "?")
