"""The installed commscope's version (shell: reads the installed package's metadata), the one
place every daemon, report and the Dask check ask it."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def installed_version() -> str:
    """The installed commscope's version ("unknown" when run from a tree not installed)."""
    try:
        return version("commscope")
    except PackageNotFoundError:
        return "unknown"
