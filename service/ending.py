"""The aggregator's final reports (shell: writes files): stamped, written beside each other,
an I/O error retried with the loop's waits, then one line."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from commscope.exporters.files import stamped, write_reports
from commscope.model.errors import ConfigError, WriteError
from commscope.model.schema import Report


def write_final(
    report: Report,
    out: Path,
    name: str,
    *,
    command: tuple[str, ...],
    retries: int,
    failed: Callable[[OSError, int], float],
) -> tuple[Report, tuple[Path, ...]]:
    """The final report stamped (provenance) and its files written; `failed(error, failures)`
    counts an I/O error and says how long to wait before the next try (at most `retries`)."""
    final = stamped(report, (), command, datetime.now(UTC))
    failures = 0
    while True:
        try:
            return final, write_reports(final, out, name)
        except WriteError as exc:
            wait_s = failed(exc.error, failures)
            failures += 1
            if failures > retries:
                raise ConfigError(f"--out {out}: reports not written: {exc}") from None
            time.sleep(wait_s)
