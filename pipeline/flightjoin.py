"""Flight Recorder dumps joined with the same job's profiles (pure): each stuck rank with what
its profile saw last, and the collectives whose profile and dump disagree.

The join is by rank, process group and sequence: the dump's group is `process_group[0]`,
the profile's the call's `Process Group Name`, its sequence the call's `Seq`, which ProcessGroup
NCCL records as its collective count + 1 before the collective bumps it, and Flight Recorder as
the count after: the same number (docs/flight-recorder.md). A profile whose calls name no group
(gloo records none) joins by rank alone: its last collective is unnumbered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from commscope.model.flight import FlightDump, FlightEntry
from commscope.model.schema import (
    FlightDisagreement,
    FlightJoin,
    FlightRecorder,
    FlightStuck,
    ProfiledCall,
    RankTail,
)
from msgspec.structs import replace


def joined(
    found: FlightRecorder, dumps: Mapping[int, FlightDump], tails: Sequence[RankTail]
) -> FlightRecorder:
    """The section with each stuck rank joined to its profile, and the disagreements (no
    profile beside the dumps: unchanged)."""
    if not tails:
        return found
    by_rank = {t.rank: t for t in tails}
    latest = max((c.end_ns for t in tails for c in t.calls if c.end_ns is not None), default=None)
    return replace(
        found,
        joined=[join(s, by_rank.get(s.rank), latest) for s in found.stuck],
        disagreements=[d for t in tails if t.rank in dumps for d in disagree(dumps[t.rank], t)],
    )


def join(stuck: FlightStuck, tail: RankTail | None, latest_ns: int | None = None) -> FlightJoin:
    """A stuck rank and its profile's tail (None: no profile of the rank); `latest_ns`: the
    latest aligned end of any rank's last profiled collective."""
    base = FlightJoin(
        rank=stuck.rank, group=stuck.group, after_seq=stuck.after_seq, after_op=stuck.after_op
    )
    if tail is None:
        return base
    call = _last_call(tail, stuck.group)
    return replace(
        base,
        profiled=True,
        profile_seq=None if call is None else call.seq,
        profile_op=None if call is None else call.collective,
        agreement=agreement(call, stuck.after_seq),
        behind_s=_behind(call, latest_ns),
        step=tail.step,
        step_s=tail.step_s,
        others_median_s=tail.others_median_s,
        compute_s=tail.compute_s,
        exposed_comm_s=tail.exposed_comm_s,
    )


def _last_call(tail: RankTail, group: str) -> ProfiledCall | None:
    """The profile's last collective of the group, else its last naming no group (None: none)."""
    calls = {c.group: c for c in tail.calls}
    return calls.get(group) or calls.get(None)


def agreement(call: ProfiledCall | None, dumped: int | None) -> str:
    """How the profile's last collective of the group stands to the dump's last (None: none)."""
    if call is None:
        return "none"
    if call.group is None or call.seq is None:
        return "unnumbered"
    if call.seq == (dumped or 0):
        return "same"
    return "earlier" if call.seq < (dumped or 0) else "later"


def _behind(call: ProfiledCall | None, latest_ns: int | None) -> float | None:
    if call is None or call.end_ns is None or latest_ns is None:
        return None
    return (latest_ns - call.end_ns) / 1e9


def disagree(dump: FlightDump, tail: RankTail) -> Iterable[FlightDisagreement]:
    """Where the rank's profile and dump hold one (group, seq) of different type or dtype."""
    for call in tail.calls:
        entry = _entry(dump, call)
        if entry is None or call.group is None or call.seq is None:
            continue
        for kind, profile, dumped in _differences(call, entry):
            yield FlightDisagreement(
                rank=dump.rank, group=call.group, seq=call.seq, kind=kind, profile=profile,
                dump=dumped,
            )  # fmt: skip
            break


def _entry(dump: FlightDump, call: ProfiledCall) -> FlightEntry | None:
    """The dump's first collective entry of the call's group and sequence."""
    matches = (
        e
        for e in dump.entries
        if not e.is_p2p and e.group == call.group and e.collective_seq_id == call.seq
    )
    return next(matches, None)


def _differences(call: ProfiledCall, entry: FlightEntry) -> Iterable[tuple[str, str, str]]:
    """(kind, the profile's, the dump's): type, then dtype (where both are known)."""
    if call.collective != entry.collective:
        yield "type", call.collective, entry.collective
    dumped = entry.input_dtypes[0] if entry.input_dtypes else None
    if call.dtype and dumped and call.dtype.lower() != dumped.lower():
        yield "dtype", call.dtype, dumped
