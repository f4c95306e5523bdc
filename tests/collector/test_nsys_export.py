"""Reading Nsight Systems SQLite exports (`collector/nsysdb.py` through the offline reader):
hand-made exports (`nsys_builder`) in the real export's layout and in older ones, rows in any
order, NCCL payloads present or absent, several processes as ranks, and bad files named with
their reason, never a traceback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest
from commscope.collector import nsys, nsysdb
from commscope.collector.discover import find_windows
from commscope.collector.nsysdb import EXPORT_FIRST
from commscope.model.errors import TraceError
from commscope.model.schema import CommOp, KernelTime, Step
from commscope.pipeline.report import ParsedFile
from commscope.service.offline import Failed, outcome, parse_windows
from commscope.service.offline import read as read_ranks
from hypothesis import given, settings
from hypothesis import strategies as st
from nsys_builder import (
    ALLGATHER,
    ALLTOALL,
    COLL,
    INIT,
    NCCL_2_22,
    NCCL_2_28,
    OLD_ALLREDUCE,
    OLD_INIT,
    P2P,
    RECV,
    SESSION_CLOCK_NS,
    SESSION_UTC_NS,
    SPLIT,
    Export,
    blob,
)
from tools import needs_shared, shared_traces

GEMM = "void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_64x4_tn_align8>"
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
H100 = "NVIDIA H100 80GB HBM3"
COMM = 0xABC
PG = "nccl:0000000000000abc"


def two_ranks(payloads: bool = True) -> Export:
    """pid 200 on GPU 0 and pid 300 on GPU 1; NCCL says pid 300 is rank 0 and pid 200 rank 1
    (the reverse of the device order). Each: a GEMM at [100, 300], an AllReduce of 1 MB
    launched at 150 inside `ncclAllReduce` [140, 160] and run at [200, 400]."""
    export = Export(gpus={0: H100, 1: H100})
    for pid, device, rank in ((200, 0, 1), (300, 1, 0)):
        init = blob(INIT, comm=COMM, ranks=2, rank=rank) if payloads else None
        export.nvtx(pid, 1, 10, 20, "ncclCommInitRank", payload=init)
        export.kernel(pid, device, 100, 300, GEMM)
        size = blob(COLL, comm=COMM, size=1_000_000) if payloads else None
        export.nvtx(pid, 1, 140, 160, "ncclAllReduce", payload=size)
        export.launched(pid, 1, 150, corr=7, kernel=(device, 200, 400, ALLREDUCE))
    return export


def read(path: Path) -> tuple[ParsedFile, ...]:
    found = outcome("w", path)
    assert isinstance(found, tuple), found
    return found


def test_each_process_is_a_rank_with_its_nccl_rank_size_and_communicator(tmp_path: Path) -> None:
    first, second = read(two_ranks().write(tmp_path / "run.sqlite"))
    assert (first.meta.rank, second.meta.rank) == (0, 1)
    assert first.note is None
    # pid 300 is rank 0: its events are on GPU 1, but the same times as rank 1's
    expected = CommOp("AllReduce", 200, 200, 1_000_000, 2, True, PG, None, "NCCL communicator")
    assert first.result.calls == [expected] == second.result.calls
    # comm [200, 400] under compute [100, 300]: 100 of 200 ns overlapped
    assert (first.result.comm_ns, first.result.overlap_ns, first.result.compute_ns) == (
        200,
        100,
        200,
    )


def test_each_rank_has_its_kernel_names_and_its_launches_joined_in_its_process(
    tmp_path: Path,
) -> None:
    # both processes launch their AllReduce with correlation id 7: a join stays in its process
    export = two_ranks()
    export.launched(200, 1, 500, corr=8, kernel=(0, 600, 602, GEMM))  # 2 ns, its call 5: short
    first, second = read(export.write(tmp_path / "run.sqlite"))
    allreduce = KernelTime(ALLREDUCE, 1, 200, communication=True)
    assert first.result.kernel_names == [allreduce, KernelTime(GEMM, 1, 200)]  # a tie: by name
    assert second.result.kernel_names == [KernelTime(GEMM, 2, 202), allreduce]
    # each call [at, at + 5]: the AllReduce starts 50 ns after its call, the GEMM 100 after
    launches = first.result.launches
    assert launches is not None
    assert (launches.calls, launches.call_ns, launches.kernels, launches.shorter) == (1, 5, 1, 0)
    assert (launches.delay_ns.min, launches.delay_ns.max) == (50.0, 50.0)
    launches = second.result.launches
    assert launches is not None
    assert (launches.calls, launches.call_ns, launches.kernels, launches.shorter) == (2, 10, 2, 1)
    assert (launches.delay_ns.min, launches.delay_ns.max) == (50.0, 100.0)


def test_the_metadata_says_nsys_the_world_gpu_and_time_base(tmp_path: Path) -> None:
    (meta, _) = (p.meta for p in read(two_ranks().write(tmp_path / "run.sqlite")))
    assert meta.source == "nsys"
    assert (meta.world_size, meta.backend, meta.gpu_name) == (2, "nccl", H100)
    assert meta.base_time_ns == SESSION_UTC_NS - SESSION_CLOCK_NS


def test_the_host_is_the_hostname_of_the_processes_target(tmp_path: Path) -> None:
    export = two_ranks()
    export.hosts = {1 << 48: "node-a"}
    metas = [p.meta for p in read(export.write(tmp_path / "run.sqlite"))]
    assert [m.host for m in metas] == ["node-a", "node-a"]


def test_without_a_hostname_row_the_host_is_unknown(tmp_path: Path) -> None:
    metas = [p.meta for p in read(two_ranks().write(tmp_path / "run.sqlite"))]
    assert [m.host for m in metas] == [None, None]


def test_host_of_takes_the_targets_row_else_the_only_one() -> None:
    hosts = {1 << 48: "a", 2 << 48: "b"}
    assert nsys.host_of((2 << 48) | (7 << 24) | 3, hosts) == "b"
    assert nsys.host_of((3 << 48) | (7 << 24), hosts) is None  # two targets, not this one
    assert nsys.host_of((3 << 48) | (7 << 24), {1 << 48: "a"}) == "a"  # the export's only
    assert nsys.host_of(1 << 48, {1 << 48: "bad\nname"}) is None


def test_without_payloads_ranks_follow_the_devices_and_sizes_stay_unknown(tmp_path: Path) -> None:
    first, second = read(two_ranks(payloads=False).write(tmp_path / "run.sqlite"))
    assert [p.meta.rank for p in (first, second)] == [0, 1]
    assert first.note == (
        "no NCCL rank in the export (no communicator-init payload of NCCL in NVTX_EVENTS: "
        "NCCL 2.19+ writes them, "
        "`nsys export --include-blobs true` keeps them): ranks assumed from the order "
        "of the processes' CUDA devices: pid 200 (GPU 0) rank 0, pid 300 (GPU 1) rank 1"
    )
    assert first.result.calls == [CommOp("AllReduce", 200, 200, None, None, True)]
    assert (first.stats.sizes_unknown, first.meta.world_size) == (1, None)


def all_to_all(pytorch: bool) -> Export:
    """One rank of two: a group of two sends (300 and 500 bytes) and two receives whose
    `ncclGroupEnd` [120, 150] launches one SendRecv kernel at 130; optionally inside PyTorch's
    `nccl:all_to_all` range [100, 200]."""
    export = Export()
    export.nvtx(1, 1, 10, 20, "ncclCommInitRank", payload=blob(INIT, comm=COMM, ranks=2, rank=0))
    if pytorch:
        export.nvtx(1, 1, 100, 200, "nccl:all_to_all, op_id = 5")
    export.nvtx(1, 1, 110, 111, "ncclGroupStart")
    for at, name, size in ((112, "ncclSend", 300), (114, "ncclRecv", 300), (116, "ncclSend", 500)):
        export.nvtx(1, 1, at, at + 1, name, payload=blob(P2P, comm=COMM, size=size, peer=0))
    export.nvtx(1, 1, 118, 119, "ncclRecv", payload=blob(P2P, comm=COMM, size=500, peer=1))
    export.nvtx(1, 1, 120, 150, "ncclGroupEnd")
    export.launched(1, 1, 130, corr=3, kernel=(0, 160, 260, SENDRECV))
    return export


def test_pytorchs_all_to_all_around_a_group_of_sends_is_an_all_to_all_of_their_sum(
    tmp_path: Path,
) -> None:
    (rank,) = read(all_to_all(pytorch=True).write(tmp_path / "a.sqlite"))
    # S = 300 + 500 bytes sent (the receives are the other side of the same traffic); the
    # bytes per peer are its split sizes (`collector.nsyssplits`)
    assert rank.result.calls == [
        CommOp(
            "AllToAll",
            160,
            100,
            800,
            2,
            True,
            PG,
            None,
            "NCCL communicator",
            in_splits=(800, 0),
            out_splits=(300, 500),
        )
    ]


def test_a_group_of_sends_and_receives_alone_is_point_to_point(tmp_path: Path) -> None:
    (rank,) = read(all_to_all(pytorch=False).write(tmp_path / "a.sqlite"))
    assert rank.result.calls[0].collective == "SendRecv"
    assert rank.result.calls[0].message_bytes == 800


def test_an_all_gathers_payload_is_the_shard_so_s_is_shard_times_ranks(tmp_path: Path) -> None:
    export = Export()
    export.nvtx(1, 1, 10, 20, "ncclCommInitRank", payload=blob(INIT, comm=COMM, ranks=4, rank=0))
    export.nvtx(1, 1, 100, 200, "ncclAllGather", payload=blob(COLL, comm=COMM, size=64))
    export.launched(1, 1, 150, corr=1, kernel=(0, 300, 400, "ncclDevKernel_AllGather_RING_LL"))
    (rank,) = read(export.write(tmp_path / "ag.sqlite"))
    assert (rank.result.calls[0].message_bytes, rank.result.calls[0].group_size) == (256, 4)


def test_a_comm_kernel_whose_launch_is_not_in_the_export_is_of_unknown_type(
    tmp_path: Path,
) -> None:
    export = Export()
    export.kernel(1, 0, 0, 50, SENDRECV, corr=99)  # launched before the export's window
    (rank,) = read(export.write(tmp_path / "cut.sqlite"))
    assert rank.result.calls == [CommOp("Other", 0, 50, None, None, True)]
    assert (rank.stats.comm_kernels, rank.stats.no_launch) == (1, 1)


def test_profiler_steps_memcpy_and_memset(tmp_path: Path) -> None:
    export = Export()
    export.kernel(1, 0, 100, 200, GEMM)
    export.nvtx(1, 7, 0, 1000, "ProfilerStep#3")
    export.nvtx(1, 7, 1000, 1500, "ProfilerStep#4, op_id = 99")  # as emit_nvtx writes it
    export.copy("memcpy", 1, 0, 300, 340)
    export.copy("memset", 1, 0, 400, 405)
    (rank,) = read(export.write(tmp_path / "s.sqlite"))
    assert rank.result.steps == {3: 1000, 4: 500}
    kernel_ns = rank.result.kernel_ns
    assert (kernel_ns["gemm"], kernel_ns["memcpy"], kernel_ns["memset"]) == (100, 40, 5)


def test_a_step_is_a_step_on_its_thread() -> None:
    from commscope.collector.nsys import steps_of

    assert steps_of([(0, 0, 1000, 3, (1 << 48) + (5 << 24) + 7)]) == [Step(3, 0, 1000, 7)]


# Each recognised step range, as two ranges at [0, 1000] and [1000, 1500] on thread 7, and
# the steps they give (collector/nsys.py STEP_RANGES has the source of each name).
STEP_NAMES = [
    (("ProfilerStep#3, op_id = 12", "ProfilerStep#4, op_id = 90"), {3: 1000, 4: 500}),
    (("train_step", "train_step"), {1: 1000, 2: 500}),  # unnumbered: by start from 1
    (("train_step_003", "train_step_004"), {3: 1000, 4: 500}),
    (("step 8", "step 9"), {8: 1000, 9: 500}),
    (("iteration10", "iteration11"), {10: 1000, 11: 500}),
    (("iteration_0", "Iteration 1"), {0: 1000, 1: 500}),
    (("iteration", "iteration"), {1: 1000, 2: 500}),
]


@pytest.mark.parametrize(("names", "steps"), STEP_NAMES)
def test_each_recognised_step_range_gives_the_steps(
    tmp_path: Path, names: tuple[str, str], steps: dict[int, int]
) -> None:
    export = Export()
    export.kernel(1, 0, 100, 1400, GEMM)
    export.nvtx(1, 7, 0, 1000, names[0])
    export.nvtx(1, 7, 1000, 1500, names[1])
    (rank,) = read(export.write(tmp_path / "s.sqlite"))
    assert rank.result.steps == steps
    assert rank.result.capture_ns == 0
    assert rank.result.in_steps is not None and rank.result.in_steps.span_ns == 1500


def test_a_profiler_step_inside_a_train_step_range_is_one_step(tmp_path: Path) -> None:
    export = Export()
    export.kernel(1, 0, 100, 1400, GEMM)
    export.nvtx(1, 7, 0, 2000, "train_step")
    export.nvtx(1, 7, 50, 1900, "ProfilerStep#5, op_id = 3")
    (rank,) = read(export.write(tmp_path / "s.sqlite"))
    assert rank.result.steps == {5: 1850}


def capture_export() -> Export:
    """No step range: pid 1 (GPU 0) runs a GEMM at [100, 300] and a memcpy at [50, 60],
    pid 2 (GPU 1) a GEMM at [150, 700]: the capture span is [50, 700] for both."""
    export = Export()
    export.kernel(1, 0, 100, 300, GEMM)
    export.copy("memcpy", 1, 0, 50, 60)
    export.kernel(2, 1, 150, 700, GEMM)
    export.nvtx(1, 7, 0, 10, "Optimizer.step#SGD.step")  # a range, not a step
    return export


def test_without_step_ranges_each_rank_has_the_capture_span_as_one_step(tmp_path: Path) -> None:
    first, second = read(capture_export().write(tmp_path / "c.sqlite"))
    for rank in (first, second):  # in the step figures, not a training step
        assert (rank.result.steps, rank.result.capture_ns) == ({}, 650)
        assert rank.result.in_steps is not None and rank.result.in_steps.span_ns == 650
    assert first.result.in_steps is not None and second.result.in_steps is not None
    # GPU busy within [50, 700]: pid 1 10 + 200 ns, pid 2 550 ns
    assert (first.result.in_steps.gpu_busy_ns, second.result.in_steps.gpu_busy_ns) == (210, 550)


def test_steps_on_one_process_leave_the_other_without_and_no_capture_span(
    tmp_path: Path,
) -> None:
    export = capture_export()
    export.nvtx(2, 3, 150, 650, "iteration 4")
    first, second = read(export.write(tmp_path / "c.sqlite"))
    assert (first.result.steps, second.result.steps) == ({}, {4: 500})
    assert first.result.capture_ns == second.result.capture_ns == 0


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), batch=st.sampled_from([1, 2, 4096]))
def test_the_steps_read_whole_or_streamed_in_any_batch_and_order_agree(
    tmp_path_factory: pytest.TempPathFactory, seed: int, batch: int
) -> None:
    """The export's rows arrive in batches of `BATCH` rows (the streamed path): batches of
    one row or two, and rows in any order, give the same ranks as one batch in order."""
    folder = tmp_path_factory.mktemp("stream")
    stepped = two_ranks()
    stepped.nvtx(200, 1, 0, 1000, "train_step")
    for export, name in ((capture_export(), "capture"), (stepped, "two")):
        whole = read(export.write(folder / f"{name}.sqlite"))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(nsysdb, "BATCH", batch)
            streamed = read(export.write(folder / f"{name}_s.sqlite", seed=seed))
        assert [msgspec.json.encode(p.result) for p in whole] == [
            msgspec.json.encode(p.result).replace(b"_s.sqlite", b".sqlite") for p in streamed
        ]


def older(kernel_table: str) -> Export:
    """No payloads, names in `shortName` only, NVTX text only: PyTorch's `nccl:all_reduce`
    around the launch names the collective."""
    export = Export(kernel_table=kernel_table, older=True, session=False)
    export.kernel(1, 0, 0, 100, "ampere_sgemm_128x64_tn")
    export.nvtx(1, 1, 40, 60, "nccl:all_reduce")
    export.launched(1, 1, 50, corr=2, kernel=(0, 50, 150, "ncclKernel_AllReduce_RING_LL_Sum_float"))
    return export


@pytest.mark.parametrize(
    "table", ["CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL_V3"]
)
def test_older_and_versioned_kernel_tables_are_read(tmp_path: Path, table: str) -> None:
    (rank,) = read(older(table).write(tmp_path / "old.sqlite"))
    assert rank.result.calls == [CommOp("AllReduce", 50, 100, None, None, True)]
    assert (rank.result.overlap_ns, rank.meta.base_time_ns) == (50, None)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_rows_in_any_order_give_the_same_ranks(
    tmp_path_factory: pytest.TempPathFactory, seed: int
) -> None:
    folder = tmp_path_factory.mktemp("order")
    export = two_ranks()
    export.nvtx(200, 1, 0, 1000, "ProfilerStep#1")
    ordered = read(export.write(folder / "ordered.sqlite"))
    shuffled = read(export.write(folder / "shuffled.sqlite", seed=seed))
    assert [msgspec.json.encode(p.result) for p in ordered] == [
        msgspec.json.encode(p.result).replace(b"shuffled", b"ordered") for p in shuffled
    ]


def test_the_file_counts_its_bytes_once(tmp_path: Path) -> None:
    path = two_ranks().write(tmp_path / "run.sqlite")
    first, second = read_ranks("w", path)
    assert (first.stats.bytes_read, second.stats.bytes_read) == (path.stat().st_size, 0)


def test_exports_of_several_nodes_without_nccl_ranks_are_numbered_on_in_name_order(
    tmp_path: Path,
) -> None:
    for node in ("node1", "node0"):
        two_ranks(payloads=False).write(tmp_path / "job" / f"{node}.sqlite")
    parsed, skipped, _ = parse_windows(find_windows(tmp_path / "job"))
    assert skipped == []
    assert [(Path(p.path).name, p.meta.rank) for p in parsed] == [
        ("node0.sqlite", 0), ("node0.sqlite", 1), ("node1.sqlite", 2), ("node1.sqlite", 3)
    ]  # fmt: skip
    assert parsed[2].note is not None
    assert parsed[2].note.endswith(
        "; ranks numbered on across its window's exports in name order: from 2"
    )


# ---------------------------------------------------------------- bad files


def reason(path: Path) -> str:
    found = outcome("w", path)
    assert isinstance(found, Failed), found
    return found.reason


def test_a_file_that_is_not_sqlite_is_skipped_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "x.sqlite").write_bytes(b"not a database at all")
    assert reason(tmp_path / "x.sqlite") == (
        "not an SQLite database (no SQLite header): not an nsys export"
    )


def test_a_corrupt_database_is_skipped_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "x.sqlite").write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    assert reason(tmp_path / "x.sqlite").startswith("corrupt SQLite database (")


def test_a_truncated_export_is_skipped_with_the_reason(tmp_path: Path) -> None:
    export = two_ranks()
    for n in range(2000):  # enough rows to span several pages
        export.kernel(200, 0, 1000 + n, 1001 + n, GEMM)
    path = export.write(tmp_path / "cut.sqlite")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert reason(path).startswith("corrupt SQLite database (")


def test_an_sqlite_database_that_is_no_nsys_export_is_skipped(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "optuna.sqlite") as db:
        db.execute("CREATE TABLE studies (id INTEGER)")
    assert reason(tmp_path / "optuna.sqlite").startswith(
        "an SQLite database but not an Nsight Systems export with CUDA kernels "
        "(no CUPTI_ACTIVITY_KIND_KERNEL table"
    )


def test_an_export_without_string_ids_is_skipped(tmp_path: Path) -> None:
    path = two_ranks().write(tmp_path / "run.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE StringIds")
    assert "(no StringIds table;" in reason(path)


def test_an_export_without_kernels_is_skipped(tmp_path: Path) -> None:
    path = Export().write(tmp_path / "cpu.sqlite")
    assert reason(path) == "no GPU kernels in the export (CUPTI_ACTIVITY_KIND_KERNEL empty)"


def test_an_nsys_report_says_to_export_it(tmp_path: Path) -> None:
    (tmp_path / "run.nsys-rep").write_bytes(b"\x00" * 10)
    assert reason(tmp_path / "run.nsys-rep") == EXPORT_FIRST


def test_read_nsys_raises_trace_error_only(tmp_path: Path) -> None:
    (tmp_path / "x.sqlite").write_bytes(b"")
    with pytest.raises(TraceError):
        read_ranks("w", tmp_path / "x.sqlite")


kernels = st.lists(
    st.tuples(st.sampled_from([1, 2]), st.integers(0, 1000), st.integers(0, 60), st.booleans()),
    max_size=30,
)


@settings(max_examples=20, deadline=None)
@given(rows=kernels)
def test_generated_kernel_tables_give_the_brute_force_unions(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[int, int, int, bool]]
) -> None:
    """Each process's |C|, |P| and |C ∩ P| equal those counted ns by ns (the oracle)."""
    export = Export()
    export.kernel(1, 0, 0, 0, GEMM)  # both processes run a kernel: two ranks, always
    export.kernel(2, 1, 0, 0, GEMM)
    for pid, start, dur, comm in rows:
        export.kernel(pid, pid - 1, start, start + dur, SENDRECV if comm else GEMM)
    path = export.write(tmp_path_factory.mktemp("gen") / "gen.sqlite", seed=len(rows))
    for item in read(path):
        pid = (item.meta.rank or 0) + 1  # no payloads: ranks in device order, device = pid - 1
        comm = {t for p, s, d, c in rows if p == pid and c for t in range(s, s + d)}
        compute = {t for p, s, d, c in rows if p == pid and not c for t in range(s, s + d)}
        found = (item.result.comm_ns, item.result.compute_ns, item.result.overlap_ns)
        assert found == (len(comm), len(compute), len(comm & compute))


# ---------------------------------------------------------------- NCCL's payloads, per version

REAL = shared_traces("nsys", "h100x2_alltoall.sqlite")
needs_real = needs_shared("nsys", "h100x2_alltoall.sqlite")


def real_schema_tables() -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with sqlite3.connect(f"{REAL.as_uri()}?mode=ro", uri=True) as db:
        entries = db.execute(
            'SELECT domainId, schemaId, idx, name, "type", "offset" '
            "FROM NVTX_PAYLOAD_SCHEMA_ENTRIES"
        ).fetchall()
        sizes = db.execute("SELECT domainId, schemaId, payloadSize FROM NVTX_PAYLOAD_SCHEMAS")
        return entries, sizes.fetchall()


@needs_real
def test_the_builders_nccl_2_27_structs_are_the_real_exports_schemas() -> None:
    entries, sizes = real_schema_tables()
    real = {(s, i): (name, kind, offset) for _, s, i, name, kind, offset in entries}
    # the real ids: CommDestroy (2) and CommInitRankConfig (11) carry the CommInitRank struct,
    # ReduceScatter (7) the AllReduce-shaped one, Send 9, Recv 10, AllGather 4
    same = {16777218: INIT, 16777227: INIT, 16777223: COLL, 16777225: P2P, 16777226: RECV,
            16777220: ALLGATHER}  # fmt: skip
    for schema, layout in same.items():
        assert [real[schema, i] for i in range(len(layout.entries))] == list(layout.entries)
        assert (1, schema, layout.size) in sizes


@needs_real
def test_a_payload_reads_through_the_real_exports_schema_tables() -> None:
    schemas = nsys.schemas_from(*real_schema_tables())
    sent = blob(P2P, comm=COMM, size=4096, peer=1)  # a 2.27 ncclSend struct, id 16777225
    assert nsys.read_payload(sent, None, schemas, 1) == (
        {"NCCL communicator ID": COMM, "Message size [bytes]": 4096, "Peer rank": 1},
        None,
    )


def test_nccl_2_22_payloads_give_ranks_and_sizes_but_no_communicator(tmp_path: Path) -> None:
    """NCCL <= 2.22: init {rank, nranks, cudaDev}, AllReduce {bytes, op}, no communicator."""
    export = Export(gpus={0: H100, 1: H100}, nccl=NCCL_2_22)
    for pid, device, rank in ((200, 0, 1), (300, 1, 0)):
        export.nvtx(pid, 1, 10, 20, "ncclCommInitRank", payload=blob(OLD_INIT, rank=rank, ranks=2))
        size = blob(OLD_ALLREDUCE, size=1_000_000)
        export.nvtx(pid, 1, 140, 160, "ncclAllReduce", payload=size)
        export.launched(pid, 1, 150, corr=7, kernel=(device, 200, 400, ALLREDUCE))
    first, second = read(export.write(tmp_path / "old.sqlite"))
    assert (first.meta.rank, second.meta.rank, first.note) == (0, 1, None)
    # n is the world (the largest communicator's size), said as such: no communicator named
    expected = CommOp("AllReduce", 200, 200, 1_000_000, 2, True, None, None, "world size")
    assert first.result.calls == [expected] == second.result.calls


def test_json_payloads_read_as_the_blobs_would(tmp_path: Path) -> None:
    """`nsys export --include-json=true`: the same payloads as JSON objects in jsonText."""
    export = Export(gpus={0: H100, 1: H100})
    for pid, device, rank in ((200, 0, 1), (300, 1, 0)):
        init = f'{{"NCCL communicator ID": {COMM}, "No. of ranks": 2, "Rank": {rank}}}'
        export.nvtx(pid, 1, 10, 20, "ncclCommInitRank", json=init)
        size = f'{{"NCCL communicator ID": {COMM}, "Message size [bytes]": 1000000}}'
        export.nvtx(pid, 1, 140, 160, "ncclAllReduce", json=size)
        export.launched(pid, 1, 150, corr=7, kernel=(device, 200, 400, ALLREDUCE))
    blobs = read(two_ranks().write(tmp_path / "blob.sqlite"))
    jsons = read(export.write(tmp_path / "json.sqlite"))
    assert [(p.meta.rank, p.result.calls, p.note) for p in jsons] == [
        (p.meta.rank, p.result.calls, p.note) for p in blobs
    ]


def test_payloads_that_cannot_be_read_are_counted_in_the_note(tmp_path: Path) -> None:
    """NCCL 2.22 init structs (12 bytes) under 2.27's schema of the same id (24 bytes)."""
    export = Export()
    for pid in (1, 2):
        export.nvtx(pid, 1, 10, 20, "ncclCommInitRank", payload=blob(OLD_INIT, rank=0, ranks=2))
        export.launched(pid, 1, 30, corr=1, kernel=(pid - 1, 40, 50, ALLREDUCE))
    (first, _) = read(export.write(tmp_path / "mixed.sqlite"))
    assert first.note is not None
    assert first.note.endswith(
        "NCCL NVTX payloads not read (their sizes, communicators and ranks unknown): "
        "2 payload of schema 16777216 with 12 bytes, not its 24"
    )
    assert first.note.startswith("no NCCL rank in the export")


def test_ncclalltoalls_payload_is_per_peer_so_s_is_it_times_ranks(tmp_path: Path) -> None:
    """NCCL 2.28+: ncclAlltoAll {comm, bytes per peer}."""
    export = Export(nccl=NCCL_2_28)
    export.nvtx(1, 1, 10, 20, "ncclCommInitRank", payload=blob(INIT, comm=COMM, ranks=4, rank=0))
    export.nvtx(1, 1, 100, 200, "ncclAlltoAll", payload=blob(ALLTOALL, comm=COMM, size=64))
    export.launched(1, 1, 150, corr=1, kernel=(0, 300, 400, SENDRECV))
    (rank,) = read(export.write(tmp_path / "a2a.sqlite"))
    assert rank.result.calls == [
        CommOp("AllToAll", 300, 100, 256, 4, True, PG, None, "NCCL communicator")
    ]


def test_a_split_communicators_size_comes_from_its_split_payload(tmp_path: Path) -> None:
    export = Export()
    export.nvtx(1, 1, 10, 20, "ncclCommInitRank", payload=blob(INIT, comm=COMM, ranks=4, rank=1))
    split = blob(SPLIT, comm=0xDEF, parent=COMM, ranks=2, rank=0, color=1, key=0)
    export.nvtx(1, 1, 30, 40, "ncclCommSplit", payload=split)
    export.nvtx(1, 1, 100, 200, "ncclAllReduce", payload=blob(COLL, comm=0xDEF, size=8))
    export.launched(1, 1, 150, corr=1, kernel=(0, 300, 400, ALLREDUCE))
    (rank,) = read(export.write(tmp_path / "split.sqlite"))
    # the process's rank is its rank in the largest communicator (the world of 4)
    assert (rank.meta.rank, rank.meta.world_size) == (1, 4)
    assert rank.result.calls == [
        CommOp("AllReduce", 300, 100, 8, 2, True, "nccl:0000000000000def", None,
               "NCCL communicator")
    ]  # fmt: skip


_JUNK = st.one_of(
    st.none(), st.binary(max_size=64), st.text(max_size=40), st.integers(-(2**63), 2**63 - 1)
)


@settings(max_examples=25, deadline=None)
@given(blobs=st.lists(st.tuples(_JUNK, _JUNK), min_size=3, max_size=3))
def test_any_payload_bytes_or_text_read_without_an_error(
    tmp_path_factory: pytest.TempPathFactory, blobs: list[tuple[object, object]]
) -> None:
    """NCCL's ranges carrying anything as binaryData and jsonText: the export reads, the
    AllReduce's size is an integer or unknown, the note (if any) a string."""
    export = Export()
    names = ("ncclCommInitRank", "ncclAllReduce", "ncclGroupEnd")
    for at, (name, (data, text)) in enumerate(zip(names, blobs, strict=True)):
        json = text if isinstance(text, str) else None
        export.nvtx(1, 1, 10 * at, 10 * at + 5, name, payload=data, json=json)
    export.launched(1, 1, 12, corr=1, kernel=(0, 40, 50, ALLREDUCE))
    (rank,) = read(export.write(tmp_path_factory.mktemp("junk") / "junk.sqlite"))
    (call,) = rank.result.calls
    assert call.message_bytes is None or isinstance(call.message_bytes, int)
    assert rank.note is None or isinstance(rank.note, str)


def test_schema_tables_without_domain_or_index_columns_are_read_in_row_order(
    tmp_path: Path,
) -> None:
    """An export whose schema tables lack domainId and idx (and no NVTX_PAYLOAD_SCHEMAS):
    entries in row order, schemas of any domain; the same ranks and sizes as with them."""
    path = two_ranks().write(tmp_path / "bare.sqlite")
    with sqlite3.connect(path) as db:
        db.execute(
            "CREATE TABLE bare AS SELECT DISTINCT schemaId, name, type, offset "
            "FROM NVTX_PAYLOAD_SCHEMA_ENTRIES ORDER BY schemaId, idx"
        )
        db.execute("DROP TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES")
        db.execute("DROP TABLE NVTX_PAYLOAD_SCHEMAS")
        db.execute("ALTER TABLE bare RENAME TO NVTX_PAYLOAD_SCHEMA_ENTRIES")
    bare = read(path)
    full = read(two_ranks().write(tmp_path / "full.sqlite"))
    assert [(p.meta.rank, p.result.calls, p.note) for p in bare] == [
        (p.meta.rank, p.result.calls, p.note) for p in full
    ]
