"""What PyTorch Flight Recorder dumps say about a job (pure): per process group each rank's
progress, the ranks that never joined a collective the others entered, collectives whose
members disagree, and the timed entries.

Definitions (docs/flight-recorder.md): a group's members are the ranks its pg_config lists in
any dump, plus every rank whose dump holds the group. A rank's progress is its dump's
pg_status, else what its buffer's collective entries say (p2p entries have their own
sequence and are left out). A dumped member whose last enqueued collective is below the
group's highest is *stuck*: it never joined the next one, which others entered. A
collective's members *mismatch* when their entries of one sequence id differ from the
lowest rank's in type (profiling name), sizes (all-to-all left out: its sizes may differ) or
dtypes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Final, Protocol, TypeVar

from commscope.model.flight import FlightDump, FlightEntry, FlightStatus
from commscope.model.schema import (
    FlightDuration,
    FlightMismatch,
    FlightProgress,
    FlightRecorder,
    FlightStuck,
    Report,
)
from commscope.pipeline import flightjoin
from msgspec.structs import replace

_MAX_MISMATCHES: Final = 100
_STARTED: Final = frozenset({"started", "completed"})
_UNSIZED: Final = frozenset({"AllToAll"})  # members' sizes may differ (uneven splits)


class _Input(Protocol):
    @property
    def flight(self) -> FlightDump | None: ...


T = TypeVar("T", bound=_Input)


def split(parsed: Sequence[T]) -> tuple[list[T], list[FlightDump]]:
    """(the inputs that are traces, the Flight Recorder dumps among them)."""
    dumps = [p.flight for p in parsed if p.flight is not None]
    return [p for p in parsed if p.flight is None], dumps


def beside(report: Report, dumps: Sequence[FlightDump]) -> Report:
    """The report with the dumps' section, joined with the report's profiles (`flightjoin`)
    (no dump: unchanged)."""
    if not dumps:
        return report
    note = f"{len(dumps)} Flight Recorder dump(s): reported apart (section Flight Recorder)"
    inputs = replace(report.inputs, notes=[*report.inputs.notes, note])
    found = flightjoin.joined(analyse(dumps), _by_rank(dumps), report.profile_tails)
    return replace(report, flight_recorder=found, inputs=inputs)


def _by_rank(dumps: Sequence[FlightDump]) -> dict[int, FlightDump]:
    """One dump per rank: a rank's later dump (by path) wins."""
    return {d.rank: d for d in sorted(dumps, key=lambda d: (d.rank, d.path))}


def analyse(dumps: Sequence[FlightDump]) -> FlightRecorder:
    """The section for one job's dumps (one per rank: a rank's later dump wins)."""
    by_rank = _by_rank(dumps)
    groups = _groups(by_rank.values())
    progress = [p for g in sorted(groups) for p in _progress(g, by_rank)]
    mismatches = [m for g in sorted(groups) for m in _mismatches(g, by_rank)]
    return FlightRecorder(
        dumps=len(dumps),
        ranks=sorted(by_rank),
        versions=sorted({d.version for d in dumps}),
        groups=groups,
        progress=progress,
        stuck=[s for g in sorted(groups) for s in stuck(g, groups[g], by_rank, progress)],
        mismatches=mismatches[:_MAX_MISMATCHES],
        mismatch_count=len(mismatches),
        undumped=_undumped(groups, by_rank),
        durations=durations(by_rank.values()),
    )


def _groups(dumps: Iterable[FlightDump]) -> dict[str, str]:
    """Every group any dump names -> its description."""
    found: dict[str, str] = {}
    for dump in dumps:
        for name in (*dump.members, *(s.group for s in dump.status)):
            found.setdefault(name, "")
        for entry in dump.entries:
            if not found.get(entry.group):
                found[entry.group] = entry.group_desc
    return found


def members(group: str, dumps: dict[int, FlightDump]) -> list[int]:
    """The group's ranks: pg_config's in any dump, and every rank whose dump holds it."""
    ranks = {r for d in dumps.values() for r in d.members.get(group, ())}
    ranks |= {rank for rank, dump in dumps.items() if _holds(dump, group)}
    return sorted(ranks)


def _holds(dump: FlightDump, group: str) -> bool:
    return any(s.group == group for s in dump.status) or any(e.group == group for e in dump.entries)


def _undumped(groups: dict[str, str], dumps: dict[int, FlightDump]) -> dict[str, list[int]]:
    missing = {g: [r for r in members(g, dumps) if r not in dumps] for g in sorted(groups)}
    return {g: ranks for g, ranks in missing.items() if ranks}


def _collectives(dump: FlightDump, group: str) -> list[FlightEntry]:
    return [e for e in dump.entries if e.group == group and not e.is_p2p]


def _progress(group: str, dumps: dict[int, FlightDump]) -> list[FlightProgress]:
    return [_rank_progress(group, dumps[r]) for r in members(group, dumps) if r in dumps]


def _rank_progress(group: str, dump: FlightDump) -> FlightProgress:
    """The rank's progress in the group: pg_status where the dump has it, else its buffer's."""
    entries = _collectives(dump, group)
    status = next((s for s in dump.status if s.group == group), None) or _from_entries(
        group, entries
    )
    last = next((e for e in reversed(entries) if e.collective_seq_id == status.enqueued), None)
    return FlightProgress(
        group=group,
        rank=dump.rank,
        enqueued=status.enqueued,
        started=status.started,
        completed=status.completed,
        last_op=None if last is None else last.collective,
    )


def _from_entries(group: str, entries: Sequence[FlightEntry]) -> FlightStatus:
    def last(entries: Iterable[FlightEntry]) -> int | None:
        return max((e.collective_seq_id for e in entries), default=None)

    return FlightStatus(
        group=group,
        enqueued=last(entries),
        started=last(e for e in entries if e.state in _STARTED),
        completed=last(e for e in entries if e.state == "completed"),
    )


def stuck(
    group: str, desc: str, dumps: dict[int, FlightDump], progress: Sequence[FlightProgress]
) -> list[FlightStuck]:
    """The group's dumped members whose last enqueued collective is below the highest."""
    mine = {p.rank: p.enqueued or 0 for p in progress if p.group == group}
    top = max(mine.values(), default=0)
    return [
        _stuck((group, desc), rank, seq, mine, dumps)
        for rank, seq in sorted(mine.items())
        if seq < top
    ]


def _stuck(
    where: tuple[str, str], rank: int, seq: int, mine: dict[int, int], dumps: dict[int, FlightDump]
) -> FlightStuck:
    """`rank` of group `where` (name, description), whose last enqueued collective is `seq`."""
    group, desc = where
    entered = sorted(r for r, s in mine.items() if s > seq)
    return FlightStuck(
        group=group,
        desc=desc,
        rank=rank,
        after_seq=seq or None,
        after_op=_op(group, seq, [dumps[rank], *(dumps[r] for r in entered)]),
        missed_seq=seq + 1,
        missed_op=_op(group, seq + 1, [dumps[r] for r in entered]),
        entered_by=entered,
    )


def _op(group: str, seq: int, dumps: Iterable[FlightDump]) -> str | None:
    """The type of collective `seq` of the group, from the first of these dumps holding it."""
    for dump in dumps:
        for entry in _collectives(dump, group):
            if entry.collective_seq_id == seq:
                return entry.collective
    return None


def _mismatches(group: str, dumps: dict[int, FlightDump]) -> list[FlightMismatch]:
    by_seq: dict[int, dict[int, list[FlightEntry]]] = defaultdict(dict)
    for rank in sorted(dumps):
        for entry in _collectives(dumps[rank], group):
            by_seq[entry.collective_seq_id].setdefault(rank, []).append(entry)
    return [m for seq in sorted(by_seq) for m in _disagreements(group, seq, by_seq[seq])]


def _disagreements(
    group: str, seq: int, entries: dict[int, list[FlightEntry]]
) -> list[FlightMismatch]:
    """Every rank whose entries of collective `seq` differ from the lowest rank's (the first
    difference: type, then sizes, then dtypes)."""
    reference, *others = sorted(entries)
    found = []
    for rank in others:
        for kind, (expected, got) in _differences(entries[reference], entries[rank]):
            stack = [f"{f.name} ({f.filename}:{f.line})" for f in entries[rank][0].frames]
            found.append(FlightMismatch(group=group, seq=seq, kind=kind, rank=rank, found=got,
                                        reference_rank=reference, expected=expected,
                                        stack=stack))  # fmt: skip
            break
    return found


def _differences(
    a: Sequence[FlightEntry], b: Sequence[FlightEntry]
) -> Iterable[tuple[str, tuple[str, str]]]:
    def shown(entries: Sequence[FlightEntry], field: str) -> str:
        values = [str(getattr(e, field)) for e in entries]
        return values[0] if len(values) == 1 else "[" + ", ".join(values) + "]"

    checks = [("type", ("profiling_name",)), ("dtype", ("input_dtypes", "output_dtypes"))]
    if not {e.collective for e in (*a, *b)} & _UNSIZED:
        checks.insert(1, ("size", ("input_sizes", "output_sizes")))
    for kind, fields in checks:
        for name in fields:
            if (left := shown(a, name)) != (right := shown(b, name)):
                yield kind, (left, right)


def durations(dumps: Iterable[FlightDump]) -> list[FlightDuration]:
    """Timed entries (duration_ms: timing enabled) per group and collective type."""
    timed: dict[tuple[str, str], list[float]] = defaultdict(list)
    for dump in dumps:
        for entry in dump.entries:
            if entry.duration_ms is not None:
                timed[entry.group, entry.collective].append(entry.duration_ms)
    return [
        FlightDuration(group=g, collective=c, count=len(ms), total_ms=sum(ms), max_ms=max(ms))
        for (g, c), ms in sorted(timed.items())
    ]
