"""CUDA graph launches and the kernels they replay, as the readers attribute them
(`collector.graphs`): hand-made Kineto traces and Nsight Systems exports whose every figure
is worked by hand (Kineto µs in, ns out), and a brute-force oracle for the attribution."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import msgspec
import pytest
from commscope.collector import graphs
from commscope.collector.graphs import GraphJoin, graph_id, is_graph_launch
from commscope.collector.nsysdb import Export as NsysExport
from commscope.model.int64s import unpack
from commscope.model.wire import MAX_GRAPHS, Event, GraphRow, GraphTally
from graphs_builder import ELEMENTWISE, GEMM, NCCL, WORKED, WORKED_TALLY, call, graphed
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import kernel, read, span, trace
from nsys_builder import Export
from tools import needs_shared, shared_traces


def test_graph_kernels_join_their_launch_by_correlation_and_graph_id() -> None:
    assert read(trace(WORKED)).graphs == [WORKED_TALLY]


def test_the_file_order_does_not_change_the_attribution() -> None:
    shuffled = list(WORKED)
    random.Random(3).shuffle(shuffled)
    assert read(trace(shuffled)).graphs == [WORKED_TALLY]


def test_a_graphs_kernels_are_no_launch_delay_samples() -> None:
    (part,) = read(trace(WORKED)).launches
    # only corr 1's cudaLaunchKernel (3 µs) and its GEMM (delay 5 µs): no graph launch is a
    # kernel's launch call, and no graph kernel a queue-delay sample
    assert (part.calls, part.call_ns, part.kernels, part.shorter) == (1, 3_000, 1, 0)
    assert list(unpack(part.delays_ns)) == [5_000]


def test_graph_kernels_still_count_as_compute_and_communication() -> None:
    parsed = read(trace(WORKED))
    assert len(parsed.comm) == 2  # the NCCL kernels of both replays
    assert sum(n.count for n in parsed.names) == 9  # every kernel, by name


def test_a_trace_without_graphs_gives_no_graph_tally() -> None:
    events = [call("cudaLaunchKernel", 1, 10, 3), kernel(GEMM, 15, 4, {"correlation": 1})]
    assert read(trace(events)).graphs == []


def copy(cat: str, ts: float, correlation: int, graph: int | None) -> dict:
    """A memcpy or memset as Kineto writes it from CUDA 12 (`graph id` 0 outside graphs;
    None: before CUDA 12, no such args)."""
    args: dict[str, int] = {"correlation": correlation}
    if graph is not None:
        args |= {"graph id": graph, "graph node id": graph and 77}
    return span(cat, "Memcpy DtoD (Device -> Device)", ts, 1, 7, args=args)


def test_a_launch_whose_recorded_nodes_are_copies_is_not_empty() -> None:
    events = [
        copy("gpu_memcpy", 30, 2, 5),  # graph 5's copy node first in the file, then its launch
        call("cudaGraphLaunch", 2, 20, 2),
        copy("gpu_memset", 31, 2, 5),
        call("cudaGraphLaunch", 3, 40, 1),  # a memcpy node and a kernel
        copy("gpu_memcpy", 45, 3, 6),
        graphed(GEMM, 46, 4, 3, 6),
        call("cudaMemcpyAsync", 4, 60, 1),  # an ordinary copy: no graph's
        copy("gpu_memcpy", 62, 4, 0),
        copy("gpu_memset", 70, 8, 9),  # a copy node of graph 9, its launch not in the trace
        call("cudaGraphLaunch", 5, 80, 3),  # its replay not recorded at all
    ]
    (tally,) = read(trace(events)).graphs
    assert tally == GraphTally(
        launches=3,
        call_ns=6_000,
        empty=1,  # corr 5 only: corr 2 replayed copies
        unlaunched=0,  # graph 9's memset is no kernel
        rows=[
            GraphRow(5, launches=1),
            GraphRow(6, launches=1, kernels=1, kernel_ns=4_000),
            GraphRow(None, launches=1),
        ],
    )


def test_kernels_of_a_normal_launch_that_comes_later_are_no_graphs() -> None:
    events = [kernel(GEMM, 15, 4, {"correlation": 1}), call("cudaLaunchKernel", 1, 10, 3),
              call("cudaGraphLaunch", 2, 20, 1)]  # fmt: skip
    (tally,) = read(trace(events)).graphs
    assert tally == GraphTally(launches=1, call_ns=1_000, empty=1,
                               rows=[GraphRow(None, launches=1)])  # fmt: skip


@pytest.mark.parametrize(
    ("name", "launches_a_graph"),
    [
        ("cudaGraphLaunch", True),
        ("cudaGraphLaunch_v10000", True),  # Nsight Systems' name
        ("cudaGraphLaunch_ptsz", True),
        ("cuGraphLaunch", True),
        ("hipGraphLaunch", True),
        ("cudaLaunchKernel", False),
        ("cudaGraphInstantiate", False),
        ("cudaStreamBeginCapture", False),
    ],
)
def test_graph_launch_calls_by_name(name: str, launches_a_graph: bool) -> None:
    assert is_graph_launch(name) is launches_a_graph


@pytest.mark.parametrize(
    ("value", "found"), [(7, 7), (0, None), (-1, None), ("7", None), (True, None), (2**63, None)]
)
def test_graph_ids(value: object, found: int | None) -> None:
    assert graph_id(value) == found


def test_graphs_beyond_the_bound_are_summed_in_the_row_without_an_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(graphs, "GRAPHS", 2)
    join = GraphJoin()
    for graph in (5, 6, 7, 8):  # one launch of one 1 ns kernel each
        join.launch(graph, 1)
        join.kernel(graph, 1, False, graph)
    tally = join.finish()
    assert tally is not None
    assert tally.rows == [GraphRow(5, 1, 1, 1), GraphRow(6, 1, 1, 1), GraphRow(None, 2, 2, 2)]


def test_launches_past_the_memory_bound_are_closed_as_they_stand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(graphs, "WAITING", 2)
    join = GraphJoin()
    for corr in range(5):  # launches 0-1 closed when launch 4 comes: their kernels are late
        join.launch(corr, 1)
    for corr in range(5):
        join.kernel(corr, 10, False, 3)
    tally = join.finish()
    assert tally is not None
    # launches 0 and 1 were closed empty; their kernels count by graph id alone
    assert (tally.launches, tally.empty, tally.unlaunched) == (5, 2, 2)
    assert tally.rows == [GraphRow(3, 3, 5, 50), GraphRow(None, 2, 0, 0)]


# ---------------------------------------------------------------- the oracle

# A file of graph launches (some without kernels), kernel launches, kernels and copies: each
# kernel of correlation c belongs to a graph launch, a kernel launch, or none in the trace; a
# graph launch's kernels and memcpy/memset nodes share one graph id (or none), and a launch
# with either is not empty. Any order of the events gives what the brute force gives.
_Case = tuple[list[dict], GraphTally | None]


@st.composite
def cases(draw: st.DrawFn) -> _Case:
    events: list[dict] = []
    rows: dict[int | None, list[int]] = {}
    launches = empty = unlaunched = call_ns = 0
    for corr in range(1, draw(st.integers(1, 12)) + 1):
        kind = draw(st.sampled_from(["graph", "kernel", "none"]))
        graph = draw(st.sampled_from([None, 0] if kind == "kernel" else [None, 0, 4, 5]))
        count = draw(st.integers(0 if kind == "graph" else 1, 1 if kind == "kernel" else 4))
        durations = [draw(st.integers(1, 9)) for _ in range(count)]
        comm = [draw(st.booleans()) for _ in range(count)]
        events += [graphed(NCCL if c else GEMM, 100 * corr + 10 * i, d, corr, graph)
                   for i, (d, c) in enumerate(zip(durations, comm, strict=True))]  # fmt: skip
        copies = draw(st.integers(0, 0 if kind == "kernel" else 2))
        events += [copy("gpu_memcpy", 100 * corr + 50 + i, corr, graph) for i in range(copies)]
        if kind == "kernel":
            events.append(call("cudaLaunchKernel", corr, 100 * corr, 1))
            continue
        if kind == "none" and not graph:
            continue
        if kind == "graph":
            events.append(call("cudaGraphLaunch", corr, 100 * corr, 2))
            launches, call_ns = launches + 1, call_ns + 2_000
            empty += count == 0 and copies == 0
            recorded = count or copies
        else:
            unlaunched, recorded = unlaunched + count, count
            if not count:
                continue  # copies of no launch in the trace: nothing
        row = rows.setdefault((graph or None) if recorded else None, [0, 0, 0, 0, 0])
        figures = (kind == "graph", count, sum(durations) * 1000, sum(comm),
                   sum(d for d, c in zip(durations, comm, strict=True) if c) * 1000)  # fmt: skip
        for i, value in enumerate(figures):
            row[i] += value
    if not launches and not rows:
        return events, None
    keys = [*sorted(g for g in rows if g is not None), *([None] if None in rows else [])]
    expected = GraphTally(launches=launches, call_ns=call_ns, empty=empty, unlaunched=unlaunched,
                          rows=[GraphRow(g, *rows[g]) for g in keys])  # fmt: skip
    return events, expected


@settings(max_examples=60, deadline=None)
@given(cases(), st.integers(0, 2**32))
def test_attribution_by_correlation_agrees_with_brute_force(case: _Case, seed: int) -> None:
    events, expected = case
    random.Random(seed).shuffle(events)
    assert read(trace(events)).graphs == ([] if expected is None else [expected])


# ---------------------------------------------------------------- Nsight Systems

PID, TID = 4242, 1


def test_nsys_graph_kernels_join_their_launch_by_correlation_and_graph_id(tmp_path: Path) -> None:
    export = Export()
    export.launched(PID, TID, 10, corr=1, kernel=(0, 15, 19, GEMM))  # a kernel launch
    export.call(PID, TID, (20, 26), corr=2, name="cudaGraphLaunch_v10000")
    for start, end, name in ((30, 35, GEMM), (36, 46, NCCL), (47, 49, ELEMENTWISE)):
        export.kernel(PID, 0, start, end, name, corr=2, graph=7)
    export.call(PID, TID, (100, 105), corr=4, name="cudaGraphLaunch_v10000")  # empty
    export.kernel(PID, 0, 120, 128, GEMM, corr=5, graph=9)  # its launch not in the export
    export.call(PID, TID, (130, 132), corr=6, name="cuGraphLaunch")
    export.kernel(PID, 0, 140, 143, GEMM, corr=6)  # graphId NULL
    found = nsys_tallies(export.write(tmp_path / "graphs.sqlite", seed=5))
    assert found == [
        GraphTally(
            launches=3,
            call_ns=13,  # 6 + 5 + 2 ns
            empty=1,
            unlaunched=1,
            rows=[
                GraphRow(7, launches=1, kernels=3, kernel_ns=17, comm_kernels=1, comm_ns=10),
                GraphRow(9, launches=0, kernels=1, kernel_ns=8),
                GraphRow(None, launches=2, kernels=1, kernel_ns=3),
            ],
        )
    ]


def nsys_tallies(path: Path) -> list[GraphTally]:
    db = NsysExport(path, path.name)
    try:
        return [e for _, batch in db.read() for e in batch if isinstance(e, GraphTally)]
    finally:
        db.close()


def test_nsys_attributes_the_worked_trace_as_kineto_does(tmp_path: Path) -> None:
    """`WORKED` written as an Nsight Systems export (µs to ns; graph id 0 as NULL): the same
    tally, launch by launch and graph by graph."""
    export = Export()
    for event in WORKED:
        start = round(event["ts"] * 1000)
        span_ns, corr = (start, start + round(event["dur"] * 1000)), event["args"]["correlation"]
        if event["cat"] == "kernel":
            graph = event["args"].get("graph id") or None
            export.kernel(PID, 0, *span_ns, event["name"], corr=corr, graph=graph)
        else:
            export.call(PID, TID, span_ns, corr=corr, name=event["name"])
    assert nsys_tallies(export.write(tmp_path / "worked.sqlite", seed=2)) == [WORKED_TALLY]


def test_nsys_copy_nodes_keep_their_launch_from_being_empty(tmp_path: Path) -> None:
    export = Export()
    export.launched(PID, TID, 10, corr=1, kernel=(0, 15, 19, GEMM))  # a kernel launch
    export.call(PID, TID, (20, 22), corr=2, name="cudaGraphLaunch_v10000")  # copies only
    export.copy("memcpy", PID, 0, 30, 31, corr=2)
    export.copy("memset", PID, 0, 32, 33, corr=2)
    export.call(PID, TID, (40, 41), corr=3, name="cudaGraphLaunch_v10000")  # nothing recorded
    export.call(PID, TID, (50, 51), corr=4, name="cudaMemcpyAsync_v3020")  # an ordinary copy
    export.copy("memcpy", PID, 0, 55, 56, corr=4)
    tally = GraphTally(launches=2, call_ns=3, empty=1, rows=[GraphRow(None, launches=2)])
    assert nsys_tallies(export.write(tmp_path / "copies.sqlite", seed=4)) == [tally]


@needs_shared("nsys", "h100x2_alltoall.sqlite")
def test_the_real_export_has_the_graph_columns_the_builder_writes_and_no_graph() -> None:
    path = shared_traces("nsys", "h100x2_alltoall.sqlite")
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        kernels = {row[1] for row in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")}
        runtime = {row[1] for row in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")}
        (graphed,) = db.execute("SELECT count(graphId) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    assert {"correlationId", "globalPid", "graphId", "graphNodeId"} <= kernels
    assert {"correlationId", "globalTid", "nameId"} <= runtime  # names in StringIds
    assert graphed == 0  # the column is NULL on every kernel: no graph replayed
    assert nsys_tallies(path) == []


@pytest.mark.parametrize("codec", [msgspec.msgpack, msgspec.json])
def test_a_tally_round_trips_as_an_event(codec: Any) -> None:
    decoded = codec.Decoder(list[Event]).decode(codec.encode([WORKED_TALLY]))
    assert decoded == [WORKED_TALLY]


def test_a_tally_with_a_row_beyond_the_bound_is_refused() -> None:
    rows = [GraphRow(g) for g in range(1, MAX_GRAPHS + 3)]
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(msgspec.msgpack.encode(GraphTally(rows=rows)), type=GraphTally)
