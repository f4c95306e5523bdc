"""commscope's Python API: where a distributed training run's time goes, in a notebook.

    >>> import commscope
    >>> report = commscope.analyse("samples/gloo_ddp_2rank", config="samples/mlp_ddp.toml")
    >>> tables = commscope.frames(report)  # pandas DataFrames: pip install 'commscope[pandas]'

The names in `__all__` are the public API (docs/api.md); every other module and name of the
package is private and may change. Each name is imported on first use (PEP 562), so importing
`commscope` or one of its parts (as the collector's worker processes do) loads nothing else.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from commscope.model.errors import CommscopeError, ConfigError
    from commscope.model.frames import Frames, frames
    from commscope.model.schema import Report
    from commscope.pipeline.report import Options
    from commscope.service.api import (
        analyse,
        analyse_jobs,
        load_report,
        options,
        report_html,
        report_json,
        report_text,
        write_reports,
    )

# public name -> the module that defines it
_HOMES: Final = {
    "analyse": "commscope.service.api",
    "analyse_jobs": "commscope.service.api",
    "options": "commscope.service.api",
    "load_report": "commscope.service.api",
    "report_text": "commscope.service.api",
    "report_json": "commscope.service.api",
    "report_html": "commscope.service.api",
    "write_reports": "commscope.service.api",
    "frames": "commscope.model.frames",
    "Frames": "commscope.model.frames",
    "Report": "commscope.model.schema",
    "Options": "commscope.pipeline.report",
    "CommscopeError": "commscope.model.errors",
    "ConfigError": "commscope.model.errors",
}

__all__ = [
    "CommscopeError",
    "ConfigError",
    "Frames",
    "Options",
    "Report",
    "analyse",
    "analyse_jobs",
    "frames",
    "load_report",
    "options",
    "report_html",
    "report_json",
    "report_text",
    "write_reports",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module the first time it is asked for."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'commscope' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
