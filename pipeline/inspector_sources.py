"""Which input format gives each report section when NCCL Inspector logs are among the
inputs (pure).

Inspector logs hold every collective of the whole run but no compute kernel and no step;
Kineto traces hold a few profiled windows with everything. For one job:

- Inspector logs alone: the communication sections (collectives, network load, traffic,
  matching, α-β; clocks and skew when the logs are verbose) come from them; those that need
  compute kernels or steps say n/a with the reason.
- Kineto traces and Inspector logs of the same job: the same collectives are in both, so the
  Inspector logs never enter the report's sections (every one comes from Kineto); they are
  reported apart as `Report.inspector`, their own sections for the whole run.
- Kineto traces alone: `sources` stays empty (every section is Kineto's, as always).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol, TypeVar

from commscope.model.inspector import INSPECTED as INSPECTOR
from commscope.model.inspector import LACKS
from commscope.model.schema import INSPECTOR_LOGS, Pipeline, Report, Sections, TraceMeta
from msgspec.structs import replace

_NO_STARTS: Final = "n/a: NCCL Inspector logs without start times (not verbose)"
KINETO: Final = "kineto (the profiled windows)"
APART: Final = "nccl inspector (the whole run, apart: its collectives are not added above)"
SECTIONS: Final = tuple(key for key in Sections.__struct_fields__ if key != "ranks")
_TIMED: Final = frozenset({"clocks", "skew"})


class Input(Protocol):
    @property
    def meta(self) -> TraceMeta: ...


T = TypeVar("T", bound=Input)


def split(parsed: Sequence[T]) -> tuple[list[T], list[T]]:
    """(the files the report's sections use, Inspector logs set apart): the logs are set
    apart only when the same inputs also hold Kineto traces."""
    kinds = {p.meta.source for p in parsed}
    if INSPECTOR_LOGS not in kinds or len(kinds) == 1:
        return list(parsed), []
    return [p for p in parsed if p.meta.source != INSPECTOR_LOGS], [
        p for p in parsed if p.meta.source == INSPECTOR_LOGS
    ]


def labelled(report: Report, used: Sequence[TraceMeta]) -> Report:
    """The report with `sources` said, when Inspector logs gave its sections."""
    if not used or any(meta.source != INSPECTOR_LOGS for meta in used):
        return report
    timed = all(meta.call_starts for meta in used)
    sources = {key: _inspector_source(key, timed) for key in SECTIONS}
    # P2P pairs are counted (matching); a stage's compute, bubble and waiting are not known
    windows = [replace(w, pipeline=Pipeline()) for w in report.windows]
    return replace(report, sources=sources, pipeline=Pipeline(), windows=windows)


def _inspector_source(key: str, timed: bool) -> str:
    if key in LACKS:
        return LACKS[key]
    return _NO_STARTS if key in _TIMED and not timed else INSPECTOR
