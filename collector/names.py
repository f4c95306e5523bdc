"""Which trace source a file's name says it is (pure: strings only, no filesystem).

Kineto traces (`.json`, `.json.gz`), Nsight Systems SQLite exports and reports, NCCL
Inspector logs: the source-specific half of naming; the neutral half (ranks, windows) is
`model.names`.
"""

from __future__ import annotations

from typing import Final

from commscope.model.names import is_inspector_name
from commscope.model.schema import INSPECTOR_LOGS

_TRACE_SUFFIXES: Final = (".json", ".json.gz")
# Inputs by kind: Kineto traces; Nsight Systems SQLite exports; Nsight Systems reports, which
# must be exported first (`nsys export --type sqlite`).
_KINDS: Final = (
    (_TRACE_SUFFIXES, "kineto"),
    ((".sqlite",), "nsys"),
    ((".nsys-rep", ".qdrep"), "nsys-rep"),
)


def is_trace_file_name(name: str) -> bool:
    return name.endswith(_TRACE_SUFFIXES) or is_inspector_name(name)


def input_kind(name: str) -> str | None:
    """What reads a file of this name (`kineto`, `nsys`, `inspector`; `nsys-rep`: a report to
    export first), None for a name that is no input."""
    if is_inspector_name(name):
        return INSPECTOR_LOGS
    return next((kind for suffixes, kind in _KINDS if name.endswith(suffixes)), None)
