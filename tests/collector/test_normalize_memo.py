"""What the normalizer works out once for a collective's repeated args gives what working it
out each time gives (`normalize.CallFacts`, `Normalizer._alone` inside `_comm_op`), and an
accumulator's batch
of collectives kept at once is each kept in turn (`Accumulator.add_all`)."""

from __future__ import annotations

from typing import Any

import msgspec
from commscope.collector.normalize import CallFacts, Normalizer, RawEvent, comm_call
from commscope.model.schema import COLLECTIVE_TYPES, CommOp, Event, GpuOp
from commscope.pipeline.accumulate import Accumulator
from hypothesis import given, settings
from hypothesis import strategies as st

# Values that are equal across types (1, 1.0, True) or print apart (0.0, -0.0) must not share
# what is remembered.
values = st.sampled_from([None, 0, 1, 1.0, 0.0, -0.0, True, False, 2, 8, -1, "1", "send", "recv",
                          "allreduce", "Float", "BFloat16", "[0, 1]", "[2, 2]", "[]", [1, 2],
                          [[4, 2]], ["Float"]])  # fmt: skip
keys = st.sampled_from(["Collective name", "In msg nelems", "Out msg nelems", "dtype",
                        "Group size", "Process Group Name", "Seq", "Input Dims", "Input type",
                        "In split size", "Out split size", "Dst Rank", "Src Rank", "Rank",
                        "Concrete Inputs", "Process Group Ranks", "Global rank start",
                        "Global rank stride", "External id"])  # fmt: skip
names = st.sampled_from(["record_param_comms", "nccl:send", "c10d::alltoall_base_",
                         "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"])  # fmt: skip
calls = st.tuples(names, st.integers(0, 10**6), st.dictionaries(keys, values, max_size=8))


@given(st.lists(calls, min_size=1, max_size=30))
@settings(max_examples=300, deadline=None)
def test_remembered_facts_are_the_facts(seen: list[tuple[str, int, dict[str, Any]]]) -> None:
    facts = CallFacts()
    for name, start, args in seen * 2:  # every call met again
        assert facts(name, start, start + 5, args) == comm_call(name, start, start + 5, args)


def _kernel(start_us: int, args: dict[str, Any]) -> RawEvent:
    name = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    return RawEvent(cat="kernel", name=name, ph="X", ts=start_us, dur=3, tid=7, pid=0, args=args)


described = st.fixed_dictionaries(
    {"Collective name": st.sampled_from(["_allgather_base", "allgather"]),
     "In msg nelems": st.sampled_from([4, 8]), "Out msg nelems": st.just(8),
     "dtype": st.sampled_from(["Float", "BFloat16"]),
     "Seq": st.integers(0, 5)},
    optional={"Group size": st.sampled_from([2, 4]),
              "Process Group Name": st.sampled_from(["0", "3"])},
)  # fmt: skip


@given(st.lists(described, min_size=1, max_size=20), st.lists(st.booleans(), min_size=20))
@settings(max_examples=100, deadline=None)
def test_a_described_kernel_is_its_comm_op(
    seen: list[dict[str, Any]], launched: list[bool]
) -> None:
    """Each kernel's CommOp is what `_collective` works out for it alone (nothing remembered),
    and `_comm_op` counts each kernel without a launch and each size unknown once, whether
    its CommOp was remembered or not."""
    normalizer, alone = Normalizer(), Normalizer()
    for each in (normalizer, alone):
        each.set_top({"distributedInfo": {"rank": 0, "world_size": 4}})
    expected, counts = [], Normalizer()
    for start, (args, was) in enumerate(zip(seen, launched, strict=False)):
        facts = comm_call(_kernel(0, {}).name, start * 10_000, start * 10_000 + 3_000, args)
        normalizer.feed([_kernel(start * 10, {**args, "correlation": start})])
        counts._comm_op(facts, [], on_gpu=True, launched=was)
        expected.append(alone._collective(facts, [], on_gpu=True))
    assert [e for e in normalizer.out if isinstance(e, CommOp)] == expected
    unknown = sum(op.message_bytes is None for op in expected)
    assert normalizer.stats.sizes_unknown == unknown == counts.stats.sizes_unknown
    assert counts.stats.no_launch == launched[: len(seen)].count(False)


comm_ops = st.builds(
    CommOp,
    st.sampled_from(COLLECTIVE_TYPES),
    st.integers(0, 10**6),
    st.integers(0, 10**5),
    st.one_of(st.none(), st.integers(0, 10**9)),
    st.one_of(st.none(), st.integers(1, 8)),
    st.booleans(),
)
gpu_ops = st.builds(GpuOp, st.just("compute"), st.integers(0, 10**6), st.integers(0, 10**5))


@given(st.lists(st.one_of(comm_ops, gpu_ops), max_size=40))
@settings(max_examples=200, deadline=None)
def test_a_batch_is_its_events_added_in_turn(events: list[Event]) -> None:
    batched, one_by_one = Accumulator(), Accumulator()
    batched.add_all(events)
    for event in events:
        one_by_one.add(event)
    encode = msgspec.msgpack.encode
    assert encode(batched.result(["f"])) == encode(one_by_one.result(["f"]))
