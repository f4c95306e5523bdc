"""`commscope diff`: what changed between two runs' JSON reports (pure: two Reports → text).

Whole-run figures side by side with their change (relative for times and rates, in
percentage points for fractions), per-collective bus bandwidth, the diagnosis verdicts. The
step time gets a significance test (Welch's t over the per-step times, mean over ranks of each
ProfilerStep) when both runs have enough steps; otherwise the report says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

import msgspec
from commscope.collector.errors import ConfigError
from commscope.collector.schema import Report
from commscope.exporters.textfmt import gbps, ms, num, pct, row
from commscope.pipeline.significance import MIN_SAMPLES, welch

SIGNIFICANT: Final = 0.05
_WIDTHS: Final = [34, 16, 16, 10]

Getter = Callable[[Report], float | None]


def load(data: bytes, name: str) -> Report:
    """A report from its JSON (ConfigError with the reason when it is not one)."""
    try:
        return msgspec.json.decode(data, type=Report)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{name}: not a commscope JSON report ({exc})") from None
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{name}: not JSON ({exc})") from None


def _exposed(r: Report) -> float | None:
    return r.diagnosis.figures.get("exposed_comm_fraction")


def _skew(r: Report) -> float | None:
    values = [s.skew_s.p95 for s in r.skew.per_collective.values() if s.skew_s.p95 is not None]
    return max(values) if values else None


# (label, value, format, change as percentage points rather than relative)
_ROWS: Final[tuple[tuple[str, Getter, Callable[[float | None], str], bool], ...]] = (
    ("Time per iteration", lambda r: r.throughput.iteration_time_s, ms, False),
    ("Tokens per second", lambda r: r.throughput.tokens_per_second, num, False),
    ("MFU", lambda r: r.utilization.mfu, pct, True),
    ("Average overlap", lambda r: r.overlap.mean, pct, True),
    ("Exposed comm / step time", _exposed, pct, True),
    ("Average bus bandwidth", lambda r: r.network.mean_bus_bandwidth_Bps, gbps, False),
    ("Bandwidth utilization", lambda r: r.network.utilization, pct, True),
    ("GPU idle / active span", lambda r: r.kernels.idle_ratio_mean, pct, True),
    ("Arrival skew p95 (worst type)", _skew, ms, False),
)


def change(a: float | None, b: float | None, points: bool) -> str:
    if a is None or b is None:
        return "n/a"
    if points:
        return f"{(b - a) * 100:+.2f} pp"
    return f"{(b - a) / a:+.1%}" if a else "n/a"


def render(a: Report, b: Report, names: tuple[str, str]) -> str:
    return "\n".join(_lines(a, b, names)) + "\n"


def _lines(a: Report, b: Report, names: tuple[str, str]) -> Iterator[str]:
    yield f"A: {names[0]}"
    yield f"B: {names[1]}"
    yield ""
    yield row(["whole run", "A", "B", "change"], _WIDTHS)
    for label, get, show, points in _ROWS:
        va, vb = get(a), get(b)
        yield row([label, show(va), show(vb), change(va, vb, points)], _WIDTHS)
    yield ""
    yield f"Step time: {step_significance(a, b)}"
    yield ""
    yield row(["busbw median per collective", "A", "B", "change"], _WIDTHS)
    for kind in sorted(set(a.collectives.all_ranks) | set(b.collectives.all_ranks)):
        va, vb = (_busbw(r, kind) for r in (a, b))
        yield row([kind, gbps(va), gbps(vb), change(va, vb, False)], _WIDTHS)
    yield ""
    yield f"Verdict: {a.diagnosis.verdict} → {b.diagnosis.verdict}"
    slow_a, slow_b = (_slowest(r) for r in (a, b))
    yield f"Slowest rank: {slow_a} → {slow_b}"


def _busbw(report: Report, kind: str) -> float | None:
    stats = report.collectives.all_ranks.get(kind)
    return stats.busbw_Bps.median if stats else None


def _slowest(report: Report) -> str:
    return f"rank {report.skew.slowest_rank}" if report.skew.slowest_rank is not None else "none"


def step_significance(a: Report, b: Report) -> str:
    steps_a, steps_b = a.throughput.step_times_s, b.throughput.step_times_s
    result = welch(steps_a, steps_b)
    if result.p_value is None:
        why = result.reason or f"{MIN_SAMPLES} steps needed on each side"
        return f"no significance test: {why}"
    verdict = "a significant change" if result.p_value < SIGNIFICANT else "not significant"
    moved = f"{result.change:+.1%}" if result.change is not None else "n/a"
    return (
        f"{ms(result.mean_a)} → {ms(result.mean_b)} ({moved}), Welch's t = {num(result.t)}, "
        f"p = {result.p_value:.2g} over {len(steps_a)} and {len(steps_b)} steps: {verdict} "
        f"at {SIGNIFICANT:g}"
    )
