"""The exception tree of commscope (pure).

Every error a user can cause derives from `CommscopeError` and carries its context, so the
shell can print one clear line and the report can name what was skipped and why.
"""

from __future__ import annotations

from typing import Final

NOT_A_TRACE: Final = "no top-level traceEvents array (not a Kineto trace)"
DIED: Final = "the parsing process died (killed, or out of memory?)"  # a worker, killed


class CommscopeError(Exception):
    """Base of every error commscope raises on purpose."""


class BackendError(CommscopeError):
    """A required runtime piece (ijson's C backend) is missing."""


class ConfigError(CommscopeError):
    """A job config or command-line value is unusable."""


class WriteError(ConfigError):
    """Reports could not be written (a read-only mount, even as root; no space left): one
    line; `error` is the OSError, for a caller that retries (the aggregator)."""

    def __init__(self, message: str, error: OSError) -> None:
        super().__init__(message)
        self.error = error


class TraceError(CommscopeError):
    """A trace file cannot be analysed: truncated, corrupt, or not a trace."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ReadError(TraceError):
    """The file could not be read (an I/O error: gone, no permission, a failing disk), as
    opposed to what its bytes say: worth reading again."""


class LimitError(CommscopeError):
    """A document goes past a limit that keeps the reader's memory bounded."""


class NotATraceError(TraceError):
    """A valid JSON document without a top-level `traceEvents` (an object without the key, a
    list, a number): not a trace at all. Next to traces it is ignored unless its name says it
    should have been one (`looks_like_trace`)."""


class MergeError(CommscopeError):
    """Reports that `commscope merge` cannot combine: not one job, not one schema version or
    set of options, or one rank's window reported twice with different numbers."""


class ClusterError(CommscopeError):
    """The Dask backend cannot be used: the extra is not installed, the scheduler does not
    answer, or its workers run another commscope."""


class RankConflictError(CommscopeError):
    """Two files claim the same rank in one window."""


class ProtocolError(CommscopeError):
    """A peer or a state file speaks something this version cannot use."""


class LayoutMissError(CommscopeError):
    """A document the fast reader cannot prove it reads exactly as ijson does (not Kineto's
    indented layout, or a value only ijson's path treats right): it is read by ijson instead."""
