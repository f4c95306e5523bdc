"""The JSON report (pure: Report → bytes), with the same numbers as the text report.

Stable keys: `schema_version` and `world_size` first, then the run's sections, `config`,
`windows` and `inputs`. Unknown values are null, never 0.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from commscope.model.schema import Report

_FIRST = ("schema_version", "world_size")


def to_document(report: Report) -> dict[str, Any]:
    data: dict[str, Any] = msgspec.to_builtins(report)
    return {key: data[key] for key in (*_FIRST, *(k for k in data if k not in _FIRST))}


def render(report: Report) -> bytes:
    return (json.dumps(to_document(report), indent=2) + "\n").encode()
