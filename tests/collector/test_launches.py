"""Kernel names and kernel launches as the normaliser reads them (`collector.launches`), on
small hand-made Kineto traces whose every figure is worked by hand (µs in, ns out)."""

from __future__ import annotations

import pytest
from commscope.collector import launches
from commscope.collector.launches import KernelNames, Launches, is_launch_call
from commscope.model.int64s import pack, unpack
from commscope.model.schema import Event, KernelTime, LaunchDelays
from hypothesis import given, settings
from hypothesis import strategies as st
from kineto_builder import kernel, read, span, trace

GEMM = "ampere_sgemm_128x64_nn"
ELEMENTWISE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<float>, "
    "at::detail::Array<char*, 1>)"
)
TRITON = "triton_poi_fused_add_0"
GRAPHED = "volta_sgemm_128x32_nt"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
HOST = 11


def call(name: str, correlation: int, ts: float, dur: float) -> dict:
    return span("cuda_runtime", name, ts, dur, HOST, args={"correlation": correlation})


def corr(correlation: int) -> dict[str, int]:
    return {"correlation": correlation}


# The worked trace: five kernels joined or not to their launch calls (µs).
#   corr 1: cudaLaunchKernel at 10 for 3, GEMM at 15 for 4:      delay 5, not shorter (4 > 3)
#   corr 2: cudaLaunchKernel at 20 for 3, elementwise at 30 for 2: delay 10, shorter (2 < 3)
#   corr 3: the kernel first in the file (Triton at 50 for 1), then cudaLaunchKernelExC at 41
#           for 2: delay 9, shorter
#   corr 4: cudaGraphLaunch at 60 for 5, its kernel at 70 for 1: a graph launch, not joined
#   corr 5: cuLaunchKernel (driver) at 80 for 4, an NCCL kernel at 100 for 50: delay 20
#   a GEMM at 200 for 6 with no correlation: counted by name, joined to nothing
WORKED = [
    call("cudaLaunchKernel", 1, 10, 3),
    kernel(GEMM, 15, 4, corr(1)),
    call("cudaLaunchKernel", 2, 20, 3),
    kernel(ELEMENTWISE, 30, 2, corr(2)),
    kernel(TRITON, 50, 1, corr(3)),
    call("cudaLaunchKernelExC", 3, 41, 2),
    call("cudaGraphLaunch", 4, 60, 5),
    kernel(GRAPHED, 70, 1, corr(4)),
    span("cuda_driver", "cuLaunchKernel", 80, 4, HOST, args=corr(5)),
    kernel(NCCL, 100, 50, corr(5)),
    kernel(GEMM, 200, 6),
]


def test_each_kernel_name_is_counted_with_its_time_and_kind() -> None:
    assert read(trace(WORKED)).names == [  # in name order
        KernelTime(GEMM, 2, 10_000),  # 4 + 6 µs
        KernelTime(NCCL, 1, 50_000, communication=True),
        KernelTime(TRITON, 1, 1_000),
        KernelTime(ELEMENTWISE, 1, 2_000),
        KernelTime(GRAPHED, 1, 1_000),
    ]


def test_kernels_join_their_launch_calls_whichever_comes_first() -> None:
    (part,) = read(trace(WORKED)).launches
    # calls of corr 1, 2, 3, 5 (the graph launch is none): 3 + 3 + 2 + 4 = 12 µs
    assert (part.calls, part.call_ns, part.kernels, part.shorter) == (4, 12_000, 4, 2)
    assert list(unpack(part.delays_ns)) == [5_000, 10_000, 9_000, 20_000]  # in join order


def test_a_trace_without_launch_calls_gives_no_launch_figures() -> None:
    parsed = read(trace([kernel(GEMM, 15, 4, corr(1))]))
    assert parsed.launches == []
    assert parsed.names == [KernelTime(GEMM, 1, 4_000)]


def test_a_launch_call_without_a_duration_in_range_is_not_counted() -> None:
    events = [call("cudaLaunchKernel", 1, 10, -1), kernel(GEMM, 15, 4, corr(1))]
    assert read(trace(events)).launches == []


@pytest.mark.parametrize(
    ("name", "launches_one"),
    [
        ("cudaLaunchKernel", True),
        ("cudaLaunchKernel_ptsz", True),
        ("cudaLaunchKernelExC", True),
        ("cuLaunchKernel", True),
        ("cuLaunchKernelEx", True),
        ("hipLaunchKernel", True),
        ("hipExtLaunchKernel", True),
        ("mtiaLaunchKernel", True),
        ("cudaLaunchCooperativeKernel", True),
        ("cudaLaunchKernel_v7000", True),  # Nsight Systems' name
        ("cudaGraphLaunch", False),
        ("cudaMemcpyAsync", False),
        ("cudaLaunchHostFunc", False),
    ],
)
def test_launch_calls_by_name(name: str, launches_one: bool) -> None:
    assert is_launch_call(name) is launches_one


def test_parts_of_at_most_delays_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(launches, "DELAYS", 2)
    events = []
    for i in range(3):  # calls at 10i for 2, kernels at 10i + 3 for 1: delay 3, shorter
        events += [call("cudaLaunchKernel", i, 10 * i, 2), kernel(GEMM, 10 * i + 3, 1, corr(i))]
    parts = read(trace(events)).launches
    assert [(p.calls, p.call_ns, p.kernels, p.shorter) for p in parts] == [
        (2, 4_000, 2, 2),  # out when the second kernel joined
        (1, 2_000, 1, 1),  # the rest, at the end of the file
    ]
    assert [list(unpack(p.delays_ns)) for p in parts] == [[3_000, 3_000], [3_000]]


def test_names_beyond_the_bound_are_summed_in_one_nameless_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(launches, "NAMES", 2)
    names = KernelNames()
    for name, dur in (("a", 1), ("b", 2), ("c", 4), ("a", 8), ("d", 16)):
        names.add(name, dur, communication=False)
    assert names.events() == [KernelTime("a", 2, 9), KernelTime("b", 1, 2), KernelTime(None, 2, 20)]


def test_waiting_calls_are_forgotten_two_generations_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # 2 a generation: calls 0, 1 (old), then 2, 3 (new), then 4 moves 2, 3 to old: 0, 1 gone
    monkeypatch.setattr(launches, "WAITING", 2)
    out = list[Event]()
    table = Launches(out)
    for correlation in range(5):
        table.keep(correlation, (HOST, 0, 1))
    for correlation in range(5):
        table.kernel(correlation, (10, 1), False, {}, True)
    table.finish()
    (part,) = out
    assert isinstance(part, LaunchDelays)
    assert (part.calls, part.kernels) == (0, 3)  # kernels 0 and 1 found no call: unjoined


def test_waiting_kernels_are_forgotten_two_generations_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(launches, "WAITING", 2)
    out = list[Event]()
    table = Launches(out)
    for correlation in range(5):  # kernels first: 0 and 1 forgotten when kernel 4 comes
        table.kernel(correlation, (10, 1), False, {}, True)
    met = [table.call(correlation, launches.KERNEL_LAUNCH, 0, 2) for correlation in range(5)]
    table.finish()
    assert [m is not None and m[launches.LANDED] for m in met] == [False, False, 1, 1, 1]
    (part,) = out
    assert isinstance(part, LaunchDelays)
    assert (part.calls, part.kernels, part.shorter) == (5, 3, 3)


def test_a_kernel_joins_its_call_once() -> None:
    # one call, two kernels of its correlation (a multi-device launch): one delay sample
    out = list[Event]()
    table = Launches(out)
    table.keep(7, (HOST, 0, 5))
    table.kernel(7, (3, 1), False, {}, True)
    table.kernel(7, (4, 1), False, {}, True)
    assert table.launch(7) == (HOST, 0)  # the call stays known for comm kernels
    table.finish()
    (part,) = out
    assert isinstance(part, LaunchDelays)
    assert (part.kernels, list(unpack(part.delays_ns))) == (1, [3])


def test_delays_pack_as_little_endian_int64() -> None:
    assert pack(launches.array("q", [1, -2])) == bytes([1, 0, 0, 0, 0, 0, 0, 0]) + bytes(
        [254] + [255] * 7
    )
    assert list(unpack(pack(launches.array("q", [5, -7])))) == [5, -7]


# ---------------------------------------------------------------- the oracle


@st.composite
def launched(draw: st.DrawFn) -> tuple[list[dict], list[int], int]:
    """Kernel launch calls and their kernels in any order, some calls without a kernel and
    some kernels without a call; each joined pair's delay (kernel start - call start, ns) and
    the calls' count, by brute force."""
    events: list[dict] = []
    delays, calls = [], 0
    for correlation in range(1, draw(st.integers(1, 10)) + 1):
        start, delay = draw(st.integers(0, 50)), draw(st.integers(0, 9))
        has_call, has_kernel = draw(st.sampled_from([(True, True), (True, False), (False, True)]))
        if has_call:
            events.append(call("cudaLaunchKernel", correlation, start, 1))
            calls += 1
        if has_kernel:
            events.append(kernel(GEMM, start + delay, 2, corr(correlation)))
        if has_call and has_kernel:
            delays.append(delay * 1000)
    return draw(st.permutations(events)), sorted(delays), calls


@given(launched())
@settings(max_examples=60, deadline=None)
def test_any_order_of_calls_and_kernels_gives_the_brute_force_joins(
    case: tuple[list[dict], list[int], int],
) -> None:
    events, delays, calls = case
    parts = read(trace(events)).launches
    assert sum(p.calls for p in parts) == calls
    assert sorted(d for p in parts for d in unpack(p.delays_ns)) == delays
