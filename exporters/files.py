"""Writing the text, JSON and HTML reports side by side, stamped with who wrote them, when
and from what (shell: files, the clock, the installed version)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from commscope.collector.errors import ConfigError
from commscope.collector.schema import Provenance, Report
from commscope.collector.version import installed_version
from commscope.exporters import html, jsonreport, naming, text
from msgspec.structs import replace


def write_reports(
    report: Report,
    out: Path,
    fallback_name: str,
    now: datetime | None = None,
    rendered: str | None = None,
) -> tuple[Path, Path, Path]:
    """`out/<timestamp>_<model>_….txt`, `.json` and `.html`, the time `now` (default: the
    clock's; `rendered`: `text.render(report)` when the caller has it already); ConfigError if
    `out` cannot be made."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{out}: cannot create the report folder ({exc.strerror or exc})"
        ) from None
    stem = naming.basename(report, fallback_name, now or datetime.now(UTC))
    text_path, json_path = out / f"{stem}.txt", out / f"{stem}.json"
    rendered = text.render(report) if rendered is None else rendered
    html_path = out / f"{stem}.html"
    with _writing(out, (text_path, json_path, html_path)):
        text_path.write_text(rendered, encoding="utf-8")
        json_path.write_bytes(jsonreport.render(report))
        html_path.write_text(html.render(report, rendered), encoding="utf-8")
    return text_path, json_path, html_path


@contextlib.contextmanager
def _writing(out: Path, paths: Sequence[Path]) -> Iterator[None]:
    """The reports' writes: one that fails (a read-only mount, even as root; no space left)
    is a ConfigError, one line, and what was written of them is removed."""
    try:
        yield
    except OSError as exc:
        for path in paths:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {exc.filename or out}: {exc.strerror or exc}") from None


def stamped(report: Report, inputs: Sequence[str], command: Sequence[str], now: datetime) -> Report:
    """`report` with its provenance: this version, `now` in UTC, the inputs and command line."""
    when = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    found = Provenance(
        tool_version=installed_version(),
        generated_utc=when,
        inputs=list(inputs),
        command=list(command),
    )
    return replace(report, provenance=found)


def check_folder(out: Path) -> None:
    """ConfigError at once when the report folder `out` could not be made or written into
    (before a long run; nothing is created here)."""
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        raise ConfigError(f"{out}: cannot write reports there ({existing} is not a folder)")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(f"cannot write {out}: {_refusal(existing)}")


def _refusal(folder: Path) -> str:
    """Why a folder refuses writes: its file system is mounted read-only, or permissions."""
    read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    return f"{'Read-only file system' if read_only else 'Permission denied'} ({folder})"


def check_file(path: Path) -> None:
    """ConfigError at once when the file `path` could not be written (its folder is missing or
    not writable, or it is a folder)."""
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a file")
    folder = path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise ConfigError(f"{path}: cannot write there ({folder} is missing or not writable)")
