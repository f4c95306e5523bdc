"""Writing the text, JSON and HTML reports side by side (shell: files, the clock)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from commscope.collector.errors import ConfigError
from commscope.collector.schema import Report
from commscope.exporters import html, jsonreport, naming, text


def write_reports(
    report: Report, out: Path, fallback_name: str, now: datetime | None = None
) -> tuple[Path, Path, Path]:
    """`out/<timestamp>_<model>_….txt`, `.json` and `.html`, the time `now` (default: the
    clock's); ConfigError if `out` cannot be made."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"{out}: cannot create the report folder ({exc.strerror or exc})"
        ) from None
    stem = naming.basename(report, fallback_name, now or datetime.now(UTC))
    text_path, json_path = out / f"{stem}.txt", out / f"{stem}.json"
    text_path.write_text(text.render(report), encoding="utf-8")
    json_path.write_bytes(jsonreport.render(report))
    html_path = out / f"{stem}.html"
    html_path.write_text(html.render(report), encoding="utf-8")
    return text_path, json_path, html_path
