"""A SendRecv call's peer and direction: gloo spans from their c10d operator, NCCL calls
from record_param_comms' `Dst Rank` / `Src Rank`, else its `Rank` or fourth concrete input
(a group rank) made global; NCCL Inspector's `p2p_peer` as group ranks."""

from __future__ import annotations

from types import SimpleNamespace

from commscope.collector.inspector import LineReader, Op
from commscope.collector.p2ppeers import (
    HeldSpans,
    PeerCalls,
    Peers,
    concrete_peer,
    global_rank,
    group_global,
    peers,
    record_global,
    record_group_peer,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from inspector_builder import p2p
from kineto_builder import annotation, collective_args, cpu_op, dist_head, kernel, read, trace


def _op(name: str, ts: float, peer: str) -> dict:
    return cpu_op(name, ts, 2, args={"Concrete Inputs": ["", "", peer, "0"]})


def _gloo(name: str, ts: float, dur: float) -> dict:
    return annotation(name, ts, dur, args={"Input Dims": [[4, 64]], "Input type": ["float"]})


def test_gloo_send_and_recv_take_the_peer_of_their_operator() -> None:
    events = [
        annotation("ProfilerStep#1", 0, 100),
        _op("c10d::send", 10, "2"),
        _gloo("gloo:send", 11, 30),
        _gloo("gloo:recv", 51, 20),  # listed before its operator: resolved at the file's end
        _op("c10d::recv_", 50, "0"),
    ]
    ops = read(trace(events, head=dist_head(1, 3, "gloo"))).comm
    assert [(op.collective, op.send_to, op.recv_from, op.message_bytes) for op in ops] == [
        ("SendRecv", 2, None, 1024),
        ("SendRecv", None, 0, 1024),
    ]


def test_a_gloo_span_outside_any_operator_has_no_peer() -> None:
    events = [annotation("ProfilerStep#1", 0, 100), _gloo("gloo:send", 11, 30)]
    (op,) = read(trace(events, head=dist_head(1, 3, "gloo"))).comm
    assert (op.send_to, op.recv_from) == (None, None)


def test_nccl_calls_name_the_peer_as_record_param_comms_records_it() -> None:
    sent = collective_args("send", 256, 256, "Float", **{"Dst Rank": 5})
    received = collective_args("recv", 256, 256, "Float", **{"Src Rank": 3})
    events = [kernel("ncclDevKernel_SendRecv", 10, 5, args=sent),
              kernel("ncclDevKernel_SendRecv", 20, 5, args=received)]  # fmt: skip
    ops = read(trace(events, head=dist_head(4, 8, "nccl", gpu="NVIDIA H100"))).comm
    assert [(op.collective, op.send_to, op.recv_from) for op in ops] == [
        ("SendRecv", 5, None),
        ("SendRecv", None, 3),
    ]


def test_concrete_peer_reads_the_third_argument_only_when_a_rank() -> None:
    assert concrete_peer({"Concrete Inputs": ["", "", "3", "0"]}) == 3
    assert concrete_peer({"Concrete Inputs": ["", "", "-1", "0"]}) is None  # any source
    assert concrete_peer({"Concrete Inputs": [""]}) is None
    assert concrete_peer({}) is None


def test_global_rank_maps_through_the_only_group_and_never_guesses() -> None:
    assert global_rank(1, {}) == 1
    assert global_rank(1, {"0": [4, 6]}) == 6
    assert global_rank(2, {"0": [4, 6]}) is None
    assert global_rank(1, {"0": [0, 1], "1": [2, 3]}) is None


def test_the_innermost_operator_holding_the_instant_speaks() -> None:
    calls = PeerCalls()
    calls.add(1, 0, 100, 7)
    calls.add(1, 10, 20, 3)
    assert (calls.peer(1, 15), calls.peer(1, 50), calls.peer(1, 150), calls.peer(2, 15)) == (
        3,
        7,
        None,
        None,
    )


def _span(start: int) -> SimpleNamespace:
    return SimpleNamespace(start_ns=start, peer=None)


def test_many_sends_before_their_operators_are_held_bounded_and_counted() -> None:
    held = HeldSpans(memory=4)
    out = []
    for k in range(100):  # 100 spans, none of whose operators has arrived yet
        out += held.span(1, _span(10 * k + 1), settled=True)
        assert held.held <= 4
    out += [found for k in range(100) for found in held.call(1, 10 * k, 10 * k + 5, k % 3, True)]
    assert (held.early, len(out), held.held) == (96, 100, 0)
    assert [peer for facts, peer in out[96:]] == [k % 3 for k in range(96, 100)]
    assert all(peer is None for _, peer in out[:96])  # fell out before their operator: counted


def test_a_span_is_resolved_as_soon_as_its_operator_is_known() -> None:
    held = HeldSpans(memory=4)
    held.call(1, 0, 10, 2, True)
    assert [peer for _, peer in held.span(1, _span(3), True)] == [2]  # operator first
    assert held.span(1, _span(23), True) == []  # operator later
    assert [peer for _, peer in held.call(1, 20, 30, 5, True)] == [5]
    assert held.held == 0


def test_before_the_groups_are_final_resolved_spans_wait_for_the_end() -> None:
    held = HeldSpans(memory=4)
    held.call(1, 0, 10, 2, settled=False)
    assert held.span(1, _span(3), settled=False) == []
    assert [peer for _, peer in held.finish()] == [2]


_EVENTS = st.lists(
    st.tuples(
        st.booleans(), st.integers(1, 2), st.integers(0, 60), st.integers(0, 20), st.integers(0, 3)
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(_EVENTS)
def test_held_spans_equal_the_end_of_file_resolution(events: list) -> None:
    """Oracle: every span takes the innermost operator of the whole file that holds its start
    (the unbounded resolution), given memory enough and no nested operators."""
    operators: list[tuple[int, int, int, int]] = []
    for is_op, tid, start, length, peer in events:
        if is_op and not any(t == tid and s <= start + length and start <= e
                             for t, s, e, _ in operators):  # fmt: skip
            operators.append((tid, start, start + length, peer))
    spans = [(tid, start) for is_op, tid, start, *_ in events if not is_op]
    held, out = HeldSpans(memory=len(events) + 1), []
    ops, spans_left = list(operators), list(spans)
    for is_op, tid, start, *_ in events:  # the events' own interleaving
        if is_op and ops and (ops[0][0], ops[0][1]) == (tid, start):
            t, s, e, p = ops.pop(0)
            out += held.call(t, s, e, p, True)
        elif not is_op:
            t, s = spans_left.pop(0)
            out += held.span(t, SimpleNamespace(start_ns=s, peer=None, tid=t), True)
    out += held.finish()
    expected = sorted((tid, start, next((p for t, s, e, p in operators
                                         if t == tid and s <= start <= e), None))
                      for tid, start in spans)  # fmt: skip
    assert sorted((f.tid, f.start_ns, peer) for f, peer in out) == expected
    assert held.early == 0


def test_a_trace_with_many_gloo_sends_gives_each_its_peer() -> None:
    events = [annotation("ProfilerStep#1", 0, 10_000)]
    for k in range(50):  # spans listed before their operators, as Kineto may write them
        events += [_gloo("gloo:send", 100 * k + 1, 30), _op("c10d::send", 100 * k, str(k % 3))]
    parsed = read(trace(events, head=dist_head(1, 3, "gloo")))
    assert [op.send_to for op in parsed.comm] == [k % 3 for k in range(50)]
    assert "comm_kernel_unresolved" not in parsed.stats.dropped


def test_a_records_group_peer_is_its_rank_arg_else_its_fourth_concrete_input() -> None:
    sent = {"Collective name": "send", "Rank": 3, "Concrete Inputs": ["", "", "", "1"]}
    assert record_group_peer(sent, 8) == 3
    assert record_group_peer({**sent, "Rank": None}, 8) == 1
    assert record_group_peer({**sent, "Collective name": "allreduce"}, 8) is None  # own rank
    assert record_group_peer(sent, 3) is None  # out of [0, limit)
    assert record_group_peer({"Collective name": "recv"}, 8) is None


def test_a_group_rank_is_made_global_by_the_records_group_else_pg_config() -> None:
    assert record_global(1, {"Process Group Ranks": "[2, 6]"}, 8) == 6
    assert record_global(2, {"Process Group Ranks": "[2, 6]"}, 8) is None
    assert record_global(1, {"Global rank start": 1, "Global rank stride": 4}, 8) == 5
    assert record_global(1, {"Global rank start": -1, "Global rank stride": -1}, 8) is None
    assert record_global(1, {"Process Group Ranks": "[0, x]"}, 8) is None
    assert group_global(1, "pp", {"pp": [3, 7], "dp": [0, 1]}) == 7
    assert group_global(1, "tp", {"pp": [3, 7], "dp": [0, 1]}) is None  # never guessed
    assert group_global(1, None, {}) == 1  # no group listed: the default group


def test_peer_fields_follow_the_direction() -> None:
    assert peers("send", 3) == Peers(send_to=3)
    assert peers("recv", None, 0, 1) == Peers(group_rank=1, group_recv_from=0)
    assert peers(None, 3, 0, 1) == Peers()


def test_inspector_send_and_recv_records_carry_group_ranks() -> None:
    sent = LineReader().line(p2p(1, "Send", 0, comm="0xdef"))
    assert isinstance(sent, Op)
    op = sent.comm_op()
    assert (op.collective, op.process_group, op.message_bytes) == ("SendRecv", "pp 0xdef", 4096)
    assert (op.group_rank, op.group_send_to, op.group_recv_from, op.send_to) == (1, 0, None, None)
    received = LineReader().line(p2p(0, "Recv", 1))
    assert isinstance(received, Op)
    assert (received.comm_op().group_rank, received.comm_op().group_recv_from) == (0, 1)
    for odd in (p2p(0, "SendRecv", 1), p2p(0, "Send", 2)):  # no direction; not a rank of 2
        parsed = LineReader().line(odd)
        assert isinstance(parsed, Op)
        assert parsed.comm_op().group_rank is None
