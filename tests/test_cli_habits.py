"""The habits of a command-line tool: --version, `python -m commscope`, help with a default
for every option, option names that mean one thing, counts written as 7.5e9, `--format json`
on stdout, the report's provenance, and paths checked before the long work."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from builders import rank_trace, write
from commscope.model.version import installed_version
from commscope.service import cli
from commscope.service.main import SIGPIPE_EXIT

PYTHON_M = [sys.executable, "-m", "commscope"]


def commscope(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*PYTHON_M, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def window(tmp_path: Path) -> Path:
    for rank in (0, 1):
        write(tmp_path / "w" / f"rank{rank}_trace.json", rank_trace(rank, 2))
    return tmp_path / "w"


def options() -> list[tuple[str, argparse.Action]]:
    """(command, option) for every option of every sub-command."""
    parser = cli._parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return [
        (name, action)
        for name, sub in commands.choices.items()
        for action in sub._actions
        if action.option_strings and not isinstance(action, argparse._HelpAction)
    ]


def test_version_through_python_m(tmp_path: Path) -> None:
    result = commscope("--version", cwd=tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("commscope ") and result.stdout.strip() != "commscope"


@pytest.mark.parametrize(("command", "action"), options(), ids=lambda x: getattr(x, "dest", x))
def test_every_option_has_help_and_says_its_default(command: str, action: argparse.Action) -> None:
    if action.help == argparse.SUPPRESS:  # hidden: an old name kept for a renamed option
        assert action.dest in {"file_idle", "max_unacked", "batch_events"}, action.option_strings
        return
    assert action.help, action.option_strings
    flag_only = isinstance(action, argparse._StoreTrueAction) or action.required
    assert flag_only or "default" in action.help, action.option_strings


@pytest.mark.parametrize(
    ("old", "new", "value", "expected"),
    [("--quiet", "file_idle", "0.5", 0.5), ("--window", "max_unacked", "16", 16)],
)
def test_an_old_option_name_still_works_and_warns(
    old: str, new: str, value: str, expected: float, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["collect", "--watch", "w", "--aggregator", "tcp://h:1", "--node", "n", "--state", "s"]
    args = cli._parser().parse_args([*base, old, value])
    assert getattr(args, new) == expected
    replacement = "--" + new.replace("_", "-")
    assert f"warning: {old} is deprecated, use {replacement}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8", 8), ("1_000", 1000), ("8e9", 8_000_000_000), ("7.5e9", 7_500_000_000), ("2E3", 2000)],
)
def test_counts_as_people_write_them(text: str, expected: int) -> None:
    assert cli.count(text) == expected


@pytest.mark.parametrize("text", ["7.5", "1e-3", "nan", "inf", "0x10", "eight", "1e18"])
def test_what_is_not_a_count_is_a_usage_error(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        cli.count(text)


def test_a_count_option_takes_scientific_notation(capsys: pytest.CaptureFixture[str]) -> None:
    args = cli._parser().parse_args(["report", "d", "--jobs", "2e0"])
    assert args.jobs == 2
    with pytest.raises(SystemExit) as stopped:
        cli._parser().parse_args(["report", "d", "--jobs", "2.5"])
    assert stopped.value.code == 2
    assert "argument --jobs: must be a whole number, got '2.5'" in capsys.readouterr().err


def test_format_json_prints_the_json_alone_on_stdout(window: Path, tmp_path: Path) -> None:
    result = commscope("report", window, "--out", tmp_path / "o", "--format", "json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    printed = json.loads(result.stdout)  # stdout is one JSON document, nothing else
    (written,) = (tmp_path / "o").glob("*.json")
    assert printed == json.loads(written.read_text())
    assert "Verdict:" in result.stderr and "commscope: wrote" in result.stderr


def test_the_json_report_says_who_wrote_it_when_and_from_what(window: Path, tmp_path: Path) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    result = commscope("report", "w", "--out", tmp_path / "o", "--jobs", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (written,) = (tmp_path / "o").glob("*.json")
    found = json.loads(written.read_text())["provenance"]
    assert found["tool_version"] == installed_version() != "unknown"
    when = datetime.strptime(found["generated_utc"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    assert before <= when <= datetime.now(UTC)
    assert found["inputs"] == [str(window.resolve())]  # absolute, though given as `w`
    assert found["command"] == ["commscope", "report", "w", "--out", str(tmp_path / "o"),
                                "--jobs", "1"]  # fmt: skip
    (text_path,) = (tmp_path / "o").glob("*.txt")
    assert f"Generated: {found['generated_utc']} by commscope " in text_path.read_text()


def test_the_summary_line_gives_the_verdict_and_the_rank_the_others_wait_for(
    window: Path, tmp_path: Path
) -> None:
    result = commscope("report", window, "--out", tmp_path / "o", cwd=tmp_path)
    summary = result.stdout.splitlines()[0]
    assert summary.startswith("commscope: 2 of 2 files, 1 window, 2 ranks. Verdict: ")
    assert ". The rank the others wait for: " in summary and ". Overlap: mean " in summary


@pytest.mark.parametrize("blocker", ["a-file", "a-file/below"])
def test_an_out_folder_that_cannot_be_written_fails_before_the_analysis(
    window: Path, tmp_path: Path, blocker: str
) -> None:
    (tmp_path / "a-file").write_text("in the way")
    (window / "rank2_trace.json").write_text('{"traceEvents": [')  # skipped if ever read
    result = commscope("report", window, "--out", tmp_path / blocker, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith(f"commscope: error: {tmp_path / blocker}: cannot write")
    assert "Traceback" not in result.stderr and "skipped" not in result.stderr  # never read
    assert result.stdout == ""


def test_merge_checks_its_output_file_before_reading_reports(tmp_path: Path) -> None:
    result = commscope("merge", "missing.json", "-o", tmp_path, cwd=tmp_path)  # a folder
    assert result.returncode == 1
    assert result.stderr == f"commscope: error: {tmp_path}: is a folder, not a file\n"


def complete(script: str, *words: str) -> list[str]:
    """What bash completes for `words` (the last one being typed) with the script loaded."""
    line = " ".join(shlex.quote(w) for w in words)
    program = (
        f"{script}\nCOMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _commscope\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    done = subprocess.run(
        ["bash", "--norc", "-c", program], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
def test_bash_completion_offers_commands_then_their_options(tmp_path: Path) -> None:
    script = commscope("--print-completion", "bash", cwd=tmp_path).stdout
    assert complete(script, "commscope", "re") == ["report"]
    assert complete(script, "commscope", "collect", "--ma") == ["--max-unacked"]
    assert complete(script, "commscope", "collect", "--qui") == []  # an old name: not offered
    assert complete(script, "commscope", "report", "--form") == ["--format"]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_the_completion_script_passes_shellcheck(tmp_path: Path) -> None:
    script = tmp_path / "commscope.bash"
    script.write_text(commscope("--print-completion", "bash", cwd=tmp_path).stdout)
    checked = subprocess.run(
        ["shellcheck", "--shell=bash", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize("command", ["report", "diff", "merge", "collect", "aggregate", "keys"])
def test_an_unknown_option_is_a_usage_error_exit_2(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main([command, "--no-such-option"])
    assert exited.value.code == cli.EXIT_USAGE
    assert capsys.readouterr().err.startswith(f"usage: commscope {command} ")


def test_keys_exits_0_having_written_the_pair(tmp_path: Path) -> None:
    assert cli.main(["keys", "--out", str(tmp_path), "--name", "n1"]) == cli.EXIT_OK
    assert sorted(p.name for p in tmp_path.iterdir()) == ["n1.key", "n1.key_secret"]


def test_a_reader_that_leaves_early_ends_with_141(window: Path, tmp_path: Path) -> None:
    """stdout a pipe whose reader has gone before the first line: no traceback, and the
    status a shell gives a tool killed by SIGPIPE."""
    read, written = os.pipe()
    os.close(read)
    command = [*PYTHON_M, "report", str(window), "--out", str(tmp_path / "out"), "--print"]
    try:
        done = subprocess.run(
            command, stdout=written, stderr=subprocess.PIPE, text=True, timeout=120, check=False
        )
    finally:
        os.close(written)
    assert done.returncode == SIGPIPE_EXIT == 141, done.stderr
    assert "Traceback" not in done.stderr
