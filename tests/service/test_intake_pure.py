"""The aggregator's admission, membership and end-of-run (`Intake`), in process with a fake
clock: who a message speaks for, which stream starts are admitted, Hello, heartbeat and
end-of-run sequences worked by hand (resends, restarts, silence past the grace,
--expect-nodes, the node cap), and a hypothesis oracle that recomputes from the whole history
of messages whether the run is over."""

from __future__ import annotations

from dataclasses import dataclass

from commscope.model.schema import (
    PROTOCOL_VERSION,
    CollectorStats,
    Reject,
    RunAck,
    Welcome,
)
from commscope.service.intake import Admission, Decision, Intake, Rules, Silenced, Taken
from hypothesis import given
from hypothesis import strategies as st

WELCOME = Welcome(protocol=PROTOCOL_VERSION, instance="a" * 32, credit=64)
BEAT = CollectorStats()


def intake(expect_nodes: int = 0, max_nodes: int = 1024) -> Intake:
    """A fresh intake at t=1000 s (the default grace 300 s, heartbeat timeout 30 s)."""
    return Intake(Rules(expect_nodes=expect_nodes, max_nodes=max_nodes), WELCOME, 1000.0)


def hello(run: Intake, node: str, instance: str, now: float = 1000.0) -> Decision:
    """A Hello as the shell takes it: decided, then the node heard from."""
    decision = run.hello(node, instance)
    run.heard(node, now)
    return decision


def end(run: Intake, node: str, instance: str | None = None, now: float = 1000.0) -> Decision:
    decision = run.end_of_run(node, instance)
    run.heard(node, now)
    return decision


def beat(run: Intake, node: str, now: float) -> Decision:
    decision = run.heartbeat(node, BEAT, now)
    run.heard(node, now)
    return decision


# ---------------------------------------------------------------- who speaks, who may start


def test_a_message_speaks_for_its_proven_node_else_its_routing_id() -> None:
    run = intake()
    assert (run.speaker(b"n1", None), run.speaker(b"\xff", None)) == ("n1", "\ufffd")
    assert run.speaker(b"id", "alice") == "alice"
    assert run.speaker(b"id", "mallory") == Taken("mallory", "alice")
    assert run.speaker(b"id", "mallory") == "mallory"  # the id was nobody's: the next owns it
    assert (run.speaker(b"id2", "alice"), run.links.routable(b"id2")) == ("alice", True)


def test_a_node_starts_only_its_own_streams_within_the_caps() -> None:
    run = Intake(Rules(max_streams_per_node=2, max_streams=3), WELCOME, 0.0)
    assert run.may_start("n1", "n2", 0, 0) is Admission.NOT_OWN_NODE
    assert [run.may_start("n1", "n1", 2, own) for own in (1, 2)] == [
        Admission.OPEN,
        Admission.TOO_MANY_STREAMS,
    ]
    assert run.may_start("n1", "n1", 3, 0) is Admission.TOO_MANY_STREAMS


# ---------------------------------------------------------------- Hello and end-of-run


def test_a_hello_welcomes_the_node_and_stores_it_at_work() -> None:
    run = intake()
    assert hello(run, "n1", "i") == Decision(reply=WELCOME, save=True)
    assert (run.nodes, run.over(1000.0), run.unended()) == ({"n1": False}, False, ["n1"])
    assert hello(run, "n1", "i") == Decision(reply=WELCOME)  # nothing changed: nothing stored


def test_the_end_of_run_of_the_only_node_ends_the_run() -> None:
    run = intake()
    hello(run, "n1", "i")
    assert end(run, "n1") == Decision(reply=RunAck(node="n1"), save=True)
    assert (run.nodes, run.ended_by, run.over(1000.0), run.unended()) == (
        {"n1": True},
        {"n1": "i"},  # the instance of its Hello
        True,
        [],
    )


def test_no_node_seen_is_never_over() -> None:
    assert not intake().over(10**6)


def test_a_resent_hello_of_the_ending_instance_leaves_the_node_ended() -> None:
    run = intake(expect_nodes=1)
    hello(run, "n1", "c")
    end(run, "n1", "c")
    assert hello(run, "n1", "c") == Decision(reply=WELCOME)
    assert (run.nodes, run.over(1000.0)) == ({"n1": True}, True)
    assert hello(run, "n1", "d") == Decision(reply=WELCOME, save=True)  # a restarted collector
    assert (run.nodes, run.over(1000.0)) == ({"n1": False}, False)


def test_an_end_of_run_before_any_hello_names_its_instance() -> None:
    run = intake(expect_nodes=1)
    end(run, "n1", "c")
    hello(run, "n1", "c")
    assert (run.nodes, run.ended_by, run.over(1000.0)) == ({"n1": True}, {"n1": "c"}, True)


def test_stored_membership_is_restored_with_the_grace_from_the_start() -> None:
    """A restarted aggregator: n1 ended (by c), n2 did not; n2 gets 300 s from t=0."""
    run = Intake(Rules(expect_nodes=2), WELCOME, 0.0, {"n1": True, "n2": False}, {"n1": "c"})
    assert hello(run, "n1", "c", now=10.0) == Decision(reply=WELCOME)  # a resend: still ended
    assert (run.over(299.0), run.over(300.0)) == (False, True)


# ---------------------------------------------------------------- silence and heartbeats


def test_a_node_silent_past_the_grace_no_longer_holds_the_run_and_is_told_once() -> None:
    run = intake(expect_nodes=2)
    hello(run, "n1", "i")
    hello(run, "n2", "j")
    end(run, "n1", now=1200.0)
    assert (run.over(1299.0), run.silenced()) == (False, [])
    assert (run.over(1300.0), run.silenced()) == (True, [Silenced("n2", 300.0)])
    assert (run.over(1400.0), run.silenced()) == (True, [])  # told once
    assert run.unended() == ["n2"]


def test_a_silent_node_heard_again_holds_the_run_again() -> None:
    run = intake()
    hello(run, "n1", "i")
    hello(run, "n2", "j")
    end(run, "n1")
    assert (run.over(1300.0), run.silenced()) == (True, [Silenced("n2", 300.0)])
    assert hello(run, "n2", "k", now=1310.0) == Decision(reply=WELCOME)
    assert (run.over(1310.0), run.silent(1310.0)) == (False, set())
    assert (run.over(1609.0), run.over(1610.0)) == (False, True)
    assert run.silenced() == [Silenced("n2", 300.0)]  # told again: it had come back


def test_heard_says_whether_a_silent_node_came_back() -> None:
    run = intake()
    hello(run, "n1", "i")
    assert run.silent(1300.0) == {"n1"}
    assert (run.heard("n1", 1301.0), run.heard("n1", 1302.0)) == (True, False)
    assert not run.heard("stranger", 1302.0)  # a node never seen is not remembered
    assert "stranger" not in run.silent(10**6)


def test_heartbeats_keep_a_quiet_node_waited_for() -> None:
    run = intake(expect_nodes=2)
    hello(run, "n1", "i")
    end(run, "n1")
    hello(run, "n2", "j")
    for now in (1200.0, 1400.0, 1600.0, 1800.0, 2000.0):
        beat(run, "n2", now)
        assert not run.over(now + 299)
    assert run.over(2300.0)


def test_without_expect_nodes_a_recent_heartbeat_or_an_open_stream_holds_the_run() -> None:
    """n1 ended; n2 only sends heartbeats (it never said Hello to this aggregator): held
    while its heartbeat is under 30 s old or it has a stream open; then n2 is unended."""
    run = intake()
    hello(run, "n1", "i")
    end(run, "n1")
    beat(run, "n2", 1000.0)
    assert (run.over(1029.0), run.pending(1029.0)) == (False, {"n2"})
    assert (run.over(1030.0, streaming={"n2"}), run.over(1030.0)) == (False, True)
    assert run.collectors(1030.0) == {"n2": (BEAT, False)}
    assert run.unended() == ["n2"]


def test_with_expect_nodes_heartbeats_do_not_hold_the_run() -> None:
    run = intake(expect_nodes=1)
    beat(run, "n2", 1000.0)
    end(run, "n1")
    assert run.over(1000.0, streaming={"n2"})


def test_expect_nodes_waits_for_that_many_nodes() -> None:
    run = intake(expect_nodes=2)
    hello(run, "n1", "i")
    end(run, "n1")
    assert not run.over(10**6)
    end(run, "n2", "j", now=10**6)
    assert run.over(10**6)


# ---------------------------------------------------------------- the cap on node names


def test_node_names_over_the_cap_are_refused_and_the_known_still_served() -> None:
    run = intake(max_nodes=2)
    hello(run, "n1", "i")
    end(run, "n2", "j")
    refused = Decision(reply=Reject(reason="more than 2 nodes"), refused=True)
    assert (hello(run, "n3", "k"), end(run, "n3", "k")) == (refused, refused)
    assert (hello(run, "n2", "x"), run.nodes) == (
        Decision(reply=WELCOME, save=True),
        {"n1": False, "n2": False},
    )
    assert [beat(run, f"b{n}", 1000.0) for n in range(3)] == [
        Decision(),
        Decision(),
        Decision(refused=True),
    ]
    assert set(run.heartbeats) == {"b0", "b1"}


# ---------------------------------------------------------------- the rule, by an oracle


@dataclass(frozen=True)
class Said:
    """One message of a node at a time: 'hello' (a new collector instance), 'beat', 'end'."""

    at: int
    node: str
    kind: str


said = st.builds(
    Said,
    st.integers(0, 2000),
    st.sampled_from(["n1", "n2", "n3"]),
    st.sampled_from(["hello", "beat", "end"]),
)


def oracle(history: list[Said], now: int, expect: int, streaming: set[str]) -> bool:
    """Over iff: some node said Hello or ended; each such node ended (its last Hello or
    end-of-run was an end-of-run) or fell silent (nothing from it for 300 s); at least
    `expect` such nodes; and without `expect`, no unended node that is not silent has a
    heartbeat under 30 s old or a stream open."""
    members = [s for s in history if s.kind != "beat"]
    known = {s.node for s in members}
    ended = {n for n in known if [s.kind for s in members if s.node == n][-1] == "end"}
    last = {s.node: s.at for s in history}
    silent = {n for n in last if n not in ended and now - last[n] >= 300}
    beats = {s.node: s.at for s in history if s.kind == "beat"}
    pending = {n for n, at in beats.items() if now - at < 30} | streaming
    return bool(
        known
        and known <= ended | silent
        and len(known) >= expect
        and (expect > 0 or not pending - ended - silent)
    )


@given(
    st.lists(said, max_size=12),
    st.integers(0, 2500),
    st.integers(0, 3),
    st.sets(st.sampled_from(["n1", "n2", "n3"])),
)
def test_the_run_is_over_exactly_when_the_oracle_says(
    history: list[Said], later: int, expect: int, streaming: set[str]
) -> None:
    history = sorted(history, key=lambda s: s.at)
    run = Intake(Rules(expect_nodes=expect), WELCOME, 0.0)
    for n, s in enumerate(history):
        if s.kind == "hello":
            run.hello(s.node, f"instance{n}")
        elif s.kind == "end":
            run.end_of_run(s.node, None)
        else:
            run.heartbeat(s.node, BEAT, s.at)
        run.heard(s.node, s.at)
    now = (history[-1].at if history else 0) + later
    assert run.over(now, streaming) == oracle(history, now, expect, streaming)
