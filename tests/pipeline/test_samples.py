"""Packed bandwidth samples: 8 bytes each, little-endian float64, values back bit for bit."""

from __future__ import annotations

import struct

import msgspec
import pytest
from commscope.collector.schema import CommOp, OpTally, RankResult
from commscope.pipeline.accumulate import count_op, pooled_ops
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
            RankResult(source="gpu kernels", ops={"AllReduce": first}),
            RankResult(source="gpu kernels", ops={"AllReduce": second}),
        ]
    )["AllReduce"]
    assert list(sample_values(into.algbw_Bps)) == pytest.approx([4e9, 4e9], rel=1e-15)
    assert list(sample_values(into.busbw_Bps)) == pytest.approx([6e9, 6e9], rel=1e-15)  # F = 1.5
    assert len(sample_values(first.algbw_Bps)) == 1  # the parts are left as they were
    stored = msgspec.msgpack.decode(msgspec.msgpack.encode(into), type=OpTally)
    assert stored == into and isinstance(stored.algbw_Bps, bytearray)
