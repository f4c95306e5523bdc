"""P2P (send/recv) pairing and the pipeline section from NCCL sources: Kineto traces of NCCL
jobs (record_param_comms as PyTorch writes it across releases), Nsight Systems exports (NCCL's
Send/Recv NVTX payloads) and NCCL Inspector logs (`p2p_perf`), offline and live.

Every job is the two-stage step of tests/pipeline/test_stages.py in µs: stage 0 (rank 0)
computes [0,10] and [60,70], sends activations [10,30] and receives gradients [70,100];
stage 1 receives [0,30], computes [30,60] and sends gradients [60,90]; step [0,100]. Its
hand-worked values (there in ns, here in µs): stage 0 compute 20, transfer 50, bubble 30
(schedule 20, neighbour 10); stage 1 compute 30, transfer 40, bubble 30, waiting for
activations 10 and to send 10; stage 0 is the one waited for (20 of its neighbour's waiting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from commscope.exporters import jsonreport
from commscope.exporters.text import render
from commscope.model.inspector import LACKS
from commscope.model.schema import CommOp, P2PMember, Pipeline, Report
from commscope.pipeline import p2pranks
from commscope.pipeline.aggregation import Aggregation
from commscope.pipeline.report import Options
from commscope.service.offline import analyse
from hypothesis import given, settings
from hypothesis import strategies as st
from inspector_builder import DUMP_US, coll, p2p
from kineto_builder import annotation, cpu_op, dist_head, kernel, launch, trace
from nsys_builder import INIT, P2P, RECV, Export, blob

from tests.pipeline.test_aggregation import apply_all, live_document, round_robin, run_records

US = 1e-6
SENDRECV = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1"
T0 = 1_000_000  # µs: the step's start on every rank's clock
# rank -> its P2P calls (start µs, end µs, "send"/"recv", peer's global rank) and compute
CALLS: dict[int, list[tuple[int, int, str, int]]] = {
    0: [(10, 30, "send", 1), (70, 100, "recv", 1)],
    1: [(0, 30, "recv", 0), (60, 90, "send", 0)],
}
COMPUTE: dict[int, list[tuple[int, int]]] = {0: [(0, 10), (60, 70)], 1: [(30, 60)]}


def check_two_stages(found: Pipeline) -> None:
    """The hand-worked section (module docstring)."""
    first, second = found.per_rank["0"], found.per_rank["1"]
    assert (found.stages, found.microbatches) == (2, 1.0)
    assert (first.stage, first.compute_s, first.transfer_s, first.bubble_s) == pytest.approx(
        (0, 20 * US, 50 * US, 30 * US)
    )
    assert (first.schedule_bubble_s, first.neighbour_bubble_s) == pytest.approx((20 * US, 10 * US))
    assert (second.stage, second.compute_s, second.transfer_s, second.bubble_s) == pytest.approx(
        (1, 30 * US, 40 * US, 30 * US)
    )
    assert (second.waiting_activations_s, second.waiting_to_send_s) == pytest.approx(
        (10 * US, 10 * US)
    )
    # rank 0 caused the waiting, but two pairs are too few for the slow-rank test to name it
    assert (found.waited_for_rank, found.waited_for_stage) == (None, None)
    assert found.evidence is not None and found.evidence.startswith("no stage stands out")
    assert first.caused_waiting_s == pytest.approx(20 * US)


# ---------------------------------------------------------------- Kineto (NCCL)

# How record_param_comms names a send's or receive's peer, by PyTorch release
# (torch/csrc/profiler/util.cpp saveNcclMeta; torch/csrc/distributed/c10d/ParamCommsUtils.hpp
# RECORD_PARAM_COMMS_DATA's inputs: tensors, seq, group name, rank, collective name, ...):
# "dst": recent releases copy the args to the kernel, `Dst Rank` / `Src Rank` global;
# "rank": `Rank` (the peer's group rank) and `Process Group Ranks`, on record_param_comms;
# "concrete": only the fourth concrete input (record_shapes), through pg_config's ranks;
# "batch": `batch_isend_irecv` (torch.distributed.pipelining's `_batch_p2p`): each op's
# record launches nothing, the batch's one kernel is launched inside `nccl:coalesced`.
STYLES = ("dst", "rank", "concrete", "batch")


def _nccl_args(style: str, way: str, peer: int) -> dict[str, Any]:
    args: dict[str, Any] = {"Collective name": way, "In msg nelems": 1024,
                            "Out msg nelems": 1024, "dtype": "Float"}  # fmt: skip
    if style == "dst":
        args.update({"Process Group Name": "0", "Group size": 2})
        args["Dst Rank" if way == "send" else "Src Rank"] = peer
    elif style in {"rank", "batch"}:
        args.update({"Process Group Name": "1", "Rank": peer, "Process Group Ranks": "[0, 1]"})
    else:
        concrete = ["", "", "", str(peer), "", "[]", "[]", "0", "1", "2"]
        args.update({"Process Group Name": "1", "Concrete Inputs": concrete})
    return args


def kineto_rank(rank: int, style: str) -> list[dict[str, Any]]:
    events = [annotation("ProfilerStep#1", T0, 100)]
    events += [kernel(GEMM, T0 + a, b - a) for a, b in COMPUTE[rank]]
    for corr, (start, end, way, peer) in enumerate(CALLS[rank], start=1):
        args = _nccl_args(style, way, peer)
        if style == "dst":  # the args on the kernel itself
            events.append(kernel(SENDRECV, T0 + start, end - start, args))
            continue
        at = T0 + start - 3  # launched on the training thread, inside record_param_comms
        if style == "batch":  # ... or after it, inside the batch's nccl:coalesced
            events.append(cpu_op("record_param_comms", at - 2, 1, args=args))
            events.append(annotation("nccl:coalesced", at - 0.5, 1))
        else:
            events.append(cpu_op("record_param_comms", at - 1, 2, args=args))
        events.append(launch(corr, at, 1))
        events.append(kernel(SENDRECV, T0 + start, end - start, {"correlation": corr}))
    return events


def write_kineto(folder: Path, style: str) -> Path:
    folder.mkdir(parents=True)
    for rank in CALLS:
        head = dist_head(rank=rank, world_size=2, gpu="NVIDIA H100 80GB HBM3")
        head["distributedInfo"]["pg_config"] = [
            {"pg_name": "0", "pg_desc": "default_pg", "pg_size": 2, "ranks": [0, 1]},
            {"pg_name": "1", "pg_desc": "pp", "pg_size": 2, "ranks": [0, 1]},
        ]
        (folder / f"rank{rank}_trace.json").write_bytes(trace(kineto_rank(rank, style), head))
    return folder


@pytest.mark.parametrize("style", STYLES)
def test_kineto_nccl_send_recv_pair_and_fill_the_pipeline(tmp_path: Path, style: str) -> None:
    report = analyse(write_kineto(tmp_path / "job" / "iteration_1", style), Options())
    assert (report.matching.p2p_pairs, report.matching.p2p_unpaired) == (2, 0)
    check_two_stages(report.pipeline)


def test_kineto_nccl_pipeline_live_is_the_offline_report(tmp_path: Path) -> None:
    root = tmp_path / "job"
    write_kineto(root / "iteration_1", "rank")
    aggregation = Aggregation()
    apply_all(aggregation, round_robin(run_records(root, 2)))
    live = live_document(aggregation)
    assert live == jsonreport.to_document(analyse(root, Options()))
    assert live["pipeline"]["per_rank"]["1"]["waiting_activations_s"] == pytest.approx(10 * US)


# ---------------------------------------------------------------- Nsight Systems

WORLD, PP = 0xABC, 0xDEF  # NCCL communicators: the world, and the pipeline's own
PP_LABEL = "nccl:0000000000000def"


def nsys_export() -> Export:
    """Two processes; the pipeline communicator numbers them the other way round (global
    rank r is its rank 1 - r), so only the report's cross-rank map finds the peers. Each
    call is an `ncclSend`/`ncclRecv` range with NCCL 2.27's payload, launching its kernel."""
    export = Export(gpus={0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA H100 80GB HBM3"})
    for rank, calls in CALLS.items():
        pid, base = 200 + rank, T0 * 1000
        export.nvtx(pid, 1, 10, 20, "ncclCommInitRank", payload=blob(INIT, comm=WORLD, ranks=2,
                                                                     rank=rank))  # fmt: skip
        export.nvtx(pid, 1, 30, 40, "ncclCommInitRank", payload=blob(INIT, comm=PP, ranks=2,
                                                                     rank=1 - rank))  # fmt: skip
        export.nvtx(pid, 1, base, base + 100_000, "ProfilerStep#1")
        for start, end in COMPUTE[rank]:
            export.kernel(pid, rank, base + start * 1000, base + end * 1000, GEMM)
        for corr, (start, end, way, peer) in enumerate(calls, start=1):
            at = base + start * 1000 - 3000
            layout, name = (P2P, "ncclSend") if way == "send" else (RECV, "ncclRecv")
            sent = blob(layout, comm=PP, size=4096, peer=1 - peer)  # the peer's PP rank
            export.nvtx(pid, 1, at - 500, at + 500, name, payload=sent)
            kernel_span = (rank, base + start * 1000, base + end * 1000, SENDRECV)
            export.launched(pid, 1, at, corr=corr, kernel=kernel_span)
    return export


def test_nsys_send_recv_payloads_pair_across_ranks_and_fill_the_pipeline(tmp_path: Path) -> None:
    nsys_export().write(tmp_path / "job" / "run.sqlite")
    report = analyse(tmp_path / "job", Options())
    assert (report.matching.p2p_pairs, report.matching.p2p_unpaired) == (2, 0)
    check_two_stages(report.pipeline)


def test_nsys_calls_carry_group_ranks_only(tmp_path: Path) -> None:
    from commscope.service.offline import outcome

    found = outcome("w", nsys_export().write(tmp_path / "run.sqlite"))
    assert isinstance(found, tuple)
    first = next(item for item in found if item.meta.rank == 0)
    sends = [op for op in first.result.calls if op.collective == "SendRecv"]
    assert [(op.send_to, op.group_rank, op.group_send_to, op.group_recv_from) for op in sends] == [
        (None, 1, 0, None),  # rank 0 is PP rank 1; its peer, rank 1, PP rank 0
        (None, 1, None, 0),
    ]
    assert {op.process_group for op in sends} == {PP_LABEL}


def test_a_group_that_sends_and_receives_is_one_call_of_its_members(tmp_path: Path) -> None:
    export = Export(gpus={0: "NVIDIA H100 80GB HBM3"})
    export.nvtx(1, 1, 10, 20, "ncclCommInitRank", payload=blob(INIT, comm=PP, ranks=2, rank=0))
    export.nvtx(1, 1, 100, 400, "ncclGroupStart")
    export.nvtx(1, 1, 110, 120, "ncclSend", payload=blob(P2P, comm=PP, size=64, peer=1))
    export.nvtx(1, 1, 130, 140, "ncclRecv", payload=blob(RECV, comm=PP, size=64, peer=1))
    export.nvtx(1, 1, 150, 400, "ncclGroupEnd")
    export.launched(1, 1, 200, corr=1, kernel=(0, 500, 600, SENDRECV))
    from commscope.service.offline import outcome

    (item,) = outcome("w", export.write(tmp_path / "run.sqlite"))  # type: ignore[misc]
    (op,) = item.result.calls
    assert (op.collective, op.group_rank, op.group_send_to, op.group_recv_from) == (
        "SendRecv",
        0,
        None,
        None,
    )
    assert op.members == (P2PMember(group_send_to=1, message_bytes=64),
                          P2PMember(group_recv_from=1, message_bytes=64))  # fmt: skip


# ---------------------------------------------------------------- NCCL Inspector


def write_inspector(folder: Path) -> Path:
    """Two verbose logs: 3 AllReduce on the world (so it is the world), the P2P calls on the
    pipeline's communicator, whose ranks are the other way round (global r is its 1 - r)."""
    folder.mkdir(parents=True)
    for rank, calls in CALLS.items():
        lines = [coll(rank, sn=sn, start_us=DUMP_US + 200 + sn) for sn in (1, 2, 3)]
        for sn, (start, end, way, peer) in enumerate(calls, start=1):
            name = "Send" if way == "send" else "Recv"
            lines.append(p2p(1 - rank, name, 1 - peer, sn=sn, exec_us=end - start,
                             start_us=DUMP_US + start))  # fmt: skip
        (folder / f"node0-pid{100 + rank}.log").write_text("\n".join(lines) + "\n")
    return folder


def test_inspector_p2p_records_pair_and_the_pipeline_says_why_it_is_empty(tmp_path: Path) -> None:
    report: Report = analyse(write_inspector(tmp_path / "logs"), Options())
    assert (report.matching.p2p_pairs, report.matching.p2p_unpaired) == (2, 0)
    assert report.sources["pipeline"] == LACKS["pipeline"]
    assert "no compute kernels" in LACKS["pipeline"]
    assert report.pipeline == Pipeline()  # no per-stage figures: not zeros
    assert LACKS["pipeline"] in render(report)


# ---------------------------------------------------------------- the cross-rank map


def _op(start: int, pg: str | None, group_rank: int | None, **peer: int) -> CommOp:
    return CommOp("SendRecv", start, 5, 64, 2, True, pg, group_rank=group_rank, **peer)  # type: ignore[arg-type]


def test_group_ranks_map_to_the_rank_whose_calls_claim_them() -> None:
    calls = {
        4: [_op(0, "pp", 1, group_send_to=0), _op(9, "other", 0, group_send_to=1)],
        7: [_op(2, "pp", 0, group_recv_from=1)],
    }
    found = p2pranks.resolved(calls)
    assert [(op.send_to, op.recv_from) for op in found[4]] == [(7, None), (None, None)]
    assert [(op.send_to, op.recv_from) for op in found[7]] == [(None, 4)]


def test_a_group_rank_two_ranks_claim_is_never_guessed() -> None:
    calls = {
        0: [_op(0, "pp", 0, group_send_to=1)],
        1: [_op(0, "pp", 1, group_recv_from=0)],
        2: [_op(0, "pp", 1, group_recv_from=0)],  # a second rank 1 of "pp": ambiguous
    }
    found = p2pranks.resolved(calls)
    assert (found[0][0].send_to, found[1][0].recv_from, found[2][0].recv_from) == (None, 0, 0)


def test_calls_with_global_peers_are_given_back_as_they_are() -> None:
    given = [CommOp("SendRecv", 0, 5, 64, 2, True, "pp", send_to=1)]
    assert p2pranks.resolved({0: given})[0] is given


@settings(max_examples=50, deadline=None)
@given(
    order=st.permutations(range(4)),
    pairs=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=12),
)
def test_group_ranks_resolve_to_the_global_peers_they_stand_for(
    order: list[int], pairs: list[tuple[int, int]]
) -> None:
    """Oracle: rank r is group rank order[r]; every send/recv given by group ranks resolves
    to the global peers the same calls would have named directly."""
    calls: dict[int, list[CommOp]] = {r: [] for r in range(4)}
    expected: dict[int, list[tuple[int | None, int | None]]] = {r: [] for r in range(4)}
    for at, (a, b) in enumerate(pairs):
        if a == b:
            continue
        calls[a].append(_op(at, "pp", order[a], group_send_to=order[b]))
        calls[b].append(_op(at, "pp", order[b], group_recv_from=order[a]))
        expected[a].append((b, None))
        expected[b].append((None, a))
    found = p2pranks.resolved(calls)
    claimed = {r for r in range(4) if calls[r]}
    for rank in range(4):
        got = [(op.send_to, op.recv_from) for op in found[rank]]
        want = [(s if s in claimed else None, v if v in claimed else None)
                for s, v in expected[rank]]  # fmt: skip
        assert got == want


def test_a_batch_that_sends_and_receives_is_one_call_of_two_members() -> None:
    """1F1B's steady state: forward send and backward receive in one batch, one kernel."""
    from kineto_builder import read

    send = _nccl_args("batch", "send", 1)
    recv = {**_nccl_args("batch", "recv", 1), "In msg nelems": 512, "Out msg nelems": 512}
    events = [
        annotation("ProfilerStep#1", T0, 100),
        cpu_op("record_param_comms", T0 + 1, 1, args=send),
        cpu_op("record_param_comms", T0 + 3, 1, args=recv),
        annotation("nccl:coalesced", T0 + 5, 2),
        launch(1, T0 + 6, 1),
        kernel(SENDRECV, T0 + 10, 20, {"correlation": 1}),
        cpu_op("record_param_comms", T0 + 40, 1, args=send),  # the next batch: one send,
        annotation("nccl:coalesced", T0 + 42, 0.5),  # its nccl:coalesced ended before the
        launch(2, T0 + 43, 1),  # launch (pytorch/pytorch#160680)
        kernel(SENDRECV, T0 + 50, 20, {"correlation": 2}),
    ]
    head = dist_head(rank=0, world_size=2, gpu="NVIDIA H100 80GB HBM3")
    ops = read(trace(events, head)).comm
    assert [(op.collective, op.message_bytes, op.send_to, op.recv_from) for op in ops] == [
        ("SendRecv", 4096, None, None),  # S: its sends (1024 Float), as an NCCL group's
        ("SendRecv", 4096, 1, None),
    ]
    assert ops[0].members == (P2PMember(send_to=1, message_bytes=4096),
                              P2PMember(recv_from=1, message_bytes=2048))  # fmt: skip
    assert ops[1].members == ()


def test_batches_both_ways_pair_member_by_member(tmp_path: Path) -> None:
    """Each rank sends to and receives from the other in one batch (one kernel each): two
    pairs, 0 -> 1 and 1 -> 0, each over the two kernels' spans."""
    folder = tmp_path / "job" / "iteration_1"
    folder.mkdir(parents=True)
    for rank in (0, 1):
        other = 1 - rank
        events = [
            annotation("ProfilerStep#1", T0, 100),
            cpu_op("record_param_comms", T0 + 1, 1, args=_nccl_args("batch", "send", other)),
            cpu_op("record_param_comms", T0 + 3, 1, args=_nccl_args("batch", "recv", other)),
            annotation("nccl:coalesced", T0 + 5, 2),
            launch(1, T0 + 6, 1),
            kernel(SENDRECV, T0 + 10 + 5 * rank, 20, {"correlation": 1}),
        ]
        head = dist_head(rank=rank, world_size=2, gpu="NVIDIA H100 80GB HBM3")
        (folder / f"rank{rank}_trace.json").write_bytes(trace(events, head))
    report = analyse(tmp_path / "job", Options())
    assert (report.matching.p2p_pairs, report.matching.p2p_unpaired) == (2, 0)
    assert report.collectives.all_ranks["SendRecv"].count == 2  # one call a kernel


def test_inspector_p2p_pairs_live_as_offline(tmp_path: Path) -> None:
    from tests.pipeline.test_inspector_windows_live import apply, document, items

    root = tmp_path / "run"
    write_inspector(root / "logs")
    aggregation = Aggregation()
    for path in sorted((root / "logs").glob("*.log")):
        apply(aggregation, [item.record for item in items(root, path)])
    live = aggregation.report(Options(), final=True)
    assert (live.matching.p2p_pairs, live.matching.p2p_unpaired) == (2, 0)
    assert document(live) == document(analyse(root, Options()))


def test_a_batched_call_is_paired_member_by_member() -> None:
    both = (P2PMember(group_send_to=1, message_bytes=8), P2PMember(group_recv_from=1))
    calls = {
        0: [CommOp("SendRecv", 0, 5, 8, 2, True, "pp", group_rank=0, members=both)],
        1: [_op(1, "pp", 1, group_recv_from=0), _op(2, "pp", 1, group_send_to=0)],
    }
    found = p2pranks.resolved(calls)
    assert [(op.start_ns, op.send_to, op.recv_from, op.message_bytes) for op in found[0]] == [
        (0, 1, None, 8),
        (0, None, 1, None),
    ]
