"""The timeline writer (`exporters.timeline`): events shifted exactly, marks on the calls and on
a track of their own, ids and names per rank, what the reader cannot read left out; the
earliest time written, and a document moved to an earlier origin line by line the one written
from it."""

from __future__ import annotations

import json
from typing import Any

from commscope.exporters.timeline import (
    CATEGORY,
    TRACK,
    Mark,
    Placed,
    Timeline,
    moved,
    origin,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

KERNEL = {"ph": "X", "cat": "kernel", "name": "ncclKernel", "pid": 0, "tid": 7,
          "ts": 100.5, "dur": 50, "args": {"correlation": 3}}  # fmt: skip
MARK = Mark(instance="w:0", collective="AllReduce", group="0", position=1,
            waiting=(100_500, 120_000), transfer=(120_000, 150_500), last=1,
            members=2)  # fmt: skip


def document(timeline: Timeline, *parts: bytes) -> dict[str, Any]:
    body = timeline.head({"k": 1}) + b"".join(parts) + timeline.tail({"after": 2})
    loaded: dict[str, Any] = json.loads(body)
    return loaded


def test_an_event_is_shifted_to_the_nanosecond_and_keeps_its_keys() -> None:
    """ts 100.5 µs + shift -2001 ns = 98.499 µs; dur 50 µs stays 50 (whole µs as an int)."""
    timeline = Timeline(origin_ns=0)
    place = Placed(rank=3, shift_ns=-2001, scope=1)
    doc = document(timeline, timeline.events([KERNEL], place))
    (event,) = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert event == {**KERNEL, "pid": 3, "tid": 1, "ts": 98.499, "dur": 50}
    assert (doc["displayTimeUnit"], doc["otherData"], doc["after"]) == ("ns", {"k": 1}, 2)


def test_a_marked_call_carries_its_instance_and_its_waiting_and_transfer_slices() -> None:
    """The call [100.5, 150.5) µs of rank 0 waits [100.5, 120) for rank 1, transfers
    [120, 150.5): args on the call, two slices on the track beside its stream."""
    timeline = Timeline(origin_ns=0)
    place = Placed(rank=0, shift_ns=1000, scope=1, marks={(100_500, 50_000): MARK})
    doc = document(timeline, timeline.events([KERNEL], place))
    events = doc["traceEvents"]
    call, waiting, transfer = (e for e in events if e["ph"] == "X")
    assert call["args"] == {"correlation": 3, CATEGORY: {
        "instance": "w:0", "collective": "AllReduce", "process_group": "0", "position": 1,
        "members": 2, "waiting_us": 19.5, "transfer_us": 30.5, "last_arrival_rank": 1}}  # fmt: skip
    assert (call["ts"], call["dur"]) == (101.5, 50)
    assert (waiting["name"], waiting["ts"], waiting["dur"]) == ("waiting", 101.5, 19.5)
    assert (transfer["name"], transfer["ts"], transfer["dur"]) == ("transfer", 121, 30.5)
    assert waiting["tid"] == transfer["tid"] != call["tid"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names[waiting["tid"]] == f"{TRACK} (pid 0 / tid 7)"
    assert place.marks == {}  # taken once


def test_the_last_arriver_gets_an_instant_and_no_empty_waiting() -> None:
    timeline = Timeline(origin_ns=0)
    last = Mark("w:0", "AllReduce", "0", 1, (120_000, 120_000), (120_000, 170_000), 0, 2)
    place = Placed(rank=0, shift_ns=0, scope=1, marks={(120_000, 50_000): last})
    kernel = {**KERNEL, "ts": 120, "dur": 50}
    events = document(timeline, timeline.events([kernel], place))["traceEvents"]
    marks = [(e["ph"], e["name"], e["ts"]) for e in events if e.get("cat") == CATEGORY]
    assert marks == [("X", "transfer", 120), ("i", "last to arrive", 120)]


def test_threads_are_numbered_over_the_timeline_and_named_from_the_trace() -> None:
    """The same (pid, tid) on two ranks are two threads; names keep the trace's own."""
    timeline = Timeline(origin_ns=0)
    names = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
        {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}},
    ]
    parts = [timeline.events([*names, KERNEL], Placed(r, 0, r + 1)) for r in (0, 1)]
    events = document(timeline, *parts)["traceEvents"]
    calls = [(e["pid"], e["tid"]) for e in events if e["ph"] == "X"]
    assert calls == [(0, 1), (1, 2)]
    named = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
    assert named == {(0, 1): "GPU 0 / stream 7", (1, 2): "GPU 0 / stream 7"}


def test_a_rank_is_a_process_with_its_labels() -> None:
    timeline = Timeline(origin_ns=0)
    labels = {"labels": "clock offset 5.000 µs", "waited_for": True}
    events = document(timeline, timeline.process(2, "rank 2", labels))["traceEvents"]
    assert [(e["name"], e["pid"], e["args"]) for e in events] == [
        ("process_name", 2, {"name": "rank 2"}),
        ("process_sort_index", 2, {"sort_index": 2}),
        ("process_labels", 2, labels),
    ]


def test_flow_ids_are_made_unique_per_file() -> None:
    flow = {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 3, "pid": 0, "tid": 1, "ts": 1}
    timeline = Timeline(origin_ns=0)
    parts = [timeline.events([flow], Placed(0, 0, scope)) for scope in (1, 2)]
    events = document(timeline, *parts)["traceEvents"]
    assert [e["id"] for e in events if e["ph"] == "s"] == [(1 << 32) + 3, (2 << 32) + 3]


def test_what_the_reader_cannot_read_is_left_out_and_counted() -> None:
    timeline = Timeline(origin_ns=0)
    items = [7, {"name": "x", "ts": 1}, {"ph": "X", "ts": 1, "dur": 1},
             {"ph": "X", "name": "x", "ts": "1", "dur": 1},
             {"ph": "X", "name": "x", "ts": 1, "dur": -1}, KERNEL]  # fmt: skip
    events = document(timeline, timeline.events(items, Placed(0, 0, 1)))["traceEvents"]
    assert len([e for e in events if e["ph"] == "X"]) == 1
    assert timeline.dropped == {"not an object": 1, "no phase": 1, "no name": 1,
                                "time unreadable": 1, "duration unreadable": 1}  # fmt: skip


def test_the_origin_is_the_earliest_start_down_to_a_second() -> None:
    assert origin([3_500_000_000, 2_700_000_001]) == 2_000_000_000
    assert origin([]) == 0


@given(st.integers(min_value=-(2**50), max_value=2**50), st.integers(-(10**12), 10**12))
def test_a_shifted_time_reads_back_to_the_nanosecond(ts_ns: int, shift: int) -> None:
    """What the reader makes of a written ts (round(ts x 1000)) is the shifted ns, exactly."""
    timeline = Timeline(origin_ns=0)
    event = {**KERNEL, "ts": ts_ns / 1000}
    wrote = json.loads(b"[" + timeline.events([event], Placed(0, shift, 1)) + b"]")[0]
    assert round(wrote["ts"] * 1000) == round(ts_ns / 1000 * 1000) + shift


def test_the_earliest_time_written_before_the_origin_is_kept() -> None:
    """100.5 µs - 101 µs = -0.5 µs; a later event does not raise it; none before: 0."""
    timeline = Timeline(origin_ns=0)
    timeline.events([KERNEL, {**KERNEL, "ts": 300}], Placed(0, -101_000, 1))
    assert timeline.earliest_ns == -500
    assert Timeline(origin_ns=0).earliest_ns == 0


def written(origin_ns: int, shift_ns: int, items: list[Any]) -> bytes:
    """A whole document as `service.timeline` writes it: head, a rank, its events, tail."""
    timeline = Timeline(origin_ns)
    marks = {(100_500, 50_000): MARK}
    parts = [timeline.head({"origin_ns": origin_ns}), timeline.process(0, "rank 0", {"labels": ""}),
             timeline.events(items, Placed(0, shift_ns, 1, marks))]  # fmt: skip
    return b"".join(parts) + timeline.tail({"commscopeDropped": timeline.dropped})


_SCALAR = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=6)
_VALUES = st.recursive(
    _SCALAR | st.floats(allow_nan=False),
    lambda inner: st.dictionaries(st.text(max_size=4), inner, max_size=2),
    max_leaves=4,
)
_EVENTS = st.lists(
    st.fixed_dictionaries(
        {"ph": st.sampled_from(["X", "i", "s", "f", "M"]), "name": st.text(max_size=8),
         "ts": st.integers(-(2**40), 2**40) | st.integers(-(2**49), 2**49).map(lambda n: n / 1000),
         "dur": st.integers(0, 10**6), "pid": st.integers(0, 3), "tid": st.text(max_size=3)},
        optional={"args": st.dictionaries(st.text(max_size=5), _VALUES, max_size=3),
                  "id": st.integers(0, 2**32)},
    ),
    max_size=6,
)  # fmt: skip


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])  # no timing: shared CPUs
@given(_EVENTS, st.integers(-(10**12), 10**12), st.integers(1, 10**4))
def test_a_document_moved_line_by_line_is_the_one_written_from_the_earlier_origin(
    items: list[Any], shift_ns: int, seconds: int
) -> None:
    """Any events (a marked call among them, odd args and text): moving every line of the one
    written from origin O by `seconds` gives, byte for byte, the one written from O - seconds
    (its head apart: the writer writes it anew)."""
    later = seconds * 10**9
    items = [KERNEL, *items]
    first = written(0, shift_ns, items).splitlines(keepends=True)
    lower = written(-later, shift_ns + later, items).splitlines(keepends=True)
    assert [moved(line, later) for line in first[1:]] == lower[1:]


def test_an_event_without_pid_or_tid_is_on_a_thread_of_its_own() -> None:
    timeline = Timeline(origin_ns=0)
    meta = timeline.process(0, "rank 0", {"labels": ""})
    bare = {key: value for key, value in KERNEL.items() if key not in ("pid", "tid")}
    events = document(timeline, meta, timeline.events([bare], Placed(0, 0, 1)))["traceEvents"]
    (process,) = [e["tid"] for e in events if e["name"] == "process_name"]
    (call,) = [e["tid"] for e in events if e["ph"] == "X"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert call != process and names == {call: "pid None / tid None"}
