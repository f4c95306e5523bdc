"""The trace sources commscope reads, in one registry (pure: file names only).

Each source is one module of collector/ (`collector.source` says what a source is): Kineto
traces (`kineto`), Nsight Systems exports (`nsysdb`), NCCL Inspector logs (`inspector_file`),
PyTorch Flight Recorder dumps (`flight`).
Adding a source is one module and one entry in `SOURCES`; everything that picks a reader by a
file's name asks here.
"""

from __future__ import annotations

from typing import Final

from commscope.collector.flight import FLIGHT
from commscope.collector.inspector_file import INSPECTOR
from commscope.collector.kineto import KINETO
from commscope.collector.nsysdb import NSYS
from commscope.collector.source import Source

# in the order they are asked: the first that claims a name reads it
SOURCES: tuple[Source, ...] = (INSPECTOR, FLIGHT, KINETO, NSYS)
DEFAULT: Final[Source] = KINETO  # what reads a file no source claims (a trace named oddly)


def claiming(name: str) -> Source | None:
    """The source that reads a file of this name, None for a name that is no input."""
    return next((source for source in SOURCES if source.claims(name)), None)


def reader_of(name: str) -> Source:
    """The source that reads a file of this name (`DEFAULT` when none claims it)."""
    return claiming(name) or DEFAULT


def is_input(name: str) -> bool:
    """Whether some source reads a file of this name (the offline report lists it)."""
    return claiming(name) is not None


def is_rewritten(name: str) -> bool:
    """Whether a file of this name may be rewritten in place, to be read again (`Live`)."""
    source = claiming(name)
    return source is not None and source.live == "rewritten"


def is_followed(name: str) -> bool:
    """Whether the live collector follows a file of this name (its source has a live mode)."""
    source = claiming(name)
    return source is not None and source.live is not None
