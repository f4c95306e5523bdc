"""A SendRecv call's peer and direction: gloo spans from their c10d operator, NCCL calls
from record_param_comms' `Dst Rank` / `Src Rank`, else its `Rank` or fourth concrete input
(a group rank) made global; NCCL Inspector's `p2p_peer` as group ranks."""

from __future__ import annotations

from commscope.collector.inspector import LineReader, Op
from commscope.collector.p2ppeers import (
    PeerCalls,
    Peers,
    concrete_peer,
    global_rank,
    group_global,
    peers,
    record_global,
    record_group_peer,
)
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
