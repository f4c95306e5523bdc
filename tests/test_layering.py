"""The functional core stays pure: its modules import no sockets, threads, clocks or OS."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Final

import pytest

ROOT = Path(__file__).resolve().parents[1]
PURE = [
    "collector/classify.py",
    "collector/errors.py",
    "collector/fields.py",
    "collector/families.py",
    "collector/fastparse.py",
    "collector/jsonguard.py",
    "collector/jsonstream.py",
    "collector/kernels.py",
    "collector/kineto.py",
    "collector/names.py",
    "collector/inspector.py",
    "collector/inspector_windows.py",
    "collector/inspector_file.py",
    "collector/source.py",
    "pipeline/inspector_live.py",
    "pipeline/straddle.py",
    "pipeline/cgroup.py",
    "pipeline/inspector_sources.py",
    "pipeline/inspector_beside.py",
    "exporters/inspectortext.py",
    "collector/normalize.py",
    "collector/nsys.py",
    "collector/schema.py",
    "collector/units.py",
    "collector/session.py",
    "pipeline/accumulate.py",
    "pipeline/alphabeta.py",
    "pipeline/clocks.py",
    "pipeline/compare.py",
    "pipeline/oldreasons.py",
    "pipeline/crossrank.py",
    "pipeline/diagnosis.py",
    "pipeline/edge.py",
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
    "pipeline/sketch.py",
    "pipeline/report.py",
    "pipeline/stats.py",
    "pipeline/waiting.py",
    "pipeline/facts.py",
    "pipeline/topkernels.py",
    "collector/launches.py",
    "exporters/kerneltext.py",
    "exporters/kernelhtml.py",
    "pipeline/merge.py",
    "exporters/crosstext.py",
    "exporters/diff.py",
    "exporters/html.py",
    "exporters/htmlplots.py",
    "exporters/svg.py",
    "exporters/jsonreport.py",
    "exporters/metricnames.py",
    "exporters/naming.py",
    "exporters/text.py",
    "exporters/textfmt.py",
    "exporters/extremes.py",
    "service/links.py",
    "service/intake.py",
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
    "distributed",
    "dask",
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


# Which packages each package may import (the composition root, service/, may import all):
# sources (collector/) and sinks (exporters/) meet only in the neutral schema, and a sink
# never reaches into the processor (pipeline/).
ALLOWED: Final = {
    "collector": {"collector"},
    "pipeline": {"collector", "pipeline"},
    "exporters": {"collector", "exporters"},
    "service": {"collector", "pipeline", "exporters", "service"},
}


def commscope_imports(path: Path) -> set[tuple[str, str]]:
    """(package, module) of every `commscope.<package>.<module>` import of a file, including
    `from commscope.<package> import <module>`."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            modules = [f"{node.module}.{a.name}" if len(parts) == 2 else node.module
                       for a in node.names]  # fmt: skip
        else:
            continue
        for name in modules:
            parts = name.split(".")
            if parts[0] == "commscope" and len(parts) >= 3:
                found.add((parts[1], parts[2]))
    return found


def sources() -> list[Path]:
    return sorted(p for part in ALLOWED for p in (ROOT / part).glob("*.py"))


@pytest.mark.parametrize("path", sources(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_packages_import_only_what_they_may(path: Path) -> None:
    reached = {package for package, _ in commscope_imports(path)}
    assert reached <= ALLOWED[path.parent.name]


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_imports_only_pure_modules(module: str) -> None:
    impure = {
        f"{package}/{name}.py"
        for package, name in commscope_imports(ROOT / module)
        if f"{package}/{name}.py" not in PURE
    }
    assert impure == set()
