"""Two runs' JSON reports compared (pure): what makes them different jobs, and whether the
step time changed significantly.

`load` reads a commscope report of any schema version up to this one (fields added since are
defaults; a newer one loads, and the renderer says so). `compare` gives a `RunComparison`:
the facts of the job that both reports know and that differ, and Welch's t over the
per-step times (mean over ranks of each ProfilerStep) decided at `_SIGNIFICANT`; its `worse`
is the CI gate: B's step time significantly worse than A's, `untested` why the gate cannot
decide (different jobs, too few steps). The renderer
(`exporters/diff.py`) only formats these results.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec
from commscope.model.errors import ConfigError
from commscope.model.schema import JobDifference, Report, RunComparison, StepTest
from commscope.pipeline.oldreasons import upgrade_report
from commscope.pipeline.significance import MIN_SAMPLES, welch

_SIGNIFICANT: Final = 0.05

# Keys every commscope JSON report has had, from schema version 1 on.
_REPORT_KEYS: Final = ("schema_version", "overlap", "collectives", "throughput", "inputs")


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
    upgrade_report(document)
    try:
        return msgspec.convert(document, type=Report, str_keys=True)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{name}: not a commscope JSON report ({exc})") from None


def _not_a_report(document: object) -> str | None:
    if not isinstance(document, dict):
        return f"a JSON {type(document).__name__}, not an object"
    if "traceEvents" in document:
        return "a profiler trace: run `commscope report` on its folder first"
    missing = [key for key in _REPORT_KEYS if key not in document]
    if missing:
        return f"no {', '.join(missing)}"
    version = document["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return f"schema_version {version!r} is not a version number"
    return None


def compare(a: Report, b: Report) -> RunComparison:
    return RunComparison(differences=differences(a, b), step_time=step_test(a, b))


def untested(comparison: RunComparison) -> str | None:
    """Why the CI gate cannot test B's step time against A's (None: it can): A and B are
    not two runs of one job, or a side has too few steps for Welch's t."""
    if comparison.differences:
        what = ", ".join(d.what for d in comparison.differences)
        return f"A and B are not two runs of one job (they differ in {what})"
    if comparison.step_time.p_value is None:
        return comparison.step_time.reason or "no steps"
    return None


def step_test(a: Report, b: Report, alpha: float = _SIGNIFICANT) -> StepTest:
    steps_a, steps_b = a.throughput.step_times_s, b.throughput.step_times_s
    r = welch(steps_a, steps_b)
    significant = r.p_value is not None and r.p_value < alpha
    slower = r.mean_a is not None and r.mean_b is not None and r.mean_b > r.mean_a
    reason = r.reason
    if r.p_value is None and reason is None:
        reason = f"{MIN_SAMPLES} steps needed on each side"
    return StepTest(
        mean_a_s=r.mean_a, mean_b_s=r.mean_b, change=r.change, t=r.t, df=r.df,
        p_value=r.p_value, reason=reason, steps=(len(steps_a), len(steps_b)), alpha=alpha,
        significant=significant, worse=significant and slower,
    )  # fmt: skip


def differences(a: Report, b: Report) -> list[JobDifference]:
    """Each fact of the job that both reports know and that differs."""
    found = []
    for label, get in _JOB_FACTS:
        va, vb = get(a), get(b)
        if va is not None and vb is not None and va != vb:
            found.append(JobDifference(label, str(va), str(vb)))
    pa, pb = a.config.parallelism, b.config.parallelism
    changed = sorted(k for k in set(pa) & set(pb) if pa[k] != pb[k])
    if changed:
        found.append(JobDifference(
            "parallelism", ", ".join(f"{k} {pa[k]}" for k in changed),
            ", ".join(f"{k} {pb[k]}" for k in changed)
        ))  # fmt: skip
    return found


_JOB_FACTS: Final[tuple[tuple[str, Callable[[Report], object]], ...]] = (
    ("world size", lambda r: r.world_size),
    ("GPU", lambda r: r.config.gpu_name),
    ("backend", lambda r: r.config.backend),
    ("model", lambda r: r.config.model_name),
    ("local batch", lambda r: r.config.local_batch_size),
    ("global batch", lambda r: r.config.global_batch_size),
    ("sequence length", lambda r: r.config.seq_len),
)
