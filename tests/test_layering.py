"""The functional core stays pure: its modules import no sockets, threads, clocks or OS."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PURE = [
    "collector/classify.py",
    "collector/errors.py",
    "collector/jsonstream.py",
    "collector/kernels.py",
    "collector/kineto.py",
    "collector/normalize.py",
    "collector/schema.py",
    "collector/session.py",
    "pipeline/accumulate.py",
    "pipeline/alphabeta.py",
    "pipeline/clocks.py",
    "pipeline/crossrank.py",
    "pipeline/diagnosis.py",
    "pipeline/flops.py",
    "pipeline/health.py",
    "pipeline/matching.py",
    "pipeline/significance.py",
    "pipeline/skew.py",
    "pipeline/config.py",
    "pipeline/intervals.py",
    "pipeline/aggregation.py",
    "pipeline/jobs.py",
    "pipeline/ranks.py",
    "pipeline/rolling.py",
    "pipeline/sections.py",
    "pipeline/report.py",
    "pipeline/stats.py",
    "exporters/crosstext.py",
    "exporters/diff.py",
    "exporters/jsonreport.py",
    "exporters/metricnames.py",
    "exporters/naming.py",
    "exporters/text.py",
    "exporters/textfmt.py",
]
SHELL_ONLY = {
    "os",
    "sys",
    "socket",
    "threading",
    "multiprocessing",
    "subprocess",
    "signal",
    "time",
    "asyncio",
    "shutil",
    "tempfile",
    "gzip",
    "pathlib",
    "zmq",
    "prometheus_client",
    "logging",
}


def imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("module", PURE)
def test_pure_module_imports_no_shell(module: str) -> None:
    assert imported(ROOT / module) & SHELL_ONLY == set()


def test_every_module_opens_with_a_docstring() -> None:
    for path in sorted(ROOT.glob("[cpes]*/*.py")):
        if path.parent.name in {"collector", "pipeline", "exporters", "service"}:
            assert ast.get_docstring(ast.parse(path.read_text())), path
