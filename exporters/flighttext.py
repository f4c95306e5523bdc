"""PyTorch Flight Recorder dumps in the text report (pure): the stuck ranks first ("rank R
stopped after AllReduce #N of group G"), each joined with its profile where one is beside the
dumps ("; its last profiled step shows …"), then where profile and dump disagree, each rank's
progress per process group, the mismatched collectives with the first one's stack, the ranks
without a dump and the timed entries. Every row is in the JSON (`flight_recorder`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from typing import Final

from commscope.exporters.textfmt import rank_list, row
from commscope.model.schema import (
    FlightDisagreement,
    FlightJoin,
    FlightMismatch,
    FlightProgress,
    FlightRecorder,
    FlightStuck,
    Report,
)
from commscope.model.units import duration

ABOUT: Final = (
    "From PyTorch Flight Recorder dumps (one per rank). Sequence ids count a process group's "
    "collectives (p2p ops left out). A rank is stuck when it never enqueued a collective "
    "other members of its group entered; a mismatch is a collective whose members enqueued "
    "a different type, sizes or dtypes than its lowest rank."
)
PROGRESS_HEAD: Final = ["group", "rank", "enqueued", "started", "completed", "last op"]
_WIDTHS: Final = [12, 6, 8, 8, 9, 14]
_MAX_ROWS: Final = 32
_STACK: Final = 12


def stuck_sentence(s: FlightStuck) -> str:
    """`rank 2 stopped after AllReduce #3 of group 0 (default_pg): ranks 0-1 entered
    AllReduce #4 without it`."""
    after = (
        "before its first collective"
        if s.after_seq is None
        else (f"after {s.after_op or 'collective'} #{s.after_seq}")
    )
    group = f"group {s.group}" + (f" ({s.desc})" if s.desc else "")
    missed = f"{s.missed_op or 'collective'} #{s.missed_seq}"
    entered = ("rank " if len(s.entered_by) == 1 else "ranks ") + rank_list(s.entered_by)
    return f"rank {s.rank} stopped {after} of {group}: {entered} entered {missed} without it"


def join_sentence(j: FlightJoin, desc: str = "") -> str:
    """`rank 2 stopped after AllReduce #3 of group 0 (default_pg); its last profiled step
    shows …`: its step against the others' median, its compute and exposed communication, and
    how its profile's last collective of the group stands to the dump's."""
    after = "before its first collective" if j.after_seq is None else (
        f"after {j.after_op or 'collective'} #{j.after_seq}")  # fmt: skip
    group = f"group {j.group}" + (f" ({desc})" if desc else "")
    head = f"rank {j.rank} stopped {after} of {group}"
    if not j.profiled:
        return f"{head}; no profile of rank {j.rank} is beside the dumps"
    return f"{head}; its last profiled step shows {_step(j)}; {_last(j)}"


def _step(j: FlightJoin) -> str:
    if j.step is None:
        return "nothing (no profiled step)"
    median = "" if j.others_median_s is None else (
        f" (the other ranks' median of step {j.step}: {duration(j.others_median_s)})")  # fmt: skip
    return (
        f"step {j.step} of {duration(j.step_s)}{median}, {duration(j.compute_s)} compute and "
        f"{duration(j.exposed_comm_s)} exposed communication"
    )


_AGREEMENT: Final = {
    "same": "its profile's last collective of the group is the same, {op} #{seq}",
    "earlier": "its profile ended before it: its last collective of the group is {op} #{seq}",
    "later": "its profile saw a later one, {op} #{seq}, than its dump",
    "unnumbered": "its profile's last collective, {op}, is unnumbered (the trace names no "
    "process group or sequence)",
    "none": "its profile saw no collective of the group",
}


def _last(j: FlightJoin) -> str:
    said = _AGREEMENT[j.agreement].format(op=j.profile_op, seq=j.profile_seq)
    if j.behind_s is None:
        return said
    return f"{said}, ending {duration(j.behind_s)} before the latest any rank's profile saw"


def disagreement_sentence(d: FlightDisagreement) -> str:
    return (
        f"rank {d.rank}, group {d.group} #{d.seq} ({d.kind}): its profile recorded {d.profile}, "
        f"its dump {d.dump}"
    )


def mismatch_sentence(m: FlightMismatch) -> str:
    return (
        f"group {m.group} #{m.seq} ({m.kind}): rank {m.rank} enqueued {m.found} where rank "
        f"{m.reference_rank} enqueued {m.expected}"
    )


def progress_cells(p: FlightProgress) -> list[str]:
    def seq(n: int | None) -> str:
        return "-" if n is None else f"#{n}"

    return [
        p.group,
        str(p.rank),
        seq(p.enqueued),
        seq(p.started),
        seq(p.completed),
        p.last_op or "-",
    ]


def flight_lines(found: FlightRecorder) -> Iterator[str]:
    yield from textwrap.wrap(ABOUT, 92)
    versions = ", ".join(found.versions) or "unknown"
    yield f"{found.dumps} dump(s), ranks {rank_list(found.ranks)}, version {versions}"
    yield ""
    yield from _stuck(found)
    yield from _disagreements(found)
    yield from _progress(found)
    yield from _mismatches(found)
    for group, ranks in found.undumped.items():
        yield f"Group {group}: no dump from rank(s) {rank_list(ranks)} (their progress is unknown)"
    yield from _durations(found)


def _stuck(found: FlightRecorder) -> Iterator[str]:
    if not found.stuck:
        yield "Stuck: none (every dumped member of each group enqueued its last collective)"
    for s in found.stuck:
        yield f"Stuck: {stuck_sentence(s)}"
    for j in found.joined:
        yield from textwrap.wrap(
            f"Joined: {join_sentence(j, found.groups.get(j.group, ''))}", 92,
            subsequent_indent="  ")  # fmt: skip


def _disagreements(found: FlightRecorder) -> Iterator[str]:
    if found.joined or found.disagreements:
        yield ""
        yield "Profile and dump of one collective (group, seq) disagree: " + (
            "none" if not found.disagreements else str(len(found.disagreements)))  # fmt: skip
    for d in found.disagreements[:_MAX_ROWS]:
        yield f"  {disagreement_sentence(d)}"


def _progress(found: FlightRecorder) -> Iterator[str]:
    yield ""
    yield "Progress per group (the last collective each rank enqueued, saw start, saw complete):"
    yield row(PROGRESS_HEAD, _WIDTHS)
    for p in found.progress[:_MAX_ROWS]:
        yield row(progress_cells(p), _WIDTHS)
    if len(found.progress) > _MAX_ROWS:
        left = len(found.progress) - _MAX_ROWS
        yield f"  ... {left} more rows in the JSON (flight_recorder.progress)"


def _mismatches(found: FlightRecorder) -> Iterator[str]:
    yield ""
    if not found.mismatches:
        yield "Mismatched collectives: none"
        return
    yield f"Mismatched collectives: {found.mismatch_count}"
    for m in found.mismatches[:_MAX_ROWS]:
        yield f"  {mismatch_sentence(m)}"
    first = found.mismatches[0]
    yield f"Stack of the first (rank {first.rank}, innermost first):"
    yield from (f"    {frame}" for frame in first.stack[:_STACK])


def _durations(found: FlightRecorder) -> Iterator[str]:
    yield ""
    if not found.durations:
        yield "Durations: n/a (timing was not enabled: TORCH_NCCL_ENABLE_TIMING=1 records them)"
        return
    yield "Durations of the timed entries (all ranks):"
    yield row(["group", "collective", "count", "total", "max"], [12, 14, 6, 9, 9])
    for d in found.durations:
        cells = [
            d.group,
            d.collective,
            str(d.count),
            duration(d.total_ms / 1e3),
            duration(d.max_ms / 1e3),
        ]
        yield row(cells, [12, 14, 6, 9, 9])


def console_lines(report: Report) -> list[str]:
    """The console's lines under the summary: each stuck rank (none without dumps)."""
    found = report.flight_recorder
    if found is None:
        return []
    if not found.stuck:
        return [f"commscope: Flight Recorder ({found.dumps} dumps): no stuck rank"]
    if found.joined:
        return [
            f"commscope: Flight Recorder: {join_sentence(j, found.groups.get(j.group, ''))}"
            for j in found.joined
        ]
    return [f"commscope: Flight Recorder: {stuck_sentence(s)}" for s in found.stuck]
