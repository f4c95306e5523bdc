"""PyTorch Flight Recorder dumps on the HTML page (pure): the stuck ranks, each rank's
joined with their profiles, where profile and dump disagree, each rank's progress per
process group and the mismatched collectives, worded as the text report words
them (`flighttext`)."""

from __future__ import annotations

from collections.abc import Iterator

from commscope.exporters.flighttext import (
    ABOUT,
    PROGRESS_HEAD,
    disagreement_sentence,
    join_sentence,
    mismatch_sentence,
    progress_cells,
    stuck_sentence,
)
from commscope.exporters.svg import esc, table_row
from commscope.model.schema import Report


def section(report: Report) -> Iterator[str]:
    found = report.flight_recorder
    if found is None:
        return
    yield "<h2>Flight Recorder</h2>"
    yield f"<p>{esc(ABOUT)}</p>"
    for s in found.stuck:
        yield f"<p><b>Stuck: {esc(stuck_sentence(s))}</b></p>"
    if not found.stuck:
        yield "<p>Stuck: none</p>"
    for j in found.joined:
        yield f"<p>Joined: {esc(join_sentence(j, found.groups.get(j.group, '')))}</p>"
    for d in found.disagreements:
        yield f"<p>Profile and dump disagree: {esc(disagreement_sentence(d))}</p>"
    yield "<table>" + table_row(PROGRESS_HEAD, "th")
    for p in found.progress:
        yield table_row(progress_cells(p))
    yield "</table>"
    yield f"<p>Mismatched collectives: {found.mismatch_count}</p>"
    for m in found.mismatches:
        stack = "<br>".join(esc(frame) for frame in m.stack)
        yield f"<details><summary>{esc(mismatch_sentence(m))}</summary><p>{stack}</p></details>"
