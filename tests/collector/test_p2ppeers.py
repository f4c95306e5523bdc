"""A SendRecv call's peer and direction: gloo spans from their c10d operator, NCCL calls
from record_param_comms' `Dst Rank` / `Src Rank`."""

from __future__ import annotations

from commscope.collector.p2ppeers import PeerCalls, concrete_peer, global_rank
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
