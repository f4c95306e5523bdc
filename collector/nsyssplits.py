"""The split sizes of an all-to-all in an Nsight Systems export, from NCCL's payloads (pure).

NCCL registers no payload schema for an uneven all-to-all (`ncclAlltoAll`, since 2.28, is
even: its payload is the bytes per peer). PyTorch runs `all_to_all_single` with splits on
NCCL as one `ncclGroupStart`…`ncclGroupEnd` of an `ncclSend` and an `ncclRecv` per peer
(torch/csrc/cuda/nccl.cpp, `all2all_single_unequal_split`), and each of those carries
`NcclNvtxParamsSendRecv {comm; bytes; peer}` (NVIDIA/nccl src/include/nvtx_payload_schemas.h;
"Bytes" and "Peer rank" up to 2.22): the bytes sent to and received from each peer, the peer
being its rank in the communicator. Those are the call's split sizes, counted in bytes (a
row is one byte; S, by the contract, is the sum of the sends).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from commscope.model.schema import MAX_SPLITS

_PEER: Final = "Peer rank"
_SEND, _RECV = "ncclSend", "ncclRecv"

Splits = tuple[tuple[int, ...], tuple[int, ...]]


def group_splits(
    members: Iterable[tuple[str, Mapping[str, int], int | None]], ranks: int | None
) -> Splits:
    """(bytes sent to, bytes received from) each of the communicator's `ranks` peers, from a
    group's (name, payload, size) members; empty unless every member is a send or a receive
    whose payload gives its size and a peer of the communicator."""
    if ranks is None:
        return (), ()
    sent, received = [0] * ranks, [0] * ranks
    for name, payload, size in members:
        peer = payload.get(_PEER)
        if name not in (_SEND, _RECV) or size is None or peer is None or not 0 <= peer < ranks:
            return (), ()
        (sent if name == _SEND else received)[peer] += size
    if not (any(sent) or any(received)):
        return (), ()
    return tuple(sent[:MAX_SPLITS]), tuple(received[:MAX_SPLITS])  # as Kineto's: the first
