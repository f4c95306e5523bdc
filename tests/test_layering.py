"""The functional core stays pure: its modules import no sockets, threads, clocks or OS."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Final

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Pure by folder: every module of the neutral model and of the processor. Elsewhere, the pure
# modules one by one (sources' parsers, sinks' formatters, the composition root's pure cores).
PURE_FOLDERS: Final = ("model", "pipeline")
PURE_ELSEWHERE: Final = [
    "collector/classify.py",
    "collector/families.py",
    "collector/fastparse.py",
    "collector/gloosplits.py",
    "collector/flight.py",
    "collector/ncclsplits.py",
    "collector/nsyssplits.py",
    "collector/graphs.py",
    "collector/inspector.py",
    "collector/inspector_file.py",
    "collector/inspector_windows.py",
    "collector/jsonguard.py",
    "collector/jsonstream.py",
    "collector/kernels.py",
    "collector/kineto.py",
    "collector/launches.py",
    "collector/normalize.py",
    "collector/nsys.py",
    "collector/p2ppeers.py",
    "collector/p2pbatch.py",
    "collector/session.py",
    "collector/source.py",
    "exporters/alltoallvcsv.py",
    "exporters/alltoallvhtml.py",
    "exporters/alltoallvtext.py",
    "exporters/crosstext.py",
    "exporters/diff.py",
    "exporters/extremes.py",
    "exporters/graphhtml.py",
    "exporters/graphtext.py",
    "exporters/html.py",
    "exporters/htmlplots.py",
    "exporters/inspectortext.py",
    "exporters/jsonreport.py",
    "exporters/kernelhtml.py",
    "exporters/kerneltext.py",
    "exporters/flighthtml.py",
    "exporters/flighttext.py",
    "exporters/linkhtml.py",
    "exporters/linktext.py",
    "exporters/metricnames.py",
    "exporters/naming.py",
    "exporters/pipehtml.py",
    "exporters/pipetext.py",
    "exporters/svg.py",
    "exporters/text.py",
    "exporters/textfmt.py",
    "exporters/timeline.py",
    "service/cgroup.py",
    "service/intake.py",
    "service/ledger.py",
    "service/links.py",
]
PURE = sorted(
    {str(p.relative_to(ROOT)) for folder in PURE_FOLDERS for p in (ROOT / folder).glob("*.py")}
    | set(PURE_ELSEWHERE)
)
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
    for path in sorted(ROOT.glob("[cmpes]*/*.py")):
        if path.parent.name in {"model", "collector", "pipeline", "exporters", "service"}:
            assert ast.get_docstring(ast.parse(path.read_text())), path


# One rule per package: what it may import of commscope. The neutral model (model/) imports
# nothing else; sources (collector/), the processor (pipeline/) and sinks (exporters/) each
# import only the model and themselves, so sources and sinks meet only in the model; the
# composition root (service/) may import anything.
ALLOWED: Final = {
    "model": {"model"},
    "collector": {"model", "collector"},
    "pipeline": {"model", "pipeline"},
    "exporters": {"model", "exporters"},
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


def parts() -> set[str]:
    """The source folders pyproject.toml installs as `commscope.<name>`."""
    with (ROOT / "pyproject.toml").open("rb") as f:
        mapping = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return set(mapping.values()) - {"commscope"}


def sources() -> list[Path]:
    return sorted(p for part in ALLOWED for p in (ROOT / part).glob("*.py"))


@pytest.mark.parametrize("path", sources(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_packages_import_only_what_they_may(path: Path) -> None:
    reached = {package for package, _ in commscope_imports(path)}
    assert reached <= ALLOWED[path.parent.name]


def test_every_package_but_the_root_has_a_rule() -> None:
    assert set(ALLOWED) | {"service"} == parts()


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_imports_only_pure_modules(module: str) -> None:
    impure = {
        f"{package}/{name}.py"
        for package, name in commscope_imports(ROOT / module)
        if f"{package}/{name}.py" not in PURE
    }
    assert impure == set()
