"""What the aggregator owes for the records it receives (pure): a verdict, then an Ack after
the commit.

A record is judged on its head (`judge`): a stream another node owns is refused; else the
`Aggregation`'s verdict says whether it is new (applied), a duplicate or ahead of a gap.
Every record judged is owed an acknowledgement (the collector learns the stream's position
and resends from there), but an `Ack` goes out only after the commit that makes what was
applied durable: one owed since the last commit waits for the next (`Ledger.commit`). A
file finished is stored at the commit; the live statistics take its busbw then, unless it
is a tailed Inspector log, whose ops they took as they came. The shell
(`service/aggregate.py`) decodes, applies, stores, syncs and sends.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from commscope.model.schema import Ack, FinishedFile
from commscope.pipeline.aggregation import Aggregation, Verdict


class Outcome(enum.Enum):
    """What becomes of a record judged on its head."""

    APPLY = "apply"  # new: decoded whole and applied
    DUPLICATE = "duplicate"  # applied before (or its stream ended): acknowledged again
    AHEAD = "ahead"  # after a gap: acknowledged with the position, so the gap is resent
    NOT_OWN_STREAM = "not_own_stream"  # another node's stream: refused, not acknowledged


_OUTCOMES = {
    Verdict.APPLY: Outcome.APPLY,
    Verdict.DUPLICATE: Outcome.DUPLICATE,
    Verdict.AHEAD: Outcome.AHEAD,
}


def judge(speaker: str, owner: str | None, verdict: Verdict) -> Outcome:
    """A record of a stream `owner` started (None: none did), sent by `speaker`."""
    if owner is not None and owner != speaker:
        return Outcome.NOT_OWN_STREAM
    return _OUTCOMES[verdict]


_Position = Callable[[str], tuple[int, bool]]  # a stream's next seq and whether it ended


class Ledger:
    """Acknowledgements owed (to the routing id that sent each stream's latest record) and
    files finished, until the commit that makes them durable."""

    def __init__(self, credit: int) -> None:
        self.credit = credit
        self._owed: dict[tuple[bytes, str], str] = {}  # (routing id, stream key) -> its id
        self._due: dict[tuple[bytes, str], Ack] = {}  # committed: to be sent
        self._finished: list[tuple[FinishedFile, bool]] = []  # and whether it was fed live

    def owe(self, identity: bytes, stream: str, wire: str) -> None:
        """A record of `stream` (`wire`: its id as its collector sent it) was judged."""
        self._owed[(identity, stream)] = wire

    def finished(self, item: FinishedFile, tailed: bool) -> None:
        """A file finished (`tailed`: a tailed Inspector log, its ops fed live)."""
        self._finished.append((item, tailed))

    @property
    def stored(self) -> bool:
        """Whether every finished file is stored (call lists may then go)."""
        return not self._finished

    def to_store(self) -> list[tuple[FinishedFile, bool]]:
        """The files to store at the commit, and whether each still feeds the live figures
        (not fed live as it came)."""
        return [(item, not live) for item, live in self._finished]

    def written(self) -> None:
        """Those files are written (the sync makes them durable)."""
        self._finished.clear()

    def commit(self, position: _Position) -> None:
        """The store synced: what was owed is due, each with its stream's position now (so
        an Ack never covers a record applied after the commit)."""
        for (identity, stream), wire in self._owed.items():
            self._due[(identity, stream)] = self._ack(wire, *position(stream))
        self._owed.clear()

    def acks(self) -> list[tuple[bytes, Ack]]:
        """The acknowledgements due; then none."""
        acks = [(identity, ack) for (identity, _), ack in self._due.items()]
        self._due.clear()
        return acks

    def _ack(self, wire: str, next_seq: int, done: bool) -> Ack:
        return Ack(stream=wire, next_seq=next_seq, done=done, credit=self.credit)


def lost(aggregation: Aggregation, unended: list[str]) -> list[str]:
    """What never finished at the end of the run: streams still open, files their collector
    could not read, collectors without end-of-run (`unended`)."""
    open_ = [f"{s.start.node}: {s.start.path} unfinished" for s in aggregation.open.values()]
    failed = [f"{f.node}: {f.path} {f.error}" for f in aggregation.finished.values() if f.lost]
    return [*open_, *failed, *(f"{node}: no end-of-run" for node in unended)]
