"""An uneven all-to-all in an Nsight Systems export (`collector.nsyssplits`): PyTorch's
`nccl:all_to_all` range around one group of an ncclSend and an ncclRecv per peer, each with
NCCL's payload (bytes, peer). The per-peer bytes are the split sizes; the report's section
follows, worked by hand on two ranks."""

from __future__ import annotations

from pathlib import Path

import pytest
from commscope.collector.nsyssplits import group_splits
from commscope.model.schema import CommOp
from commscope.pipeline.alltoallv import row_bytes
from commscope.pipeline.report import Options
from commscope.service.offline import analyse, outcome
from nsys_builder import INIT, P2P, Export, blob

COMM = 0xABC
PG = "nccl:0000000000000abc"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
# bytes rank i sends rank j (what j receives from i)
SENT = [[100, 300], [500, 900]]


def job() -> Export:
    """Two processes, ranks 0 and 1 (GPUs 0 and 1), one all_to_all_single each: their sends
    and receives in one group, a SendRecv kernel at [160, 260 + 100 x rank]."""
    export = Export()
    for rank in (0, 1):
        pid = 200 + rank
        export.nvtx(pid, 1, 10, 20, "ncclCommInitRank",
                    payload=blob(INIT, comm=COMM, ranks=2, rank=rank))  # fmt: skip
        export.nvtx(pid, 1, 100, 200, "nccl:all_to_all, op_id = 5")
        export.nvtx(pid, 1, 110, 111, "ncclGroupStart")
        for peer in (0, 1):
            for at, name, size in ((112, "ncclSend", SENT[rank][peer]),
                                   (114, "ncclRecv", SENT[peer][rank])):  # fmt: skip
                payload = blob(P2P, comm=COMM, size=size, peer=peer)
                export.nvtx(pid, 1, at + 4 * peer, at + 4 * peer + 1, name, payload=payload)
        export.nvtx(pid, 1, 120, 150, "ncclGroupEnd")
        export.launched(pid, 1, 130, corr=3, kernel=(rank, 160, 260 + 100 * rank, SENDRECV))
    return export


def test_the_sends_and_receives_per_peer_are_the_split_sizes(tmp_path: Path) -> None:
    first, second = outcome("w", job().write(tmp_path / "run.sqlite"))  # type: ignore[misc]
    # rank 1 sends 500 B to rank 0 and 900 B to itself, receives 300 B and 900 B
    assert second.result.calls == [
        CommOp(
            "AllToAll",
            160,
            200,
            1400,
            2,
            True,
            PG,
            None,
            "NCCL communicator",
            in_splits=(500, 900),
            out_splits=(300, 900),
        )
    ]
    # rank 0 sends 400 B (S) and receives 600 B: splits of bytes, a row is one byte
    (op,) = first.result.calls
    assert (op.message_bytes, op.in_splits, op.out_splits) == (400, (100, 300), (100, 500))
    assert row_bytes(op) == 1 and row_bytes(second.result.calls[0]) == 1


def test_the_report_has_the_section_worked_by_hand(tmp_path: Path) -> None:
    job().write(tmp_path / "w" / "run.sqlite")
    got = analyse(tmp_path, Options()).alltoallv
    assert got is not None
    assert got.matrix_bytes == SENT and got.matrix_na_reason is None
    assert [(r.sent_bytes, r.received_bytes) for r in got.per_rank.values()] == [
        (400, 600),
        (1400, 1200),
    ]
    assert got.busiest_rank == 1
    # rank 1 moved 1400 B in its 200 ns, x (2-1)/2
    assert got.busbw_Bps.max == pytest.approx(1400 / 200e-9 / 2)


def test_a_group_gives_splits_only_when_every_member_says_its_peer() -> None:
    send = ("ncclSend", {"Peer rank": 1}, 64)
    assert group_splits([send], 2) == ((0, 64), (0, 0))
    assert group_splits([send], None) == ((), ())  # n unknown (NCCL up to 2.22)
    assert group_splits([send, ("ncclRecv", {}, 64)], 2) == ((), ())  # a peer not said
    assert group_splits([send, ("ncclRecv", {"Peer rank": 2}, 64)], 2) == ((), ())
    assert group_splits([("ncclAllReduce", {}, 64)], 2) == ((), ())
