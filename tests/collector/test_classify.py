"""classify.py against the metric contract (DESIGN.md, "Classification" and "Message size")."""

from __future__ import annotations

import pytest
from commscope.collector.classify import (
    collective_type,
    dtype_bytes,
    dtype_name,
    input_dims_bytes,
    is_comm_call,
    is_comm_kernel,
    nelems_bytes,
    shape_group,
    split_sizes,
)
from commscope.model.bus import bus_factor
from commscope.model.schema import MAX_SPLITS

# ------------------------------------------------------------------ collective_type


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("allreduce", "AllReduce"),
        ("allreduce_coalesced", "AllReduce"),
        ("_allgather_base", "AllGather"),
        ("all_gather_into_tensor_coalesced", "AllGather"),
        ("allgather", "AllGather"),
        ("_reduce_scatter_base", "ReduceScatter"),
        ("reduce_scatter_tensor_coalesced", "ReduceScatter"),
        ("all_to_all", "AllToAll"),
        ("alltoall_base", "AllToAll"),
        ("broadcast", "Broadcast"),
        ("reduce", "Reduce"),
        ("send", "SendRecv"),
        ("recv", "SendRecv"),
        ("barrier", "Barrier"),
        ("gather", "Other"),
        ("scatter", "Other"),
    ],
)
def test_collective_name_maps_to_its_type(name: str, expected: str) -> None:
    assert collective_type(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "AllReduce",
        ),
        ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather"),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "SendRecv",
        ),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "SendRecv"),
        (
            "ncclKernel_ReduceScatter_RING_LL_Sum_bf16(ncclDevComm*, unsigned long, ncclWork*)",
            "ReduceScatter",
        ),
        ("ncclKernel_Reduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "Reduce"),
        (
            "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "Broadcast",
        ),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", "Other"),
        (
            "rcclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "AllReduce",
        ),
        ("rcclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "AllGather"),
        ("NCCLKERNEL_ALLREDUCE_RING_LL_SUM_FLOAT", "AllReduce"),
        # NCCL before 2.5 names the collective first (issue 9, item 7)
        ("ncclAllReduceRingLLKernel_sum_f32(CollectiveArgs)", "AllReduce"),
        ("ncclBroadcastRingLLKernel_copy_i8(CollectiveArgs)", "Broadcast"),
        ("ncclAllGatherRingLLKernel_copy_i8(CollectiveArgs)", "AllGather"),
        ("ncclReduceScatterRingLLKernel_sum_f16(CollectiveArgs)", "ReduceScatter"),
        ("ncclReduceTreeLLKernel_sum_f32(CollectiveArgs)", "Reduce"),
        ("ncclAllReduceTreeKernel_sum_bf16", "AllReduce"),
        # HCCL (Ascend, MTIA) and XCCL (Intel XPU) the same way
        ("hcclKernel_AllReduce_sum_f32", "AllReduce"),
        ("xcclAllGatherKernel", "AllGather"),
    ],
)
def test_kernel_name_maps_to_its_type(name: str, expected: str) -> None:
    assert collective_type(name) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("nccl:all_reduce", "AllReduce"),
        ("nccl:_all_gather_base", "AllGather"),
        ("nccl:all_to_all", "AllToAll"),
        ("nccl:broadcast", "Broadcast"),
        ("nccl:reduce_scatter", "ReduceScatter"),
        ("gloo:all_gather", "AllGather"),
        ("gloo:all_reduce", "AllReduce"),
        ("c10d::alltoall_base_", "AllToAll"),
        ("c10d::allreduce_", "AllReduce"),
        ("_c10d_functional::all_gather_into_tensor", "AllGather"),
        ("hccl:all_reduce", "AllReduce"),
        ("xccl:reduce_scatter_tensor_coalesced", "ReduceScatter"),
        ("nccl:_reduce_scatter_base", "ReduceScatter"),
    ],
)
def test_annotation_or_op_name_maps_to_its_type(name: str, expected: str) -> None:
    assert collective_type(name) == expected


# ------------------------------------------------------------------ dtype_bytes


@pytest.mark.parametrize(
    ("dtype", "size"),
    [
        ("Float", 4),
        ("float32", 4),
        ("float", 4),
        ("Double", 8),
        ("double", 8),
        ("Half", 2),
        ("BFloat16", 2),
        ("Long", 8),
        ("int64", 8),
        ("long int", 8),
        ("Int", 4),
        ("int32", 4),
        ("int", 4),
        ("Short", 2),
        ("short int", 2),
        ("Char", 1),
        ("Byte", 1),
        ("Bool", 1),
        ("unsigned char", 1),
        ("signed char", 1),
        ("Float8_e4m3fn", 1),
        ("Float8_e5m2", 1),
    ],
)
def test_dtype_size_follows_the_contract_table(dtype: str, size: int) -> None:
    assert dtype_bytes(dtype) == size


@pytest.mark.parametrize(("dtype", "size"), [("FLOAT", 4), ("bfloat16", 2), ("LONG INT", 8)])
def test_dtype_name_is_case_insensitive(dtype: str, size: int) -> None:
    assert dtype_bytes(dtype) == size


@pytest.mark.parametrize(
    ("dtype", "size"),
    [("c10::BFloat16", 2), ("c10::Half", 2), ("c10::Float8_e4m3fn", 1), ("C10::Float", 4)],
)
def test_dtype_c10_prefix_is_ignored(dtype: str, size: int) -> None:
    assert dtype_bytes(dtype) == size


@pytest.mark.parametrize("dtype", ["ComplexFloat", "TensorList", "Scalar", "", None, 4])
def test_unknown_or_missing_dtype_has_no_size(dtype: object) -> None:
    assert dtype_bytes(dtype) is None


def test_a_long_name_is_worked_out_as_a_short_one() -> None:
    """Names of up to 256 characters are worked out once and remembered; longer ones every
    time (the memory stays bounded): the answer is the same either way."""
    short = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    long = short + "_x" * 200  # 439 characters
    assert collective_type(short) == collective_type(short) == "AllReduce"
    assert collective_type(long) == "AllReduce"
    assert dtype_bytes(" " * 300 + "c10::BFloat16") == dtype_bytes("c10::BFloat16") == 2


# ------------------------------------------------------------------ is_comm_kernel / is_comm_call


@pytest.mark.parametrize(
    "name",
    [
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
        "NCCLKernel_x",
        "rcclKernel_AllReduce",
        "RCCL_anything",
        "ncclAllReduceRingLLKernel_sum_f32",
        "hcclKernel_AllReduce",
        "xcclAllGather",
    ],
)
def test_nccl_or_rccl_prefix_is_a_comm_kernel(name: str) -> None:
    assert is_comm_kernel(name)


@pytest.mark.parametrize(
    "name",
    [
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>",
        "ampere_sgemm_128x64_nn",
        "my_ncclKernel_wrapper",
        "",
    ],
)
def test_other_kernels_are_compute(name: str) -> None:
    assert not is_comm_kernel(name)


@pytest.mark.parametrize(
    "name",
    [
        "c10d::allreduce_",
        "c10d::_allgather_base_",
        "_c10d_functional::all_reduce",
        "_c10d_functional::wait_tensor",
        "record_param_comms",
        "WorkNCCL::Wait",
        "aten::wait",
        "nccl:all_reduce",
        "hccl:all_reduce",
        "xccl:all_gather",
    ],
)
def test_c10d_record_and_wait_ops_are_comm_calls(name: str) -> None:
    assert is_comm_call(name)


@pytest.mark.parametrize("name", ["aten::mm", "aten::add_", "DistributedDataParallel.forward"])
def test_plain_ops_are_not_comm_calls(name: str) -> None:
    assert not is_comm_call(name)


# ------------------------------------------------------------------ bus_factor


@pytest.mark.parametrize(
    ("collective", "n", "factor"),
    [
        ("AllReduce", 8, 1.75),  # 2(8-1)/8 = 14/8
        ("AllReduce", 2, 1.0),  # 2(2-1)/2
        ("AllReduce", 1, 0.0),  # 2(1-1)/1: a group of one moves nothing
        ("AllGather", 8, 0.875),  # (8-1)/8
        ("ReduceScatter", 4, 0.75),  # (4-1)/4
        ("AllToAll", 2, 0.5),  # (2-1)/2
    ],
)
def test_bus_factor_of_group_dependent_collectives(collective: str, n: int, factor: float) -> None:
    assert bus_factor(collective, n) == factor


@pytest.mark.parametrize("collective", ["Broadcast", "Reduce", "SendRecv", "Barrier", "Other"])
@pytest.mark.parametrize("n", [8, None])
def test_bus_factor_of_other_collectives_is_one(collective: str, n: int | None) -> None:
    assert bus_factor(collective, n) == 1.0


@pytest.mark.parametrize("collective", ["AllReduce", "AllGather", "ReduceScatter", "AllToAll"])
@pytest.mark.parametrize("n", [None, 0])
def test_bus_factor_needs_a_known_group_size(collective: str, n: int | None) -> None:
    assert bus_factor(collective, n) is None


# ------------------------------------------------------------------ nelems_bytes


def test_message_size_takes_the_larger_of_in_and_out() -> None:
    # max(1000, 8000) x 2 (BFloat16) = 16000
    args = {"In msg nelems": 1000, "Out msg nelems": 8000, "dtype": "BFloat16"}
    assert nelems_bytes(args) == 16000


def test_message_size_of_a_reduce_scatter_is_the_full_input() -> None:
    # max(8000, 1000) x 4 (Float) = 32000
    args = {"In msg nelems": 8000, "Out msg nelems": 1000, "dtype": "Float"}
    assert nelems_bytes(args) == 32000


def test_message_size_from_one_count_alone() -> None:
    # 10 x 8 (Double) = 80
    assert nelems_bytes({"Out msg nelems": 10, "dtype": "Double"}) == 80


@pytest.mark.parametrize(
    "args",
    [
        {"In msg nelems": 1000, "Out msg nelems": 1000},
        {"In msg nelems": 1000, "Out msg nelems": 1000, "dtype": "ComplexFloat"},
        {"dtype": "Float"},
        {"In msg nelems": True, "dtype": "Float"},
        {"In msg nelems": "10", "dtype": "Float"},
    ],
    ids=["no dtype", "unknown dtype", "no counts", "bool count", "string count"],
)
def test_message_size_is_unknown_without_dtype_or_count(args: dict[str, object]) -> None:
    assert nelems_bytes(args) is None


# ------------------------------------------------------------------ input_dims_bytes


def test_input_dims_size_of_one_tensor() -> None:
    # 1024 x 4 elements x 4 B (float) = 16384
    args = {"Input Dims": [[1024, 4]], "Input type": ["float"]}
    assert input_dims_bytes(args) == 16384


def test_input_dims_size_counts_the_first_input_only() -> None:
    # first input: 10 x 4 B = 40; the second (20 x 8 B) is ignored
    args = {"Input Dims": [[10], [20]], "Input type": ["float", "double"]}
    assert input_dims_bytes(args) == 40


def test_input_dims_size_sums_a_tensor_list() -> None:
    # (2x3 + 4) elements x 4 B = 40
    args = {"Input Dims": [[[2, 3], [4]], []], "Input type": ["float", ""]}
    assert input_dims_bytes(args) == 40


def test_input_dims_size_with_c10_dtype() -> None:
    # 201088 x 2 B (c10::BFloat16) = 402176
    args = {"Input Dims": [[201088]], "Input type": ["c10::BFloat16"]}
    assert input_dims_bytes(args) == 402176


@pytest.mark.parametrize(
    "args",
    [
        {"Input Dims": [[[9600]], []], "Input type": ["TensorList", ""]},
        {"Input Dims": [[], [], [], []], "Input type": ["TensorList", "", "", "Scalar"]},
        {"Input Dims": [], "Input type": []},
        {"Input Dims": [[True, 3]], "Input type": ["float"]},
        {"Input Dims": [[-1, 3]], "Input type": ["float"]},
        {"Input Dims": [[10]]},
        {"Input Dims": "[[10]]", "Input type": ["float"]},
    ],
    ids=[
        "TensorList type",
        "TensorList without dims (DLRM c10d::allreduce_)",
        "empty dims",
        "bool is not a count",
        "negative extent",
        "no Input type",
        "dims not a list",
    ],
)
def test_input_dims_size_is_unknown(args: dict[str, object]) -> None:
    assert input_dims_bytes(args) is None


# ------------------------------------------------------------------ shape_group


@pytest.mark.parametrize(
    ("name", "args", "n"),
    [
        # all-gather: Out / In msg nelems = 8000 / 1000
        (
            "record_param_comms",
            {"Collective name": "_allgather_base", "In msg nelems": 1000, "Out msg nelems": 8000},
            8,
        ),
        # reduce-scatter: In / Out = 8000 / 1000
        (
            "record_param_comms",
            {
                "Collective name": "reduce_scatter_tensor_coalesced",
                "In msg nelems": 8000,
                "Out msg nelems": 1000,
            },
            8,
        ),
        # c10d ops list the output first: all-gather 8 x 4 x 2 = 64 over 4 x 2 = 8 -> 8
        ("c10d::_allgather_base_", {"Input Dims": [[8, 4, 2], [4, 2]]}, 8),
        # a tensor-list output of 4 shards of 10 over an input of 10 -> 4
        ("c10d::allgather_", {"Input Dims": [[[10], [10], [10], [10]], [[10]]]}, 4),
        # reduce-scatter: input 300 over output 100 -> 3
        ("c10d::_reduce_scatter_base_", {"Input Dims": [[100], [300]]}, 3),
        ("c10d::reduce_scatter_", {"Input dims": [[[100]], [[100], [100], [100]]]}, 3),
    ],
)
def test_shapes_imply_the_group_of_gathers_and_scatters(
    name: str, args: dict[str, object], n: int
) -> None:
    assert shape_group(name, args) == n


@pytest.mark.parametrize(
    ("name", "args"),
    [
        (
            "record_param_comms",
            {"Collective name": "allreduce", "In msg nelems": 10, "Out msg nelems": 10},
        ),
        (
            "record_param_comms",
            {"Collective name": "_allgather_base", "In msg nelems": 3, "Out msg nelems": 8},
        ),
        (
            "record_param_comms",
            {"Collective name": "_allgather_base", "In msg nelems": 0, "Out msg nelems": 8},
        ),
        ("nccl:_all_gather_base", {"Input Dims": [[25136]]}),
        ("c10d::_allgather_base_", {"Input Dims": [[8, "x"], [4]]}),
        ("c10d::_allgather_base_", {}),
    ],
    ids=["not sharded", "not a multiple", "empty input", "one input", "odd dims", "no args"],
)
def test_shapes_that_say_nothing_give_no_group(name: str, args: dict[str, object]) -> None:
    assert shape_group(name, args) is None


# ------------------------------------------------------------------ dtype names, split sizes


@pytest.mark.parametrize(
    ("spellings", "name"),
    [
        (["Float", "float", "float32", "c10::Float"], "Float"),
        (["Long", "long int", "int64", "c10::Long"], "Long"),
        (["Byte", "unsigned char", "uint8"], "Byte"),
        (["Char", "signed char", "int8"], "Char"),
        (["Half", "c10::Half", "float16"], "Half"),
        (["BFloat16", "c10::BFloat16", "bfloat16"], "BFloat16"),
        (["Float8_e4m3fn", "c10::Float8_e4m3fn"], "float8_e4m3fn"),
        (["ComplexFloat", "c10::complex<float>"], "ComplexFloat"),
    ],
)
def test_every_spelling_of_a_dtype_has_one_name(spellings: list[str], name: str) -> None:
    """record_param_comms' `dtype` says ScalarType names, `Input type` caffe2's."""
    assert {dtype_name(spelling) for spelling in spellings} == {name}


@pytest.mark.parametrize("dtype", [None, "", "  ", 4])
def test_a_missing_dtype_has_no_name(dtype: object) -> None:
    assert dtype_name(dtype) is None


@pytest.mark.parametrize(
    ("recorded", "splits"),
    [
        ("[1, 2]", (1, 2)),
        ("[4, 0, 7]", (4, 0, 7)),
        ("[]", ()),  # an even split: none recorded
        ("[" + ", ".join(map(str, range(30))) + ", ...]", tuple(range(30))),  # Kineto's cut
        ([3, 5], (3, 5)),
        ("[1, -2]", ()),
        ("[1, x]", ()),
        ("1, 2", ()),
        (None, ()),
        ([True], ()),
        ("[4611686018427387904]", ()),  # 2**62: beyond a count
    ],
)
def test_split_sizes_are_the_entries_recorded(recorded: object, splits: tuple[int, ...]) -> None:
    assert split_sizes(recorded) == splits


def test_split_sizes_keep_the_first_max_splits_entries() -> None:
    recorded = "[" + ", ".join(["7"] * 3000) + "]"
    assert split_sizes(recorded) == (7,) * MAX_SPLITS
