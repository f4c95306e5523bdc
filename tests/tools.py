"""External tools the tests use when installed (promtool, prometheus, shellcheck, …),
optional modules (an extra's: `require_module`) and the real traces of ../shared/traces
(`shared_traces`, `needs_shared`, `require_shared`).

A missing tool skips its tests, unless `COMMSCOPE_REQUIRE_TOOLS` names it (a comma-separated
list, or `1` for every tool): CI installs them and sets it, so there a missing tool fails.
"""

from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path
from types import ModuleType
from typing import Final

import pytest


def require_tool(name: str) -> str:
    """The path of tool `name`; skip the test when it is missing, fail when it is required."""
    path = shutil.which(name)
    if path is not None:
        return path
    required = os.environ.get("COMMSCOPE_REQUIRE_TOOLS", "")
    if required == "1" or name in required.split(","):
        pytest.fail(f"{name} is not installed, and COMMSCOPE_REQUIRE_TOOLS requires it")
    pytest.skip(f"{name} is not installed")


def require_module(name: str, install: str) -> ModuleType:
    """Optional module `name` (an extra's); skip the test (or, called at a module's top, the
    module) when it is missing, fail when `COMMSCOPE_REQUIRE_MODULES` (comma-separated) names
    it, as CI does."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if name in os.environ.get("COMMSCOPE_REQUIRE_MODULES", "").split(","):
            pytest.fail(f"{name} is not installed, and COMMSCOPE_REQUIRE_MODULES requires it")
        pytest.skip(f"{name} is not installed ({install})", allow_module_level=True)


# The real traces of public jobs (../shared/traces, beside the repository): used in place, as
# their README asks that they not be copied into a project. A fresh clone has none, and the
# tests that read them skip with this one reason.
SHARED_TRACES: Final = Path(__file__).resolve().parents[2] / "shared" / "traces"
NO_SHARED: Final = "real traces not present (../shared/traces, beside the repository)"


def shared_traces(*parts: str) -> Path:
    """A path under ../shared/traces (which may not exist)."""
    return SHARED_TRACES.joinpath(*parts)


def needs_shared(*parts: str) -> pytest.MarkDecorator:
    """Skip the test when this path under ../shared/traces is missing."""
    return pytest.mark.skipif(not shared_traces(*parts).exists(), reason=NO_SHARED)


def require_shared(*parts: str) -> Path:
    """This path under ../shared/traces; skip the test when it is missing."""
    path = shared_traces(*parts)
    if not path.exists():
        pytest.skip(NO_SHARED)
    return path
