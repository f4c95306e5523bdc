"""Flight Recorder dumps joined with profiles (`pipeline.flightjoin`): each stuck rank with its
profile's last collective of the group and its last step, worded as the report words it; the
collectives whose profile and dump disagree; and the whole path from hand-made Kineto traces
and dumps through `commscope report`'s offline driver."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from builders import GEMM, write
from commscope.collector.flight import decode
from commscope.exporters.flighttext import join_sentence
from commscope.model.schema import (
    FlightDisagreement,
    FlightStuck,
    ProfiledCall,
    RankTail,
)
from commscope.pipeline import flightjoin
from commscope.pipeline.report import Options
from commscope.service.offline import analyse
from flight_builder import dump, entry
from flight_builder import write as write_dump
from kineto_builder import annotation, collective_args, dist_head, kernel, trace

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
STUCK = FlightStuck(group="0", desc="default_pg", rank=1, after_seq=3, after_op="AllReduce",
                    missed_seq=4, missed_op="AllReduce", entered_by=[0])  # fmt: skip


def _tail(group: str | None, seq: int | None, end_ns: int | None = 900) -> RankTail:
    call = ProfiledCall(group=group, seq=seq, collective="AllReduce", end_ns=end_ns, step=7)
    return RankTail(rank=1, calls=[call], step=7, step_s=0.004, compute_s=0.001,
                    exposed_comm_s=0.0025, others_median_s=0.002, others=3)  # fmt: skip


@pytest.mark.parametrize(
    ("group", "seq", "agreement"),
    [("0", 3, "same"), ("0", 2, "earlier"), ("0", 5, "later"), (None, None, "unnumbered"),
     ("7", 3, "none")],
)  # fmt: skip
def test_the_profiles_last_collective_of_the_group_against_the_dumps(
    group: str | None, seq: int | None, agreement: str
) -> None:
    found = flightjoin.join(STUCK, _tail(group, seq), latest_ns=1_900)
    assert (found.profiled, found.agreement) == (True, agreement)
    assert found.behind_s == (1e-6 if agreement != "none" else None)
    assert (found.step, found.step_s, found.others_median_s) == (7, 0.004, 0.002)


def test_the_sentence_names_the_rank_the_collective_and_its_last_step() -> None:
    """Step 7 took 4 ms against the others' 2 ms: 1 ms compute, 2.5 ms exposed communication;
    the profile's last of group 0 is #3, as the dump's; it ended 1 µs before the latest."""
    found = flightjoin.join(STUCK, _tail("0", 3), latest_ns=1_900)
    assert join_sentence(found, "default_pg") == (
        "rank 1 stopped after AllReduce #3 of group 0 (default_pg); its last profiled step "
        "shows step 7 of 4.00 ms (the other ranks' median of step 7: 2.00 ms), 1.00 ms compute "
        "and 2.50 ms exposed communication; its profile's last collective of the group is the "
        "same, AllReduce #3, ending 1.00 µs before the latest any rank's profile saw"
    )


def test_a_rank_without_a_profile_is_said_so() -> None:
    found = flightjoin.join(STUCK, None)
    assert not found.profiled
    assert join_sentence(found).endswith("; no profile of rank 1 is beside the dumps")


def test_profile_and_dump_of_one_collective_disagree_on_type_then_dtype() -> None:
    """Rank 1's profile recorded group 0 #3 as an AllGather of Float; its dump holds #3 as an
    all_reduce (the type is said, not also the dtype); group 1 #2 is BFloat16 in the dump."""
    entries = [entry(3), entry(2, input_dtypes=["BFloat16"], process_group=("1", "tp"))]
    found = decode(pickle.dumps(dump(entries)), 1, "nccl_trace_rank_1")
    calls = [
        ProfiledCall(group="0", seq=3, collective="AllGather", end_ns=1, step=1, dtype="Float"),
        ProfiledCall(group="1", seq=2, collective="AllReduce", end_ns=1, step=1, dtype="Float"),
        ProfiledCall(group="1", seq=9, collective="AllReduce", end_ns=1, step=1),  # not dumped
    ]
    got = list(flightjoin.disagree(found, RankTail(rank=1, calls=calls)))
    assert got == [
        FlightDisagreement(rank=1, group="0", seq=3, kind="type", profile="AllGather",
                           dump="AllReduce"),
        FlightDisagreement(rank=1, group="1", seq=2, kind="dtype", profile="Float",
                           dump="BFloat16"),
    ]  # fmt: skip


def _rank_trace(rank: int, seqs: int) -> bytes:
    """Steps 10 [0,1000) and 11 [1000,2000) µs (rank 1: step 10 alone, 1,500 µs); in each a GEMM
    [s, s+100) and an AllReduce [s+200, s+700) of group 0 numbered 1, 2 (`seqs` of them)."""
    events = []
    for i in range(seqs):
        start = 1000 * i
        args = collective_args("allreduce", 1024, 1024, "Float", **{
            "Group size": 2, "Process Group Name": "0", "Seq": i + 1})  # fmt: skip
        duration = 1500 if rank == 1 else 1000
        events += [annotation(f"ProfilerStep#{10 + i}", start, duration),
                   kernel(GEMM, start, 100), kernel(ALLREDUCE, start + 200, 500, args)]  # fmt: skip
    tail = {"baseTimeNanoseconds": 1_700_000_000 * 10**9}
    return trace(events, head=dist_head(rank, 2, gpu="NVIDIA H100 80GB HBM3"), tail=tail)


def test_dumps_beside_traces_join_through_the_offline_report(tmp_path: Path) -> None:
    """Rank 0 enqueued AllReduce #1 and #2, rank 1 only #1 (its dump and its trace agree). Rank
    1's last profiled step is 10 (1.5 ms; rank 0's step 10: 1 ms), with 100 µs of compute and
    500 µs of exposed communication; its last AllReduce of group 0 is #1, as its dump says,
    and ended 1 ms before rank 0's #2 (clocks agree: both #1 end at 700 µs)."""
    for rank, seqs in ((0, 2), (1, 1)):
        write(tmp_path / f"rank{rank}_trace.json", _rank_trace(rank, seqs))
        ops = [entry(i + 1, state="scheduled") for i in range(seqs)]
        write_dump(tmp_path, rank, dump(ops, ranks="[0, 1]"))
    found = analyse(tmp_path, Options()).flight_recorder
    assert found is not None
    (joined,) = found.joined
    assert (joined.rank, joined.agreement, joined.profile_seq) == (1, "same", 1)
    assert found.disagreements == []
    assert join_sentence(joined, found.groups["0"]) == (
        "rank 1 stopped after AllReduce #1 of group 0 (default_pg); its last profiled step "
        "shows step 10 of 1.50 ms (the other ranks' median of step 10: 1.00 ms), 100 µs "
        "compute and 500 µs exposed communication; its profile's last collective of the group "
        "is the same, AllReduce #1, ending 1.00 ms before the latest any rank's profile saw"
    )
