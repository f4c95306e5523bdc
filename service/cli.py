"""The `commscope` command (shell: argv, files, exit codes).

    commscope report DIR [--config F] [--out DIR] [--batch-size N] [--seq-len N]
                         [--peak-bandwidth GBPS] [--print]
    commscope collect --watch DIR --aggregator tcp://HOST:5555 --node NAME --state DIR
                      --keys DIR --server-key FILE
    commscope aggregate --listen tcp://0.0.0.0:5555 --metrics-port 9464 --out DIR [--state DIR]
                        --keys DIR --allow DIR
    commscope keys --out DIR --name NODE
    commscope diff A.json B.json [--fail-on-regression]
    commscope merge A.json B.json [...] [-o OUT.json] [--json]
    commscope timeline DIR --out FILE[.gz] [--gzip] [--hosts SPEC] [--config F]

Exit codes: 0 every input analysed; 3 report written but some inputs were skipped (listed in
the report); 4 every input analysed, but they hold several jobs: one report per job;
1 nothing could be done (bad flag value, config, no traces, every input skipped, not a report,
broken install); 2 usage error, or reports `merge` cannot combine; 5 `diff
--fail-on-regression` and the step time got significantly worse; 6 `aggregate` wrote the
final report, but files were lost (streams unfinished when the run ended, or a collector that
never sent end-of-run), or `collect` could not read a file (every read failed); 7 `diff
--fail-on-regression` could not test (not two runs of one job, too few steps). The table of
every code per command: docs/service.md, "Exit codes".
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shlex
import signal
import sys
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

from commscope.collector.inspector_windows import DEFAULT_WINDOW_S, WindowRule
from commscope.collector.jsonstream import require_c_backend
from commscope.exporters import diff, files, flighttext, jsonreport, text
from commscope.exporters.files import write_reports
from commscope.exporters.metricnames import MAX_RANK_SERIES, SHARD_PATTERN
from commscope.exporters.progress import TerminalProgress
from commscope.model.errors import ClusterError, CommscopeError, ConfigError, MergeError
from commscope.model.schema import MAX_BATCH_EVENTS, NODE_PATTERN, Inputs, Report, RunEnd
from commscope.model.version import installed_version
from commscope.pipeline import compare
from commscope.pipeline.merge import check_distinct, combine
from commscope.pipeline.ranks import rank_set
from commscope.pipeline.report import Options
from commscope.service import api, offline, parallel, timeline
from commscope.service.cluster import CONNECT_TIMEOUT_S
from commscope.service.endpoints import LOOPBACK, endpoint
from commscope.service.logs import configure_logging
from msgspec.structs import replace

if TYPE_CHECKING:  # the daemons are imported when one runs (`report` needs neither: lean)
    from commscope.service.aggregate import AggregatorSettings
    from commscope.service.collect import CollectorSettings

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_SKIPPED: Final = 3
EXIT_JOBS: Final = 4
EXIT_REGRESSION: Final = 5
EXIT_LOST: Final = 6
EXIT_UNTESTED: Final = 7
LINGER_S: Final = 45.0  # two scrapes at Prometheus' default 15 s interval, and a margin


def main(argv: Sequence[str] | None = None, stop: threading.Event | None = None) -> int:
    """`stop`: set by signals caught before this module loaded (service/main.py)."""
    given = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(given)
    args.stop = stop
    args.command = ["commscope", *given]
    try:
        require_c_backend()
        return int(args.run(args))
    except CommscopeError as exc:
        print(f"commscope: error: {exc}", file=sys.stderr)
        return EXIT_FAILED


def _parser() -> argparse.ArgumentParser:
    cpus = parallel.cores()  # the default --jobs of report and collect: read once (cgroup files)
    parser = argparse.ArgumentParser(
        prog="commscope",
        description="Where a distributed training run's time goes: compute vs communication.",
    )
    parser.add_argument("--version", action="version", version=f"commscope {installed_version()}")
    parser.add_argument(
        "--print-completion",
        choices=("bash",),
        action=_Completion,
        help="print a bash completion script and exit: "
        "`source <(commscope --print-completion bash)`",
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")
    report = commands.add_parser(
        "report",
        help="analyse finished traces and write the text and JSON reports",
        description="Analyse a window (iteration_N/ of rank traces) or a run folder of windows.",
    )
    report.add_argument("traces", type=Path, help="window or run folder (or one trace file)")
    report.add_argument(
        "--out",
        type=Path,
        default=Path("trace_analysis"),
        help="report folder (default: %(default)s)",
    )
    _job_options(report)
    report.add_argument(
        "--format",
        choices=("text", "json"),
        help="also print the report to stdout in this format; with json, stdout is the JSON "
        "alone (a list of reports when the files hold several jobs) and the summary goes to "
        "stderr (default: print only the summary line)",
    )
    report.add_argument("--print", action="store_true", help="the same as --format text")
    report.add_argument("--no-progress", action="store_true", help="no progress line")
    _inspector_window(report)
    report.add_argument(
        "--jobs",
        type=count,
        default=cpus,
        metavar="N",
        help="files parsed at once, by this process and N - 1 worker processes (default: the "
        "CPUs this process may use, its affinity capped by a cgroup CPU quota (a container's "
        "CPU limit), %(default)s here; 1: all in this process)",
    )
    report.add_argument(
        "--dask",
        metavar="ADDRESS",
        help="parse the files on a dask.distributed cluster (its scheduler, e.g. "
        "tcp://scheduler:8786; the workers must see the files at the same paths; needs the "
        "dask extra) (default: none: local processes, see --jobs)",
    )
    report.add_argument(
        "--dask-timeout",
        type=float,
        default=CONNECT_TIMEOUT_S,
        metavar="S",
        help="give up when the scheduler has not answered within S (default: %(default)s)",
    )
    report.add_argument(
        "--timeline",
        type=Path,
        metavar="FILE",
        help="also write the aligned timeline of all ranks (see `commscope timeline`; gzip "
        "when FILE ends in .gz) (default: none)",
    )
    report.set_defaults(run=_report)
    _timeline_parser(commands, cpus)
    _collect_parser(commands, cpus)
    _aggregate_parser(commands)
    _keys_parser(commands)
    compare = commands.add_parser(
        "diff",
        help="what changed between two runs' JSON reports",
        description="Compare two JSON reports: whole-run figures, busbw per collective, the "
        "verdicts, and whether the step time changed significantly (Welch's t-test).",
    )
    compare.add_argument("before", type=Path, help="the JSON report of run A")
    compare.add_argument("after", type=Path, help="the JSON report of run B")
    compare.add_argument(
        "--fail-on-regression",
        action="store_true",
        help=f"exit {EXIT_REGRESSION} when B's step time is significantly worse than A's, "
        f"{EXIT_UNTESTED} when it cannot be tested (A and B not two runs of one job, or under "
        "3 steps a side)",
    )
    compare.set_defaults(run=_diff)
    _merge_parser(commands)
    return parser


class _Completion(argparse.Action):
    """Prints the completion script of the parser it belongs to, then exits."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(bash_completion(parser))
        parser.exit()


def bash_completion(parser: argparse.ArgumentParser) -> str:
    """A bash completion function for `commscope`: its commands, then each one's visible
    options; anything else completes as a path."""
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    top = [*commands.choices, *_visible(parser)]
    cases = "".join(
        f"    {name}) opts={shlex.quote(' '.join(_visible(sub)))} ;;\n"
        for name, sub in commands.choices.items()
    )
    return (
        "_commscope() {\n"
        '  local cur="${COMP_WORDS[COMP_CWORD]}" opts=""\n'
        '  if [ "$COMP_CWORD" -eq 1 ]; then\n'
        f'    mapfile -t COMPREPLY < <(compgen -W {shlex.quote(" ".join(top))} -- "$cur")\n'
        "    return\n"
        "  fi\n"
        '  case "${COMP_WORDS[1]}" in\n'
        f"{cases}"
        "  esac\n"
        '  if [[ "$cur" == -* ]]; then\n'
        '    mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")\n'
        "  else\n"
        '    mapfile -t COMPREPLY < <(compgen -f -- "$cur")\n'
        "  fi\n"
        "}\n"
        "complete -o filenames -F _commscope commscope\n"
    )


def _visible(parser: argparse.ArgumentParser) -> list[str]:
    """The option strings --help shows (hidden old names left out)."""
    return [
        flag
        for action in parser._actions
        if action.help != argparse.SUPPRESS
        for flag in action.option_strings
    ]


def _merge_parser(commands: Any) -> None:
    merge = commands.add_parser(
        "merge",
        help="combine shard reports (each aggregator's, or reports on subsets of the ranks)",
        description="Combine the JSON reports of shards of one job into one report: figures "
        "per rank and over ranks exactly; the cross-rank analysis for the process groups "
        f"inside one shard only. Exit {EXIT_USAGE} with the reason when the reports cannot be "
        "merged (not reports, different jobs or options, one rank reported differently, a "
        "shard given twice).",
    )
    merge.add_argument("reports", type=Path, nargs="+", help="the shards' JSON reports")
    merge.add_argument(
        "-o",
        "--out",
        type=Path,
        metavar="OUT.json",
        help="also write the merged report: the JSON here, the .txt and .html beside it "
        "(default: none)",
    )
    merge.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="print the merged report as text or JSON (default: %(default)s)",
    )
    merge.add_argument("--json", action="store_true", help="the same as --format json")
    merge.set_defaults(run=_merge)


def _merge(args: argparse.Namespace) -> int:
    """Exit 2 with one line when the reports cannot be merged (a shard given twice too)."""
    if args.out is not None:
        files.check_file(args.out)
        if args.out.suffix.lower() != ".json":
            why = "name the JSON report (.json): the .txt and .html go beside it"
            print(f"commscope merge: error: -o {args.out}: {why}", file=sys.stderr)
            return EXIT_USAGE
    try:
        named = [(str(path), api.load_report(path)) for path in args.reports]
        check_distinct(named)
        merged = combine(named)
    except (ConfigError, MergeError) as exc:
        print(f"commscope merge: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    inputs = [str(path.resolve()) for path in args.reports]
    merged = files.stamped(merged, inputs, args.command, datetime.now(UTC))
    rendered = text.render(merged)
    if args.out is not None:
        try:
            paths = files.write_beside(merged, args.out, rendered)
        except OSError as exc:
            raise ConfigError(f"{args.out}: cannot write ({exc.strerror or exc})") from None
        print("\n".join(f"commscope: wrote {path}" for path in paths), file=sys.stderr)
    if args.json or args.format == "json":
        sys.stdout.buffer.write(jsonreport.render(merged))
    else:
        sys.stdout.write(rendered)
    return EXIT_OK


def _job_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=Path,
        help="TorchTitan job config (.toml or .json) (default: none: throughput and MFU n/a "
        "unless the flags below give what they need)",
    )
    parser.add_argument(
        "--batch-size",
        metavar="N",
        help="local batch size, overrides the config (default: the config's)",
    )
    parser.add_argument(
        "--seq-len",
        metavar="N",
        help="sequence length, overrides the config (default: the config's)",
    )
    parser.add_argument(
        "--peak-bandwidth",
        type=float,
        metavar="GBPS",
        help="link peak per direction, GB/s (default: from the GPU name, e.g. H100 450)",
    )
    parser.add_argument(
        "--flops-per-token",
        type=float,
        metavar="F",
        help="model FLOPs per token, for MFU (default: 6·N + 12·L·D·T from the config's model "
        "or --params)",
    )
    parser.add_argument(
        "--params",
        metavar="N",
        help="parameters without the embedding, for MFU, e.g. 7.5e9 (default: from the "
        "config's model)",
    )
    parser.add_argument(
        "--peak-tflops",
        type=float,
        metavar="T",
        help="GPU peak dense TFLOP/s, for MFU (default: from the GPU name, e.g. H100 989)",
    )
    parser.add_argument(
        "--hosts",
        metavar="SPEC",
        help="which host each rank ran on, where the traces do not say: RANKS=HOST entries "
        "(0-3=node0,4-7=node1) or a file of them, one a line (default: the traces' own)",
    )
    parser.add_argument(
        "--net-peak",
        type=float,
        metavar="GBPS",
        help="inter-node (network) link peak per direction, GB/s, e.g. 50 for 400 Gb/s "
        "(default: none: inter-node utilization n/a)",
    )


def _collect_parser(commands: Any, cpus: int) -> None:
    collect = commands.add_parser(
        "collect",
        help="stream this node's rank traces to the aggregator (a sidecar daemon)",
        description="Watch a folder for rank traces as they are written and stream them to "
        "the aggregator. SIGTERM: finish the files being read, send end-of-run, exit. "
        f"Exit {EXIT_LOST}: a file could not be read (named in the report); only --state is "
        "written.",
    )
    collect.add_argument("--watch", type=Path, required=True, help="the trace folder")
    collect.add_argument("--aggregator", required=True, help="e.g. tcp://agg-host:5555")
    collect.add_argument("--node", required=True, help="this node's name (unique in the job)")
    collect.add_argument("--state", type=Path, required=True, help="checkpoint folder")
    collect.add_argument("--poll", action="store_true", help="poll (network filesystems)")
    collect.add_argument(
        "--poll-interval",
        type=float,
        default=2.0,
        metavar="S",
        help="with --poll: look for changes every S seconds (default: %(default)s)",
    )
    collect.add_argument(
        "--file-idle",
        type=float,
        default=2.0,
        metavar="S",
        help="a file not growing for S seconds is at its end (a trace whose JSON or gzip "
        "stream has ended is not waited for) (default: %(default)s)",
    )
    _deprecated(collect, "--quiet", "--file-idle", float)
    collect.add_argument(
        "--settle",
        type=float,
        default=300.0,
        metavar="S",
        help="a document still unfinished S seconds after its last change is reported "
        "truncated (default: %(default)s)",
    )
    collect.add_argument(
        "--max-unacked",
        type=count,
        default=64,
        metavar="N",
        help="records sent and not yet acknowledged, at most; then reading pauses "
        "(default: %(default)s)",
    )
    _deprecated(collect, "--window", "--max-unacked", count)
    _collect_timing(collect)
    collect.add_argument(
        "--metrics-port", type=int, help="serve this collector's own /metrics (default: none)"
    )
    collect.add_argument(
        "--metrics-addr", default="0.0.0.0", help="address of /metrics (default: %(default)s)"
    )
    collect.add_argument(
        "--job", default="commscope", help="the job label of its metrics (default: %(default)s)"
    )
    collect.add_argument("--batch-events", type=count, default=4096, help=argparse.SUPPRESS)
    collect.add_argument(
        "--jobs",
        type=count,
        default=cpus,
        metavar="N",
        help="files whose document has ended are reduced in N worker processes, several at "
        "once (default: the CPUs this process may use, its affinity capped by a cgroup CPU "
        "quota (a container's CPU limit: a sidecar limited to 2 CPUs starts 2), %(default)s "
        "here; 1: all in this process); a file still being written is read here as it grows",
    )
    _collect_keys(collect)
    _inspector_window(collect)
    collect.add_argument(
        "--once", action="store_true", help="send what is there, then end-of-run and exit"
    )
    collect.set_defaults(run=_collect)


def _inspector_window(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--inspector-window",
        type=int,
        default=DEFAULT_WINDOW_S,
        metavar="S",
        help="cut each NCCL Inspector log into windows of S seconds on its own clock, aligned "
        "to multiples of S since the epoch so that every rank's window covers the same span "
        "(an op logged late goes to the lowest window still open; a window closes S/5 "
        "seconds after its end); the same S for `collect` and `report` gives the same "
        "windows (default: %(default)s; 0: the whole log is one window)",
    )


def _window_rule(args: argparse.Namespace) -> WindowRule:
    return api.window_rule(args.inspector_window)


def _collect_timing(collect: argparse.ArgumentParser) -> None:
    for flag, default, what in (
        ("--resend-after", 2.0, "resend a record not acknowledged within S seconds, or "
         "within the aggregator's measured round trip if longer (doubling while unanswered)"),
        ("--heartbeat", 5.0, "tell the aggregator every S seconds that this collector lives"),
        ("--drain", 60.0, "after SIGTERM, exit within S seconds even if the last files or "
         "end-of-run are not acknowledged; with --once, exit 1 once the aggregator has not "
         "answered for S seconds"),
        ("--silence", 30.0, "warn (and report connected 0) when the aggregator has not "
         "answered for S seconds"),
    ):  # fmt: skip
        collect.add_argument(
            flag, type=float, default=default, metavar="S", help=f"{what} (default: %(default)s)"
        )


def _deprecated(parser: argparse.ArgumentParser, old: str, new: str, kind: Any) -> None:
    """`old`, hidden from --help, still accepted for `new`, with a warning on stderr."""
    parser.add_argument(
        old,
        type=kind,
        dest=new.lstrip("-").replace("-", "_"),
        action=_Renamed,
        help=argparse.SUPPRESS,
    )


class _Renamed(argparse.Action):
    """An option's old name: stores into the new one's place and says so once."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        new = "--" + self.dest.replace("_", "-")
        print(f"commscope: warning: {option_string} is deprecated, use {new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def _aggregate_parser(commands: Any) -> None:
    aggregate = commands.add_parser(
        "aggregate",
        help="receive the collectors' streams; serve /metrics; write the reports at run end",
        description="The job's aggregator. The run ends when every collector has sent "
        "end-of-run (without --expect-nodes, none still sending heartbeats or files), on "
        "SIGTERM, or after --idle-timeout; then the reports are written and /metrics stays "
        f"up --linger seconds. Exit {EXIT_LOST}: the report was written but files were lost "
        "(streams unfinished, or a collector that never sent end-of-run).",
    )
    aggregate.add_argument("--listen", required=True, help="e.g. tcp://0.0.0.0:5555")
    aggregate.add_argument(
        "--out",
        type=Path,
        default=Path("trace_analysis"),
        help="report folder, written at the end of the run (default: %(default)s)",
    )
    aggregate.add_argument("--state", type=Path, help="durable state folder (default: OUT/state)")
    aggregate.add_argument(
        "--linger",
        type=float,
        default=LINGER_S,
        metavar="S",
        help="keep /metrics up S seconds after the run (default: %(default)s)",
    )
    aggregate.add_argument(
        "--metrics-port", type=int, help="serve Prometheus /metrics here (default: none)"
    )
    aggregate.add_argument(
        "--metrics-addr", default="0.0.0.0", help="address of /metrics (default: %(default)s)"
    )
    aggregate.add_argument(
        "--job",
        default=None,
        help="the job label of every metric, and the reports' name when the config names no "
        "model (default: the model's name; the reports: the first watch folder's)",
    )
    aggregate.add_argument(
        "--shard",
        default="",
        metavar="NAME",
        help="this aggregator's shard (the nodes whose collectors point at it): a "
        "`shard` label on every metric, so several aggregators' metrics meet in one "
        "Prometheus or VictoriaMetrics (default: none, no label)",
    )
    aggregate.add_argument(
        "--ranks",
        default="",
        metavar="SPEC",
        help="a shard's ranks, e.g. 0-255 or 0-63,128-191: a window is complete here once "
        "each of these has finished a file (default: every rank of the job, 0 … world-1)",
    )
    _aggregate_run_options(aggregate)
    aggregate.add_argument(
        "--keys",
        type=Path,
        metavar="DIR",
        help="the aggregator's key pair (default: none: --insecure is then required)",
    )
    aggregate.add_argument(
        "--allow",
        type=Path,
        metavar="DIR",
        help="the collectors' public keys, NODE.key files (default: none: needs --insecure)",
    )
    _insecure_option(aggregate)
    aggregate.add_argument(
        "--max-nodes",
        type=count,
        default=1024,
        metavar="N",
        help="collectors (node names) at most (default: %(default)s)",
    )
    aggregate.add_argument(
        "--max-handshakes",
        type=count,
        default=16,
        metavar="N",
        help="connections in their handshake at once; more are shut at once (default:"
        " %(default)s; memory before authentication is at most N x 4 MiB)",
    )
    aggregate.add_argument(
        "--handshake-timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="a connection that has not finished its handshake in S seconds is closed"
        " (default: %(default)s)",
    )
    aggregate.add_argument(
        "--max-streams",
        type=count,
        default=4096,
        metavar="N",
        help="files open at once, in all (default: %(default)s)",
    )
    aggregate.add_argument(
        "--max-rank-series",
        type=int,
        default=MAX_RANK_SERIES,
        metavar="N",
        help="per-rank Prometheus series for N ranks at most: beyond, only the N "
        "lowest-numbered ranks (the rank the others wait for in place of the last) keep theirs and "
        "commscope_ranks_folded counts the rest; job-wide series still cover every rank; "
        "0: no cap (default: %(default)s)",
    )
    _job_options(aggregate)
    aggregate.set_defaults(run=_aggregate)


def _aggregate_run_options(aggregate: argparse.ArgumentParser) -> None:
    aggregate.add_argument(
        "--expect-nodes",
        type=count,
        default=0,
        metavar="N",
        help="the run ends only once N collectors have sent end-of-run (default: %(default)s: "
        "once every collector seen has, and none is still sending)",
    )
    aggregate.add_argument(
        "--idle-timeout",
        type=float,
        metavar="S",
        help="end the run after S seconds without a message from any collector (default: never)",
    )
    aggregate.add_argument(
        "--end-grace",
        type=float,
        default=300.0,
        metavar="S",
        help="a collector silent S seconds (no heartbeat, no record) without end-of-run is no "
        "longer waited for: the run ends once every other has ended, and the report names it "
        "(longer than the collectors' --heartbeat; default: %(default)s)",
    )
    aggregate.add_argument(
        "--horizon",
        type=float,
        default=600.0,
        metavar="S",
        help="the rolling busbw statistics on /metrics cover the last S seconds "
        "(default: %(default)s)",
    )
    aggregate.add_argument(
        "--refresh",
        type=float,
        default=5.0,
        metavar="S",
        help="publish the aggregator's own counters to /metrics every S seconds (a report: "
        "when a window completes, and at each quarter of an open window's ranks) "
        "(default: %(default)s)",
    )
    aggregate.add_argument(
        "--credit",
        type=count,
        default=64,
        metavar="N",
        help="records in flight per file (default: %(default)s)",
    )


def _collect_keys(collect: argparse.ArgumentParser) -> None:
    collect.add_argument(
        "--keys",
        type=Path,
        metavar="DIR",
        help="this collector's key pair (default: none: --insecure is then required)",
    )
    collect.add_argument(
        "--server-key",
        type=Path,
        metavar="FILE",
        help="the aggregator's public key, NAME.key (default: none: needs --insecure)",
    )
    _insecure_option(collect)


def _insecure_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--insecure",
        action="store_true",
        help=f"no keys: an unauthenticated link, allowed only on loopback ({LOOPBACK})",
    )


def _keys_parser(commands: Any) -> None:
    keys = commands.add_parser(
        "keys",
        help="make a CurveZMQ key pair for a collector or the aggregator",
        description="Write NAME.key (the public key: into the aggregator's --allow folder, or "
        "the collectors' --server-key) and NAME.key_secret (mode 0600: the daemon's --keys).",
    )
    keys.add_argument("--out", type=Path, required=True, help="folder to write the pair into")
    keys.add_argument("--name", required=True, help="the node name (collector) or 'aggregator'")
    keys.set_defaults(run=_keys)


def _timeline_parser(commands: Any, cpus: int) -> None:
    line = commands.add_parser(
        "timeline",
        help="write one Chrome/Perfetto trace of all ranks on aligned clocks",
        description="Write the Kineto traces of the job under DIR as one Chrome/Perfetto trace: "
        "each rank a process, its events shifted by its estimated clock offset, collectives "
        "annotated with their instance, waiting and transfer (docs/usage.md, Timeline).",
    )
    line.add_argument("traces", type=Path, help="window or run folder (or one trace file)")
    line.add_argument("--out", type=Path, required=True, metavar="FILE", help="the trace to write")
    line.add_argument("--gzip", action="store_true", help="gzip it (default: if FILE ends in .gz)")
    line.add_argument("--jobs", type=count, default=cpus, metavar="N",
                      help="files parsed at once (default: %(default)s)")  # fmt: skip
    line.add_argument("--hosts", metavar="SPEC", help="as `report --hosts` (default: none)")
    line.add_argument("--config", type=Path, help="as `report --config` (default: none)")
    line.set_defaults(run=_timeline)


def _timeline(args: argparse.Namespace) -> int:
    """Exit 0 when every input is on the timeline, 3 when some were left out (listed). The
    analysis is `report`'s, with the options that change what the timeline shows."""
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {args.jobs}")
    options = api.options(config=args.config, hosts=args.hosts)
    files.check_file(args.out)  # before the long work, not after it
    found = api.analysis(args.traces, options=options, workers=args.jobs)
    return _timeline_written(found, args.out, args.gzip or None)


def _timeline_written(found: offline.Analysis, out: Path, compress: bool | None) -> int:
    written = timeline.write(found, out, compress=compress)
    for left in written.skipped:
        print(f"commscope: left out {left.path}: {left.reason}", file=sys.stderr)
    print(f"commscope: wrote {out} ({written.ranks:,} ranks, {written.events:,} events)")
    return EXIT_SKIPPED if written.skipped else EXIT_OK


def _keys(args: argparse.Namespace) -> int:
    from commscope.service import curve  # noqa: PLC0415 (zmq: only for the keys)

    public, secret = curve.make_pair(args.out, args.name)
    print(f"commscope: wrote {public} (public key of {args.name}: share it)")
    print(f"commscope: wrote {secret} (secret key, mode 0600: keep it on {args.name} only)")
    return EXIT_OK


def _report(args: argparse.Namespace) -> int:
    options = _options(args)
    files.check_folder(args.out)  # before the long work, not after it
    if args.timeline is not None:
        files.check_file(args.timeline)
    progress = None
    if not args.no_progress and sys.stderr.isatty():
        progress = TerminalProgress(sys.stderr)
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {args.jobs}")
    try:
        found = api.analysis(
            args.traces, options=options, workers=args.jobs, progress=progress,
            inspector_window=args.inspector_window, dask=args.dask, dask_timeout=args.dask_timeout,
        )  # fmt: skip
    except ClusterError as exc:
        print(f"commscope: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    reports, kept = found.reports, (found if args.timeline is not None else None)
    del found  # the parsed files: held while the reports are written for the timeline only
    inputs = reports[0].inputs
    alone = reports[0].flight_recorder is None  # Flight Recorder dumps alone still report
    if len(reports) == 1 and inputs.files == len(inputs.skipped) and alone:
        return _nothing_analysed(inputs)
    now = datetime.now(UTC)
    source = [str(args.traces.resolve())]
    reports = [files.stamped(r, source, args.command, now) for r in reports]
    console = sys.stderr if args.format == "json" else sys.stdout  # stdout: the JSON alone
    for report in reports:
        rendered = text.render(report)  # the .txt and --print (and the HTML up to 16 ranks)
        paths = write_reports(report, args.out, args.traces.resolve().name, now, rendered)
        if args.print or args.format == "text":
            sys.stdout.write(rendered)
        _summary_line(report, console)
        print("\n".join(f"commscope: wrote {path}" for path in paths), file=console)
    if args.format == "json":
        _print_json(reports)
    skipped = list(dict.fromkeys(s for r in reports for s in r.inputs.skipped))
    _input_lines(replace(inputs, skipped=skipped))
    if kept is not None:
        _timeline_written(kept, args.timeline, None)
    if skipped:
        return EXIT_SKIPPED
    return EXIT_JOBS if len(reports) > 1 else EXIT_OK


def _nothing_analysed(inputs: Inputs) -> int:
    """Every input skipped or ignored: say why, write no report."""
    _input_lines(inputs)
    found = f"{inputs.files} trace file(s) skipped" if inputs.files else "no trace"
    ignored = f", {len(inputs.ignored)} other JSON file(s) ignored" if inputs.ignored else ""
    message = f"nothing analysed ({found}{ignored}); no report written"
    print(f"commscope: error: {message}", file=sys.stderr)
    return EXIT_FAILED


def _diff(args: argparse.Namespace) -> int:
    reports = [api.load_report(path) for path in (args.before, args.after)]
    comparison = compare.compare(reports[0], reports[1])
    names = (str(args.before), str(args.after))
    sys.stdout.write(diff.render(reports[0], reports[1], names, comparison))
    if not args.fail_on_regression:
        return EXIT_OK
    why = compare.untested(comparison)
    if why is not None:
        print(f"commscope: step time not tested, not gated: {why}", file=sys.stderr)
        return EXIT_UNTESTED
    print(f"commscope: {diff.regression(comparison.step_time)}", file=sys.stderr)
    return EXIT_REGRESSION if comparison.step_time.worse else EXIT_OK


def _collect(args: argparse.Namespace) -> int:
    from commscope.service import curve  # noqa: PLC0415 (the daemon's imports: lean `report`)
    from commscope.service.collect import Collector  # noqa: PLC0415

    settings = _collector_settings(args)
    configure_logging()
    if settings.keys is None:
        curve.warn_insecure(args.aggregator)
    stop = _stop_on_signals(args.stop)
    try:
        collector = Collector(settings)
    except OSError as exc:
        raise ConfigError(f"{args.state}: cannot use the state folder ({exc})") from None
    acknowledged = collector.run(stop)
    if collector.lost:  # named in the report; never exit 0 having lost a file
        return EXIT_LOST
    return EXIT_OK if acknowledged else EXIT_FAILED


def _collector_settings(args: argparse.Namespace) -> CollectorSettings:
    from commscope.collector.stream import StreamSettings  # noqa: PLC0415 (as in _collect)
    from commscope.service import curve  # noqa: PLC0415
    from commscope.service.collect import CollectorSettings  # noqa: PLC0415

    """The collector's settings from its flags, each checked (ConfigError: one line)."""
    api.positive(("--max-unacked", args.max_unacked), ("--poll-interval", args.poll_interval))
    api.positive(("--settle", args.settle), ("--resend-after", args.resend_after))
    api.positive(("--silence", args.silence))
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be at least 1, got {args.jobs}")
    aggregator = endpoint("--aggregator", args.aggregator)
    keys = curve.client_keys(aggregator, args.keys, args.server_key, args.node, args.insecure)
    if not re.fullmatch(NODE_PATTERN, args.node):
        raise ConfigError(f"--node {args.node!r}: letters, digits and _.:@- only (253 at most)")
    if not 1 <= args.batch_events <= MAX_BATCH_EVENTS:
        raise ConfigError(
            f"--batch-events must be 1 to {MAX_BATCH_EVENTS}, got {args.batch_events}"
        )
    return CollectorSettings(
        watch=args.watch,
        aggregator=aggregator,
        node=args.node,
        state=args.state,
        stream=StreamSettings(
            quiet_s=args.file_idle, settle_s=args.settle, batch_events=args.batch_events
        ),
        use_inotify=not args.poll,
        poll_s=args.poll_interval,
        window=args.max_unacked,
        resend_s=args.resend_after,
        heartbeat_s=args.heartbeat,
        once=args.once,
        drain_s=args.drain,
        silence_s=args.silence,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        job=args.job,
        keys=keys,
        jobs=args.jobs,
        inspector=_window_rule(args),
    )


def _aggregate(args: argparse.Namespace) -> int:
    from commscope.service import curve  # noqa: PLC0415 (the daemon's imports: lean `report`)
    from commscope.service.aggregate import Aggregator  # noqa: PLC0415
    from commscope.service.store import run_end  # noqa: PLC0415

    settings = _aggregator_settings(args)
    configure_logging()
    if settings.keys is None:
        curve.warn_insecure(args.listen)
    log = logging.getLogger("commscope.aggregate")  # the summary joins the log stream
    stop = _stop_on_signals(args.stop)
    try:
        ended = run_end(settings.state)
        if ended is not None:  # a restart after the run: nothing to wait for, nothing to write
            return _ended_before(settings.state, ended)
        aggregator = Aggregator(settings)
    except OSError as exc:
        raise ConfigError(f"{settings.state}: cannot use the state folder ({exc})") from None
    report = aggregator.run(stop)
    log.info("run summary", extra={"summary": _summary(report), "lost": len(aggregator.lost)})
    for warning in report.config.warnings:
        log.warning("config warning", extra={"warning": warning})
    return _run_exit(aggregator.lost)


def _ended_before(state: Path, ended: RunEnd) -> int:
    """Started on the state folder of a run that has ended: one line, the run's exit."""
    logging.getLogger("commscope.aggregate").warning(
        "the run of this state folder has ended and its reports are written: nothing to do "
        "(another --state, or the folder removed, starts a new run)",
        extra={"state": str(state), "reports": ended.reports, "lost": ended.lost},
    )
    return _run_exit(ended.lost)


def _run_exit(lost: Sequence[str]) -> int:
    """The aggregator's exit: 6 when files were lost (the report is written all the same)."""
    return EXIT_LOST if lost else EXIT_OK


def _aggregator_settings(args: argparse.Namespace) -> AggregatorSettings:
    from commscope.service import curve  # noqa: PLC0415 (as in _aggregate)
    from commscope.service.aggregate import AggregatorSettings  # noqa: PLC0415

    """The aggregator's settings from its flags, each checked (ConfigError: one line)."""
    options = _options(args)
    api.positive(("--credit", args.credit), ("--horizon", args.horizon))
    api.positive(("--end-grace", args.end_grace))
    api.positive(("--max-nodes", args.max_nodes), ("--max-streams", args.max_streams))
    api.positive(("--max-handshakes", args.max_handshakes))
    if not 0 < args.handshake_timeout <= 3600:
        raise ConfigError(f"--handshake-timeout: 0 < S <= 3600, got {args.handshake_timeout}")
    endpoint("--listen", args.listen, bind=True)
    keys = curve.server_keys(args.listen, args.keys, args.allow, args.insecure)
    _port("--metrics-port", args.metrics_port)
    files.check_folder(args.out)  # the report is written at the end: fail now, not then
    if not args.linger >= 0:
        raise ConfigError(f"--linger must be 0 or more, got {args.linger}")
    job = args.job or (options.config.model if options.config and options.config.model else None)
    state = args.state if args.state is not None else args.out / "state"
    return AggregatorSettings(
        listen=args.listen,
        out=args.out,
        state=state,
        linger_s=args.linger,
        max_nodes=args.max_nodes,
        max_streams=args.max_streams,
        job=job or "commscope",
        options=options,
        metrics_port=args.metrics_port,
        metrics_addr=args.metrics_addr,
        expect_nodes=args.expect_nodes,
        idle_timeout_s=args.idle_timeout,
        end_grace_s=args.end_grace,
        horizon_s=args.horizon,
        credit=args.credit,
        refresh_s=args.refresh,
        keys=keys,
        shard=_shard(args.shard),
        ranks=_ranks(args.ranks),
        max_rank_series=_at_least_0("--max-rank-series", args.max_rank_series),
        command=tuple(args.command),
        name=args.job or "",
        handshake_s=args.handshake_timeout,
        max_handshakes=args.max_handshakes,
    )


def _at_least_0(name: str, value: int) -> int:
    if value < 0:
        raise ConfigError(f"{name} must be 0 or more, got {value}")
    return value


def _shard(shard: str) -> str:
    if shard and not re.fullmatch(SHARD_PATTERN, shard):
        raise ConfigError(f"--shard {shard!r}: letters, digits and _.:@- only (63 at most)")
    return shard


def _ranks(spec: str) -> frozenset[int] | None:
    if not spec:
        return None
    try:
        return rank_set(spec)
    except ValueError as exc:
        raise ConfigError(f"--ranks {spec!r}: {exc}") from None


def _port(flag: str, port: int | None) -> None:
    if port is not None and not 1 <= port <= 65535:
        raise ConfigError(f"{flag} port {port} is out of range (1-65535)")


def _stop_on_signals(early: threading.Event | None = None) -> threading.Event:
    stop = early or threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    return stop


def _options(args: argparse.Namespace) -> Options:
    """The report's options from the job flags (`api.options`, the API's too)."""
    return api.options(
        config=args.config,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        peak_bandwidth=args.peak_bandwidth,
        flops_per_token=args.flops_per_token,
        params=args.params,
        peak_tflops=args.peak_tflops,
        hosts=args.hosts,
        net_peak=args.net_peak,
    )


def count(text: str) -> int:
    """An argparse type for a count (`--jobs 8`, `--max-streams 4e3`): a usage error when the
    text is not a whole number."""
    try:
        return api.whole_number(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _input_lines(inputs: Inputs) -> None:
    for skipped in inputs.skipped:
        print(f"commscope: skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    for path in inputs.ignored:
        print(f"commscope: ignored {path}: not a trace (no traceEvents)", file=sys.stderr)
    if inputs.jobs:
        print(
            f"commscope: these files hold {len(inputs.jobs)} jobs, each reported apart "
            "(nothing matched or pooled across them)",
            file=sys.stderr,
        )


def _print_json(reports: list[Report]) -> None:
    """One report's JSON document, or a list of them (one per job)."""
    documents = [jsonreport.to_document(r) for r in reports]
    whole = documents[0] if len(documents) == 1 else documents
    sys.stdout.write(json.dumps(whole, indent=2) + "\n")


def _summary_line(report: Report, stream: TextIO) -> None:
    print(_summary(report), file=stream, flush=True)
    for line in flighttext.console_lines(report):
        print(line, file=stream, flush=True)
    for warning in report.config.warnings:
        print(f"commscope: warning: {warning}", file=sys.stderr, flush=True)


def _summary(report: Report) -> str:
    return text.summary_line(report)


if __name__ == "__main__":
    raise SystemExit(main())
