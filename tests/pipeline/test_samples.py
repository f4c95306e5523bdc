"""Packed bandwidth samples: 8 bytes each, little-endian float64, values back bit for bit."""

from __future__ import annotations

import itertools
import struct

import msgspec
import pytest
from commscope.model.schema import CommOp, OpTally, RankResult
from commscope.pipeline.accumulate import Accumulator, count_op, pooled_ops
from commscope.pipeline.stats import add_sample, sample_values
from hypothesis import given
from hypothesis import strategies as st


@given(st.lists(st.floats(allow_nan=False)))
def test_values_come_back_exactly_and_in_order(values: list[float]) -> None:
    packed = bytearray()
    for value in values:
        add_sample(packed, value)
    assert len(packed) == 8 * len(values)
    assert list(sample_values(packed)) == values
    assert [v for (v,) in struct.iter_unpack("<d", packed)] == values  # little-endian float64


def test_a_tally_keeps_its_samples_through_merge_and_the_stored_bytes() -> None:
    first, second = OpTally(), OpTally()
    count_op(first, CommOp("AllReduce", 0, 1_000, 4_000, 4, True))  # 4 kB in 1 µs
    count_op(second, CommOp("AllReduce", 0, 2_000, 8_000, 4, True))
    count_op(second, CommOp("AllReduce", 0, 0, 8_000, 4, True))  # no duration: no sample
    into = pooled_ops(
        [
            RankResult(evidence_text="gpu kernels", ops={"AllReduce": first}),
            RankResult(evidence_text="gpu kernels", ops={"AllReduce": second}),
        ]
    )["AllReduce"]
    assert list(sample_values(into.algbw_Bps)) == pytest.approx([4e9, 4e9], rel=1e-15)
    assert list(sample_values(into.busbw_Bps)) == pytest.approx([6e9, 6e9], rel=1e-15)  # F = 1.5
    assert len(sample_values(first.algbw_Bps)) == 1  # the parts are left as they were
    stored = msgspec.msgpack.decode(msgspec.msgpack.encode(into), type=OpTally)
    assert stored == into and isinstance(stored.algbw_Bps, bytearray)


def test_a_records_calls_are_counted_a_type_at_a_time() -> None:
    """Two AllReduces of 4 kB in 1 µs on 4 ranks (F = 2 x 3/4), one of unknown size, and a
    gloo Broadcast (F = 1) of 1 kB in 2 µs: counts, sums, bus parts and samples by hand."""
    ops = [
        CommOp("AllReduce", 0, 1_000, 4_000, 4, True, group_source="Group size arg"),
        CommOp("Broadcast", 5, 2_000, 1_000, None, False),
        CommOp("AllReduce", 10, 1_000, None, 4, True),
        CommOp("AllReduce", 20, 1_000, 4_000, 4, True),
    ]
    acc = Accumulator()
    acc.keep_calls(ops)
    tally = acc.gpu_ops["AllReduce"]
    assert (tally.count, tally.sized_count, tally.message_bytes) == (3, 2, 8_000)
    assert (tally.time_ns, tally.sized_time_ns, tally.bus_time_ns) == (3_000, 2_000, 2_000)
    assert (tally.bus_parts, tally.bus_count) == ({4: 2 * 4_000 * 6}, 2)
    assert tally.group_sources == {"Group size arg": 1, "unknown": 2}
    algbw = 4_000 / (1_000 * 1e-9)  # S / (duration x 1e-9), as `count_op` finds it: ~4e9
    assert list(sample_values(tally.algbw_Bps)) == [algbw, algbw]
    assert list(sample_values(tally.busbw_Bps)) == [algbw * 6 / 4] * 2
    broadcast = acc.cpu_ops["Broadcast"]
    assert list(sample_values(broadcast.busbw_Bps)) == [1_000 / (2_000 * 1e-9) * 1 / 1]
    assert broadcast.bus_parts == {1: 1_000}
    assert (acc.gpu_calls, acc.cpu_calls, acc.has_gpu) == ([ops[0], *ops[2:]], [ops[1]], True)


Ops = st.lists(
    st.builds(
        CommOp,
        collective=st.sampled_from(["AllReduce", "AllGather", "SendRecv", "Broadcast"]),
        start_ns=st.integers(0, 10**6),
        dur_ns=st.integers(0, 10**6),
        message_bytes=st.none() | st.integers(0, 2**40),
        group_size=st.none() | st.integers(0, 64),
        on_gpu=st.booleans(),
        group_source=st.none() | st.sampled_from(["Group size arg", "pg_config"]),
    ),
    max_size=40,
)


@given(Ops, st.lists(st.integers(0, 40), max_size=4))
def test_calls_counted_at_once_equal_calls_counted_one_by_one(
    ops: list[CommOp], cuts: list[int]
) -> None:
    """Whatever the calls and however a file's are cut into records: the same result, its
    tallies' samples bit for bit."""
    one_by_one, at_once = Accumulator(), Accumulator()
    for op in ops:
        one_by_one.keep_call(op)
    bounds = [0, *sorted(cuts), len(ops)]
    for low, high in itertools.pairwise(bounds):
        at_once.keep_calls(ops[low:high])
    assert at_once.result() == one_by_one.result()
    assert msgspec.msgpack.encode(at_once.result()) == msgspec.msgpack.encode(one_by_one.result())
