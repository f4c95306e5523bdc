"""Top kernels and kernel launches in the text and HTML reports (`exporters.kerneltext`,
`exporters.kernelhtml`): names made short, the tables, and n/a with its reason."""

from __future__ import annotations

import pytest
from commscope.exporters import html, text
from commscope.exporters.extremes import Cut
from commscope.exporters.kerneltext import (
    OTHER,
    TOP,
    launch_lines,
    short_name,
    short_names,
    top_kernel_lines,
)
from commscope.model.schema import (
    KernelRow,
    Launches,
    RankLaunches,
    Report,
    Summary,
    TopKernels,
)

VECTORIZED = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::sqrt_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(float)#1}, at::detail::Array<char*, 2> >(int, at::native::sqrt_kernel_cuda("
    "at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() "
    "const::{lambda(float)#1}, at::detail::Array<char*, 2>)"
)
FILL = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, "
    "at::detail::Array<char*, 1> >(int, at::native::FillFunctor<int>, at::detail::Array<char*, 1>)"
)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        (VECTORIZED, "at::native::vectorized_elementwise_kernel<…>"),
        (
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t",
        ),
        (
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, false>"
            "(float*, float const*, int, int, int)",
            "(anonymous namespace)::softmax_warp_forward<…>",
        ),
        (
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_16x3_nn_align4>"
            "(cutlass_80_tensorop_s1688gemm_128x128_16x3_nn_align4::Params)",
            "cutlass::Kernel<…>",
        ),
        ("volta_sgemm_128x32_nt", "volta_sgemm_128x32_nt"),
        ("triton_poi_fused_add_0", "triton_poi_fused_add_0"),
        ("void f<(anonymous namespace)::Op, 2>(int)", "f<…>"),
        (None, OTHER),
    ],
)
def test_kernel_names_lose_return_type_templates_and_arguments(
    name: str | None, short: str
) -> None:
    assert short_name(name) == short


def test_a_long_name_is_cut_to_the_width() -> None:
    assert short_name("k" * 100, width=10) == "k" * 9 + "…"


def test_names_that_shorten_alike_get_a_hint() -> None:
    assert short_names([VECTORIZED, FILL, "volta_sgemm_128x32_nt"]) == [
        "at::native::vectorized_elementwise_kernel<…> [sqrt_kernel_cuda]",
        "at::native::vectorized_elementwise_kernel<…> [FillFunctor]",
        "volta_sgemm_128x32_nt",
    ]


def kernel_row(name: str | None, count: int, time_s: float, share: float, comm: bool) -> KernelRow:
    return KernelRow(name=name, count=count, time_s=time_s, mean_s=time_s / count, share=share,
                     communication=comm if name is not None else None)  # fmt: skip


def report() -> Report:
    rows = [
        kernel_row("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*)", 2, 6e-3, 0.6, True),
        kernel_row(VECTORIZED, 8, 3e-3, 0.3, False),
        kernel_row(None, 4, 1e-3, 0.1, False),
    ]
    launches = RankLaunches(calls=10, call_time_s=50e-6, kernels=8,
                            queue_delay_s=Summary(median=7e-6, p95=250e-6, relative_error=0.01),
                            shorter=6, shorter_share=0.75)  # fmt: skip
    return Report(
        ranks=[0],
        top_kernels=TopKernels(
            count=14, time_s=10e-3, names_kept=200, all_ranks=rows, per_rank={"0": rows}
        ),
        launches=Launches(all_ranks=launches, per_rank={"0": launches}),
    )


def test_the_top_kernels_table() -> None:
    lines = list(top_kernel_lines(report(), Cut()))
    assert lines[3] == (
        "All ranks pooled: 14 kernels, 10.0 ms; top 2 of 2 names (past 200 names the rest are "
        "summed)"
    )
    assert [line.split() for line in lines[4:8]] == [
        ["#", "count", "total", "mean", "share", "kind", "kernel"],
        ["1", "2", "6.00", "ms", "3.00", "ms", "60.00%", "comm",
         "ncclKernel_AllReduce_RING_LL_Sum_float"],
        ["2", "8", "3.00", "ms", "375", "µs", "30.00%",
         "at::native::vectorized_elementwise_kernel<…>"],
        ["4", "1.00", "ms", "250", "µs", "10.00%", "(other", "kernels)"],
    ]  # fmt: skip
    assert lines[-1].split() == [
        "0", "14", "10.0", "ms", "60.00%", "ncclKernel_AllReduce_RING_LL_Sum_float"
    ]  # fmt: skip


def test_rows_beyond_the_top_are_summed_in_the_text() -> None:
    rows = [kernel_row(f"k{i}", 1, 1e-3, 0.05, False) for i in range(TOP + 5)]
    shown = report()
    shown.top_kernels.all_ranks = rows
    lines = list(top_kernel_lines(shown, Cut()))
    other = next(line for line in lines if line.endswith("(other kernels)"))
    assert other.split()[:3] == ["5", "5.00", "ms"]  # the 5 names beyond the top 15


def test_the_launch_table() -> None:
    lines = list(launch_lines(report(), Cut()))
    assert [line.split() for line in lines[5:7]] == [
        ["rank", "calls", "CPU", "time", "kernels", "delay", "med", "delay", "p95", "short"],
        ["all", "10", "50.0", "µs", "8", "~7.00", "µs", "~250", "µs", "6", "(75.0%)"],
    ]


def test_sections_without_figures_say_why() -> None:
    empty = Report(top_kernels=TopKernels(na_reason="no kernel names"),
                   launches=Launches(na_reason="no launch calls"))  # fmt: skip
    assert list(top_kernel_lines(empty, Cut())) == ["n/a (no kernel names)"]
    assert list(launch_lines(empty, Cut())) == ["n/a (no launch calls)"]


def test_the_text_and_html_reports_carry_both_sections() -> None:
    shown = text.render(report())
    assert "10a. TOP KERNELS BY GPU TIME" in shown and "10b. KERNEL LAUNCHES" in shown
    page = html.render(report())
    assert "<h2>Top kernels and kernel launches</h2>" in page
    # the short name shown, the whole one in the cell's title
    assert ">at::native::vectorized_elementwise_kernel&lt;…&gt;</td>" in page
    assert 'title="void at::native::vectorized_elementwise_kernel&lt;4,' in page
    assert "<td>~7.00 µs</td><td>~250 µs</td><td>6 (75.0%)</td>" in page
