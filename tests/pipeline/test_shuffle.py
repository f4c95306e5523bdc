"""Events in any order, split across any windows' files, give an identical report."""

from __future__ import annotations

import random

import msgspec
from commscope.exporters import jsonreport
from commscope.model.schema import (
    COLLECTIVE_TYPES,
    CommOp,
    CpuSpan,
    Event,
    FileStats,
    GpuOp,
    Step,
    TraceMeta,
)
from commscope.pipeline.accumulate import Accumulator
from commscope.pipeline.report import Options, ParsedFile, build_report
from hypothesis import given, settings
from hypothesis import strategies as st

times = st.integers(0, 10_000_000)
durations = st.integers(0, 2_000_000)
gpu_ops = st.builds(GpuOp, st.sampled_from(["compute", "memcpy", "memset"]), times, durations)
comm_ops = st.builds(
    CommOp,
    st.sampled_from(COLLECTIVE_TYPES),
    times,
    durations,
    st.one_of(st.none(), st.integers(0, 10**9)),
    st.one_of(st.none(), st.integers(1, 64)),
    st.booleans(),
    dtype=st.sampled_from([None, "Float", "Long"]),
    in_splits=st.sampled_from([(), (1, 3)]),
    out_splits=st.sampled_from([(), (2, 2)]),
)
cpu_spans = st.builds(
    lambda tid, start, dur, call: CpuSpan(tid, start, start + dur, call),
    st.integers(1, 3),
    times,
    durations,
    st.booleans(),
)
steps = st.builds(Step, st.integers(0, 20), times, durations, st.integers(1, 3))
events = st.lists(st.one_of(gpu_ops, comm_ops, cpu_spans, steps), max_size=80)


def report_bytes(ranks: dict[int, list[Event]]) -> bytes:
    files = []
    for rank, rank_events in ranks.items():
        accumulator = Accumulator()
        accumulator.add_all(rank_events)
        meta = TraceMeta(rank=rank, world_size=len(ranks), gpu_name="NVIDIA A100-SXM4-80GB")
        files.append(
            ParsedFile("w", f"rank{rank}.json", rank, meta, accumulator.result(), FileStats())
        )
    return jsonreport.render(build_report(["w"], files, [], Options()))


@given(st.lists(events, min_size=1, max_size=3), st.randoms())
@settings(max_examples=150, deadline=None)
def test_shuffled_events_give_an_identical_report(
    per_rank: list[list[Event]], rng: random.Random
) -> None:
    ranks = dict(enumerate(per_rank))
    shuffled = {rank: rng.sample(evs, len(evs)) for rank, evs in reversed(ranks.items())}
    assert report_bytes(shuffled) == report_bytes(ranks)


@given(events)
@settings(max_examples=100, deadline=None)
def test_events_survive_the_wire_encoding(evs: list[Event]) -> None:
    decoded = msgspec.msgpack.Decoder(list[Event]).decode(msgspec.msgpack.encode(evs))
    assert decoded == evs
