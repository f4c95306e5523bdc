"""Writing the text, JSON and HTML reports side by side, stamped with who wrote them, when
and from what (shell: files, the clock, the installed version)."""

from __future__ import annotations

import os
from collections.abc import Sequence
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
    clock's; `rendered`: `text.render(report)` when the caller has it already), never over
    another report's (`-2`, `-3`, ... as needed); ConfigError if `out` cannot be made."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{out}: cannot create the report folder ({exc.strerror or exc})"
        ) from None
    stem = _unclaimed(out, naming.basename(report, fallback_name, now or datetime.now(UTC)))
    return write_beside(report, out / f"{stem}.json", rendered)


def write_beside(
    report: Report, json_path: Path, rendered: str | None = None
) -> tuple[Path, Path, Path]:
    """The JSON report at `json_path`, its text and HTML beside it (`.txt`, `.html`)."""
    text_path, html_path = json_path.with_suffix(".txt"), json_path.with_suffix(".html")
    rendered = text.render(report) if rendered is None else rendered
    text_path.write_text(rendered, encoding="utf-8")
    json_path.write_bytes(jsonreport.render(report))
    html_path.write_text(html.render(report, rendered), encoding="utf-8")
    return text_path, json_path, html_path


def _unclaimed(out: Path, stem: str) -> str:
    """`stem`, else `stem-2`, `stem-3`, ...: the first name none of whose three files exists.
    Its .json is created here, exclusively, so two writers in one second never share a name."""
    n = 1
    while True:
        name = naming.numbered(stem, n)
        n += 1
        try:
            (out / f"{name}.json").touch(exist_ok=False)
        except FileExistsError:
            continue
        if not any((out / f"{name}{ext}").exists() for ext in (".txt", ".html")):
            return name
        (out / f"{name}.json").unlink()  # a stray .txt or .html of that name: the next one


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
        raise ConfigError(f"{out}: cannot write reports there ({existing} is not writable)")


def check_file(path: Path) -> None:
    """ConfigError at once when the file `path` could not be written (its folder is missing or
    not writable, or it is a folder)."""
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a file")
    folder = path.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise ConfigError(f"{path}: cannot write there ({folder} is missing or not writable)")
