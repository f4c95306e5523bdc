"""The pure half of the Nsight Systems reader (`collector/nsys.py`): table names, range names,
NCCL payloads, NCCL API groups, ranks."""

from __future__ import annotations

from commscope.collector import nsys
from commscope.collector.nsys import ApiCall, Comms, Process
from hypothesis import given
from hypothesis import strategies as st
from nsys_builder import COLL, INIT, P2P, blob, gpid

SCHEMAS = nsys.schemas_from(
    [
        (INIT, "NCCL communicator ID", 18, None),
        (INIT, "No. of ranks", 5, 8),
        (INIT, "Rank", 5, 12),
        (COLL, "NCCL communicator ID", 18, None),
        (COLL, "Message size [bytes]", 22, 8),
        (P2P, "NCCL communicator ID", 18, None),
        (P2P, "Message size [bytes]", 22, 8),
    ]
)


def test_the_kernel_table_is_found_under_its_older_and_versioned_names() -> None:
    bases = nsys.KERNEL_TABLES
    assert (
        nsys.pick_table({"CUPTI_ACTIVITY_KIND_KERNEL", "X"}, bases) == "CUPTI_ACTIVITY_KIND_KERNEL"
    )
    older = {"CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"}
    assert nsys.pick_table(older, bases) == "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL"
    versioned = {"CUPTI_ACTIVITY_KIND_KERNEL_V2", "CUPTI_ACTIVITY_KIND_KERNEL_V3"}
    assert nsys.pick_table(versioned, bases) == "CUPTI_ACTIVITY_KIND_KERNEL_V3"
    assert nsys.pick_table({"CUPTI_ACTIVITY_KIND_KERNELS_OF_MINE"}, bases) is None


def test_pytorch_emit_nvtx_suffixes_are_cut_from_range_names() -> None:
    assert nsys.call_name("nccl:all_to_all, op_id = 991144") == "nccl:all_to_all"
    assert nsys.call_name("aten::add, seq = 3, op_id = 9, sizes = [[2]]") == "aten::add"
    assert nsys.call_name("step, with a comma") == "step, with a comma"


def test_nccls_own_ranges_are_told_from_pytorchs() -> None:
    assert nsys.is_nccl_api("ncclGroupEnd") and nsys.is_nccl_api("ncclAllReduce")
    assert not nsys.is_nccl_api("nccl:all_reduce")


def test_step_names() -> None:
    names = ["ProfilerStep#12", "step 3", "train_step_4", "iteration 5", "Optimizer.step#SGD.step"]
    assert [nsys.step_number(n) for n in names] == [12, 3, 4, 5, None]


@given(comm=st.integers(0, 2**64 - 1), ranks=st.integers(1, 2**31 - 1), rank=st.integers(0, 100))
def test_a_payload_decodes_to_the_values_written(comm: int, ranks: int, rank: int) -> None:
    fields = nsys.decode_payload(blob(INIT, comm=comm, ranks=ranks, rank=rank), SCHEMAS)
    assert fields == {"NCCL communicator ID": comm, "No. of ranks": ranks, "Rank": rank}


@given(data=st.binary(max_size=64))
def test_any_bytes_decode_to_fields_or_nothing_never_an_error(data: bytes) -> None:
    fields = nsys.decode_payload(data, SCHEMAS)
    assert set(fields) <= {"NCCL communicator ID", "No. of ranks", "Rank", "Message size [bytes]"}


def test_a_payload_of_an_unknown_schema_or_too_short_is_empty() -> None:
    assert nsys.decode_payload(blob(INIT, comm=1)[:40], SCHEMAS) == {"NCCL communicator ID": 1}
    assert nsys.decode_payload(b"\x00" * 31, SCHEMAS) == {}
    assert nsys.decode_payload("text", SCHEMAS) == {}


def payload(schema: int, **values: int) -> dict[str, int]:
    return nsys.decode_payload(blob(schema, **values), SCHEMAS)


def test_nested_groups_launch_at_the_outermost_group_end() -> None:
    comms = Comms()
    comms.add(payload(INIT, comm=5, ranks=4, rank=2))
    calls = [
        ApiCall(1, 0, 1, "ncclGroupStart"),
        ApiCall(1, 2, 3, "ncclGroupStart"),
        ApiCall(1, 4, 5, "ncclAllReduce", payload(COLL, comm=5, size=10)),
        ApiCall(1, 6, 7, "ncclGroupEnd"),  # inner: launches nothing
        ApiCall(1, 8, 9, "ncclAllReduce", payload(COLL, comm=5, size=30)),
        ApiCall(1, 10, 20, "ncclGroupEnd"),
        ApiCall(1, 30, 40, "ncclBroadcast", payload(COLL, comm=5, size=7)),
    ]
    found = [(c.name, c.start_ns, c.collective_name, c.nelems_bytes, c.group_size)
             for _, c in nsys.launchers(reversed(calls), comms)]  # fmt: skip
    # the group's two all-reduces coalesce: S = 10 + 30; n from the communicator's init
    assert found == [
        ("ncclGroupEnd", 10, "AllReduce", 40, 4),
        ("ncclBroadcast", 30, "Broadcast", 7, 4),
    ]
    assert (comms.rank, comms.world) == (2, 4)


def test_a_group_member_without_a_size_leaves_the_groups_size_unknown() -> None:
    calls = [
        ApiCall(1, 0, 1, "ncclGroupStart"),
        ApiCall(1, 2, 3, "ncclSend", payload(P2P, comm=5, size=10)),
        ApiCall(1, 4, 5, "ncclSend"),
        ApiCall(1, 6, 9, "ncclGroupEnd"),
    ]
    ((_, call),) = nsys.launchers(calls, Comms())
    assert (call.collective_name, call.nelems_bytes, call.group_size) == ("SendRecv", None, None)


def test_ranks_from_nccl_payloads_when_every_process_has_one() -> None:
    first, second = Comms(rank=1, world=2), Comms(rank=0, world=2)
    processes = [Process(gpid(10), (0,), first), Process(gpid(11), (1,), second)]
    assert nsys.ranks_of(processes) == ({gpid(10): 1, gpid(11): 0}, None)
    assert nsys.world_of(processes) == 2


def test_ranks_by_device_order_when_a_payload_rank_is_missing() -> None:
    processes = [Process(gpid(10), (3,), Comms(rank=0, world=2)), Process(gpid(11), (1,))]
    ranks, note = nsys.ranks_of(processes)
    assert ranks == {gpid(11): 0, gpid(10): 1}
    assert note is not None and note.endswith("pid 11 (GPU 1) rank 0, pid 10 (GPU 3) rank 1")


def test_the_time_base_is_the_session_start_on_both_clocks() -> None:
    assert nsys.base_time_ns(1_000_000, 300) == 999_700
    assert nsys.base_time_ns(None, 300) is None


def test_a_payload_whose_schema_id_has_its_upper_half_set_still_decodes() -> None:
    flagged = bytearray(blob(INIT, comm=9, ranks=2, rank=1))
    flagged[12:16] = b"\x01\x00\x00\x00"  # bytes 12-15: reserved beside the 32-bit schema id
    assert nsys.decode_payload(bytes(flagged), SCHEMAS)["Rank"] == 1
