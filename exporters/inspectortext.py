"""The text report's SOURCES section: which input format gave each section, and NCCL
Inspector logs reported apart beside Kineto traces (pure rendering)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from commscope.exporters.crosstext import matching_lines, skew_lines
from commscope.exporters.extremes import cut_of
from commscope.model.schema import Report, Sections
from msgspec.structs import asdict

_Table = Callable[[Report], Iterator[str]]


def sources_lines(report: Report, bandwidth: _Table, every_row: bool) -> Iterator[str]:
    """Each section's source; then, when Inspector logs were set apart, their own
    collective bandwidth, matching and skew (`bandwidth`: the report's section 6 table;
    `every_row`: no table cut, as `text.render`)."""
    yield "Which input gave each section (JSON key: source)"
    for key, source in report.sources.items():
        yield f"  {key}: {source}"
    if report.inspector is not None:
        yield from _apart(report.inspector, bandwidth, every_row)


def _apart(sections: Sections, bandwidth: _Table, every_row: bool) -> Iterator[str]:
    own = Report(**asdict(sections))
    cut = cut_of(own, every_row)
    yield ""
    yield "NCCL Inspector logs, the whole run (apart: these collectives are not in 1-15)"
    yield ""
    yield from bandwidth(own)
    yield ""
    yield from matching_lines(own, cut)
    yield ""
    yield from skew_lines(own, cut)
