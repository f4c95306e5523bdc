"""The P2P records of a coalesced NCCL batch (`collector/p2pbatch.py`): each record goes to one
batch, the batch after it; a batch given after a later one gets none (never a wrong peer)."""

from __future__ import annotations

from commscope.collector.normalize import CommCall
from commscope.collector.p2pbatch import Batches, batch_bytes, batch_peers
from commscope.collector.p2ppeers import Peers


def _record(start: int, way: str, peer: int | None = None, group_peer: int | None = None,
            size: int | None = 64) -> CommCall:  # fmt: skip
    return CommCall("record_param_comms", start, start + 1, way, size, pg="pp", peer=peer,
                    group_peer=group_peer)  # fmt: skip


def test_each_record_goes_to_the_batch_after_it_once() -> None:
    batches = Batches()
    for record in (_record(0, "send", 1), _record(5, "recv", 1), _record(20, "isend", 2)):
        batches.add(7, record)
    batches.add(7, CommCall("record_param_comms", 1, 2, "allreduce"))  # not P2P: not kept
    assert [r.start_ns for r in batches.members(7, 10)] == [0, 5]
    assert [r.start_ns for r in batches.members(7, 30)] == [20]
    assert batches.members(7, 25) == []  # before the last batch given: none
    assert batches.members(8, 30) == []


def test_a_plain_send_that_launched_its_own_kernel_is_no_batchs() -> None:
    batches = Batches()
    plain, batched = _record(0, "send", 1), _record(5, "send", 2)
    batches.add(7, plain)
    batches.add(7, batched)
    batches.launched(7, [plain, CommCall("nccl:send", 0, 9)])
    assert batches.members(7, 10) == [batched]


def test_a_batch_has_a_peer_only_when_it_goes_one_way_to_one_peer() -> None:
    groups = {"pp": [4, 9]}
    assert batch_peers([_record(0, "send", 9), _record(1, "isend", None, 1)], groups) == Peers(9)
    assert batch_peers([_record(0, "recv", None, 0)], groups) == Peers(recv_from=4)
    assert batch_peers([_record(0, "send", 9), _record(1, "recv", 9)], groups) == Peers()
    assert batch_peers([_record(0, "send", 9), _record(1, "send", 4)], groups) == Peers()


def test_a_batch_sends_its_sends_else_its_receives() -> None:
    assert batch_bytes([_record(0, "send", 1, size=8), _record(1, "recv", 1, size=99)]) == 8
    assert batch_bytes([_record(0, "recv", 1, size=8), _record(1, "irecv", 2, size=4)]) == 12
    assert batch_bytes([_record(0, "send", 1, size=None)]) is None
