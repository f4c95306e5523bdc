"""The Python API: what `commscope report` does, as calls for notebooks and scripts (shell: reads
traces and writes reports).

`analyse` reads a job's traces into the typed `Report` the JSON report serialises,
`analyse_jobs` one per job, `analysis` the same with the files and jobs they were made of
(which the CLI hands the timeline); the three take one set of keywords, `_Keywords`: one for
each of `report`'s options (`options` builds and checks the job's, for the CLI too).
`load_report` reads a JSON report back; `report_text`, `report_json`, `report_html` and
`write_reports` render and write it as the CLI does.
`commscope/__init__.py` is the public face.
"""

from __future__ import annotations

import decimal
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, TypedDict, Unpack, cast

from commscope.collector.inspector_windows import DEFAULT_WINDOW_S, MAX_WINDOW_S, WindowRule
from commscope.exporters import files, html, jsonreport, text
from commscope.model.errors import ConfigError
from commscope.model.schema import Report
from commscope.pipeline import compare
from commscope.pipeline.config import JobConfig, flags_only, parse_config, with_overrides
from commscope.pipeline.hosts import parse_hosts
from commscope.pipeline.report import Options
from commscope.service import offline
from commscope.service.cluster import CONNECT_TIMEOUT_S, Cluster

_MAX_DIGITS: Final = 18  # integer options above 10^18 are refused, not built digit by digit


class _JobOptions(TypedDict, total=False):
    """`report`'s job options as keywords (the flag without `--`, `-` as `_`): the same
    units (GB/s, TFLOP/s) and the same checks; a ConfigError names the flag."""

    config: str | Path | None  # TorchTitan job config (.toml or .json)
    batch_size: int | str | None
    seq_len: int | str | None
    peak_bandwidth: float | None  # GB/s per direction
    flops_per_token: float | None
    params: int | float | str | None  # e.g. 7.5e9
    peak_tflops: float | None
    hosts: str | Path | None  # "0-3=node0,4-7=node1" or a file of such lines
    net_peak: float | None  # GB/s per direction


@dataclass(frozen=True)
class _Reading:
    """How the files are read: processes, a Dask cluster, the Inspector windows, progress."""

    workers: int
    rule: WindowRule
    cluster: Cluster | None
    progress: offline.Progress | None


def options(**job: Unpack[_JobOptions]) -> Options:
    """The report's options from `report`'s flags as keywords, each checked (ConfigError)."""
    _known(job, _JobOptions.__optional_keys__)
    batch_size, seq_len = (
        _whole("--batch-size", job.get("batch_size")),
        _whole("--seq-len", job.get("seq_len")),
    )
    for flag, value in (("--batch-size", batch_size), ("--seq-len", seq_len)):
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} must be a positive integer, got {value}")
    params = _whole("--params", job.get("params"))
    peak, net_peak, tflops = job.get("peak_bandwidth"), job.get("net_peak"), job.get("peak_tflops")
    flops = job.get("flops_per_token")
    positive(
        ("--peak-bandwidth", peak),
        ("--flops-per-token", flops),
        ("--params", params),
        ("--peak-tflops", tflops),
        ("--net-peak", net_peak),
    )
    path = job.get("config")
    return Options(
        config=_config(path, batch_size, seq_len),
        config_path=str(path) if path is not None else None,
        peak_override_Bps=peak * 1e9 if peak is not None else None,
        flops_per_token=flops,
        params=params,
        peak_flops_override=tflops * 1e12 if tflops is not None else None,
        hosts=_hosts(job.get("hosts")),
        net_peak_Bps=net_peak * 1e9 if net_peak is not None else None,
    )


def positive(*flags: tuple[str, float | None]) -> None:
    """ConfigError naming the first flag given a value that is not above 0 (NaN too)."""
    for flag, number in flags:
        if number is not None and not number > 0:  # NaN too
            raise ConfigError(f"{flag} must be positive, got {number}")


def _config(
    path: str | Path | None, batch_size: int | None, seq_len: int | None
) -> JobConfig | None:
    """The job config read from `path`, with --batch-size and --seq-len over it."""
    config = None
    if path is not None:
        try:
            content = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
        config = parse_config(content, Path(path).name)
    if batch_size is not None or seq_len is not None:
        config = with_overrides(config or flags_only(), batch_size, seq_len)
    return config


def _hosts(spec: str | Path | None) -> dict[int, str] | None:
    """--hosts: entries given as text, or the file that holds them."""
    if spec is None:
        return None
    path = Path(spec)
    if path.is_file():
        try:
            spec = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"--hosts {path}: cannot read ({exc})") from None
    return parse_hosts(str(spec))


def _whole(flag: str, given: int | float | str | None) -> int | None:
    """An integer option as people write it (8, 1_000, 8e9, 7.5e9) when it is exactly one."""
    if given is None:
        return None
    try:
        return whole_number(str(given))
    except ValueError as exc:
        raise ConfigError(f"{flag} {exc}") from None


def whole_number(text: str) -> int:
    """`8`, `1_000`, `8e9`, `7.5e9` as the integer they are; ValueError when not exactly one
    (`7.5`, `1e-3`, `nan`) or above 10^18."""
    try:
        value = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        value = decimal.Decimal("NaN")
    if not value.is_finite() or value != value.to_integral_value():
        raise ValueError(f"must be a whole number, got {text!r}")
    if value.adjusted() >= _MAX_DIGITS:
        raise ValueError(f"is too large: {text}")
    return int(value)


def window_rule(seconds: int) -> WindowRule:
    """--inspector-window: the NCCL Inspector logs' windows, checked (ConfigError)."""
    if not 0 <= seconds <= MAX_WINDOW_S:
        raise ConfigError(f"--inspector-window must be 0 to {MAX_WINDOW_S} seconds, got {seconds}")
    return WindowRule(seconds)


def cluster(address: str | None, timeout_s: float) -> Cluster | None:
    """--dask: the scheduler whose workers parse the files (None: none)."""
    if address is None:
        return None
    positive(("--dask-timeout", timeout_s))
    return Cluster(address, timeout_s)


class _Keywords(_JobOptions, total=False):
    """The keywords of `analyse`, `analyse_jobs` and `analysis`: the job options above, or
    `options` (built by `options(...)`) instead of them, and how the files are read."""

    options: Options | None  # instead of the job keywords (giving both is a ConfigError)
    workers: int  # files parsed at once, each in its own process (default 1: in this one)
    inspector_window: int  # seconds (--inspector-window; default 300)
    dask: str | None  # a Dask scheduler's address whose workers parse the files
    dask_timeout: float  # seconds to wait for it (--dask-timeout; default 10)
    progress: offline.Progress | None  # begin(files, total_bytes), advance(nbytes), end()


def analyse(path: str | Path, **given: Unpack[_Keywords]) -> Report:
    """The report of the job under `path` (a run folder, a window or one trace file) with the
    most files; other jobs' files are skipped with the reason (ConfigError: no trace).
    Keywords (`report`'s flags, `-` as `_`, its units and checks; a ConfigError names the
    flag): config, batch_size, seq_len, peak_bandwidth (GB/s), flops_per_token, params,
    peak_tflops, hosts, net_peak (GB/s), or `options=options(...)` instead of them;
    inspector_window (s), dask (a scheduler's address), dask_timeout (s), workers (files
    parsed at once, each in its own process; 1: in this one), progress."""
    reading, chosen = _prepared(given)
    return offline.analyse(
        Path(path), chosen, reading.progress, reading.workers, reading.rule, cluster=reading.cluster
    )


def analyse_jobs(path: str | Path, **given: Unpack[_Keywords]) -> list[Report]:
    """One report per job under `path`, as `commscope report` writes them (its JSON list);
    the keywords as `analyse`'s. ClusterError: the Dask scheduler did not answer."""
    return analysis(path, **given).reports


def analysis(path: str | Path, **given: Unpack[_Keywords]) -> offline.Analysis:
    """`analyse_jobs`' reports with the files and jobs they were made of (what `timeline`
    writes from); the keywords as `analyse`'s."""
    reading, chosen = _prepared(given)
    return offline.analysis(
        Path(path), chosen, reading.progress, reading.workers, reading.cluster, rule=reading.rule
    )


def _prepared(given: _Keywords) -> tuple[_Reading, Options]:
    """The keywords checked: how the files are read, and the report's options."""
    _known(given, _Keywords.__optional_keys__)
    job = {key: value for key, value in given.items() if key in _JobOptions.__optional_keys__}
    return _reading(given), _chosen(given.get("options"), cast(_JobOptions, job))


def _known(given: Mapping[str, object], keys: frozenset[str]) -> None:
    """TypeError for a keyword that is not one of `keys`, as Python raises for a signature."""
    unknown = sorted(set(given) - keys)
    if unknown:
        raise TypeError(f"unexpected keyword argument {unknown[0]!r}")


def _reading(given: _Keywords) -> _Reading:
    workers = given.get("workers", 1)
    if workers < 1:
        raise ConfigError(f"workers must be at least 1, got {workers}")
    rule = window_rule(given.get("inspector_window", DEFAULT_WINDOW_S))
    address, timeout_s = given.get("dask"), given.get("dask_timeout", CONNECT_TIMEOUT_S)
    return _Reading(workers, rule, cluster(address, timeout_s), given.get("progress"))


def _chosen(given: Options | None, job: _JobOptions) -> Options:
    if given is None:
        return options(**job)
    if job:
        raise ConfigError(f"give options= or the keywords {', '.join(job)}, not both")
    return given


def load_report(path: str | Path) -> Report:
    """A report from its JSON file (`commscope report`'s .json, `commscope merge -o`'s), as
    it was written; ConfigError when it cannot be read or is not a report."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return compare.load(data, str(path))


def report_text(report: Report) -> str:
    """The text report, as `commscope report --print` prints it and the .txt holds."""
    return text.render(report)


def report_json(report: Report) -> bytes:
    """The JSON report, as the .json holds it (`load_report` reads it back)."""
    return jsonreport.render(report)


def report_html(report: Report) -> str:
    """The HTML report, as the .html holds it (one self-contained page)."""
    return html.render(report, text.render(report))


def write_reports(
    report: Report, folder: str | Path, name: str = "commscope"
) -> tuple[Path, Path, Path]:
    """The .txt, .json and .html in `folder` as `commscope report --out` names them
    (`<time>_<model>_…`; `name` where the report names no model); WriteError (a
    ConfigError) when they cannot be written."""
    return files.write_reports(report, Path(folder), name, datetime.now(UTC))
