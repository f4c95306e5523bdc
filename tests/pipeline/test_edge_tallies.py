"""pipeline/edge.py: each record of facts carries its calls' tallies by type, counted once at
the edge; the aggregator adds them (no call counted again) and refuses tallies that are not
the record's calls' or are out of bounds."""

from __future__ import annotations

import math
import struct

import msgspec
import pytest
from commscope.model.schema import CommOp, Facts, OpTally, Record
from commscope.pipeline.accumulate import Accumulator, tallies
from commscope.pipeline.edge import Reduction, absorb, facts, from_facts, well_formed
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

STREAM = "0123456789abcdef0123456789abcdef"
DECODER = msgspec.msgpack.Decoder(Record)

# AllReduce over 4 ranks: F = 2 x 3 / 4; 4096 B in 2 µs is 2.048 GB/s algbw
ALLREDUCE = CommOp("AllReduce", 0, 2_000, 4096, 4, True, "0", 1, "pg_config")
GLOO = CommOp("Broadcast", 5_000, 1_000, None, None, False, "1", 2)
comm_ops = st.builds(
    CommOp,
    st.sampled_from(["AllReduce", "AllGather", "SendRecv"]),
    st.integers(0, 400),
    st.integers(0, 60),
    st.sampled_from([None, 0, 4096]),
    st.sampled_from([None, 1, 2, 8]),
    st.booleans(),
    st.sampled_from([None, "0", "1"]),
    st.sampled_from([None, 0, 1]),
    st.sampled_from([None, "pg_config", "world size"]),
)


def record(calls: list[CommOp]) -> Facts:
    """One record of these calls as a collector sends it, decoded as the aggregator reads it."""
    acc = Accumulator()
    acc.keep_calls(calls)
    (part,) = facts(acc, STREAM, 1)
    decoded = DECODER.decode(msgspec.msgpack.encode(part))
    assert isinstance(decoded, Facts)
    return decoded


def test_a_record_carries_its_calls_tallies_worked_out_by_hand() -> None:
    part = record([ALLREDUCE, GLOO, ALLREDUCE])
    assert set(part.gpu_ops) == {"AllReduce"} and set(part.cpu_ops) == {"Broadcast"}
    reduce = part.gpu_ops["AllReduce"]
    assert (reduce.count, reduce.sized_count, reduce.message_bytes, reduce.time_ns) == (
        2, 2, 8192, 4_000
    )  # fmt: skip
    assert reduce.bus_parts == {4: 2 * 4096 * 6}  # Σ S x (F x n), F x n = 6
    assert struct.unpack("<2d", reduce.algbw_Bps) == pytest.approx((2.048e9, 2.048e9))
    assert struct.unpack("<2d", reduce.busbw_Bps) == pytest.approx((3.072e9, 3.072e9))
    assert part.cpu_ops["Broadcast"] == OpTally(
        count=1, time_ns=1_000, group_sources={"unknown": 1}
    )
    assert well_formed(part)


@settings(max_examples=200, deadline=None)
@given(st.lists(comm_ops, max_size=30), st.integers(2, 9))
def test_tallies_absorbed_give_what_counting_the_calls_gives(
    calls: list[CommOp], limit: int
) -> None:
    acc = Accumulator()
    acc.keep_calls(calls)
    parts = [DECODER.decode(msgspec.msgpack.encode(p)) for p in facts(acc, STREAM, 1, limit)]
    assert all(isinstance(p, Facts) and well_formed(p) for p in parts)
    counted = Accumulator()
    for part in parts:
        assert isinstance(part, Facts)
        absorb(counted, replace(part, gpu_ops={}, cpu_ops={}))  # the calls counted on arrival
    assert from_facts(parts).result() == counted.result() == acc.result()  # type: ignore[arg-type]


def test_the_collector_counts_each_call_once_as_the_records_are_cut() -> None:
    reduction = Reduction()
    reduction.add_all([ALLREDUCE, GLOO])
    assert (reduction.gpu_ops, reduction.cpu_ops) == ({}, {})  # not as they come
    (part,) = reduction.facts(STREAM, 1)
    assert (part.gpu_ops, part.cpu_ops) == tallies([ALLREDUCE, GLOO])
    plain = Accumulator()
    plain.add_all([ALLREDUCE, GLOO])
    assert reduction.result(["f"]) == plain.result(["f"])


def _bad_tallies() -> list[tuple[str, Facts]]:
    good = record([ALLREDUCE, ALLREDUCE, GLOO])
    reduce, gloo = good.gpu_ops["AllReduce"], good.cpu_ops["Broadcast"]
    nan = struct.pack("<d", math.nan) + bytes(reduce.algbw_Bps[8:])

    def gpu(**fields: object) -> Facts:
        return replace(good, gpu_ops={"AllReduce": replace(reduce, **fields)})

    return [
        ("count-short", gpu(count=1, group_sources={"pg_config": 1})),
        ("type-missing", replace(good, cpu_ops={})),
        ("type-extra", replace(good, gpu_ops={**good.gpu_ops, "AllGather": reduce})),
        (
            "type-on-the-other-side",
            replace(good, gpu_ops={**good.gpu_ops, "Broadcast": gloo}, cpu_ops={}),
        ),
        ("tallies-without-calls", replace(good, calls=[])),
        ("sized-over-count", gpu(sized_count=3)),
        ("bus-over-sized", replace(good, cpu_ops={"Broadcast": replace(gloo, bus_count=1)})),
        ("time-negative", gpu(time_ns=-1)),
        ("bytes-negative", gpu(message_bytes=-5)),
        ("sample-not-whole", gpu(algbw_Bps=reduce.algbw_Bps + b"\x00")),
        ("samples-over-sized", gpu(algbw_Bps=reduce.algbw_Bps * 2)),
        ("busbw-over-algbw", gpu(algbw_Bps=reduce.algbw_Bps[:8])),
        ("sample-nan", gpu(algbw_Bps=bytearray(nan))),
        ("sample-inf", gpu(busbw_Bps=bytearray(struct.pack("<2d", math.inf, 1.0)))),
        ("sample-negative", gpu(busbw_Bps=bytearray(struct.pack("<2d", -1.0, 1.0)))),
        ("source-invented", gpu(group_sources={"rumour": 2})),
        ("sources-short", gpu(group_sources={"pg_config": 1})),
        ("bus-part-of-no-group", gpu(bus_parts={0: 5})),
        ("bus-part-over-world", gpu(bus_parts={2**24 + 1: 5})),
        ("bus-part-negative", gpu(bus_parts={4: -1})),
    ]


@pytest.mark.parametrize(("why", "part"), _bad_tallies(), ids=[w for w, _ in _bad_tallies()])
def test_tallies_that_are_not_the_calls_or_out_of_bounds_are_refused(why: str, part: Facts) -> None:
    assert not well_formed(part), why


def test_a_record_without_tallies_has_its_calls_counted() -> None:
    part = replace(record([ALLREDUCE, GLOO]), gpu_ops={}, cpu_ops={})
    assert well_formed(part)
    plain = Accumulator()
    plain.keep_calls([ALLREDUCE, GLOO])
    assert from_facts([part]).result() == plain.result()
