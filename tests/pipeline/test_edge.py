"""pipeline/edge.py: a file's accumulator as Facts records and back gives the same result,
whatever the events and however the facts are cut (hypothesis, hand-built traces, the real
traces), and what a record carries is bounded."""

from __future__ import annotations

from array import array

import msgspec
import pytest
from commscope.collector.discover import open_trace
from commscope.collector.kineto import TraceReader
from commscope.model.int64s import pack as pack_delays
from commscope.model.schema import (
    MAX_FACT_ITEMS,
    CommOp,
    CpuSpan,
    Event,
    Facts,
    GpuOp,
    KernelTime,
    LaunchDelays,
    LaunchTally,
    MemoryPeak,
    Record,
    Sketch,
    Step,
)
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.edge import facts, from_facts, pack, unpack, well_formed
from commscope.pipeline.intervals import IntervalSet
from commscope.pipeline.sketch import sketch_of
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace
from tools import needs_shared, shared_traces

TRACES = shared_traces("kineto")
STREAM = "0123456789abcdef0123456789abcdef"
DECODER = msgspec.msgpack.Decoder(Record)

times = st.integers(-50, 400)
durations = st.integers(-5, 60)
gpu_ops = st.builds(
    GpuOp,
    st.sampled_from(["compute", "memcpy", "memset"]),
    times,
    durations,
    st.sampled_from([None, "gemm", "attention"]),
)
comm_ops = st.builds(
    CommOp,
    st.sampled_from(["AllReduce", "AllGather", "SendRecv"]),
    times,
    durations,
    st.sampled_from([None, 0, 4096]),
    st.sampled_from([None, 1, 2, 8]),
    st.booleans(),
    st.sampled_from([None, "0", "1"]),
    st.sampled_from([None, 0, 1, 2]),
    st.sampled_from([None, "pg_config", "world size"]),
    st.sampled_from([None, "Float", "Long"]),
    st.sampled_from([(), (1, 3)]),
    st.sampled_from([(), (2, 2)]),
)
cpu_spans = st.builds(CpuSpan, st.integers(1, 3), times, times, st.booleans())
steps = st.builds(Step, st.integers(0, 4), times, durations, st.integers(1, 3))
peaks = st.builds(MemoryPeak, st.integers(0, 1), st.integers(0, 10**6), st.none() | times)
kernel_times = st.builds(
    KernelTime, st.sampled_from([None, "a", "b", "c"]), st.integers(1, 5), st.integers(0, 99),
    st.booleans(),
)  # fmt: skip
delays = st.lists(st.integers(-100, 10**6), max_size=6).map(lambda v: pack_delays(array("q", v)))
launch_parts = st.builds(LaunchDelays, *[st.integers(0, 9)] * 4, delays)
events = st.lists(
    st.one_of(gpu_ops, comm_ops, cpu_spans, steps, peaks, kernel_times, launch_parts), max_size=80
)


def accumulated(items: list[Event]) -> Accumulator:
    acc = Accumulator()
    acc.add_all(items)
    return acc


def over_the_wire(acc: Accumulator, limit: int = MAX_FACT_ITEMS) -> list[Facts]:
    """The records encoded and decoded as the aggregator reads them."""
    parts = []
    for part in facts(acc, STREAM, 1, limit):
        decoded = DECODER.decode(msgspec.msgpack.encode(part))
        assert isinstance(decoded, Facts)
        parts.append(decoded)
    return parts


@settings(max_examples=300, deadline=None)
@given(events, st.integers(2, 12))
def test_the_facts_give_the_result_of_the_events_however_cut(
    items: list[Event], limit: int
) -> None:
    acc = accumulated(items)
    parts = over_the_wire(acc, limit)
    assert [p.seq for p in parts] == list(range(1, len(parts) + 1))
    assert from_facts(parts).result(["f"]) == accumulated(items).result(["f"])


def test_each_record_holds_at_most_the_limit_of_items() -> None:
    """3 compute kernels apart: 3 runs; with 2 items a record, each record holds its set's
    entry and one run (the other sets' empty entries take records of their own)."""
    acc = accumulated([GpuOp("compute", t, 5) for t in (0, 10, 20)])
    parts = list(facts(acc, STREAM, 7, limit=2))
    computes = [unpack(p.runs["compute"]) for p in parts if "compute" in p.runs]
    assert [(list(s), list(e)) for s, e in computes] == [([0], [5]), ([10], [15]), ([20], [25])]
    assert parts[0].seq == 7 and parts[0].has_gpu and parts[0].kernel_ns == {"other": 15}


def test_an_empty_accumulator_is_one_record_of_nothing() -> None:
    (part,) = facts(Accumulator(), STREAM, 1)
    assert from_facts([part]).result() == Accumulator().result()
    assert part.runs == {"compute": b"", "gpu_comm": b"", "cpu_comm": b"", "copies": b""}


def test_a_thread_without_time_is_kept() -> None:
    """A cpu_op span of no length still names its thread (the CPU-only source and the
    training thread rest on which threads were seen)."""
    acc = accumulated([CpuSpan(7, 10, 10, False)])
    (part,) = facts(acc, STREAM, 1)
    assert part.busy == {7: b""}
    assert from_facts([part]).result() == acc.result()


def test_a_gpu_rank_ships_each_thread_s_cpu_runs_as_their_bounds() -> None:
    """Thread 7's cpu_op spans [0, 10) and [20, 30) and its call [40, 45): with a kernel on
    the rank they go as [0, 30) and [40, 45) (its time range is all they give); without one
    (CPU-only: cpu_op time less call time is compute) they go as they are."""
    spans: list[Event] = [CpuSpan(7, 0, 10, False), CpuSpan(7, 20, 30, False),
                          CpuSpan(7, 40, 45, True)]  # fmt: skip
    for kernels, busy in (([GpuOp("compute", 5, 1)], ([0], [30])), ([], ([0, 20], [10, 30]))):
        acc = accumulated([*spans, *kernels])
        (part,) = over_the_wire(acc)
        assert tuple(map(list, unpack(part.busy[7]))) == busy
        assert tuple(map(list, unpack(part.call_time[7]))) == ([40], [45])
        assert from_facts([part]).result(["f"]) == acc.result(["f"])


def test_runs_pack_as_little_endian_int64_pairs() -> None:
    data = pack(array("q", [1, -3]), array("q", [2, 2**40]))
    assert data == (1).to_bytes(8, "little") + (2).to_bytes(8, "little") + (-3).to_bytes(
        8, "little", signed=True
    ) + (2**40).to_bytes(8, "little")
    assert [list(a) for a in unpack(data)] == [[1, -3], [2, 2**40]]


def test_packed_runs_that_are_not_whole_are_not_well_formed() -> None:
    assert well_formed(Facts(stream=STREAM, seq=1, busy={1: bytes(32)}))
    assert not well_formed(Facts(stream=STREAM, seq=1, call_time={1: bytes(20)}))


def test_runs_out_of_order_from_a_peer_still_give_their_union() -> None:
    """Runs a peer sends unsorted or overlapping are added one by one: [0, 10) ∪ [5, 20) and
    [30, 40) before them give [0, 20) and [30, 40)."""
    runs = IntervalSet()
    runs.add_runs(array("q", [30, 0, 5]), array("q", [40, 10, 20]))
    assert list(runs.runs()) == [(0, 20), (30, 40)]


@needs_shared("kineto")
@pytest.mark.parametrize(
    "name",
    [
        "dlrm_8rank_v100/worker0_step_12.1694128201545.pt.trace.json",
        "sampled_2rank/sampled_rank-1.json.gz",
        "single_rank/v100_allreduce_216k_events_rank1.json.gz",
        "single_rank/mi300_rccl_generic_rank0.json.gz",
    ],
)
def test_real_traces_give_the_same_result_through_their_facts(name: str) -> None:
    path = TRACES / name
    acc = Accumulator()
    with open_trace(path) as handle:
        for batch in TraceReader(handle, str(path)).batches(4096):
            acc.add_all(batch)
    parts = over_the_wire(acc)
    assert from_facts(parts).result([name]) == acc.result([name])


def test_a_launch_sketch_from_a_peer_must_be_one() -> None:
    good = sketch_of([7_000.0, 9_000.0, -5.0, 0.0])
    assert well_formed(launch_facts(good))
    bad = [
        replace(good, count=5),  # counts that do not add up
        replace(good, positive={10**6: 2}),  # a bucket beyond any int64 of nanoseconds
        replace(good, positive={400: 0, 450: 2}),  # an empty bucket
        replace(good, min=10.0, max=1.0),
        replace(good, sum_parts=[1.0] * 65),
    ]
    assert not any(well_formed(launch_facts(sketch)) for sketch in bad)


def launch_facts(delays: Sketch) -> Facts:
    return Facts(stream=STREAM, seq=1, launches=LaunchTally(calls=4, kernels=4, delay_ns=delays))
