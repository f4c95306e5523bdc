"""The aggregator's intake of a record's call tallies (protocol 14): a collector's record is
applied with its tallies added, none counted again; tallies that are not the record's calls'
are refused at decode and counted ("invalid"), never raised, the stream left where it was."""

from __future__ import annotations

import msgspec
import pytest
from commscope.model.schema import CommOp, Facts, GpuOp, Record, StreamEnd, StreamStart, TraceMeta
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.edge import Reduction
from commscope.service.aggregate import Aggregator
from commscope.service.links import own_stream
from msgspec.structs import replace

NODE = "n1"
STREAM = "0123456789abcdef0123456789abcdef"
EVENTS = [
    GpuOp("compute", 0, 100),
    CommOp("AllReduce", 50, 100, 4096, 4, True, "0", 1, "pg_config"),
    CommOp("AllGather", 300, 40, 1024, 4, True, "0", 2, "pg_config"),
]
START = StreamStart(stream=STREAM, node=NODE, path="/run/w/rank0.json", folder="w", root_name="r")


def facts() -> Facts:
    reduction = Reduction()
    reduction.add_all(EVENTS)
    (part,) = reduction.facts(STREAM, 1)
    return part


def send(aggregator: Aggregator, record: Record) -> None:
    aggregator.receive([NODE.encode(), msgspec.msgpack.encode(record)], peer=NODE)


def refusals(aggregator: Aggregator) -> dict[str, int]:
    return {k: v for k, v in aggregator.stats.rejected.items() if v}


def test_a_records_tallies_are_applied_as_counting_its_calls_would_be(agg: Aggregator) -> None:
    for record in (START, facts(), StreamEnd(stream=STREAM, seq=2, meta=TraceMeta(rank=0))):
        send(agg, record)
    assert refusals(agg) == {}
    (finished,) = agg.aggregation.finished.values()
    expected = Accumulator()
    expected.add_all(EVENTS)
    assert finished.result == expected.result([START.path])


@pytest.mark.parametrize(
    "part",
    [
        replace(facts(), gpu_ops={"AllReduce": facts().gpu_ops["AllReduce"]}),  # a type missing
        replace(facts(), calls=facts().calls[:1]),  # a call fewer than counted
        replace(
            facts(),
            gpu_ops={
                **facts().gpu_ops,
                "AllReduce": replace(facts().gpu_ops["AllReduce"], time_ns=-1),
            },
        ),
    ],
    ids=["type-missing", "call-missing", "time-negative"],
)
def test_tallies_that_are_not_the_calls_are_refused_and_counted(
    agg: Aggregator, part: Facts
) -> None:
    send(agg, START)
    send(agg, part)
    assert refusals(agg) == {"invalid": 1}
    assert agg.aggregation.position(own_stream(NODE, STREAM)) == (1, False)
