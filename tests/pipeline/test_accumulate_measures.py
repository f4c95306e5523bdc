"""A rank's measures in `Accumulator.result` against a unit-by-unit oracle (each ns a set
member): the GPU busy time, its span and every in-step measure come from disjoint parts and
S alone (no union built), and must equal the sets' own."""

from __future__ import annotations

from commscope.model.schema import CommOp, CpuSpan, Event, GpuOp, InSteps, RankResult, Step
from commscope.pipeline.accumulate import Accumulator, _call_order, _in_call_order
from hypothesis import given, settings
from hypothesis import strategies as st

Spans = list[tuple[int, int]]

_SPANS = st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12)), max_size=8)
_KERNELS = st.lists(
    st.tuples(st.sampled_from(["compute", "memcpy", "memset", "fused"]), st.integers(0, 60),
              st.integers(1, 12)),
    max_size=10,
)  # fmt: skip


def _units(spans: Spans) -> set[int]:
    return {t for start, dur in spans for t in range(start, start + dur)}


def _result(events: list[Event], steps: Spans) -> RankResult:
    accumulator = Accumulator()
    accumulator.add_all([*events, *(Step(k, s, d, 1) for k, (s, d) in enumerate(steps))])
    return accumulator.result()


def _expected(comm: set[int], compute: set[int], busy: set[int], steps: set[int]) -> tuple:  # type: ignore[type-arg]
    in_steps = InSteps(
        span_ns=len(steps),
        comm_ns=len(comm & steps),
        overlap_ns=len(comm & compute & steps),
        compute_ns=len(compute & steps),
        gpu_busy_ns=len(busy & steps),
    )
    span = max(busy) + 1 - min(busy) if busy else 0
    return len(comm), len(comm & compute), len(compute), len(busy), span, in_steps


def _found(found: RankResult) -> tuple:  # type: ignore[type-arg]
    return (found.comm_ns, found.overlap_ns, found.compute_ns, found.gpu_busy_ns,
            found.gpu_span_ns, found.in_steps)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(kernels=_KERNELS, comms=_SPANS, steps=_SPANS)
def test_a_gpu_ranks_measures_are_its_units(
    kernels: list[tuple[str, int, int]], comms: Spans, steps: Spans
) -> None:
    events: list[Event] = [GpuOp(kind, start, dur, "gemm") for kind, start, dur in kernels]  # type: ignore[arg-type]
    events += [CommOp("AllReduce", start, dur, 8, 2, True, "0") for start, dur in comms]
    compute = _units([(s, d) for kind, s, d in kernels if kind == "compute"])
    comm = _units(comms)
    busy = _units([(s, d) for _, s, d in kernels]) | comm
    assert _found(_result(events, steps)) == _expected(comm, compute, busy, _units(steps))


@settings(max_examples=100, deadline=None)
@given(spans=_SPANS, comms=_SPANS, steps=_SPANS)
def test_a_gloo_ranks_measures_are_its_units(spans: Spans, comms: Spans, steps: Spans) -> None:
    events: list[Event] = [CpuSpan(1, s, s + d, False) for s, d in spans]
    events += [CommOp("AllReduce", start, dur, 8, 2, False, "0") for start, dur in comms]
    expected = _expected(_units(comms), _units(spans), set(), _units(steps))
    assert _found(_result(events, steps)) == expected


def test_the_copies_count_once_where_kernels_or_communication_cover_them() -> None:
    # compute [0,10), communication [5,20), a memcpy [8,30): busy [0,30), in S [0,25): 25
    events: list[Event] = [GpuOp("compute", 0, 10, "gemm"), GpuOp("memcpy", 8, 22),
                           CommOp("AllReduce", 5, 15, 8, 2, True, "0")]  # fmt: skip
    found = _result(events, [(0, 25)])
    assert (found.gpu_busy_ns, found.gpu_span_ns) == (30, 30)
    assert found.in_steps == InSteps(
        span_ns=25, comm_ns=15, overlap_ns=5, compute_ns=10, gpu_busy_ns=25
    )


_CALLS = st.lists(
    st.builds(
        CommOp,
        st.sampled_from(["AllReduce", "AllGather"]),
        st.integers(0, 6),  # starts that often tie
        st.integers(0, 3),
        st.sampled_from([None, 0, 8]),
        st.just(2),
        st.just(True),
        st.sampled_from([None, "0", "1"]),
        st.sampled_from([None, 1, 2]),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(_CALLS)
def test_the_calls_come_in_their_order_whether_starts_tie_or_not(calls: list[CommOp]) -> None:
    assert _in_call_order(calls) == sorted(calls, key=_call_order)
