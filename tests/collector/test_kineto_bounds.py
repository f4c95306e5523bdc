"""What the normaliser holds for later events stays bounded (PENDING_MEMORY kernels waiting,
CALL_MEMORY calls a thread, launches whose kernel came first not kept), and results stay exact
in Kineto's order; out of that order, a kernel resolved without all its calls is counted."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from commscope.collector import normalize
from commscope.collector.normalize import CallIndex, CommCall, Normalizer, from_item
from commscope.model.schema import CommOp
from kineto_builder import collective_args, cpu_op, dist_head, kernel, launch, read, trace

ALLREDUCE_KERNEL = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
GEMM = "ampere_sgemm_128x64_nn"
TID = 11
EARLY = "comm_kernel_unresolved"


def record(ts: float, nelems: int, dur: float = 10) -> dict[str, Any]:
    args = collective_args("allreduce", nelems, nelems, "Float")
    return cpu_op("record_param_comms", ts, dur, TID, args)


def kineto_order(count: int) -> list[dict[str, Any]]:
    """`count` all-reduces in Kineto's CUDA order: every record first (collective i at 100 i
    µs, i + 1 elements), then each kernel (at 10,000 + 100 i) just before its launch
    (at 100 i + 5, inside its record)."""
    cpu = [record(100 * i, i + 1) for i in range(count)]
    device = []
    for i in range(count):
        device.append(kernel(ALLREDUCE_KERNEL, 10_000 + 100 * i, 3, {"correlation": i}))
        device.append(launch(i, 100 * i + 5, TID))
    return cpu + device


def expected(count: int, group: int | None, source: str | None) -> Counter[CommOp]:
    """(i + 1) floats = 4 (i + 1) B each, the group from the world size (or none)."""
    ops = []
    for i in range(count):
        start_ns, size = (10_000 + 100 * i) * 1000, 4 * (i + 1)
        ops.append(
            CommOp("AllReduce", start_ns, 3000, size, group, True, None, None, source, "Float")
        )
    return Counter(ops)


def feed_one_by_one(events: list[dict[str, Any]], head: dict[str, Any]) -> tuple[Normalizer, int]:
    """The normaliser after every event, and the most kernels it held at once."""
    normalizer = Normalizer()
    normalizer.set_top(head)
    most = 0
    for event in events:
        normalizer.feed([from_item(event)])
        most = max(most, normalizer.held[0])
    normalizer.finish()
    return normalizer, most


def test_kernels_past_the_bound_in_kineto_order_are_resolved_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(normalize, "PENDING_MEMORY", 2)
    normalizer, most = feed_one_by_one(kineto_order(6), dist_head(world_size=8))
    # each kernel's launch lies before the thread's latest record (500 µs) but the last's
    # (505 µs): those wait, the bound holds, and every size is the enclosing record's
    comm = Counter(e for e in normalizer.out if isinstance(e, CommOp))
    assert comm == expected(6, 8, "world size")
    assert most == 2
    assert normalizer.stats.dropped == {}


def test_kineto_order_reads_the_same_with_and_without_the_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = trace(kineto_order(5), dist_head(world_size=8))
    unbounded = read(doc)
    monkeypatch.setattr(normalize, "PENDING_MEMORY", 1)
    bounded = read(doc)
    assert Counter(bounded.events) == Counter(unbounded.events)
    assert bounded.stats == unbounded.stats


def test_without_distributed_info_in_the_head_kernels_past_the_bound_are_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # no distributedInfo before the events: the trailer could still bring the groups, so
    # nothing is provably final: past 2 waiting, the oldest is resolved now and counted
    # (kernel 2 resolves kernel 0, kernel 3 kernel 1); no world size: group unknown
    monkeypatch.setattr(normalize, "PENDING_MEMORY", 2)
    normalizer, most = feed_one_by_one(kineto_order(4), {"schemaVersion": 1})
    assert Counter(e for e in normalizer.out if isinstance(e, CommOp)) == expected(4, None, None)
    assert most == 2
    assert normalizer.stats.dropped == {EARLY: 2}


def sizes(parsed: Any) -> list[int | None]:
    return [op.message_bytes for op in sorted(parsed.comm, key=lambda op: op.start_ns)]


def test_a_call_after_a_kernel_it_encloses_was_resolved_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events = [
        record(0, 100),  # encloses launch 1 (at 5 µs)
        cpu_op("aten::mm", 50, 1, TID),  # the thread's horizon passes 5 µs
        kernel(ALLREDUCE_KERNEL, 1000, 3, {"correlation": 1}),
        launch(1, 5, TID),
        kernel(ALLREDUCE_KERNEL, 2000, 3, {"correlation": 2}),  # 2 waiting: kernel 1 resolved
        launch(2, 60, TID),
        record(4, 7),  # out of order: the innermost record of launch 1, too late
    ]
    doc = trace(events, dist_head(world_size=8))
    # without the bound kernel 1 waits for the file's end: 7 floats (28 B) of the late record
    assert sizes(read(doc)) == [28, None]
    monkeypatch.setattr(normalize, "PENDING_MEMORY", 1)
    parsed = read(doc)
    assert sizes(parsed) == [400, None]  # 100 floats
    assert parsed.stats.dropped == {EARLY: 1}


def test_a_thread_keeps_its_later_calls_and_counts_lookups_into_the_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(normalize, "CALL_MEMORY", 4)
    calls = CallIndex()
    for start in (0, 10, 20, 30, 40):  # the 5th call forgets the earlier half: 0-5, 10-15
        calls.add(TID, CommCall("nccl:all_reduce", start, start + 5))
    assert calls.held == 3
    assert calls.enclosing(TID, 22) == [CommCall("nccl:all_reduce", 20, 25)]
    assert calls.missed == 0
    assert calls.enclosing(TID, 12) == []  # held by a forgotten call
    assert calls.missed == 1


def test_a_launch_whose_kernel_came_first_is_not_kept() -> None:
    events = []
    for i in range(50):  # CUDA's order: each kernel just before its launch
        events.append(kernel(GEMM, 100 * i, 3, {"correlation": i}))
        events.append(launch(i, 100 * i - 50, 1))
    normalizer, _ = feed_one_by_one(events, dist_head())
    assert normalizer.held == (0, 0, 0)
    assert normalizer.stats.no_launch == 0


def test_a_graph_launch_is_kept_for_its_later_kernels() -> None:
    events = [
        kernel(GEMM, 5, 1, {"correlation": 9}),
        launch(9, 1, TID, name="cudaGraphLaunch"),
        kernel(ALLREDUCE_KERNEL, 10, 2, {"correlation": 9}),
    ]
    parsed = read(trace(events, dist_head(world_size=2)))
    assert [op.start_ns for op in parsed.comm] == [10000]
    assert parsed.stats.no_launch == 0


def test_a_top_level_key_given_twice_the_first_stands() -> None:
    # the trailer's distributedInfo (a second one) does not add groups to the head's
    tail = {"world_size": 4, "pg_config": [{"pg_name": "0", "pg_size": 4}]}
    doc = trace([], dist_head(world_size=2))[:-1] + b', "distributedInfo": '
    parsed = read(doc + json.dumps(tail).encode() + b"}")
    assert (parsed.meta.world_size, parsed.meta.pg_sizes) == (2, {})
