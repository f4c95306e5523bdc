"""NCCL Inspector logs reported apart beside the same job's Kineto traces (pure).

`beside(report, apart, options)`: the Kineto report with the logs' own sections for the whole
run as `Report.inspector` and `Report.sources` saying which input gave each section; the
logs' collectives never enter the Kineto sections (`inspector_sources.split` set them apart).
The offline run and the live aggregator's report both go through here.
"""

from __future__ import annotations

from collections.abc import Sequence

from commscope.model.schema import Report, Sections
from commscope.pipeline.inspector_sources import APART, KINETO, SECTIONS
from commscope.pipeline.report import Options, ParsedFile, build_report
from msgspec.structs import replace


def beside(report: Report, apart: Sequence[ParsedFile], options: Options) -> Report:
    """The Kineto report with the Inspector logs' own sections beside it (none: unchanged)."""
    if not apart:
        return report
    windows = sorted({p.window for p in apart})
    own = build_report(windows, list(apart), [], options)
    sections = Sections(**{key: getattr(own, key) for key in SECTIONS})
    sources = dict.fromkeys(SECTIONS, KINETO) | {"inspector": APART}
    note = (
        f"{len({p.path for p in apart})} NCCL Inspector log(s) beside the Kineto traces: "
        "reported apart (the same collectives are in both; none is counted twice)"
    )
    inputs = replace(report.inputs, notes=[*report.inputs.notes, note])
    return replace(report, sources=sources, inspector=sections, inputs=inputs)
