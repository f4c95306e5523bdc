"""Logging for the daemons (shell): stdlib logging to stdout, one JSON object per line when
stdout is not a terminal, plain text when it is. Called only by the CLI."""

from __future__ import annotations

import json
import logging
import sys
from typing import Final

_STANDARD: Final = frozenset(vars(logging.makeLogRecord({})))


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        return json.dumps(entry, default=str)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in vars(record).items() if k not in _STANDARD}
        fields = " ".join(f"{k}={v}" for k, v in extra.items())
        return f"{record.name}: {record.getMessage()}" + (f" ({fields})" if fields else "")


def configure_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(_TextFormatter() if sys.stdout.isatty() else _JsonFormatter())
    root = logging.getLogger("commscope")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def sparse(count: int) -> bool:
    """Whether the count-th occurrence of a repeated event is logged: the 1st, 10th, 100th,
    1000th, then every 10000th (a log line never per event)."""
    return count in (1, 10, 100, 1000) or count % 10000 == 0
