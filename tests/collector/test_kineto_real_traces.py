"""The real traces in ../shared/traces/kineto, read in place: facts checked against the raw JSON.

Every expected number here was first computed from the raw JSON with the stdlib `json`
module (kernel `args`; else the kernel's `correlation` -> its launch -> the enclosing
`nccl:*` annotation's Input Dims x Input type), independently of commscope.
"""

from __future__ import annotations

import gzip
from collections import Counter
from functools import cache
from pathlib import Path
from typing import NamedTuple

import pytest
from commscope.model.schema import CommOp, Step
from kineto_builder import Parsed, read
from tools import needs_shared, shared_traces

KINETO = shared_traces("kineto")
DLRM = "dlrm_8rank_v100"
SAMPLED = "sampled_2rank"
A100 = "single_rank/a100_nccl_args_rank0.json.gz"
B200 = "single_rank/b200_allgather_args_rank0.json.gz"
MI300 = "single_rank/mi300_rccl_generic_rank0.json.gz"
V100 = "single_rank/v100_allreduce_216k_events_rank1.json.gz"

pytestmark = needs_shared("kineto")


def dlrm_file(rank: int) -> str:
    (path,) = (KINETO / DLRM).glob(f"worker{rank}_*.pt.trace.json")
    return str(path.relative_to(KINETO))


@cache
def parsed(relative: str) -> Parsed:
    path = KINETO / relative
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as stream:
        return read(b"", stream)  # type: ignore[arg-type]


def by_type(relative: str) -> Counter[str]:
    return Counter(op.collective for op in parsed(relative).comm)


def sizes(relative: str, collective: str) -> Counter[int | None]:
    return Counter(op.message_bytes for op in parsed(relative).comm if op.collective == collective)


def steps(relative: str) -> int:
    return len(parsed(relative).of(Step))


class Facts(NamedTuple):
    """What the raw JSON of one file says."""

    name: str  # a path under KINETO, or dlrmK for DLRM worker K
    rank: int
    world_size: int
    gpu: str | None  # deviceProperties[0].name
    base_time_ns: int | None  # baseTimeNanoseconds
    steps: int  # ProfilerStep#N user annotations
    items: int  # len(traceEvents)

    @property
    def relative(self) -> str:
        if self.name.startswith("dlrm"):
            return dlrm_file(int(self.name.removeprefix("dlrm")))
        return self.name


V100_NAME = "Tesla V100-SXM2-32GB"
DLRM_ITEMS = (3290, 3424, 3268, 3474, 3310, 3250, 3272, 3250)
FACTS = [
    *[Facts(f"dlrm{k}", k, 8, V100_NAME, None, 1, DLRM_ITEMS[k]) for k in range(8)],
    Facts(f"{SAMPLED}/sampled_rank-0.json.gz", 0, 128, None, None, 2, 4855),
    Facts(f"{SAMPLED}/sampled_rank-1.json.gz", 1, 128, None, None, 2, 4720),
    Facts(A100, 0, 2, "NVIDIA A100-PG509-200", 1711964646000000000, 3, 40573),
    Facts(B200, 0, 8, "NVIDIA B200", 1767189312000000000, 0, 24656),
    Facts(MI300, 0, 8, "AMD Instinct MI300X", 1767189312000000000, 3, 56451),
    pytest.param(Facts(V100, 1, 2, V100_NAME, None, 5, 216092), marks=pytest.mark.slow),
]


def _id(facts: object) -> str:
    return Path(facts.name).name if isinstance(facts, Facts) else str(facts)


@pytest.mark.parametrize("facts", FACTS, ids=_id)
def test_rank_and_world_size_from_distributed_info(facts: Facts) -> None:
    meta = parsed(facts.relative).meta
    assert (meta.rank, meta.world_size) == (facts.rank, facts.world_size)


@pytest.mark.parametrize("facts", FACTS, ids=_id)
def test_gpu_name_from_device_properties(facts: Facts) -> None:
    assert parsed(facts.relative).meta.gpu_name == facts.gpu


@pytest.mark.parametrize("facts", FACTS, ids=_id)
def test_base_time_from_the_document(facts: Facts) -> None:
    assert parsed(facts.relative).meta.base_time_ns == facts.base_time_ns


@pytest.mark.parametrize("facts", FACTS, ids=_id)
def test_profiler_steps(facts: Facts) -> None:
    assert steps(facts.relative) == facts.steps


@pytest.mark.parametrize("facts", FACTS, ids=_id)
def test_every_item_is_read_and_none_dropped(facts: Facts) -> None:
    stats = parsed(facts.relative).stats
    assert (stats.events, stats.dropped) == (facts.items, {})


# ------------------------------------------------------------------ DLRM, 8 x V100


@pytest.mark.parametrize("rank", range(8))
def test_dlrm_rank_has_five_alltoall_and_three_allreduce(rank: int) -> None:
    # the 5 ncclKernel_SendRecv kernels are launched inside nccl:all_to_all: NCCL runs
    # all-to-all as grouped send/recv, the program called all_to_all
    assert by_type(dlrm_file(rank)) == Counter({"AllToAll": 5, "AllReduce": 3})


@pytest.mark.parametrize("rank", range(8))
def test_dlrm_allreduce_sizes_come_from_the_nccl_annotation(rank: int) -> None:
    # nccl:all_reduce Input Dims x float: 394241 x 4 = 1576964, 112 x 4 = 448, 226960 x 4 = 907840
    assert sizes(dlrm_file(rank), "AllReduce") == Counter({1576964: 1, 448: 1, 907840: 1})


@pytest.mark.parametrize("rank", range(8))
def test_dlrm_all_to_all_sizes_come_from_the_nccl_annotation(rank: int) -> None:
    # nccl:all_to_all: 6144 float x 4 = 24576 (twice), 24 long int x 8 = 192,
    # 384 int x 4 = 1536, 3392 int x 4 = 13568
    expected = Counter({24576: 2, 192: 1, 1536: 1, 13568: 1})
    assert sizes(dlrm_file(rank), "AllToAll") == expected


@pytest.mark.parametrize("rank", range(8))
def test_dlrm_group_size_is_the_world(rank: int) -> None:
    result = parsed(dlrm_file(rank))
    assert {op.group_size for op in result.comm} == {8}
    assert result.stats.sizes_unknown == 0


# ------------------------------------------------------------------ sampled ranks of a 128-rank job


@pytest.mark.parametrize("rank", [0, 1])
def test_sampled_rank_collectives_are_named_by_their_nccl_call(rank: int) -> None:
    # all 10 kernels are ncclKernel_SendRecv, launched inside 4 nccl:all_to_all,
    # 4 nccl:all_reduce and 2 nccl:_all_gather_base calls
    relative = f"{SAMPLED}/sampled_rank-{rank}.json.gz"
    assert by_type(relative) == Counter({"AllToAll": 4, "AllReduce": 4, "AllGather": 2})
    assert parsed(relative).stats.sizes_unknown == 0


@pytest.mark.parametrize("rank", [0, 1])
def test_sampled_allgather_size_is_the_gathered_output_of_the_c10d_op(rank: int) -> None:
    # c10d::_allgather_base_ Input Dims [[1073741824], [16777216]] signed char: the output
    # (a group of 64) beats shard x world size (16777216 x 128 would double it)
    relative = f"{SAMPLED}/sampled_rank-{rank}.json.gz"
    assert sizes(relative, "AllGather") == Counter({1073741824: 2})


# ------------------------------------------------------------------ single ranks


def test_a100_has_fifteen_allreduce_and_six_broadcast() -> None:
    assert by_type(A100) == Counter({"AllReduce": 15, "Broadcast": 6})


def test_a100_sizes_come_from_kernel_args() -> None:
    # max(In, Out msg nelems) x 4 (Float); e.g. 6637568 x 4 = 26550272
    assert sizes(A100, "AllReduce") == Counter(
        {26550272: 3, 9724160: 3, 8196000: 3, 31502336: 3, 26255360: 3}
    )
    assert sizes(A100, "Broadcast") == Counter({212480: 3, 424: 3})


def test_a100_metadata_from_pg_config() -> None:
    meta = parsed(A100).meta
    assert (meta.pg_sizes, meta.nccl_version, meta.backend) == ({"0": 2}, "2.17.1", "nccl")


def test_b200_has_one_allgather_of_the_gathered_output() -> None:
    # Out msg nelems 201088 x 2 (BFloat16) = 402176 B; Group size 8; Process Group Name "3"
    (op,) = [op for op in parsed(B200).comm if op.collective == "AllGather"]
    assert op == CommOp(
        "AllGather", op.start_ns, op.dur_ns, 402176, 8, True, "3", None, "Group size arg",
        "BFloat16",
    )  # fmt: skip


def test_b200_symmetric_memory_all_reduces_are_communication() -> None:
    # 73 `multimem_all_reduce_kernel` launches (PyTorch symmetric memory, `collector.families`):
    # AllReduce by their family, no collective args (size unknown), n from the world size
    others = [op for op in parsed(B200).comm if op.collective != "AllGather"]
    facts = Counter((op.collective, op.message_bytes, op.group_size, op.group_source)
                    for op in others)  # fmt: skip
    assert facts == Counter({("AllReduce", None, 8, "world size"): 73})
    assert (parsed(B200).stats.comm_kernels, parsed(B200).stats.sizes_unknown) == (74, 73)


def test_mi300_has_seventeen_comm_kernels() -> None:
    assert by_type(MI300) == Counter({"AllReduce": 6, "Broadcast": 6, "Other": 5})


def test_mi300_sized_kernels() -> None:
    # BFloat16: 2873320 x 2 = 5746640, 8816192 x 2 = 17632384, 9600 x 2 = 19200; Long 20 x 8 = 160
    assert sizes(MI300, "AllReduce") == Counter({5746640: 3, 17632384: 3})
    assert sizes(MI300, "Broadcast") == Counter({19200: 3, 160: 3})


def test_mi300_generic_kernels_launched_before_the_window_are_unsized() -> None:
    # five ncclDevKernel_Generic kernels carry no args and their launches are not in the file
    assert sizes(MI300, "Other") == Counter({None: 5})
    assert parsed(MI300).stats.sizes_unknown == 5
    assert {op.group_size for op in parsed(MI300).comm} == {8}


@pytest.mark.slow
def test_v100_216k_allreduce_kernels_all_have_unknown_size() -> None:
    # no collective args anywhere and no Input Dims (record_shapes was off)
    assert sizes(V100, "AllReduce") == Counter({None: 2020})
    assert by_type(V100) == Counter({"AllReduce": 2020})
    assert parsed(V100).stats.sizes_unknown == 2020
