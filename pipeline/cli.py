"""The `commscope` command (shell: argv, files, exit codes).

    commscope report DIR [--config F] [--out DIR] [--batch-size N] [--seq-len N]
                         [--peak-bandwidth GBPS] [--print]

Exit codes: 0 every input analysed; 3 report written but some inputs were skipped (listed in
the report); 1 nothing could be done (bad flag value, config, no traces, broken install);
2 usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from commscope.collector.errors import CommscopeError, ConfigError
from commscope.collector.jsonstream import require_c_backend
from commscope.collector.schema import Report
from commscope.exporters import jsonreport, naming, text
from commscope.exporters.progress import TerminalProgress
from commscope.pipeline.config import JobConfig, parse_config, with_overrides
from commscope.pipeline.report import Options
from commscope.pipeline.run import analyse

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_SKIPPED: Final = 3


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        require_c_backend()
        return int(args.run(args))
    except CommscopeError as exc:
        print(f"commscope: error: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="commscope",
        description="Where a distributed training run's time goes: compute vs communication.",
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    report = commands.add_parser(
        "report",
        help="analyse finished traces and write the text and JSON reports",
        description="Analyse a window (iteration_N/ of rank traces) or a run folder of windows.",
    )
    report.add_argument("traces", type=Path, help="window or run folder (or one trace file)")
    report.add_argument("--config", type=Path, help="TorchTitan job config (.toml or .json)")
    report.add_argument(
        "--out",
        type=Path,
        default=Path("trace_analysis"),
        help="report folder (default: %(default)s)",
    )
    report.add_argument("--batch-size", type=int, help="local batch size (overrides the config)")
    report.add_argument("--seq-len", type=int, help="sequence length (overrides the config)")
    report.add_argument(
        "--peak-bandwidth", type=float, metavar="GBPS", help="link peak per direction, GB/s"
    )
    report.add_argument("--print", action="store_true", help="also print the text report")
    report.add_argument("--no-progress", action="store_true", help="no progress line")
    report.set_defaults(run=_report)
    return parser


def _report(args: argparse.Namespace) -> int:
    options = _options(args)
    progress = None
    if not args.no_progress and sys.stderr.isatty():
        progress = TerminalProgress(sys.stderr)
    report = analyse(args.traces, options, progress)
    paths = _write(report, args.out, args.traces.resolve().name)
    if args.print:
        sys.stdout.write(text.render(report))
    _summary(report, paths)
    return EXIT_SKIPPED if report.inputs.skipped else EXIT_OK


def _options(args: argparse.Namespace) -> Options:
    for flag, value in (("--batch-size", args.batch_size), ("--seq-len", args.seq_len)):
        if value is not None and value <= 0:
            raise ConfigError(f"{flag} must be a positive integer, got {value}")
    if args.peak_bandwidth is not None and args.peak_bandwidth <= 0:
        raise ConfigError(f"--peak-bandwidth must be positive GB/s, got {args.peak_bandwidth}")
    config = None
    if args.config is not None:
        try:
            content = args.config.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"{args.config}: cannot read ({exc.strerror or exc})") from None
        config = parse_config(content, args.config.name)
    if args.batch_size is not None or args.seq_len is not None:
        config = with_overrides(config or JobConfig(), args.batch_size, args.seq_len)
    peak = args.peak_bandwidth * 1e9 if args.peak_bandwidth is not None else None
    path = str(args.config) if args.config is not None else None
    return Options(config=config, config_path=path, peak_override_Bps=peak)


def _write(report: Report, out: Path, fallback: str) -> tuple[Path, Path]:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{out}: cannot create the report folder ({exc.strerror or exc})"
        ) from None
    stem = naming.basename(report, fallback, datetime.now(UTC))
    text_path, json_path = out / f"{stem}.txt", out / f"{stem}.json"
    text_path.write_text(text.render(report), encoding="utf-8")
    json_path.write_bytes(jsonreport.render(report))
    return text_path, json_path


def _summary(report: Report, paths: tuple[Path, Path]) -> None:
    overlap = report.overlap
    mean = f"{overlap.mean * 100:.2f}%" if overlap.mean is not None else "n/a"
    inputs = report.inputs
    print(
        f"commscope: {inputs.files - len(inputs.skipped)} of {inputs.files} files, "
        f"{len(report.windows)} window(s), {len(report.ranks)} rank(s); mean overlap {mean}"
    )
    for skipped in inputs.skipped:
        print(f"commscope: skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    print(f"commscope: wrote {paths[0]}")
    print(f"commscope: wrote {paths[1]}")


if __name__ == "__main__":
    raise SystemExit(main())
