"""What each record is owed (`service/ledger.py`), in process: a real `Aggregation` judges
and applies, the `Ledger` holds acknowledgements until the commit. Hand-worked sequences
(a duplicate, a record ahead of a gap, an Ack after the commit, a restart's replay), and an
oracle: whatever the duplicates and reorderings, every record is applied exactly once, in
order, and no Ack covers a record applied after the last commit."""

from __future__ import annotations

from dataclasses import dataclass, field

from commscope.model.schema import Ack, Facts, FinishedFile, Record, StreamEnd, StreamStart
from commscope.pipeline.aggregation import Aggregation, Verdict
from commscope.service.ledger import Ledger, Outcome, judge, lost
from hypothesis import given
from hypothesis import strategies as st

NODE, PEER = "n1", b"n1"
STREAM = "ab" * 16


def records(facts: int) -> list[Record]:
    """A stream of `facts` empty Facts between its start (seq 0) and its end."""
    start = StreamStart(stream=STREAM, node=NODE, path="/w/r0.json", folder=".", root_name="w")
    middle = [Facts(stream=STREAM, seq=seq) for seq in range(1, facts + 1)]
    return [start, *middle, StreamEnd(stream=STREAM, seq=facts + 1)]


@dataclass
class Intake:
    """The shell's part, without bytes: judge a record, apply it if new, owe it an Ack."""

    aggregation: Aggregation = field(default_factory=Aggregation)
    ledger: Ledger = field(default_factory=lambda: Ledger(credit=8))
    applied: list[int] = field(default_factory=list)

    def receive(self, record: Record, speaker: str = NODE) -> Outcome:
        seq = record.seq
        verdict = self.aggregation.verdict_at(record.stream, seq, isinstance(record, StreamStart))
        outcome = judge(speaker, self.aggregation.owner(record.stream), verdict)
        if outcome is Outcome.APPLY:
            applied = self.aggregation.apply(record)
            self.applied.append(seq)
            if applied.finished is not None:
                self.ledger.finished(applied.finished, applied.tailed)
        if outcome is not Outcome.NOT_OWN_STREAM:
            self.ledger.owe(speaker.encode(), record.stream, record.stream)
        return outcome

    def commit(self) -> None:
        self.ledger.written()
        self.ledger.commit(self.aggregation.position)


def ack(next_seq: int, done: bool = False) -> tuple[bytes, Ack]:
    return (PEER, Ack(stream=STREAM, next_seq=next_seq, done=done, credit=8))


def test_judge_refuses_another_nodes_stream_and_else_follows_the_verdict() -> None:
    assert judge("n2", NODE, Verdict.APPLY) is Outcome.NOT_OWN_STREAM
    assert judge(NODE, NODE, Verdict.DUPLICATE) is Outcome.DUPLICATE
    assert judge(NODE, None, Verdict.APPLY) is Outcome.APPLY
    assert judge(NODE, None, Verdict.AHEAD) is Outcome.AHEAD


def test_an_ack_waits_for_the_commit() -> None:
    intake = Intake()
    start, first, *_ = records(2)
    assert intake.receive(start) is Outcome.APPLY
    assert intake.ledger.acks() == []  # applied, not yet durable
    intake.commit()
    assert intake.ledger.acks() == [ack(1)]
    assert intake.ledger.acks() == []  # sent once
    intake.receive(first)
    assert intake.ledger.acks() == []


def test_an_ack_carries_the_position_at_the_commit_not_at_the_send() -> None:
    """Record 1 applied after the commit of record 0: the Ack sent says 1 (record 1 is not
    durable yet); the next commit says 2."""
    intake = Intake()
    start, first, *_ = records(2)
    intake.receive(start)
    intake.commit()
    intake.receive(first)
    assert intake.ledger.acks() == [ack(1)]
    intake.commit()
    assert intake.ledger.acks() == [ack(2)]


def test_a_duplicate_is_acknowledged_again_and_not_applied() -> None:
    intake = Intake()
    start, first, *_ = records(2)
    for record in (start, first, first, start):
        intake.receive(record)
    assert intake.applied == [0, 1]
    intake.commit()
    assert intake.ledger.acks() == [ack(2)]  # one Ack per stream and routing id


def test_a_record_ahead_of_a_gap_is_acknowledged_with_the_position_and_resent() -> None:
    intake = Intake()
    start, first, second, end = records(2)
    assert intake.receive(start) is Outcome.APPLY
    assert intake.receive(second) is Outcome.AHEAD
    intake.commit()
    assert intake.ledger.acks() == [ack(1)]  # the collector resends from 1
    assert [intake.receive(r) for r in (first, second, end)] == [Outcome.APPLY] * 3
    intake.commit()
    assert intake.applied == [0, 1, 2, 3] and intake.ledger.acks() == [ack(4, done=True)]


def test_another_nodes_record_is_refused_and_owed_nothing() -> None:
    intake = Intake()
    start, first, *_ = records(1)
    intake.receive(start)
    intake.commit()
    intake.ledger.acks()
    assert intake.receive(first, speaker="n2") is Outcome.NOT_OWN_STREAM
    intake.commit()
    assert intake.applied == [0] and intake.ledger.acks() == []


def test_a_finished_file_is_stored_at_the_commit_and_feeds_the_live_figures_unless_tailed() -> None:
    ledger = Ledger(credit=8)
    done = FinishedFile(stream="a", node=NODE, path="/w/a", folder=".", root_name="w")
    tailed = FinishedFile(stream="b", node=NODE, path="/w/b", folder=".", root_name="w")
    ledger.finished(done, tailed=False)
    ledger.finished(tailed, tailed=True)
    assert not ledger.stored
    assert ledger.to_store() == [(done, True), (tailed, False)]
    ledger.written()
    assert ledger.stored and ledger.to_store() == []


def test_a_restart_replays_the_log_and_acknowledges_resends_as_duplicates() -> None:
    """Records 0 and 1 logged before a crash: a new aggregation replays them; the collector,
    not acknowledged, sends 1 again (a duplicate, acknowledged with 2) and then 2 and 3."""
    start, first, second, end = records(2)
    restarted = Intake()
    for logged in (start, first):
        assert restarted.receive(logged) is Outcome.APPLY
    restarted.ledger = Ledger(credit=8)  # the replay owes no one: nobody sent it
    assert restarted.receive(first) is Outcome.DUPLICATE
    restarted.commit()
    assert restarted.ledger.acks() == [ack(2)]
    restarted.receive(second)
    restarted.receive(end)
    restarted.commit()
    assert restarted.applied == [0, 1, 2, 3] and restarted.ledger.acks() == [ack(4, done=True)]


def test_lost_names_open_streams_unreadable_files_and_collectors_without_end_of_run() -> None:
    intake = Intake()
    start, *_ = records(0)
    intake.receive(start)
    other = StreamStart(stream="cd" * 16, node="n2", path="/w/r1.json", folder=".", root_name="w")
    intake.aggregation.apply(other)
    intake.aggregation.apply(StreamEnd(stream="cd" * 16, seq=1, error="unreadable", lost=True))
    assert lost(intake.aggregation, ["n3"]) == [
        "n1: /w/r0.json unfinished",
        "n2: /w/r1.json unreadable",
        "n3: no end-of-run",
    ]


# ---------------------------------------------------------------- the oracle

Step = tuple[str, int]  # ("send", index of a record), ("commit", 0) or ("ack", 0)


@st.composite
def schedules(draw: st.DrawFn) -> tuple[int, list[Step]]:
    """A stream of 0-5 Facts and what the network makes of it: any records, repeated and in
    any order, with commits and sends of the Acks anywhere among them."""
    facts = draw(st.integers(0, 5))
    send = st.tuples(st.just("send"), st.integers(0, facts + 1))
    other = st.tuples(st.sampled_from(["commit", "ack"]), st.just(0))
    return facts, draw(st.lists(st.one_of(send, send, other), max_size=40))


@given(schedules())
def test_every_record_is_applied_once_in_order_and_acknowledged_only_once_durable(
    schedule: tuple[int, list[Step]],
) -> None:
    """Each Ack sent covers at most what was applied by the last commit; then the collector
    resends from the last Ack until the stream is done (go-back-N): every record was applied
    exactly once, in order."""
    facts, steps = schedule
    stream, intake = records(facts), Intake()
    committed, acked = 0, 0
    for kind, index in steps:
        if kind == "send":
            intake.receive(stream[index])
        elif kind == "commit":
            intake.commit()
            committed = len(intake.applied)
        else:
            for _, sent in intake.ledger.acks():
                assert sent.next_seq <= committed
                acked = max(acked, sent.next_seq)
    for _ in range(len(stream) + 1):  # at most one round a record
        for record in stream[acked:]:
            intake.receive(record)
        intake.commit()
        acked = max([acked, *(sent.next_seq for _, sent in intake.ledger.acks())])
    assert intake.applied == list(range(len(stream)))
    assert intake.aggregation.position(STREAM) == (len(stream), True)
