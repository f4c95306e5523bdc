"""docs/service.md's table of exit codes, walked: every code `service/cli.py` can end with is
in it (and nothing else), each row names a test that exists and asserts that code, and the
deployments (systemd units, the aggregator Job) restart a daemon on exactly the codes the table
marks "yes" and never on those it marks "no"."""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from commscope.service import cli
from commscope.service.main import SIGPIPE_EXIT
from deploycheck import DEPLOY, REPO
from test_systemd import AGGREGATOR, COLLECTOR, setting

DOC = REPO / "docs" / "service.md"
UNITS = {"collect": COLLECTOR, "aggregate": AGGREGATOR}
NAMES = {
    **{value: name for name, value in vars(cli).items() if name.startswith("EXIT_")},
    SIGPIPE_EXIT: "SIGPIPE_EXIT",
}


@dataclass(frozen=True)
class Row:
    code: int
    command: str
    meaning: str
    restarted: str  # "yes", "no", or "" (not a daemon)
    test: str  # path::function

    def __str__(self) -> str:
        return f"{self.command}-{self.code}-{self.test.rsplit('::', 1)[1]}"


@functools.cache
def rows() -> tuple[Row, ...]:
    """The table's rows (a `\\|` inside a cell is a literal bar)."""
    section = DOC.read_text(encoding="utf-8").split("\n## Exit codes\n", 1)[1]
    found = []
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| Code "):
            continue
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        code, command, meaning, restarted, test = cells
        found.append(Row(int(code), command, meaning, restarted, test.strip("`")))
    return tuple(found)


def commands() -> set[str]:
    (sub,) = [a for a in cli._parser()._actions if a.__class__.__name__ == "_SubParsersAction"]
    return set(sub.choices)  # type: ignore[attr-defined]


def test_the_table_holds_every_code_of_the_cli_and_every_command() -> None:
    assert {row.code for row in rows()} == set(NAMES)
    assert {row.command for row in rows()} == commands()


def test_each_command_has_0_and_2() -> None:
    for command in commands():
        assert {0, cli.EXIT_USAGE} <= {r.code for r in rows() if r.command == command}, command


def _function(path: str, name: str) -> str:
    """The source of test function `name` of `path`, its decorators included."""
    source = (REPO / path).read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            return "\n".join(source.splitlines()[first - 1 : node.end_lineno])
    raise AssertionError(f"{path} has no {name}")


@pytest.mark.parametrize("row", rows(), ids=str)
def test_each_row_names_a_test_that_asserts_its_code(row: Row) -> None:
    """The test exists and compares an exit status with the code (or its EXIT_ name); a test
    named for several commands names each of them."""
    path, name = row.test.split("::")
    body = _function(path, name)
    assert re.search(rf"==\s*{row.code}\b|\b{NAMES[row.code]}\b", body), row.test
    if len({r.command for r in rows() if r.test == row.test}) > 1:
        assert f'"{row.command}"' in body, (row.command, row.test)


def _prevented(command: str) -> set[int]:
    return {int(code) for code in setting(UNITS[command], "RestartPreventExitStatus").split()}


def _fail_job_codes() -> set[int]:
    (job,) = [
        d
        for d in yaml.safe_load_all((DEPLOY / "kubernetes/base/aggregator.yaml").read_text())
        if d and d["kind"] == "Job"
    ]
    rules: list[dict[str, Any]] = job["spec"]["podFailurePolicy"]["rules"]
    return {v for r in rules if r["action"] == "FailJob" for v in r["onExitCodes"]["values"]}


@pytest.mark.parametrize("command", sorted(UNITS))
def test_the_deployments_restart_what_the_table_says(command: str) -> None:
    never = {r.code for r in rows() if r.command == command and r.restarted == "no"} - {0}
    again = {r.code for r in rows() if r.command == command and r.restarted == "yes"}
    assert {r.restarted for r in rows() if r.command == command} <= {"yes", "no"}
    assert never <= _prevented(command) and not again & _prevented(command)
    if command == "aggregate":
        assert _fail_job_codes() == never
