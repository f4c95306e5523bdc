"""Writing the text, JSON and HTML reports side by side, stamped with who wrote them, when
and from what (shell: files, the clock, the installed version)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from commscope.exporters import alltoallvcsv, html, jsonreport, naming, text
from commscope.model.errors import ConfigError, WriteError
from commscope.model.schema import Provenance, Report
from commscope.model.version import installed_version
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
    another report's (`-2`, `-3`, ... as needed); WriteError (a ConfigError) if they cannot
    be written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        why = f"{out}: cannot create the report folder ({exc.strerror or exc})"
        raise WriteError(why, exc) from None
    stem = naming.basename(report, fallback_name, now or datetime.now(UTC))
    with _writing(out, ()):
        stem = _unclaimed(out, stem)
    return write_beside(report, out / f"{stem}.json", rendered)


def write_beside(
    report: Report, json_path: Path, rendered: str | None = None
) -> tuple[Path, Path, Path]:
    """The JSON report at `json_path`, its text and HTML beside it (`.txt`, `.html`)."""
    text_path, html_path = json_path.with_suffix(".txt"), json_path.with_suffix(".html")
    rendered = text.render(report) if rendered is None else rendered
    paths = text_path, json_path, html_path
    with _writing(json_path.parent, paths):
        text_path.write_text(rendered, encoding="utf-8")
        json_path.write_bytes(jsonreport.render(report))
        html_path.write_text(html.render(report, rendered), encoding="utf-8")
        _replay(report, json_path.with_suffix(alltoallvcsv.SUFFIX))
    return paths


def _replay(report: Report, path: Path) -> None:
    """The all-to-all-v matrix in nccl-tests' alltoallv input, beside the reports."""
    found = alltoallvcsv.replay_csv(report.alltoallv)
    if found is not None:
        path.write_text(found, encoding="utf-8")


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


@contextlib.contextmanager
def _writing(out: Path, paths: Sequence[Path]) -> Iterator[None]:
    """The reports' writes: one that fails (a read-only mount, even as root; no space left)
    is a WriteError, one line, and what was written of them is removed."""
    try:
        yield
    except OSError as exc:
        for path in paths:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        why = f"cannot write {exc.filename or out}: {exc.strerror or exc}"
        raise WriteError(why, exc) from None


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
