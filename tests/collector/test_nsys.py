"""The pure half of the Nsight Systems reader (`collector/nsys.py`): table names, range names,
NCCL payloads, NCCL API groups, ranks."""

from __future__ import annotations

import struct

from commscope.collector import nsys
from commscope.collector.nsys import ApiCall, Comms, Process
from commscope.model.schema import CommOp, GpuOp, Step
from hypothesis import given
from hypothesis import strategies as st
from nsys_builder import (
    COLL,
    INIT,
    NCCL_2_22,
    NCCL_2_27,
    NCCL_2_28,
    OLD_INIT,
    OLD_P2P,
    P2P,
    Layout,
    blob,
    gpid,
    schema_rows,
)

SCHEMAS = nsys.schemas_from(*schema_rows(NCCL_2_27))
OLD = nsys.schemas_from(*schema_rows(NCCL_2_22))
NEWEST = nsys.schemas_from(*schema_rows(NCCL_2_28))
LAYOUTS = {x for version in (NCCL_2_22, NCCL_2_27, NCCL_2_28) for x in version}
SCHEMAS_OF = {x: s for version, s in ((NCCL_2_22, OLD), (NCCL_2_27, SCHEMAS), (NCCL_2_28, NEWEST))
              for x in version}  # fmt: skip
_MEMBER = {"Q": st.integers(0, 2**64 - 1), "i": st.integers(-(2**31), 2**31 - 1)}


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


def test_step_range_names_by_family_with_their_numbers() -> None:
    # 0: PyTorch's ProfilerStep#N; 1: train_step (Megatron-LM scripts), step N; 2: iteration
    names = {
        "ProfilerStep#12": (0, 12),
        "train_step": (1, None),
        "train_step_003": (1, 3),
        "train step 4": (1, 4),
        "step 3": (1, 3),
        "Step 9": (1, 9),
        "iteration": (2, None),
        "iteration5": (2, 5),
        "iteration_7": (2, 7),
        "Iteration 8": (2, 8),
    }
    assert {name: nsys.step_range(name) for name in names} == names


def test_names_that_only_contain_step_are_no_step_range() -> None:
    names = ["Optimizer.step#SGD.step", "step", "ProfilerStep#", "stepper 3", "pre_iteration 3"]
    assert [nsys.step_range(name) for name in names] == [None] * 5


TID = gpid(9) + 4  # thread 4 of process 9


def test_the_first_family_present_gives_the_steps() -> None:
    # train_step [0, 2000] around emit_nvtx's ProfilerStep#5 [100, 1900]: one step, #5
    ranges = [(1, 0, 2000, None, TID), (0, 100, 1900, 5, TID), (2, 0, 50, 1, TID)]
    assert nsys.steps_of(ranges) == [Step(5, 100, 1800, 4)]


def test_unnumbered_step_ranges_are_numbered_by_start_from_1() -> None:
    ranges = [(1, 500, 900, None, TID), (1, 0, 400, None, TID), (1, 950, 1000, 7, TID)]
    assert nsys.steps_of(ranges) == [Step(1, 0, 400, 4), Step(2, 500, 400, 4), Step(3, 950, 50, 4)]


@given(st.permutations([(1, 500, 900, None, TID), (1, 0, 400, None, TID + 1),
                        (2, 0, 99, 3, TID), (1, 0, 300, None, TID)]))  # fmt: skip
def test_steps_do_not_depend_on_the_order_of_the_rows(
    ranges: list[tuple[int, int, int, int | None, int]],
) -> None:
    # the ties at start 0 are ordered by end, then thread
    expected = [Step(1, 0, 300, 4), Step(2, 0, 400, 5), Step(3, 500, 400, 4)]
    assert nsys.steps_of(ranges) == expected


def test_without_step_ranges_the_capture_span_is_step_0() -> None:
    assert nsys.capture_step((50, 700)) == Step(nsys.CAPTURE_STEP, 50, 650, 0)
    assert nsys.capture_step(None) is None
    assert nsys.steps_of([]) == []


def test_the_builders_structs_are_24_bytes_and_laid_out_as_their_entries_say() -> None:
    # sizeof by the C rules on x86-64 (int 4, size_t and uint64_t 8, a struct padded to its
    # largest member): {u64; int; int; int} 20 -> 24, {u64; u64; 5 x int} 36 -> 40,
    # {u64; size_t} 16, {u64; size_t; int} 20 -> 24; NCCL 2.22: {int; int; int} 12,
    # size_t 8, {size_t; int} 12 -> 16
    sizes = {x.fmt: x.size for x in LAYOUTS}
    assert sizes == {"<Qiii4x": 24, "<QQiiiii4x": 40, "<QQ": 16, "<QQi4x": 24, "<iii": 12,
                     "<Q": 8, "<Qi4x": 16}  # fmt: skip
    for layout in LAYOUTS:  # member k holds k + 1; each entry reads its member back
        body = blob(layout, header=False, **{m: k + 1 for k, m in enumerate(layout.members)})
        for k, (_, _, offset) in enumerate(layout.entries):
            width = struct.calcsize("<" + layout.fmt.lstrip("<").replace("4x", "")[k])
            assert int.from_bytes(body[offset or 0 :][:width], "little") == k + 1


def written(layout: Layout, values: dict[str, int]) -> dict[str, int]:
    """What a payload's integer entries hold (the reduction op is an NCCL enum: not read)."""
    pairs = zip(layout.entries, layout.members, strict=True)
    return {name: values[m] for (name, kind, _), m in pairs if kind in (5, 18, 22)}


@given(data=st.data())
def test_every_nccls_payload_decodes_to_the_values_written(data: st.DataObject) -> None:
    layout = data.draw(st.sampled_from(sorted(LAYOUTS, key=lambda x: (x.schema, x.fmt))))
    codes = layout.fmt.lstrip("<").replace("4x", "")
    values = {m: data.draw(_MEMBER[c]) for m, c in zip(layout.members, codes, strict=True)}
    fields, problem = nsys.decode_payload(blob(layout, **values), SCHEMAS_OF[layout], 1)
    assert (fields, problem) == (written(layout, values), None)


def test_a_payload_of_nccl_2_22_read_against_2_27s_schemas_is_named_not_misread() -> None:
    # the same schema id (Send, 1 << 24 + 9) is a 16-byte struct in 2.22, 24 bytes in 2.27
    old = blob(OLD_P2P, size=1024, peer=1)
    assert nsys.decode_payload(old, OLD, 1) == ({"Bytes": 1024, "Peer rank": 1}, None)
    assert nsys.decode_payload(old, SCHEMAS, 1) == (
        {}, "payload of schema 16777225 with 16 bytes, not its 24"
    )  # fmt: skip


def test_a_payload_of_an_unknown_schema_domain_or_size_is_named() -> None:
    unknown = Layout(INIT.schema + 99, "<Q", ("comm",), (("NCCL communicator ID", 18, None),))
    assert nsys.decode_payload(blob(unknown, comm=1), SCHEMAS, 1) == (
        {}, "payload of a schema not in NVTX_PAYLOAD_SCHEMA_ENTRIES (id 16777315)"
    )  # fmt: skip
    assert nsys.decode_payload(blob(INIT, comm=1), SCHEMAS, 2)[0] == {}  # NCCL's is domain 1
    cut = blob(INIT, comm=1)[:40]  # the header says 24 bytes follow; 8 do
    assert nsys.decode_payload(cut, SCHEMAS, 1) == (
        {}, "payload of schema 16777216 cut short (8 of its 24 bytes)"
    )  # fmt: skip
    short = "payload blob shorter than its 32-byte header"
    assert nsys.decode_payload(b"\x00" * 31, SCHEMAS, 1) == ({}, short)
    assert nsys.decode_payload("text", SCHEMAS, 1) == ({}, "binaryData that is not a blob")
    assert nsys.decode_payload(None, SCHEMAS, 1) == ({}, None)


def test_without_a_domain_column_a_schema_id_of_one_domain_is_read() -> None:
    assert nsys.decode_payload(blob(INIT, rank=3), SCHEMAS, None)[0]["Rank"] == 3
    # the id in two domains: which one is not said, so not read
    entries, sizes = schema_rows((INIT,))
    twice = nsys.schemas_from([*entries, *[(2, *row[1:]) for row in entries]], sizes)
    assert nsys.decode_payload(blob(INIT, rank=3), twice, None)[0] == {}
    assert nsys.decode_payload(blob(INIT, rank=3), twice, 2)[0]["Rank"] == 3
    # schema tables without a domain: the schema of any domain
    anywhere = nsys.schemas_from([(None, *row[1:]) for row in entries], sizes)
    assert nsys.decode_payload(blob(INIT, rank=3), anywhere, 1)[0]["Rank"] == 3


def test_an_entry_without_an_offset_follows_the_one_before_aligned_to_its_size() -> None:
    # NVTX: an entry registered without an offset is self-aligned: int at 0, then uint64 at 8;
    # after an entry this cannot size (a float, type 19) the next one cannot be placed
    rows = [(1, 7, 0, "a", 5, None), (1, 7, 1, "b", 18, 0), (1, 7, 2, "f", 19, 16),
            (1, 7, 3, "c", 5, None), (1, 7, 4, "d", 5, 28)]  # fmt: skip
    schema = nsys.schemas_from(rows, [(1, 7, 32)])[1, 7]
    assert schema == nsys.Schema((("a", "<i", 0), ("b", "<Q", 8), ("d", "<i", 28)), 32)


@given(data=st.binary(max_size=80), domain=st.sampled_from([None, 1, 2]))
def test_any_bytes_decode_to_fields_or_a_reason_never_an_error(
    data: bytes, domain: int | None
) -> None:
    fields, problem = nsys.decode_payload(data, SCHEMAS, domain)
    assert problem is None or (isinstance(problem, str) and fields == {})
    assert all(isinstance(v, int) for v in fields.values())


@given(body=st.binary(max_size=48), size=st.integers(0, 2**64 - 1))
def test_a_header_with_any_size_and_body_decodes_or_is_named(body: bytes, size: int) -> None:
    header = struct.pack("<IIIIQQ", 1, 0, INIT.schema, 0, size, 32 + len(body))
    fields, problem = nsys.decode_payload(header + body, SCHEMAS, 1)
    assert (problem is None) == (size == 24 and len(body) >= 24) == (len(fields) == 4)


_CELL = st.one_of(
    st.none(), st.integers(-(2**70), 2**70), st.text(max_size=4), st.binary(max_size=4)
)


@given(
    rows=st.lists(st.tuples(*[_CELL] * 6), max_size=8),
    sizes=st.lists(st.tuples(*[_CELL] * 3), max_size=3),
    data=st.binary(max_size=80),
)
def test_any_schema_rows_and_bytes_never_raise(
    rows: list[tuple[object, ...]], sizes: list[tuple[object, ...]], data: bytes
) -> None:
    fields, _ = nsys.read_payload(data, None, nsys.schemas_from(rows, sizes), None)
    assert all(isinstance(v, int) for v in fields.values())


def test_a_json_payload_gives_its_integer_fields() -> None:
    text = ('{"NCCL communicator ID": 18446744073709551615, "Message size [bytes]": "1048576",'
            ' "Peer rank": -1, "Reduction operation": "Sum", "ok": true}')  # fmt: skip
    assert nsys.decode_json(text) == (
        {"NCCL communicator ID": 2**64 - 1, "Message size [bytes]": 1048576, "Peer rank": -1},
        None,
    )
    assert nsys.decode_json("[1]") == ({}, "jsonText payload that is not a JSON object")
    assert nsys.decode_json("{") == ({}, "jsonText payload that is not JSON")
    assert nsys.decode_json("[" * 70000)[1] == "jsonText payload that is not text of at most 64 KiB"
    assert nsys.decode_json(None) == ({}, None)


@given(text=st.text(max_size=60))
def test_any_json_text_decodes_to_fields_or_a_reason(text: str) -> None:
    fields, problem = nsys.decode_json(text)
    assert problem is None or fields == {}


def test_the_blob_is_read_first_then_the_json_then_the_blobs_reason_is_given() -> None:
    json_rank = '{"Rank": 5, "No. of ranks": 8}'
    assert nsys.read_payload(blob(INIT, rank=2), json_rank, SCHEMAS)[0]["Rank"] == 2
    assert nsys.read_payload(None, json_rank, SCHEMAS) == ({"Rank": 5, "No. of ranks": 8}, None)
    assert nsys.read_payload(b"x", "{", SCHEMAS) == (
        {}, "payload blob shorter than its 32-byte header"
    )  # fmt: skip


def test_nccl_2_22s_init_without_a_communicator_still_gives_the_rank() -> None:
    comms = Comms()
    comms.add(nsys.decode_payload(blob(OLD_INIT, rank=3, ranks=8), OLD, 1)[0])
    assert (comms.rank, comms.world, comms.sizes) == (3, 8, {})


def test_of_two_largest_communicators_the_lowest_rank_whatever_the_order() -> None:
    for order in ((5, 2), (2, 5)):
        comms = Comms()
        for rank in order:
            comms.add({"NCCL communicator ID": rank, "No. of ranks": 8, "Rank": rank})
        comms.add({"NCCL communicator ID": 9, "No. of ranks": 4, "Rank": 0})
        assert (comms.rank, comms.world) == (2, 8)


def test_the_export_note_counts_unread_payloads_by_reason() -> None:
    note = nsys.export_note("ranks assumed", {"b reason": 1, "a reason": 3})
    assert note == (
        "ranks assumed. NCCL NVTX payloads not read (their sizes, communicators and ranks "
        "unknown): 3 a reason; 1 b reason"
    )
    assert nsys.export_note(None, {}) is None


def payload(layout: Layout, **values: int) -> dict[str, int]:
    return nsys.decode_payload(blob(layout, **values), SCHEMAS, 1)[0]


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
    assert nsys.decode_payload(bytes(flagged), SCHEMAS, 1)[0]["Rank"] == 1


# ---------------------------------------------------------------- kernel families


def test_a_kernel_of_each_kind_in_an_export() -> None:
    tally = nsys.Tally()
    fused = "userbuffers_fp16_sum_inplace_gpu_rr_rs"
    lookalike = "void my_moe::alltoall_dispatch<4>(float*)"
    deepep = "void deep_ep::internode_ll::combine<3, 10, 7168>(void*)"
    made = [nsys.kernel_event(name, 0, 10, None, world=2, tally=tally)
            for name in (fused, lookalike, deepep, lookalike)]  # fmt: skip
    assert made[:2] == [GpuOp("fused", 0, 10), GpuOp("compute", 0, 10, "other")]
    assert made[2] == CommOp("AllToAll", 0, 10, None, 2, True, None, None, "world size")
    assert (tally.comm_kernels, tally.no_launch, tally.sizes_unknown) == (1, 1, 1)
    assert (tally.lookalike_ns, tally.lookalikes) == (20, {"my_moe::alltoall_dispatch": 20})


def test_nic_rows_become_pci_ids_sorted_each_once() -> None:
    rows = [(5555, 4129), ("5555", "4129"), (0x8086, 0x1572), (None, 1), (5555, 1 << 16)]
    assert nsys.nic_ids(rows) == ["15b3:1021", "8086:1572"]  # ConnectX-7 and an Intel X710
