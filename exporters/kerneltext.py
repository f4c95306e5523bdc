"""Top kernels and kernel launches in the text report, and kernel names made short (pure).

`short_name` makes a demangled kernel name readable in a table: the return type, template
arguments and argument list go (`void at::native::vectorized_elementwise_kernel<4, …>(…)` →
`at::native::vectorized_elementwise_kernel<…>`), `(anonymous namespace)` stays, and what is
still longer than SHORT characters is cut with `…`. The JSON keeps every name whole.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import Final

from commscope.exporters.extremes import Cut
from commscope.exporters.textfmt import pct, row
from commscope.model.schema import KernelRow, RankLaunches, Report
from commscope.model.units import duration

TOP: Final = 15  # kernel names in the text; the JSON has every name kept
_SHORT: Final = 72
OTHER: Final = "(other kernels)"
_ANONYMOUS: Final = ("(anonymous namespace)", "<unnamed>")  # GCC's and Nsight's demangling
_OPEN: Final = {"<": ">", "(": ")"}
_WORD: Final = re.compile(r"[A-Za-z_]\w*")
# wrappers and types a template argument names that tell two kernels of one name nothing
_GENERIC: Final = frozenset(
    {"BinaryFunctor", "UnaryFunctor", "gpu_kernel_impl", "gpu_kernel_impl_nocast", "void",
     "int", "long", "unsigned", "float", "double", "char", "bool", "short", "signed", "const",
     "at", "native", "c10", "std", "array", "detail", "Array", "lambda", "instance",
     "operator", "BFloat16", "Half"}
)  # fmt: skip


def short_name(name: str | None, width: int = _SHORT) -> str:
    """The name without its return type, template arguments (`<…>`) and argument list."""
    if name is None:
        return OTHER
    text = name.removeprefix("void ").strip()
    found: list[str] = []
    at = 0
    while at < len(text):
        char = text[at]
        anonymous = next((a for a in _ANONYMOUS if text.startswith(a, at)), None)
        if anonymous is not None:
            found.append(anonymous)
            at += len(anonymous)
        elif char == "(" and found:
            break  # the argument list
        elif char == "<":
            found.append("<…>")
            at = _closed(text, at)
        else:
            found.append(char)
            at += 1
    short = "".join(found).strip() or text
    return short if len(short) <= width else short[: width - 1] + "…"


def short_names(names: list[str | None], width: int = _SHORT) -> list[str]:
    """`short_name` of each; where two come out the same, each with a hint of what its
    template arguments name first (`vectorized_elementwise_kernel<…> [sqrt_kernel_cuda]`)."""
    shorts = [short_name(name, width) for name in names]
    seen = Counter(shorts)
    return [
        _hinted(short, name) if seen[short] > 1 else short
        for short, name in zip(shorts, names, strict=True)
    ]


def _hinted(short: str, name: str | None) -> str:
    hint = _hint(name[name.find("<") :]) if name and "<" in name else None
    return f"{short} [{hint}]" if hint else short


def _hint(arguments: str) -> str | None:
    """What names the work among template arguments: the last functor, else the first kernel
    function, else the first name that is no type or wrapper."""
    words = [w for w in _WORD.findall(arguments) if w not in _GENERIC]
    functors = [w for w in words if "Functor" in w]
    kernels = [w for w in words if "kernel" in w.lower()]
    return functors[-1] if functors else kernels[0] if kernels else next(iter(words), None)


def _closed(text: str, at: int) -> int:
    """The index past the bracket that closes the one at `at` (brackets of both kinds nest)."""
    depth = 0
    for index in range(at, len(text)):
        char = text[index]
        if char in _OPEN:
            depth += 1
        elif char in (">", ")") and not text.startswith("->", index - 1):
            depth -= 1
            if depth == 0:
                return index + 1
    return len(text)


_KERNEL_WIDTHS: Final = [4, 8, 10, 10, 7, 4]


def top_kernel_lines(report: Report, cut: Cut) -> Iterator[str]:
    top = report.top_kernels
    if top.na_reason is not None or not top.all_ranks:
        yield f"n/a ({top.na_reason or 'no kernels'})"
        return
    named = sum(1 for r in top.all_ranks if r.name is not None)
    yield "GPU time = Σ kernel durations (concurrent streams both count); share = of all kernels'"
    yield "GPU time; comm = a communication kernel. Names shortened: the JSON has them whole."
    yield ""
    yield (
        f"All ranks pooled: {top.count} kernels, {duration(top.time_s)}; top {min(TOP, named)} "
        f"of {named} names{_kept(top.all_ranks, top.names_kept)}"
    )
    yield row(["#", "count", "total", "mean", "share", "kind"], _KERNEL_WIDTHS) + "  kernel"
    shown = _shown(top.all_ranks)
    names = short_names([kernel.name for kernel in shown])
    for index, (kernel, name) in enumerate(zip(shown, names, strict=True), start=1):
        yield _kernel_row(str(index) if kernel.name is not None else "", kernel, name)
    if top.per_rank:
        yield ""
        yield row(["rank", "kernels", "GPU time", "top share"], [6, 8, 10, 10]) + "  top kernel"
        ranks = cut.ranks(top.per_rank, _top_share, "top share", pct)
        for rank, rows in ranks.items:
            yield _rank_row(rank, rows)
        yield from ranks.summary


def _top_share(rows: list[KernelRow]) -> float | None:
    return rows[0].share if rows else None


def _kept(rows: list[KernelRow], cap: int) -> str:
    return f" (past {cap} names the rest are summed)" if rows[-1].name is None else ""


def _shown(rows: list[KernelRow]) -> list[KernelRow]:
    """The TOP first rows, and the summed row of the rest (those beyond TOP included)."""
    shown, rest = rows[:TOP], rows[TOP:]
    if not rest:
        return shown
    count = sum(r.count for r in rest)
    time_s = sum(r.time_s for r in rest)
    share = sum(r.share or 0.0 for r in rest)
    return [*shown, KernelRow(name=None, count=count, time_s=time_s, mean_s=time_s / count,
                              share=share, communication=None)]  # fmt: skip


def _kernel_row(label: str, kernel: KernelRow, name: str) -> str:
    kind = "comm" if kernel.communication else ""
    cells = [label, str(kernel.count), duration(kernel.time_s), duration(kernel.mean_s),
             pct(kernel.share), kind]  # fmt: skip
    return row(cells, _KERNEL_WIDTHS) + "  " + name


def _rank_row(rank: str, rows: list[KernelRow]) -> str:
    first = rows[0]
    cells = [rank, str(sum(r.count for r in rows)), duration(sum(r.time_s for r in rows)),
             pct(first.share)]  # fmt: skip
    return row(cells, [6, 8, 10, 10]) + "  " + short_name(first.name)


_LAUNCH_WIDTHS: Final = [6, 7, 10, 8, 11, 11, 16]


def launch_lines(report: Report, cut: Cut) -> Iterator[str]:
    launches = report.launches
    if launches.all_ranks is None:
        yield f"n/a ({launches.na_reason or 'no launch calls'})"
        return
    yield "Launch calls: cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel and their variants (CPU"
    yield "time). Each kernel is joined to its call by correlation: queue delay = kernel start -"
    yield "call start; short = kernels that ran shorter than their launch call."
    yield "~ = quantile from a mergeable log-bucket sketch, within 1% (counts, sums, mean exact)."
    yield ""
    head = ["rank", "calls", "CPU time", "kernels", "delay med", "delay p95", "short"]
    yield row(head, _LAUNCH_WIDTHS)
    yield _launch_row("all", launches.all_ranks)
    shown = cut.ranks(launches.per_rank, _median_delay, "queue delay median", duration)
    for rank, figures in shown.items:
        yield _launch_row(rank, figures)
    yield from shown.summary


def _median_delay(figures: RankLaunches) -> float | None:
    return figures.queue_delay_s.median


def _launch_row(label: str, figures: RankLaunches) -> str:
    delay = figures.queue_delay_s
    cells = [label, str(figures.calls), duration(figures.call_time_s), str(figures.kernels),
             _approx(duration(delay.median), delay.relative_error),
             _approx(duration(delay.p95), delay.relative_error),
             f"{figures.shorter} ({pct(figures.shorter_share, 1)})"]  # fmt: skip
    return row(cells, _LAUNCH_WIDTHS)


def _approx(value: str, error: float | None) -> str:
    return f"~{value}" if error is not None and value != "n/a" else value
