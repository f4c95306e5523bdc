"""External tools the tests use when installed (promtool, prometheus, shellcheck, …), and
optional modules (an extra's: `require_module`).

A missing tool skips its tests, unless `COMMSCOPE_REQUIRE_TOOLS` names it (a comma-separated
list, or `1` for every tool): CI installs them and sets it, so there a missing tool fails.
"""

from __future__ import annotations

import importlib
import os
import shutil
from types import ModuleType

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
    """Optional module `name` (an extra's); skip the test when it is missing, fail when
    `COMMSCOPE_REQUIRE_MODULES` (comma-separated) names it, as CI does."""
    try:
        return importlib.import_module(name)
    except ImportError:
        if name in os.environ.get("COMMSCOPE_REQUIRE_MODULES", "").split(","):
            pytest.fail(f"{name} is not installed, and COMMSCOPE_REQUIRE_MODULES requires it")
        pytest.skip(f"{name} is not installed ({install})")
