"""Properties of the reader (hypothesis): chunking, event order, encoding and PyTorch 1.8-1.10's
layout (string tids, capitalised categories) change nothing."""

from __future__ import annotations

import functools
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import msgspec
from commscope.collector.normalize import LAUNCH_MEMORY, string_tid
from commscope.model.schema import CommOp, CpuSpan, Event, GpuOp, Step
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import (
    ChunkedReader,
    Parsed,
    annotation,
    collective_args,
    cpu_op,
    dims_args,
    dist_head,
    kernel,
    launch,
    legacy_event,
    read,
    span,
    trace,
    union,
)
from msgspec.structs import replace

PROPERTY = settings(deadline=None, max_examples=60, database=None)

DTYPE_BYTES = {"Float": 4, "BFloat16": 2, "Long": 8}
# Collective name -> (kernel name, type from the name, type from the kernel name)
COLLECTIVES = {
    "allreduce": ("ncclKernel_AllReduce_RING_LL_Sum_float(x)", "AllReduce", "AllReduce"),
    "_allgather_base": ("ncclDevKernel_AllGather_RING_LL(x)", "AllGather", "AllGather"),
    "broadcast": ("ncclKernel_Broadcast_RING_LL_Sum_int8_t(x)", "Broadcast", "Broadcast"),
    "all_to_all": ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(x)", "AllToAll", "SendRecv"),
}
# how a collective's size can be found: kernel args, record_param_comms, nccl: annotation,
# nowhere (launch inside a plain op), nowhere (launch absent)
HOW = ("kernel args", "record", "annotation", "plain op", "no launch")
CALL_TIDS = (11, 12)


@dataclass
class Generated:
    """A generated trace in Kineto's layout, and the CommOps it must give."""

    head: dict[str, Any]
    cpu: list[dict[str, Any]] = field(default_factory=list)
    device: list[dict[str, Any]] = field(default_factory=list)
    expected_comm: list[CommOp] = field(default_factory=list)

    def doc(self, cpu: list[dict] | None = None, device: list[dict] | None = None) -> bytes:
        # the trailer carries no metadata field: see test_jsonstream's trailer bugs
        tail = {"traceName": "gen.json", "displayTimeUnit": "ms"}
        return trace((cpu or self.cpu) + (device or self.device), self.head, tail)


@st.composite
def collectives(draw: st.DrawFn, out: Generated, world: int) -> None:
    """Append up to 6 collectives, each in its own 100 µs slot, with the CommOp they give."""
    for i in range(draw(st.integers(0, 6))):
        name = draw(st.sampled_from(sorted(COLLECTIVES)))
        kernel_name, by_name, by_kernel = COLLECTIVES[name]
        how = draw(st.sampled_from(HOW))
        tid = draw(st.sampled_from(CALL_TIDS))
        nelems = draw(st.integers(1, 10**6))
        dtype = draw(st.sampled_from(sorted(DTYPE_BYTES)))
        group = draw(st.sampled_from([None, 2, world]))
        extra: dict[str, Any] = {} if group is None else {"Group size": group}
        splits = draw(SPLITS) if name == "all_to_all" else ((), ())
        if any(splits):
            extra["In split size"], extra["Out split size"] = map(split_text, splits)
        args = collective_args(name, nelems, nelems, dtype, **extra)
        slot, gpu_ts, gpu_dur = 100.0 * i, 10_000.0 + 100 * i, draw(st.integers(1, 90)) / 8
        correlation = 1000 + i
        kernel_args: dict[str, Any] = {"correlation": correlation}
        size: int | None = nelems * DTYPE_BYTES[dtype]
        label, kind = by_name, dtype
        if how == "kernel args":
            kernel_args.update(args)
        elif how == "record":
            out.cpu.append(cpu_op("c10d::op_", slot, 40, tid))
            out.cpu.append(cpu_op("record_param_comms", slot + 1, 38, tid, args))
        elif how == "annotation":
            out.cpu.append(cpu_op("record_param_comms", slot + 1, 38, tid))
            dims = dims_args([[nelems]], ["float"])
            out.cpu.append(annotation("nccl:all_reduce", slot + 2, 30, tid, dims))
            label, kernel_name, size, group = (
                "AllReduce",
                COLLECTIVES["allreduce"][0],
                nelems * 4,
                None,
            )
            kind, splits = "Float", ((), ())
        else:
            # the kernel name alone: a SendRecv kernel may run any collective
            label, size, group = "Other" if by_kernel == "SendRecv" else by_kernel, None, None
            kind, splits = None, ((), ())
            if how == "plain op":
                out.cpu.append(cpu_op("aten::copy_", slot + 1, 38, tid))
        if how != "no launch":
            out.cpu.append(launch(correlation, slot + 5, tid))
        out.device.append(kernel(kernel_name, gpu_ts, gpu_dur, kernel_args))
        start, dur = round(gpu_ts * 1000), round(gpu_dur * 1000)
        n, source = expected_group(group, label, how, world)
        kept = splits[0][:30], splits[1][:30]  # Kineto writes the first 30
        op = CommOp(label, start, dur, size, n, True, group_source=source, dtype=kind)
        out.expected_comm.append(replace(op, in_splits=kept[0], out_splits=kept[1]))


# an all-to-all's split sizes (sent, received), each none or a list, maybe past Kineto's 30
_SPLIT = st.integers(0, 10**6)
_SPLIT_LIST = st.lists(_SPLIT, max_size=4) | st.lists(_SPLIT, min_size=29, max_size=40)
SPLITS = st.tuples(_SPLIT_LIST.map(tuple), _SPLIT_LIST.map(tuple))


def split_text(splits: tuple[int, ...]) -> str:
    """A split list as Kineto writes it: past 30 entries, the first 30 and `...`."""
    shown = ", ".join(map(str, splits[:30]))
    return f"[{shown}, ...]" if len(splits) > 30 else f"[{shown}]"


def expected_group(group: int | None, label: str, how: str, world: int) -> tuple[int, str]:
    """The `Group size` arg, else (an all-gather whose args say In = Out nelems) the shapes'
    n = 1, else the world."""
    if group is not None:
        return group, "Group size arg"
    if label == "AllGather" and how in ("kernel args", "record"):
        return 1, "tensor shapes"
    return world, "world size"


@st.composite
def generated_traces(draw: st.DrawFn) -> Generated:
    world = draw(st.sampled_from([2, 4, 8]))
    head = dist_head(rank=draw(st.integers(0, world - 1)), world_size=world, gpu="NVIDIA H100")
    head["baseTimeNanoseconds"] = 1767189312000000000  # in the head, as the B200 trace has it
    out = Generated(head)
    draw(collectives(out, world))
    quarter_us = st.integers(0, 4000).map(lambda q: q / 4)
    for _ in range(draw(st.integers(0, 8))):  # plain ops on the training thread, may overlap
        out.cpu.append(cpu_op("aten::op", draw(quarter_us), draw(quarter_us), 1))
    for step in range(draw(st.integers(0, 2))):
        out.cpu.append(annotation(f"ProfilerStep#{step}", 1000.0 * step, 999.5, 1))
    if draw(st.booleans()):
        dims = dims_args([[draw(st.integers(1, 999))]], ["float"])
        out.cpu.append(annotation("gloo:all_reduce", 5.5, 2, 21, dims))
        out.expected_comm.append(
            CommOp(
                "AllReduce",
                5500,
                2000,
                dims["Input Dims"][0][0] * 4,
                world,
                False,
                group_source="world size",
                dtype="Float",
            )
        )
    for _ in range(draw(st.integers(0, 6))):
        cat = draw(st.sampled_from(["kernel", "gpu_memcpy", "gpu_memset"]))
        out.device.append(span(cat, "gemm_or_copy", draw(quarter_us), draw(quarter_us), 7))
    if draw(st.booleans()):  # a dropped event
        out.device.append({"ph": "X", "cat": "kernel", "name": "k", "ts": 1})
    return out


def without_cpu_spans(parsed: Parsed) -> Counter[Event]:
    return Counter(e for e in parsed.events if not isinstance(e, CpuSpan))


def cpu_unions(parsed: Parsed) -> dict[tuple[int, bool], list[tuple[int, int]]]:
    keys = {(s.tid, s.comm_call) for s in parsed.cpu}
    return {
        key: union((s.start_ns, s.end_ns) for s in parsed.cpu if (s.tid, s.comm_call) == key)
        for key in keys
    }


# ------------------------------------------------------------------ (a) chunking


@PROPERTY
@given(generated_traces(), st.lists(st.integers(1, 97), min_size=1, max_size=8))
def test_any_chunking_gives_the_same_events_meta_and_stats(
    gen: Generated, sizes: list[int]
) -> None:
    doc = gen.doc()
    whole = read(doc)
    chunked = read(doc, ChunkedReader(doc, sizes))  # type: ignore[arg-type]
    assert chunked.events == whole.events
    assert chunked.meta == whole.meta
    assert chunked.stats == whole.stats


# ------------------------------------------------------------------ (b), (c) order


@PROPERTY
@given(generated_traces(), st.randoms(use_true_random=False))
def test_shuffling_within_the_cpu_and_device_sections_changes_nothing(
    gen: Generated, rng: random.Random
) -> None:
    cpu, device = gen.cpu[:], gen.device[:]
    rng.shuffle(cpu)
    rng.shuffle(device)
    before, after = read(gen.doc()), read(gen.doc(cpu, device))
    assert without_cpu_spans(after) == without_cpu_spans(before)
    # CpuSpans: the same union per thread; the spans themselves may split when a child op
    # comes before its parent (see test_a_child_listed_before_its_parent_still_merges...)
    assert cpu_unions(after) == cpu_unions(before)
    assert (after.meta, after.stats) == (before.meta, before.stats)


@PROPERTY
@given(generated_traces(), st.randoms(use_true_random=False))
def test_shuffling_all_events_gives_the_expected_comm_ops(
    gen: Generated, rng: random.Random
) -> None:
    events = gen.cpu + gen.device
    assert sum(e["cat"] == "cuda_runtime" for e in events) < LAUNCH_MEMORY
    rng.shuffle(events)
    parsed = read(trace(events, gen.head))
    assert Counter(parsed.comm) == Counter(gen.expected_comm)
    assert parsed.stats.sizes_unknown == sum(op.message_bytes is None for op in gen.expected_comm)


# ------------------------------------------------------------------ PyTorch 1.8-1.10 layout


@PROPERTY
@given(generated_traces())
def test_the_legacy_layout_with_numbers_for_threads_gives_the_same_events(gen: Generated) -> None:
    # `"tid": "11"`, `"stream 7"`, `Operator`, `Kernel`, ...: each thread is its number
    now, then = read(gen.doc()), read(legacy_doc(gen, "{}"))
    assert then.events == now.events
    assert same_but_bytes(then, now)


@PROPERTY
@given(generated_traces())
def test_the_legacy_layout_with_named_threads_relabels_them_one_to_one(gen: Generated) -> None:
    # `"tid": "thread 11"`: thread 11's events, steps and calls all under one id of its own
    now, then = read(gen.doc()), read(legacy_doc(gen, "thread {}"))
    named = {tid: string_tid(f"thread {tid}") for tid in range(100)}
    assert len(set(named.values())) == len(named)
    assert Counter(then.events) == Counter(map(functools.partial(relabel, named), now.events))
    assert same_but_bytes(then, now)


def legacy_doc(gen: Generated, thread: str) -> bytes:
    return gen.doc(*([legacy_event(e, thread) for e in part] for part in (gen.cpu, gen.device)))


def same_but_bytes(one: Parsed, other: Parsed) -> bool:
    """The same meta, GPU flag and stats but for the bytes read (the layouts' lengths differ)."""
    stats = msgspec.structs.replace(one.stats, bytes_read=other.stats.bytes_read)
    return (one.meta, stats, one.has_gpu) == (other.meta, other.stats, other.has_gpu)


def relabel(tids: dict[int, int], event: Event) -> Event:
    if isinstance(event, Step | CpuSpan):
        return msgspec.structs.replace(event, tid=tids[event.tid])
    return event


# ------------------------------------------------------------------ (d) encoding

INT64 = st.integers(-(2**63), 2**63 - 1)
EVENTS = st.one_of(
    st.builds(GpuOp, st.sampled_from(["compute", "memcpy", "memset"]), INT64, INT64),
    st.builds(
        CommOp,
        st.sampled_from(["AllReduce", "AllGather", "SendRecv", "Other"]),
        INT64,
        INT64,
        st.none() | INT64,
        st.none() | st.integers(1, 2**20),
        st.booleans(),
        st.none() | st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=8),
        st.none() | INT64,
        dtype=st.none() | st.sampled_from(["Float", "Long", "float8_e4m3fn"]),
        in_splits=st.lists(st.integers(0, 2**62 - 1), max_size=5).map(tuple),
        out_splits=st.lists(st.integers(0, 2**62 - 1), max_size=5).map(tuple),
    ),
    st.builds(Step, INT64, INT64, INT64, INT64),
    st.builds(CpuSpan, INT64, INT64, INT64, st.booleans()),
)


@settings(deadline=None, max_examples=200, database=None)
@given(EVENTS)
def test_msgpack_round_trips_every_event_type(event: Event) -> None:
    decoded = msgspec.msgpack.Decoder(Event).decode(msgspec.msgpack.encode(event))
    assert type(decoded) is type(event)
    assert decoded == event


@settings(deadline=None, max_examples=50, database=None)
@given(st.lists(EVENTS, max_size=20))
def test_msgpack_round_trips_a_batch(batch: list[Event]) -> None:
    assert msgspec.msgpack.Decoder(list[Event]).decode(msgspec.msgpack.encode(batch)) == batch
