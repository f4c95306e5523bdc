"""`commscope diff`: what changed between two runs' JSON reports (pure: two Reports → text).

First, what makes the two runs different jobs (world size, GPU model, backend, model, batch,
sequence length, parallel degrees) when anything does; then the whole-run figures side by
side with their change (relative for times and rates, in percentage points for fractions),
per-collective bus bandwidth, the diagnosis verdicts. The step time gets a significance test
(Welch's t over the per-step times, mean over ranks of each ProfilerStep) when both runs have
enough steps; otherwise the report says so. `regression` is the CI gate: B's step time
significantly worse than A's. `load` takes only commscope reports, of any schema version up
to this one (fields added since are defaults); a newer one loads with a note.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final

import msgspec
from commscope.collector.errors import ConfigError
from commscope.collector.schema import SCHEMA_VERSION, Report
from commscope.exporters.textfmt import gbps, ms, num, pct, row
from commscope.pipeline.significance import MIN_SAMPLES, welch

SIGNIFICANT: Final = 0.05
_WIDTHS: Final = [34, 16, 16, 10]

Getter = Callable[[Report], float | None]


# Keys every commscope JSON report has had, from schema version 1 on.
REPORT_KEYS: Final = ("schema_version", "overlap", "collectives", "throughput", "inputs")


def load(data: bytes, name: str) -> Report:
    """A report from its JSON (ConfigError with the reason when it is not one)."""
    try:
        document = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"{name}: not JSON ({exc})") from None
    except RecursionError:  # msgspec's own limit on nesting, hit by garbage, never by a report
        raise ConfigError(f"{name}: not a commscope JSON report (nested too deeply)") from None
    why = _not_a_report(document)
    if why is not None:
        raise ConfigError(f"{name}: not a commscope JSON report ({why})")
    try:
        return msgspec.convert(document, type=Report, str_keys=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{name}: not a commscope JSON report ({exc})") from None


def _not_a_report(document: object) -> str | None:
    if not isinstance(document, dict):
        return f"a JSON {type(document).__name__}, not an object"
    if "traceEvents" in document:
        return "a profiler trace: run `commscope report` on its folder first"
    missing = [key for key in REPORT_KEYS if key not in document]
    if missing:
        return f"no {', '.join(missing)}"
    version = document["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return f"schema_version {version!r} is not a version number"
    return None


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
    yield from relation_lines(a, b)
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


def relation_lines(a: Report, b: Report) -> Iterator[str]:
    """What makes A and B different jobs, before any figure; or what they share."""
    found = differences(a, b)
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
    yield from (f"  {label}: {va} → {vb}" for label, va, vb in found)
    yield "A change below may come from these differences, not from the code."
    yield ""


def differences(a: Report, b: Report) -> list[tuple[str, str, str]]:
    """(what, A's, B's) for each fact of the job that both reports know and that differs."""
    found = []
    for label, get in _JOB_FACTS:
        va, vb = get(a), get(b)
        if va is not None and vb is not None and va != vb:
            found.append((label, str(va), str(vb)))
    pa, pb = a.config.parallelism, b.config.parallelism
    changed = sorted(k for k in set(pa) & set(pb) if pa[k] != pb[k])
    if changed:
        found.append(
            ("parallelism", ", ".join(f"{k} {pa[k]}" for k in changed),
             ", ".join(f"{k} {pb[k]}" for k in changed))
        )  # fmt: skip
    return found


def _model(r: Report) -> str | None:
    return " ".join(x for x in (r.config.model, r.config.flavor) if x) or None


_JOB_FACTS: Final[tuple[tuple[str, Callable[[Report], object]], ...]] = (
    ("world size", lambda r: r.world_size),
    ("GPU", lambda r: r.config.gpu_name),
    ("backend", lambda r: r.config.backend),
    ("model", _model),
    ("local batch", lambda r: r.config.local_batch_size),
    ("global batch", lambda r: r.config.global_batch_size),
    ("sequence length", lambda r: r.config.seq_len),
)


def _setup(r: Report) -> str:
    world = f"{r.world_size} ranks" if r.world_size is not None else "world size unknown"
    device = r.config.gpu_name or "no GPU in the traces"
    device += f", {r.config.backend}" if r.config.backend else ""
    return f"{world} ({device}), model {_model(r) or 'n/a'}"


def regression(a: Report, b: Report) -> tuple[bool, str]:
    """(whether B's step time is significantly worse than A's, the verdict in words)."""
    result = welch(a.throughput.step_times_s, b.throughput.step_times_s)
    if result.p_value is None or result.mean_a is None or result.mean_b is None:
        return False, f"step time not tested, not gated: {result.reason or 'no steps'}"
    worse = result.mean_b > result.mean_a and result.p_value < SIGNIFICANT
    what = "significantly worse" if worse else "not significantly worse"
    moved = f" ({result.change:+.1%})" if result.change is not None else ""
    return worse, (
        f"step time {what}: {ms(result.mean_a)} → {ms(result.mean_b)}{moved}, "
        f"p = {result.p_value:.2g} (Welch's t, significant below {SIGNIFICANT:g})"
    )
