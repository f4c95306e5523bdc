"""`commscope diff` rendered (pure: two Reports → text).

First, what makes the two runs different jobs (`pipeline.compare.differences`) when anything
does; then the whole-run figures side by side with their change (relative for times and
rates, in percentage points for fractions), per-collective bus bandwidth, the diagnosis
verdicts, and the step time's significance test (`pipeline.compare.step_test`) in words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

from commscope.exporters import text
from commscope.exporters.textfmt import num, pct, row
from commscope.model.schema import SCHEMA_VERSION, Report, RunComparison, StepTest
from commscope.model.units import duration, p_value, rate

_WIDTHS: Final = [34, 16, 16, 10]

_Getter = Callable[[Report], float | None]


def _exposed(r: Report) -> float | None:
    return r.diagnosis.figures.get("exposed_comm_fraction")


def _skew(r: Report) -> float | None:
    values = [s.skew_s.p95 for s in r.skew.per_collective.values() if s.skew_s.p95 is not None]
    return max(values) if values else None


# (label, value, format, change as percentage points rather than relative)
_ROWS: Final[tuple[tuple[str, _Getter, Callable[[float | None], str], bool], ...]] = (
    ("Time per iteration", lambda r: r.throughput.iteration_time_s, duration, False),
    ("Tokens per second", lambda r: r.throughput.tokens_per_second, num, False),
    ("MFU", lambda r: r.utilization.mfu, pct, True),
    ("Average overlap", lambda r: r.overlap.mean, pct, True),
    ("Exposed comm / step time", _exposed, pct, True),
    ("Average bus bandwidth", lambda r: r.network.mean_bus_bandwidth_Bps, rate, False),
    ("Bandwidth utilization", lambda r: r.network.utilization, pct, True),
    ("GPU idle / active span", lambda r: r.kernels.idle_ratio_mean, pct, True),
    ("Arrival skew p95 (worst type)", _skew, duration, False),
)


def change(a: float | None, b: float | None, points: bool) -> str:
    if a is None or b is None:
        return "n/a"
    if points:
        return f"{(b - a) * 100:+.2f} pp"
    if a and b / a >= 10:  # ten times or more: a factor reads better than +24531.4%
        return f"x{b / a:,.0f}"
    return f"{(b - a) / a:+.1%}" if a else "n/a"


def render(a: Report, b: Report, names: tuple[str, str], comparison: RunComparison) -> str:
    return "\n".join(_lines(a, b, names, comparison)) + "\n"


def _lines(
    a: Report, b: Report, names: tuple[str, str], comparison: RunComparison
) -> Iterator[str]:
    yield f"A: {names[0]}"
    yield f"B: {names[1]}"
    yield ""
    yield from _relation_lines(a, b, comparison)
    yield row(["whole run", "A", "B", "change"], _WIDTHS)
    for label, get, show, points in _ROWS:
        va, vb = get(a), get(b)
        yield row([label, show(va), show(vb), change(va, vb, points)], _WIDTHS)
    yield ""
    yield f"Step time: {step_significance(comparison.step_time)}"
    yield ""
    yield row(["busbw median per collective", "A", "B", "change"], _WIDTHS)
    for kind in sorted(set(a.collectives.all_ranks) | set(b.collectives.all_ranks)):
        va, vb = (_busbw(r, kind) for r in (a, b))
        yield row([kind, rate(va), rate(vb), change(va, vb, False)], _WIDTHS)
    yield ""
    yield f"Verdict: {a.diagnosis.verdict} → {b.diagnosis.verdict}"
    slow_a, slow_b = (_awaited(r) for r in (a, b))
    yield f"The rank the others wait for: {slow_a} → {slow_b}"


def _busbw(report: Report, kind: str) -> float | None:
    stats = report.collectives.all_ranks.get(kind)
    return stats.busbw_Bps.median if stats else None


def _awaited(report: Report) -> str:
    rank = report.skew.waited_for_rank
    return f"rank {rank}" if rank is not None else "none"


def step_significance(test: StepTest) -> str:
    if test.p_value is None:
        return f"no significance test: {test.reason}"
    verdict = "a significant change" if test.significant else "not significant"
    moved = f"{test.change:+.1%}" if test.change is not None else "n/a"
    return (
        f"{duration(test.mean_a_s)} → {duration(test.mean_b_s)} ({moved}), "
        f"Welch's t = {num(test.t)}, {p_value(test.p_value)} over {test.steps[0]} and "
        f"{test.steps[1]} steps: {verdict} at {test.alpha:g}"
    )


def _relation_lines(a: Report, b: Report, comparison: RunComparison) -> Iterator[str]:
    """What makes A and B different jobs, before any figure; or what they share."""
    found = comparison.differences
    for side, report in (("A", a), ("B", b)):
        if report.schema_version > SCHEMA_VERSION:
            yield (
                f"Note: {side} was written by a newer commscope (schema {report.schema_version}, "
                f"this one reads {SCHEMA_VERSION}): what it added is not compared."
            )
    if not found:
        setup_a, setup_b = _setup(a), _setup(b)
        same = setup_a == setup_b
        yield f"Same setup: {setup_a}" if same else f"Setup: A {setup_a}; B {setup_b}"
        yield ""
        return
    yield "UNRELATED RUNS: A and B are not two runs of one job. They differ in:"
    yield from (f"  {d.what}: {d.a} → {d.b}" for d in found)
    yield "A change below may come from these differences, not from the code."
    yield ""


def _setup(r: Report) -> str:
    world = f"{r.world_size} ranks" if r.world_size is not None else "world size unknown"
    about = ", ".join(x for x in (text.device(r), r.config.backend) if x)
    return f"{world} ({about}), model {r.config.model_name or 'n/a'}"


def regression(test: StepTest) -> str:
    """The CI gate's verdict in words (`test.worse`: B's step time significantly worse)."""
    if test.p_value is None or test.mean_a_s is None or test.mean_b_s is None:
        return f"step time not tested, not gated: {test.reason or 'no steps'}"
    what = "significantly worse" if test.worse else "not significantly worse"
    moved = f" ({test.change:+.1%})" if test.change is not None else ""
    return (
        f"step time {what}: {duration(test.mean_a_s)} → {duration(test.mean_b_s)}{moved}, "
        f"{p_value(test.p_value)} (Welch's t, significant below {test.alpha:g})"
    )
